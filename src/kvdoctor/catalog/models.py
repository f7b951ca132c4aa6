"""Model catalog: a ModelShape from an HF id, a config.json, a model directory or an HF cache dir.

The embedded table (data/models.json) holds the shape facts vLLM derives for each model (built by
scripts/build_catalog.py with the same ``shape_from_hf_config`` used here on a user's files).
"""

from __future__ import annotations

import difflib
import re
from functools import lru_cache
from pathlib import Path

from kvdoctor.errors import InputError, NotFoundError, UnknownModelError
from kvdoctor.facts.model import ModelShape, QuantInfo
from kvdoctor.safeio import shipped_table
from kvdoctor.ledger.shape import shape_from_dict, shape_from_hf_config

_DATA = Path(__file__).resolve().parent / "data" / "models.json"


@lru_cache(maxsize=1)
def _raw() -> dict[str, dict]:
    return shipped_table(_DATA, "models", "model catalog")


@lru_cache(maxsize=None)
def _shape(hf_id: str) -> ModelShape:
    return shape_from_dict(_raw()[hf_id])


@lru_cache(maxsize=1)
def _index() -> dict[str, str]:
    """lower-case spellings -> catalog id: 'org/name', 'org__name', 'models--org--name', bare 'name'."""
    idx: dict[str, str] = {}
    bare: dict[str, list[str]] = {}
    for hf in _raw():
        low = hf.lower()
        idx[low] = hf
        idx[low.replace("/", "__")] = hf
        idx["models--" + low.replace("/", "--")] = hf
        bare.setdefault(low.split("/")[-1], []).append(hf)
    for name, ids in bare.items():
        if len(ids) == 1:  # a bare name is only an alias when it is unambiguous
            idx.setdefault(name, ids[0])
    return idx


def list_models() -> list[str]:
    return sorted(_raw(), key=str.lower)


def _read_json(path: Path) -> dict:
    from kvdoctor.safeio import MAX_CONFIG_BYTES, check_magnitudes, loads_json, read_document

    # bounded read of a regular file; NaN/Infinity, overflowing and > 2**53 numbers refused
    raw = read_document(path, "config", limit=MAX_CONFIG_BYTES)
    data = loads_json(raw.decode("utf-8", "replace"), str(path), strict_numbers=True)
    if not isinstance(data, dict):
        raise InputError(f"{path} must hold a JSON object")
    check_magnitudes(data, str(path))
    return data


def _snapshot(cache_dir: Path) -> Path:
    """models--org--name/ -> the snapshot that refs/main names, else the newest with a config.json."""
    snaps = cache_dir / "snapshots"
    ref = cache_dir / "refs" / "main"
    if ref.is_file():
        cand = snaps / ref.read_text(encoding="utf-8").strip()
        if (cand / "config.json").is_file():
            return cand
    found = [p for p in snaps.iterdir() if (p / "config.json").is_file()] if snaps.is_dir() else []
    if not found:
        raise InputError(f"{cache_dir} is a Hugging Face cache dir without a snapshot holding config.json")
    return max(found, key=lambda p: p.stat().st_mtime)


def _cache_name(path: Path) -> str | None:
    for part in reversed(path.parts):
        if part.startswith("models--"):
            return part[len("models--"):].replace("--", "/", 1)
    return None


def shape_from_path(path: Path) -> ModelShape:
    """A config.json file, a model directory, an HF cache dir (models--org--name) or its snapshot."""
    p = path.expanduser()
    if p.is_dir():
        if (p / "snapshots").is_dir() and not (p / "config.json").is_file():
            p = _snapshot(p)
        if not (p / "config.json").is_file():
            raise InputError(f"{path} has no config.json")
        cfg_file = p / "config.json"
    else:
        cfg_file = p
    cfg = _read_json(cfg_file)
    qfile = cfg_file.parent / "hf_quant_config.json"
    hq = _read_json(qfile) if qfile.is_file() else None
    name = _cache_name(cfg_file.resolve()) or _cache_name(cfg_file) or str(path)
    try:
        shape = shape_from_hf_config(cfg, name, hf_quant_config=hq)
    except InputError as exc:
        # The shape reader ends its messages with " in <name>"; when the name is just the path we are
        # about to prefix, say it once ("x/config.json: config field 'n' is missing").
        msg, suffix = str(exc), f" in {name}"
        if name == str(path) and msg.endswith(suffix):
            msg = msg[: -len(suffix)]
        raise InputError(f"{cfg_file}: {msg}") from None
    from dataclasses import replace

    return replace(shape, source=str(cfg_file))


def _hf_cache_dir(model_id: str) -> Path | None:
    """An id not in the catalog but downloaded: the Hugging Face cache entry vLLM would read."""
    import os

    if model_id.count("/") != 1:
        return None
    roots = []
    if os.environ.get("HF_HUB_CACHE"):
        roots.append(Path(os.environ["HF_HUB_CACHE"]))
    if os.environ.get("HF_HOME"):
        roots.append(Path(os.environ["HF_HOME"]) / "hub")
    roots.append(Path.home() / ".cache" / "huggingface" / "hub")
    for root in roots:
        d = root.expanduser() / ("models--" + model_id.replace("/", "--"))
        if (d / "snapshots").is_dir():
            return d
    return None


_HUB_CACHE_PATH = re.compile(r"(?:^|/)models--([^/]+?)--([^/]+?)(?:/|$)")


def lookup_model(text: str) -> ModelShape:
    """A ModelShape for an HF id (case-insensitive), a config.json path, a model dir or an HF cache dir.

    Order: an existing path; a catalog id; an id downloaded to the local Hugging Face cache
    ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub); else NotFoundError with close matches.
    """
    if not isinstance(text, str) or not text.strip():
        raise InputError("empty model name")
    t = text.strip()
    p = Path(t).expanduser()
    if p.exists():
        return shape_from_path(p)
    hit = _index().get(t.lower().rstrip("/"))
    if hit is not None:
        return _shape(hit)
    same = same_config(t)
    if same is not None:
        return _shape(same)
    by_dir = _catalog_by_directory(t)
    if by_dir is not None:
        return by_dir
    deriv = quantized_derivative(t)
    if deriv is not None:
        return deriv
    hub = _HUB_CACHE_PATH.search(t)
    if hub is not None and not Path(t).expanduser().exists():
        # the Hugging Face cache's folder of an id on the server (…/hub/models--org--name/snapshots/<sha>): that id
        rid = f"{hub.group(1)}/{hub.group(2)}"
        try:
            return lookup_model(rid)
        except UnknownModelError as exc:
            raise UnknownModelError(f"{t} is the Hugging Face cache folder of {rid}: {str(exc).split(' (did you mean')[0]}",
                                    exc.suggestions) from None
    if t.endswith(".json") or t.startswith(("/", "./", "~")):
        # a path on the server (KServe mounts its storageUri at /mnt/models, a volume at /models): the model's name or
        # its config.json here says what it is
        raise UnknownModelError(f"model path {t} does not exist on this machine: pass --model with the model's name "
                                "(or its config.json)")
    cached = _hf_cache_dir(t)
    if cached is not None:
        return shape_from_path(cached)
    names = list_models()
    release = release_sibling(t, names)
    if release is not None:
        raise UnknownModelError(
            f"model {t!r} is not in the catalog; it reads as a dated re-release of {release}: such a release keeps "
            "the layers and heads and may change the context length (Qwen3's -Instruct-2507: 262,144 tokens), which "
            "sets vLLM's default. Give --max-model-len and that shape is used, or pass the release's config.json or "
            "model directory", [release])
    siblings = same_size_siblings(t, names)
    close = difflib.get_close_matches(t.lower(), [n.lower() for n in names], n=4, cutoff=0.55)
    by_low = {n.lower(): n for n in names}
    sugg = list(siblings) + [n for n in _family_and_size(t, names) if n not in siblings]
    sugg += [by_low[c] for c in close if by_low[c] not in sugg]
    tail = t.lower().split("/")[-1]
    sugg += [n for n in names if tail and tail in n.lower() and n not in sugg]
    hint = (f"; {siblings[0]} is the same architecture and size (base/instruct differ only in weights' "
            "values: identical memory figures, but the context length that sets vLLM's default may differ). Give "
            "--max-model-len and that shape is used" if siblings else "")
    raise UnknownModelError(
        f"model {t!r} is not in the catalog{hint}; or pass its config.json or model directory (a local "
        "config.json gives the exact shape: layers, heads, vocab, dtype, quantization_config)", sugg[:5]
    )


_SIZE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?b(?:-a\d+(?:\.\d+)?b)?)(?![a-z\d])")


def _family_and_size(text: str, names: list[str]) -> list[str]:
    """Catalog ids of the same family and size as ``text`` ("Qwen3-Coder-30B-A3B-Instruct" → Qwen3-30B-A3B, before a
    spelling-nearest Qwen2.5-3B): the size token and the name's first word, both required."""
    tail = text.lower().split("/")[-1]
    size = _SIZE.search(tail)
    family = re.match(r"[a-z]+[\d.]*", tail)
    if size is None or family is None:
        return []
    out = []
    for n in names:
        nt = n.lower().split("/")[-1]
        m = _SIZE.search(nt)
        if m is not None and m.group(1) == size.group(1) and nt.startswith(family.group(0)):
            out.append(n)
    words = set(tail.split("-"))

    def foreign(n: str) -> int:  # words of the candidate the name lacks ("VL", a date tag): another model's marks
        return sum(w not in words for w in n.lower().split("/")[-1].split("-"))

    return sorted(out, key=lambda n: (foreign(n), -difflib.SequenceMatcher(None, tail, n.lower().split("/")[-1]).ratio()))


# Hub ids whose config.json is a catalog model's, byte for byte in every field the ledger reads: repositories the Hub
# renamed (Meta-Llama-3.1-* became Llama-3.1-*; the old id still resolves) and re-releases of one architecture
# (Llama 3.3 70B is Llama 3.1 70B's config with new weights). Pattern -> catalog id.
_SAME_CONFIG = (
    (re.compile(r"^meta-llama/meta-llama-3\.1-(8b|70b|405b)(-instruct)?$"), r"meta-llama/Llama-3.1-\1\2"),
    (re.compile(r"^meta-llama/llama-3\.3-70b-instruct$"), "meta-llama/Llama-3.1-70B-Instruct"),
    # DeepSeek's R1 distills are their base models fine-tuned (the model card names each base; the Qwen-7B's is
    # Qwen2.5-Math-7B, Qwen2.5-7B's dimensions): the base's config but its ids. Qwen2.5-Coder-7B/32B-Instruct have
    # Qwen2.5-7B/32B-Instruct's dimensions. Assumed, not read from their own config.json (none was found verbatim).
    (re.compile(r"^deepseek-ai/deepseek-r1-distill-qwen-(7b|14b|32b)$"), r"Qwen/Qwen2.5-\1"),
    (re.compile(r"^deepseek-ai/deepseek-r1-distill-llama-8b$"), "meta-llama/Llama-3.1-8B"),
    (re.compile(r"^deepseek-ai/deepseek-r1-distill-llama-70b$"), "meta-llama/Llama-3.1-70B-Instruct"),
    (re.compile(r"^qwen/qwen2\.5-coder-(7b|32b)-instruct$"), r"Qwen/Qwen2.5-\1-Instruct"),
    # GLM-5 and GLM-5.1 share glm_moe_dsa's dimensions: aiconfigurator's GLM-5-FP8 preset agrees with GLM-5.1's raw
    # config in every field it carries (78 layers, hidden 6144, 64 heads, q/kv LoRA 2048/512, 256 experts)
    (re.compile(r"^zai-org/glm-5$"), "zai-org/GLM-5.1"),
    # GLM-4.6 is taken to be GLM-4.7's architecture (GLM-4.5's 355B-A32B MoE with the 202,752-token context)
    (re.compile(r"^zai-org/glm-4\.6$"), "zai-org/GLM-4.7"),
    # the catalog holds Nemotron 3 Nano 30B-A3B as its -BF16 repository: the id without the dtype, and its quantized
    # copies through it (…-FP8, …-NVFP4: quantized_derivative); Nemotron-Cascade-2-30B-A3B is that architecture,
    # checked on a public log of its NVFP4 copy (4,819,104 tokens as printed: docs/catalog.md)
    (re.compile(r"^nvidia/(?:nvidia-nemotron-3-nano-30b-a3b|nemotron-cascade-2-30b-a3b)$"),
     "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"),
)


def same_config(text: str) -> str | None:
    """The catalog id whose config.json ``text`` shares (``_SAME_CONFIG``), else None."""
    low = text.strip().lower().rstrip("/")
    for rx, target in _SAME_CONFIG:
        if rx.match(low):
            want = rx.sub(target, low).lower()
            hit = _index().get(want)
            if hit is not None:
                return hit
    return None


def _catalog_by_directory(text: str) -> ModelShape | None:
    """A model directory that is not on this machine (``/models/Qwen3-8B``, ``~/ai/models/qwen3-4b-instruct-2507``)
    named exactly as one catalog model's repository: that model's shape. Operators download a repository into a
    directory of its own name; a fine-tune keeps the shape. ``model_directory_note`` says which was taken."""
    if "/" not in text or text.endswith(".json"):
        return None
    base = text.rstrip("/").rsplit("/", 1)[-1].lower()
    names = list_models()
    hits = [n for n in names if n.rsplit("/", 1)[-1].lower() == base]
    if len(hits) == 1:
        return _shape(_index()[hits[0].lower()])
    if hits:
        return None
    # a directory named as a repository the Hub renamed (/models/Meta-Llama-3.1-8B-Instruct): the catalog id whose
    # config it has, under any of the catalog's organisations
    same = {t for org in dict.fromkeys(n.split("/", 1)[0] for n in names) if (t := same_config(f"{org}/{base}"))}
    return _shape(_index()[same.pop().lower()]) if len(same) == 1 else None


# A quantized copy of a catalog model named by its publisher's convention (Qwen/Qwen3-8B-FP8, RedHatAI/...-FP8-dynamic,
# ...-AWQ, ...-GPTQ-Int4, ...-quantized.w4a16, ...-NVFP4, Intel's ...-int4-AutoRound, unsloth's ...-bnb-4bit): the
# base's layers and heads with the weights stored as the suffix says. Quantization keeps the architecture (vLLM reads
# the same config.json plus its quantization_config); what the name cannot say is the exact scheme (group size, which
# modules stay unquantized), so each entry is the publishers' usual one and the note says it is assumed.
_QUANT_SUFFIX = re.compile(
    r"[-_.](?P<q>fp8(?:[-_](?:dynamic|static|block|e4m3))?|w8a8(?:[-_]fp8)?|(?:quantized\.)?w8a8|(?:quantized\.)?w4a16"
    r"|int4[-_]w4a16|awq(?:[-_](?:4bit|int4))?|gptq(?:[-_](?:int4|int8|4bit|8bit))?|nvfp4|fp4"
    r"|int4[-_]autoround|autoround(?:[-_]int4)?|(?:unsloth[-_])?bnb[-_]4bit|gguf)$")


def _suffix_quant(q: str) -> QuantInfo:
    from kvdoctor.ledger.shape import quant_from_config

    q = q.lower().replace("_", "-").removeprefix("quantized.")
    if q.startswith("fp8") or q == "w8a8-fp8":
        return quant_from_config({"quant_method": "fp8"}, source=f"the name's '{q}'")
    if q == "w8a8":
        return quant_from_config({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {
            "num_bits": 8, "type": "int", "strategy": "channel"}}}}, source=f"the name's '{q}'")
    if q in ("nvfp4", "fp4"):
        return quant_from_config({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {
            "num_bits": 4, "type": "float", "group_size": 16}}}}, source=f"the name's '{q}'")
    if "bnb" in q or q == "gguf":
        return quant_from_config({"quant_method": "bitsandbytes" if "bnb" in q else "gguf", "load_in_4bit": True},
                                 source=f"the name's '{q}'")
    bits = 8 if q.endswith(("int8", "8bit")) else 4
    method = "awq" if q.startswith("awq") else "gptq"  # AutoRound and W4A16 checkpoints load through GPTQ-style kernels
    return quant_from_config({"quant_method": method, "bits": bits, "group_size": 128}, source=f"the name's '{q}'")


def quantized_derivative(text: str) -> ModelShape | None:
    """A catalog model's quantized copy named by the usual suffix (``_QUANT_SUFFIX``): the base's shape with the
    suffix's quantization, else None. The base is found as ``lookup_model`` finds an id (the catalog, a renamed
    repository, a directory named as the repository) under the name's own organisation or any other."""
    from dataclasses import replace

    t = text.strip().rstrip("/")
    m = _QUANT_SUFFIX.search(t.lower())
    if m is None or "/" in t[m.start():]:
        return None
    stem = t[: m.start()]
    base = None
    # the base as an id is found: the catalog's own spelling (a bare name too), a renamed repository, the same name
    # under another organisation (_catalog_by_directory); then with the Hub's "-hf" conversion suffix (TheBloke's
    # "Llama-2-7B-AWQ" is meta-llama's "Llama-2-7b-hf")
    for cand in (stem, f"{stem}-hf"):
        hit = _index().get(cand.lower()) or _index().get((same_config(cand) or "").lower())
        base = _shape(hit) if hit is not None else _catalog_by_directory(cand)
        if base is not None:
            break
    if base is None:
        return None
    return replace(base, quant=replace(_suffix_quant(m.group("q")), assumed=True))


def model_directory_note(text: str, shape: ModelShape) -> str | None:
    """The note for a model taken from another id's config (``same_config``), a directory's name
    (``_catalog_by_directory``) or a quantized copy's name (``quantized_derivative``), else None."""
    t = text.strip()
    if shape.name.lower() == t.lower().rstrip("/") or Path(t).expanduser().exists() or t.lower() in _index():
        return None
    hub = _HUB_CACHE_PATH.search(t)
    if hub is not None:
        rid = f"{hub.group(1)}/{hub.group(2)}"
        inner = model_directory_note(rid, shape)
        return (f"model {t} is the Hugging Face cache folder of {rid} (not on this machine)"
                + (f"; {inner}" if inner else f": the catalog's {shape.name}"))
    if shape.quant is not None and shape.quant.assumed and (m := _QUANT_SUFFIX.search(t.lower().rstrip("/"))):
        return (f"model {t} is read as a quantized copy of the catalog's {shape.name}: its layers and heads, with the "
                f"weights as the name's '{m.group('q')}' usually means ({shape.quant.note}; assumed: the checkpoint's "
                "own config.json gives the exact quantization_config, pass --model with it)")
    if same_config(t) is not None:
        return f"model {t} has the config of the catalog's {shape.name} (a renamed repository or a re-release of " \
               "the same architecture): its figures are used"
    base = t.rstrip("/").rsplit("/", 1)[-1]
    named = (f"the catalog's {shape.name}" if base.lower() == shape.name.rsplit("/", 1)[-1].lower()
             # (the same config.json: a repository the Hub renamed, or a sibling such as an Instruct model and its
             # base: sweep 220 item 11, Qwen2.5-0.5B-Instruct read as Qwen/Qwen2.5-0.5B)
             else f"{base}, whose config is the catalog's {shape.name} (a renamed repository, or a sibling such as "
                  "an instruct model and its base)")
    return (f"model {t} is not on this machine; its directory is named as {named}, whose shape is used (a fine-tune "
            "has the same; for a quantized or modified copy pass --model with its config.json)")


# a dated re-release's tag inside the name (Qwen3-235B-A22B-Instruct-2507-FP8, Qwen3-4B-Thinking-2507)
_RELEASE_TAG = re.compile(r"-(?:instruct-|thinking-)?(?:2[0-9])(?:0[1-9]|1[0-2])(?=$|-)")


def release_sibling(text: str, names: list[str] | None = None) -> str | None:
    """The catalog model a dated re-release is built on (its tag removed: ``…-Instruct-2507-FP8`` → ``…-FP8``), else
    None. Not taken for the model: such a release keeps the shape but its config's context length differs."""
    low = text.strip().lower().rstrip("/")
    if not _RELEASE_TAG.search(low):
        return None
    base = _RELEASE_TAG.sub("", low, count=1)
    names = names if names is not None else list_models()
    return next((n for n in names if n.lower() == base), None)


_VARIANT_SUFFIXES = ("-instruct", "-chat", "-it", "-base", "-hf", "-chat-hf", "-instruct-hf")


_VARIANT_INFIX = re.compile(r"-(?:instruct|chat)(?=-v\d)")  # Mistral's "-Instruct-v0.1" before the version tag


def _stem(name: str) -> str:
    low = _VARIANT_INFIX.sub("", name.lower().rstrip("/"), count=1)
    for suf in sorted(_VARIANT_SUFFIXES, key=len, reverse=True):
        if low.endswith(suf):
            return low[: -len(suf)]
    return low


def same_size_siblings(text: str, names: list[str] | None = None) -> list[str]:
    """Catalog models that differ from ``text`` only by a base/instruct/chat suffix (same org and size):
    ``Qwen/Qwen2.5-14B-Instruct`` → ``Qwen/Qwen2.5-14B``. Same architecture, so the same memory figures."""
    names = names if names is not None else list_models()
    stem = _stem(text)
    return [n for n in names if _stem(n) == stem and n.lower() != text.lower().rstrip("/")]
