"""Where an EngineConfig comes from: flags, a pasted ``vllm serve`` line, a vLLM YAML file, a log.

All sources normalise to the same typed values, so the same setting written four ways compares
equal (``engine.diff``). Parsing follows vLLM 0.33's ``FlexibleArgumentParser``
(``utils/argparse_utils.py``) and ``EngineArgs.add_cli_args`` (``engine/arg_utils.py``):

- option names: ``--max_model_len`` == ``--max-model-len`` (vLLM rewrites ``_`` to ``-``);
  ``--flag=value`` and ``--flag value``; short forms ``-tp -pp -dp -q``;
- booleans are ``argparse.BooleanOptionalAction``: ``--enable-prefix-caching`` /
  ``--no-enable-prefix-caching``. Pre-0.6 vLLM took ``--enable-chunked-prefill False``; we accept that
  older spelling too (and note it), since such lines are still pasted from old runbooks;
- human-readable ints only where vLLM accepts them (``max_model_len`` also ``auto``/``-1``,
  ``max_num_batched_tokens``, ``kv_cache_memory_bytes``): ``1k`` = 1000, ``1K`` = 1024, no decimals
  with binary suffixes;
- ``--config file.yaml``: the file's keys are inserted before the line's own flags, so the line wins
  (``FlexibleArgumentParser._pull_args_from_config``).

Unknown flags are never fatal: they land in ``EngineConfig.extra`` verbatim (reported by callers).
"""

from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from kvdoctor.engine.config import ENGINE_FIELDS, EngineConfig
from kvdoctor.errors import InputError

if TYPE_CHECKING:  # pragma: no cover - types only
    from kvdoctor.evidence.model import StartupFacts

# ---------------------------------------------------------------------------------------------
# Value converters (one per vLLM argparse type). They raise ValueError with a short reason; the
# caller prefixes the flag name so the user sees one line: "--max-num-seqs: not an integer: 'x'".

_HUMAN_RE = re.compile(r"(\d+(?:\.\d+)?)([kKmMgGtT])")
_DEC = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BIN = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_int(value: object) -> int:
    """vLLM ``human_readable_int``: ``25.6k`` = 25600, ``1K`` = 1024, ``1.5K`` rejected."""
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"not an integer: {value!r}")
        return int(value)
    text = str(value).strip()
    m = _HUMAN_RE.fullmatch(text)
    if m:
        number, suffix = m.groups()
        if suffix in _DEC:
            # vLLM truncates: int(float(number) * mult)
            return int(float(number) * _DEC[suffix])
        if "." in number:
            raise ValueError(
                f"decimals are not allowed with binary suffixes like {suffix} "
                f"(did you mean {number}{suffix.lower()}?)"
            )
        return int(number) * _BIN[suffix]
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"not an integer: {text!r}") from None


def byte_count(value: object) -> int:
    """``--kv-cache-memory-bytes``: vLLM's human-readable ints plus the units people type
    (``12GiB``, ``12 GB``, ``12e9``; units.parse_bytes)."""
    from kvdoctor.units import parse_bytes

    return parse_bytes(value)


def human_int_or_auto(value: object) -> int:
    """``--max-model-len``: also ``auto`` / ``-1`` (vLLM auto-fits the length to memory)."""
    if isinstance(value, str) and value.strip().lower() in ("auto", "-1"):
        return -1
    return human_int(value)


def plain_int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    try:
        return int(str(value).strip())
    except ValueError:
        raise ValueError(f"not an integer: {value!r}") from None


def plain_float(value: object) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a number, got {value!r}")
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value).strip())
    except ValueError:
        raise ValueError(f"not a number: {value!r}") from None


_TRUE = {"true", "1", "yes", "on"}
_FALSE = {"false", "0", "no", "off"}


def boolean(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = str(value).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise ValueError(f"not a boolean: {value!r}")


# vLLM's dtype aliases (config/model.py _STR_DTYPE_TO_TORCH_DTYPE): "half" is float16, "float" is float32.
_DTYPE_ALIASES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16",
                  "fp32": "float32", "torch.bfloat16": "bfloat16", "torch.float16": "float16",
                  "torch.float32": "float32"}


def dtype_name(value: object) -> str:
    text = str(value).strip()
    return _DTYPE_ALIASES.get(text.lower(), text.lower())


def text(value: object) -> str:
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value).strip()


def lower_text(value: object) -> str:
    return text(value).lower()


def json_value(value: object) -> object:
    """``--speculative-config '{"method": "mtp", ...}'``: dicts stay dicts; strings are JSON."""
    if isinstance(value, (dict, list)) or value is None:
        return value
    import json

    try:
        return json.loads(str(value))
    except json.JSONDecodeError:
        raise ValueError(f"not valid JSON: {str(value)[:60]!r}") from None


# dest -> converter. Types as vLLM 0.33 declares them (EngineArgs field annotations).
CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "model": text,
    "served_model_name": text,
    "max_model_len": human_int_or_auto,
    "gpu_memory_utilization": plain_float,
    "max_num_seqs": plain_int,
    "max_num_batched_tokens": human_int,
    "block_size": plain_int,
    "kv_cache_dtype": lower_text,
    "kv_cache_memory_bytes": byte_count,
    "num_gpu_blocks_override": plain_int,
    "quantization": lower_text,
    "dtype": dtype_name,
    "tensor_parallel_size": plain_int,
    "pipeline_parallel_size": plain_int,
    "data_parallel_size": plain_int,
    "enable_expert_parallel": boolean,
    "enforce_eager": boolean,
    "enable_prefix_caching": boolean,
    "enable_chunked_prefill": boolean,
    "long_prefill_token_threshold": plain_int,
    "max_num_partial_prefills": plain_int,
    "scheduling_policy": lower_text,
    "performance_mode": lower_text,
    "cpu_offload_gb": plain_float,
    "kv_offloading_size": plain_float,
    "swap_space": plain_float,
    "disable_sliding_window": boolean,
    "disable_hybrid_kv_cache_manager": boolean,
    "async_scheduling": boolean,
    "max_cudagraph_capture_size": plain_int,
    "speculative_config": json_value,
}
assert set(CONVERTERS) == set(ENGINE_FIELDS)

BOOL_FIELDS = frozenset(k for k, v in CONVERTERS.items() if v is boolean)

# Short and alternative option strings -> dest (engine/arg_utils.py add_argument calls).
ALIASES: dict[str, str] = {
    "-tp": "tensor_parallel_size",
    "-pp": "pipeline_parallel_size",
    "-dp": "data_parallel_size",
    "-q": "quantization",
    "-sc": "speculative_config",
    "--device-memory-utilization": "gpu_memory_utilization",  # 0.33 device-neutral alias
    "--model-tag": "model",
    "--max-seq-len": "max_model_len",  # not a vLLM flag; the engine-config line calls it max_seq_len
}

# Boolean flags outside ENGINE_FIELDS (vLLM 0.33 EngineArgs / frontend bool fields, plus common
# older ones): they take no value, so the next token is not swallowed as their argument.
_KNOWN_BOOL_EXTRAS = frozenset(
    """trust_remote_code enable_auto_tool_choice enable_eplb enable_lora
    disable_log_stats disable_log_requests enable_log_requests enable_log_outputs disable_custom_all_reduce
    skip_tokenizer_init enable_prompt_embeds disable_cascade_attn enable_sleep_mode enable_dbo
    data_parallel_hybrid_lb data_parallel_external_lb data_parallel_multi_port_external_lb
    language_model_only enable_mm_embeds skip_mm_profiling fully_sharded_loras kv_sharing_fast_prefill
    disable_chunked_mm_input scheduler_reserve_full_isl aggregate_engine_logging allow_credentials
    enable_request_id_headers disable_fastapi_docs disable_uvicorn_access_log enable_prompt_tokens_details
    enable_server_load_tracking enable_force_include_usage enable_tokenizer_info_endpoint
    return_tokens_as_token_ids disable_frontend_multiprocessing use_v2_block_manager
    enable_reasoning disable_async_output_proc worker_use_ray engine_use_ray headless
    enable_log_deltas log_error_stack tokens_only fail_on_environ_validation
    long_prefill_token_threshold_adaptive allow_deprecated_quantization""".split()
)

# Keys of the "non-default args" dict that are not engine settings (kvdoctor ignores them quietly).
_LOG_NOISE = frozenset({"model_tag", "subparser", "dispatch_function", "api_key", "hf_token"})


def _dest(option: str) -> str:
    """``--max-model-len`` / ``--max_model_len`` / ``max-model-len`` -> ``max_model_len``."""
    return option.lstrip("-").replace("-", "_")


def _canonical(option: str) -> tuple[str, bool | None]:
    """Map an option string to (dest, negated?) ; ``--no-enable-prefix-caching`` -> (.., True)."""
    if option in ALIASES:
        return ALIASES[option], None
    opt = "--" + option.lstrip("-").replace("_", "-")
    if opt in ALIASES:
        return ALIASES[opt], None
    dest = _dest(option)
    if dest.startswith("no_") and (dest[3:] in BOOL_FIELDS or dest[3:] in _KNOWN_BOOL_EXTRAS):
        return dest[3:], True
    return dest, None


def _convert(dest: str, value: object, spelled: str) -> object:
    try:
        return CONVERTERS[dest](value)
    except ValueError as exc:
        raise InputError(f"{spelled}: {exc}") from None


def _apply(cfg: EngineConfig, dest: str, value: object, spelled: str) -> None:
    if dest in CONVERTERS:
        setattr(cfg, dest, _convert(dest, value, spelled))
    else:
        cfg.extra[dest] = value
        if dest in ("compilation_config", "O", "cuda_graph_sizes") and cfg.max_cudagraph_capture_size is None:
            cfg.max_cudagraph_capture_size = _capture_ceiling(dest, value)


def _capture_ceiling(dest: str, value: object) -> int | None:
    """The largest CUDA-graph batch a compilation config sets (its ``max_cudagraph_capture_size``, else the largest
    of its ``cudagraph_capture_sizes``), or 0.10's ``--cuda-graph-sizes N``: decode batches above it run without
    graphs. None when it sets neither (``-O3``, a config of other keys)."""
    if dest == "cuda_graph_sizes":
        try:
            return int(str(value).split()[0])
        except (ValueError, IndexError):
            return None
    conf = value
    if isinstance(value, str):
        try:
            conf = json.loads(value)
        except ValueError:
            return None
    if not isinstance(conf, dict):
        return None
    try:
        if conf.get("max_cudagraph_capture_size") is not None:
            return int(conf["max_cudagraph_capture_size"])
        sizes = conf.get("cudagraph_capture_sizes")
        if isinstance(sizes, list) and sizes:
            return max(int(x) for x in sizes)
    except (TypeError, ValueError):
        return None
    return None


# ---------------------------------------------------------------------------------------------
# from_flags


def from_flags(mapping: Mapping[str, Any], *, origin: str = "flags") -> EngineConfig:
    """Typed config from ``{name: value}`` as a user typed them (``"32k"``, ``"true"``, ``8``).

    Names may be dests (``max_model_len``) or flags (``--max-model-len``, ``-tp``); ``None`` values
    mean "not given". Unknown names go to ``extra`` verbatim.
    """
    cfg = EngineConfig(origin=origin)
    for key, value in mapping.items():
        if value is None:
            continue
        dest, negated = _canonical(str(key))
        if negated:
            value = not _convert(dest, value, str(key)) if dest in BOOL_FIELDS else False
        spelled = str(key) if str(key).startswith("-") else "--" + dest.replace("_", "-")
        _apply(cfg, dest, value, spelled)
    return cfg


# ---------------------------------------------------------------------------------------------
# vllm serve line

_ENV_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# docker run options that take no value (everything else starting with "-" takes one unless "=").
_DOCKER_BOOL = frozenset(
    "--rm -d --detach -i --interactive -t --tty -it -ti -dit --privileged --init --read-only "
    "--sig-proxy -P --publish-all --no-healthcheck --oom-kill-disable --help -q --quiet".split()
)
# ``dynamo.vllm``: NVIDIA Dynamo's vLLM worker, which takes vLLM's engine arguments (``--model X``) beside its own
# (``--is-prefill-worker``, ``--connector``: kept, not modelled)
_PY_ENTRYPOINTS = ("vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server",
                   "vllm.entrypoints.cli.main", "dynamo.vllm")


_COMMENT_LINE = re.compile(r"^[ \t]*#.*$", re.M)
_A_COMMAND = re.compile(r"\bvllm\s+serve\b|vllm\.entrypoints|\bdynamo\.vllm\b|\b(?:docker|podman|nerdctl)\s+(?:container\s+)?run\b")


def split_command_line(text: str) -> list[str]:
    """A pasted shell command line (continuations, a prompt prefix, quotes) as its words; InputError when its
    quotes do not balance."""
    # A script's comment lines ('#export MODEL=...', a commented-out older command) are not words, unless the command
    # itself is behind one (a root prompt: '# vllm serve ...'). A comment line inside a backslash continuation ends
    # the command in bash; dropping it keeps the flags on both sides, which is what a pasted runbook means.
    uncommented = _COMMENT_LINE.sub("", text)
    if _A_COMMAND.search(uncommented):
        text = uncommented
    # Backslash-newline continuations (bash) and caret/backtick ones (cmd, PowerShell) join lines.
    joined = re.sub(r"[\\^`][ \t]*\r?\n", " ", text)
    # A pasted block may hold several lines: keep only up to an unescaped newline that ends the command
    # only when the next line is not a flag; simplest faithful rule: treat newlines as spaces.
    joined = joined.replace("\r", " ").replace("\n", " ")
    # A prompt prefix ("$ vllm serve ...") is common in pasted runbooks.
    joined = re.sub(r"^\s*[$#>]\s+", "", joined)
    try:
        return shlex.split(joined, comments=False)
    except ValueError as exc:  # unbalanced quotes
        raise InputError(f"cannot split the command line: {exc}") from None


SHELL_OPS = frozenset({"|", "||", "&&", ";", "&", "|&"})
_FORK_CLI = re.compile(r"vllm-[a-z0-9]+")
REDIRECT_RE = re.compile(r"^(?:\d?>>?|&>>?|<|\d?>&\d)")


def _is_command_start(tokens: list[str], i: int, *, loose: bool = False) -> bool:
    head = os.path.basename(tokens[i])
    nxt = tokens[i + 1] if i + 1 < len(tokens) else ""
    if head == "vllm":
        # `conda run -n vllm vllm serve`: a bare "vllm" is only the command when nothing better follows.
        return nxt == "serve" or loose
    if _FORK_CLI.fullmatch(head):  # a fork's own CLI over vLLM's serve flags (vllm-omni serve ...)
        return nxt == "serve"
    if head in ("docker", "podman", "nerdctl"):
        return nxt in ("run", "container")
    if re.fullmatch(r"python[0-9.]*", head):
        return any(t.startswith("vllm.entrypoints") or t == "dynamo.vllm" for t in tokens[i + 1:i + 5])
    return False


def _cut_shell_tail(tokens: list[str]) -> list[str]:
    """Stop at a pipe, `&&`, `;`, `&` or a redirection (`2>&1 | tee server.log`, `> out.log &`)."""
    for j, tok in enumerate(tokens):
        if tok in SHELL_OPS or REDIRECT_RE.match(tok):
            return tokens[:j]
    return tokens


def _strip_to_args(tokens: list[str], cfg: EngineConfig) -> tuple[list[str], bool]:
    """Drop env prefixes and wrappers (``nohup``, ``uv run``, ``conda run -n x``, ``cd d &&``),
    ``docker run ...``, ``vllm serve`` / ``python -m ...``; cut the shell tail after the command.

    Returns (argument tokens after the command, positional_model_allowed).
    """
    start = next((i for i in range(len(tokens)) if _is_command_start(tokens, i)), None)
    if start is None:
        start = next((i for i in range(len(tokens)) if _is_command_start(tokens, i, loose=True)), None)
    if start is None:
        # Bare arguments (e.g. a Kubernetes `args:` list pasted on its own line), else garbage.
        i = 0
        while i < len(tokens) and _ENV_RE.match(tokens[i]):
            k, v = tokens[i].split("=", 1)
            cfg.env[k] = v
            i += 1
        rest = _cut_shell_tail(tokens[i:])
        if rest and rest[0].startswith("-"):
            return rest, False
        if not rest:
            raise InputError("empty command line: expected `vllm serve MODEL ...`")
        raise InputError(f"not a vLLM server command: expected `vllm serve MODEL ...`, got `{rest[0]}`")
    # Environment assignments of the same shell command (after the last operator before the start).
    seg_start = max([j + 1 for j in range(start) if tokens[j] in SHELL_OPS] or [0])
    for tok in tokens[seg_start:start]:
        if _ENV_RE.match(tok):
            k, v = tok.split("=", 1)
            cfg.env[k] = v
    i = start
    rest = _cut_shell_tail(tokens[i:])
    head = os.path.basename(rest[0])

    if head in ("docker", "podman", "nerdctl"):
        return _strip_docker(rest[1:], cfg)
    if head == "vllm" or (_FORK_CLI.fullmatch(head) and rest[1:2] == ["serve"]):
        if len(rest) < 2 or rest[1] != "serve":
            sub = rest[1] if len(rest) > 1 else ""
            raise InputError(f"expected `vllm serve ...`, got `vllm {sub}`" if sub else "expected `vllm serve MODEL ...`")
        return rest[2:], True
    if re.fullmatch(r"python[0-9.]*", head):
        j = 1
        while j < len(rest) and rest[j] in ("-u", "-O", "-B"):
            j += 1
        if j + 1 < len(rest) and rest[j] == "-m":
            mod = rest[j + 1]
            if mod in _PY_ENTRYPOINTS:
                args = rest[j + 2:]
                if mod == "vllm.entrypoints.cli.main":
                    if args[:1] != ["serve"]:
                        raise InputError("expected `python -m vllm.entrypoints.cli.main serve ...`")
                    return args[1:], True
                return args, False
        raise InputError(f"not a vLLM server command: {' '.join(rest[:4])}")
    raise InputError(f"not a vLLM server command: expected `vllm serve MODEL ...`, got `{rest[0]}`")


def _strip_docker(tokens: list[str], cfg: EngineConfig) -> tuple[list[str], bool]:
    if not tokens or tokens[0] not in ("run", "container"):
        raise InputError("expected `docker run ... vllm/vllm-openai:TAG ...`")
    i = 2 if tokens[0] == "container" else 1
    entrypoint: str | None = None
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("-"):
            name, has_eq, value = tok.partition("=")
            if name == "--entrypoint":
                entrypoint = value if has_eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
                i += 1 if has_eq else 2
            elif name in ("-e", "--env"):
                assignment = value if has_eq else (tokens[i + 1] if i + 1 < len(tokens) else "")
                if "=" in assignment:
                    k, v = assignment.split("=", 1)
                    cfg.env[k] = v
                i += 1 if has_eq else 2
            elif has_eq or name in _DOCKER_BOOL:
                i += 1
            else:
                i += 2
            continue
        break
    if i >= len(tokens):
        raise InputError("docker run line has no image")
    image = tokens[i]
    if (version := version_from_image(image)) is not None:
        cfg.vllm_version = version
    args = tokens[i + 1:]
    if entrypoint:  # `--entrypoint vllm IMAGE serve MODEL ...`: the entrypoint is the command's first word
        return _strip_to_args([entrypoint, *args], cfg)
    # An explicit command after the image (`... vllm/vllm-openai vllm serve X`) or the image's own
    # entrypoint (`vllm serve` in current images, api_server in old ones).
    if args and (os.path.basename(args[0]) in ("vllm",) or re.fullmatch(r"python[0-9.]*", args[0])):
        return _strip_to_args(args, cfg)
    # The official image's ENTRYPOINT is `vllm serve` (older: python -m ...api_server), so a
    # positional model is accepted either way.
    return args, True


# `cat > config.yaml << EOF` (or `cat <<'EOF' > config.yaml`) ... `EOF`: a file the script writes before it starts vLLM
_HEREDOC_HEAD = re.compile(r"^[^\n]*\bcat\b[^\n]*<<-?\s*(['\"]?)(\w+)\1[^\n]*$", re.M)
_REDIRECT_TARGET = re.compile(r">\s*(['\"]?)([^\s'\"<>|;&]+)\1")


def _heredocs(text: str, variables: dict[str, str] | None = None) -> tuple[str, dict[str, str]]:
    """The script without its here-documents, and the files they write (name -> text). An unquoted delimiter
    (``<< EOF``) expands the body's variables, as the shell does; a quoted one (``<< 'EOF'``) keeps it as written."""
    written: dict[str, str] = {}
    out, pos = [], 0
    for m in _HEREDOC_HEAD.finditer(text):
        if m.start() < pos:
            continue
        target = _REDIRECT_TARGET.search(m.group(0).replace("<<", "  "))
        end = re.compile(rf"^[ \t]*{re.escape(m.group(2))}[ \t]*$", re.M).search(text, m.end())
        if target is None or end is None:
            continue
        body = text[m.end() + 1:end.start()]
        written[target.group(2)] = body if m.group(1) else _expand_word(body, variables or {})
        out.append(text[pos:m.start()])
        pos = end.end()
    out.append(text[pos:])
    return "".join(out), written


def _parse_args(args: list[str], cfg: EngineConfig, *, positional_model: bool,
                base_dir: Path | None, notes: list[str], written: dict[str, str] | None = None) -> None:
    config_file: str | None = None
    i = 0
    positionals: list[str] = []
    while i < len(args):
        tok = args[i]
        if not tok.startswith("-") or re.fullmatch(r"-\d+(\.\d+)?", tok):
            positionals.append(tok)
            i += 1
            continue
        if tok == "--":
            positionals.extend(args[i + 1:])
            break
        name, has_eq, inline = tok.partition("=")
        if name in ("--config",):
            if has_eq:
                config_file = inline
                i += 1
            else:
                if i + 1 >= len(args):
                    raise InputError("--config: expected a YAML file")
                config_file = args[i + 1]
                i += 2
            continue
        dest, negated = _canonical(_unabbreviated(name, notes))
        nxt = args[i + 1] if i + 1 < len(args) else None
        if negated:
            if dest in BOOL_FIELDS:
                setattr(cfg, dest, False)
            else:
                cfg.extra[dest] = False
            i += 1
            continue
        if dest in BOOL_FIELDS or dest in _KNOWN_BOOL_EXTRAS:
            value: object = True
            if has_eq:
                value = inline
            elif nxt is not None and nxt.lower() in _TRUE | _FALSE:
                # Old vLLM (<= 0.5) took `--enable-chunked-prefill False`; 0.33 would reject it.
                value = nxt
                notes.append(f"{name} {nxt}: old boolean spelling; vLLM 0.33 wants {name} / --no-{name[2:]}")
                i += 1
            _apply(cfg, dest, value if dest in BOOL_FIELDS else _maybe_bool(value), name)
            i += 1
            continue
        if has_eq:
            value = inline
            i += 1
        elif nxt is not None and (not nxt.startswith("-") or re.fullmatch(r"-\d+(\.\d+)?", nxt)):
            value = nxt
            i += 2
            # nargs="+" options (served-model-name) swallow following plain words; the model, if any,
            # came before them.
            if dest == "served_model_name":
                vals = [value]
                while i < len(args) and not args[i].startswith("-"):
                    vals.append(args[i])
                    i += 1
                value = vals
        else:
            if dest in CONVERTERS:
                raise InputError(f"{name}: expected a value")
            value = True  # an unknown flag used as a switch
            i += 1
        _apply(cfg, dest, value, name)

    if positionals:
        if positional_model:
            # `vllm serve TAG --model X`: vLLM sets args.model = args.model_tag, so the positional wins.
            if cfg.model is not None and cfg.model != positionals[0]:
                notes.append(f"both a positional model ({positionals[0]}) and --model {cfg.model}: vLLM uses the positional one")
            cfg.model = positionals[0]
            positionals = positionals[1:]
        if positionals:
            notes.append(f"ignored stray argument(s): {' '.join(positionals)}")

    if config_file is not None:
        path = Path(config_file).expanduser()
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        written = written or {}
        inline = written.get(config_file, written.get(os.path.basename(config_file)))
        if inline is not None:
            lines = inline.splitlines()
            unset = [ln.strip() for ln in lines if _unresolved(ln)]
            if unset:
                notes.append(f"{config_file} (from the text): not set in the text, so not used: "
                             + ", ".join(unset) + "; pass the values explicitly")
            inline = "\n".join(ln for ln in lines if not _unresolved(ln))
        from_file = (config_from_yaml_text(inline, f"{config_file} (from the text)") if inline is not None
                     else load_yaml(path))
        # Line flags win over the file (vLLM inserts the file's args before the line's own).
        merged = from_file.overlay(cfg)
        for f in ENGINE_FIELDS:
            setattr(cfg, f, merged.value_of(f))
        cfg.extra = merged.extra
        cfg.env = merged.env
        cfg.field_origins = merged.field_origins
        notes.extend(from_file.notes)
        notes.append(f"--config {config_file}: loaded; flags on the line win over the file")


def _unabbreviated(name: str, notes: list[str]) -> str:
    """A long option as vLLM's parser reads it: itself, or the one ``vllm serve`` option it is a unique prefix of
    (argparse's allow_abbrev: ``--max-num-batched-token`` is ``--max-num-batched-tokens``). A name kvdoctor knows, or
    that no option starts with (a fork's or an older release's flag), stays as it is; an ambiguous one too, with a
    note (vLLM 0.33 would refuse it)."""
    from kvdoctor.engine.serve_flags import SERVE_FLAGS

    opt = "--" + name.lstrip("-").replace("_", "-")
    dest = _dest(opt)
    if not name.startswith("--") or opt in SERVE_FLAGS or opt in ALIASES or dest in CONVERTERS \
            or dest in _KNOWN_BOOL_EXTRAS:
        return name
    cands = sorted(f for f in SERVE_FLAGS if f.startswith(opt))
    if len(cands) == 1:
        notes.append(f"{name} read as {cands[0]} (vLLM's parser accepts a unique prefix of an option)")
        return cands[0]
    if cands:
        notes.append(f"{name} is ambiguous to vLLM 0.33's parser ({', '.join(cands[:4])}"
                     f"{', ...' if len(cands) > 4 else ''}): vLLM would refuse it; kept but not modelled")
    return name


def _maybe_bool(value: object) -> object:
    try:
        return boolean(value)
    except ValueError:
        return value


def parse_serve_line(text: str, *, base_dir: str | Path | None = None,
                     variables: dict[str, str] | None = None, files: dict[str, str] | None = None) -> EngineConfig:
    """Parse a pasted server command: ``vllm serve MODEL --flag v ...``, ``python -m
    vllm.entrypoints.openai.api_server --model X ...``, ``docker run ... vllm/vllm-openai:TAG ...``,
    with ``VAR=1`` prefixes and backslash-newline continuations. ``--config x.yaml`` is loaded
    (relative to ``base_dir`` or the current directory). ``variables``: the environment the command runs in (a
    container's ``env`` for its ``sh -c`` script); the script's own assignments win. ``files``: files the command
    can read besides the disk (a ConfigMap's keys; the script's here-documents are added). What the parse noticed
    (old spellings, stray words) lands in ``cfg.notes``; unknown flags in ``cfg.extra``.
    """
    if not isinstance(text, str) or not text.strip():
        raise InputError("empty command line: expected `vllm serve MODEL ...`")
    if _SYSTEMD_SECTION.search(text):
        text, variables = _systemd_service(text, base_dir, variables)
    image = None
    if _DOCKERFILE.match(text):
        text, variables, image = _dockerfile(text, base_dir, variables)
    if re.search(r"(?:^|[\s=(.])LLM\s*\(", text):
        return parse_llm_call(text)
    from kvdoctor.evidence.offline import offline_tool

    if offline_tool(text) and not _A_COMMAND.search(text):
        return parse_offline_line(text)
    if "\n" in text.strip() and _YAML_DOC.match(text) and (not _A_COMMAND.search(text)
                                                        or re.search(r"^(?:apiVersion|kind|services|spec):", text, re.M)):
        # a YAML file given where a command was asked for: read it as --config would (a vLLM config, a manifest, a
        # compose file, a chart's values), since that is what it is (its `command: ["vllm", ...]` lists included)
        return config_from_yaml_text(text, "the --serve file")
    if (argv := _python_argv(text)) is not None:
        text = argv
    elif _PYTHON_SOURCE.search(text) and ((tree := _parse_python(text)) is not None or not _A_COMMAND.search(text)):
        # (a shell script naming `vllm serve` is not Python; a Python module that imports vllm.entrypoints is)
        ray = _python_ray_llm(tree) if tree is not None else None
        if ray is not None:
            return ray
        # (kvdoctor does not run code: a command assembled from variables at run time is not a line it can read)
        raise InputError("a Python file that builds its vLLM command at run time: pass the command it runs as a "
                         "`vllm serve ...` line, or an `LLM(...)` call with literal arguments")
    cfg = EngineConfig(origin="serve-line", usage_context="api")
    known = {**(variables or {}), **_text_assignments(text, variables or {})}
    text, written = _heredocs(text, known)
    text = _bash_arrays(text, cfg.notes)
    written = {**(files or {}), **written}
    # `${V:+--max-num-seqs $V}` and `${V:-a b}` hold spaces: the shell expands them before it splits words
    text = _BRACE_REF.sub(lambda m: _expand_word(m.group(0), known), text)
    tokens = split_command_line(text)
    args, positional_model = _strip_to_args(tokens, cfg)
    notes: list[str] = []
    args = _expand_variables(args, {**known, **_shell_assignments(tokens)}, notes)
    _parse_args(args, cfg, positional_model=positional_model,
                base_dir=Path(base_dir) if base_dir is not None else None, notes=notes, written=written)
    cfg.notes.extend(notes)
    if image and not cfg.vllm_version:
        cfg.vllm_version = version_from_image(image)
    return cfg


_ARGV_LIST = re.compile(r"\[\s*(['\"])[^'\"]*vllm")
_PYTHON_SOURCE = re.compile(r"^(?:import \w+|from [\w.]+ import |def \w+\(|class \w+[(:])", re.M)
# a YAML document's opening: a `---`, or a `key:` mapping line (not a shell's `VAR=`, nor a comment)
_YAML_DOC = re.compile(r"\A(?:\s*#[^\n]*\n)*\s*(?:---\s*\n|[A-Za-z_][\w.-]*:(?:\s|$))")


def _py_literal(node: "ast.expr") -> object:
    """A literal the way Ray's docs write configs: constants, lists, dicts and ``dict(k=v, ...)`` calls; anything
    computed (a variable, ``os.environ[...]``) is ``_UNREAD``."""
    import ast

    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        return {kw.arg: v for kw in node.keywords if kw.arg and (v := _py_literal(kw.value)) is not _UNREAD}
    if isinstance(node, ast.Dict):
        return {k: v for kn, vn in zip(node.keys, node.values)
                if kn is not None and isinstance(k := _py_literal(kn), str) and (v := _py_literal(vn)) is not _UNREAD}
    if isinstance(node, (ast.List, ast.Tuple)):
        return [v for x in node.elts if (v := _py_literal(x)) is not _UNREAD]
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _UNREAD


_UNREAD = object()


def _parse_python(text: str) -> "ast.Module | None":
    """The file as Python source, or None where it is not (a shell script, a YAML file)."""
    import ast
    import warnings

    try:
        with warnings.catch_warnings():  # a pasted script's "invalid escape sequence": not the reader's concern
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def _python_ray_llm(tree: "ast.Module") -> "EngineConfig | None":
    """A Python file that serves with Ray Serve LLM (``LLMConfig(model_loading_config=dict(...), engine_kwargs=dict(...),
    accelerator_type=...)``, Ray's documented form): its literal arguments read as the same config in a Serve YAML
    (``manifests.ray_llm_servers``). None when the file holds no such call."""
    import ast

    from kvdoctor.engine import manifests

    configs = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        callee = node.func.id if isinstance(node.func, ast.Name) else \
            node.func.attr if isinstance(node.func, ast.Attribute) else None
        if callee == "LLMConfig":
            conf = {kw.arg: v for kw in node.keywords if kw.arg and (v := _py_literal(kw.value)) is not _UNREAD}
            if isinstance(conf.get("model_loading_config"), dict):
                configs.append((f"LLMConfig.{len(configs)}", conf))
    if not configs:
        return None
    spec = manifests.pick(manifests.ray_llm_servers(configs), None, "the Python file")
    spec.notes.append("read from a Python file's LLMConfig(...) call: its literal arguments only")
    return from_server(spec, "the Python file")


def _python_argv(text: str) -> str | None:
    """A command a harness printed as its Python argv (``Server command: ['vllm', 'serve', 'Qwen/Qwen3.5-2B',
    '--max-model-len', '8192']``: verl, subprocess wrappers) as the shell words it runs, so it parses like a typed
    line; None when the text holds no such list."""
    import ast

    from kvdoctor.evidence.logs.startup import matching_brace

    m = _ARGV_LIST.search(text)
    end = matching_brace(text[m.start():]) if m is not None else None
    if end is None:
        return None
    try:
        words = ast.literal_eval(text[m.start():m.start() + end + 1])
    except (ValueError, SyntaxError):
        return None
    if isinstance(words, list) and words and all(isinstance(w, str) for w in words):
        return shlex.join(words)
    return None


_ARRAY_START = re.compile(r"^[ \t]*([A-Za-z_][A-Za-z0-9_]*)(\+?)=\(", re.M)
_IF_LINE = re.compile(r"^\s*if\b", re.M)
_FI_LINE = re.compile(r"^\s*fi\b", re.M)


def _paren_body(text: str, i: int) -> int | None:
    """The index of the ``)`` that closes the array opened just before ``i``, outside quotes (None: unclosed)."""
    quote = None
    while i < len(text):
        c = text[i]
        if quote:
            if c == quote:
                quote = None
            elif c == "\\" and quote == '"':
                i += 1
        elif c in "'\"":
            quote = c
        elif c == "\\":
            i += 1
        elif c == ")":
            return i
        i += 1
    return None


def _bash_arrays(text: str, notes: list[str]) -> str:
    """A script's bash arrays (``ARGS=( ... )``, ``ARGS+=( ... )``) put back where ``"${ARGS[@]}"`` uses them, their
    words as written (quotes kept, so the variables in them expand later). An append inside ``if … fi`` is kept too,
    and a note says so: the condition is not evaluated."""
    if "[@]" not in text:
        return text
    arrays: dict[str, list[str]] = {}
    conditional = []
    for m in _ARRAY_START.finditer(text):
        end = _paren_body(text, m.end())
        if end is None:
            continue
        body = " ".join(text[m.end():end].split())
        name, append = m.group(1), bool(m.group(2))
        before = text[:m.start()]  # inside if ... fi: more `if` lines than `fi` lines before it
        if append and len(_IF_LINE.findall(before)) > len(_FI_LINE.findall(before)):
            conditional.append(f"{name}+=({body})")
        arrays[name] = (arrays.get(name, []) if append else []) + [body]
    if conditional:
        notes.append("bash array appends inside if ... fi kept as written (their conditions are not evaluated): "
                     + "; ".join(conditional))

    def use_name(name: str, written: str) -> str:
        words = arrays.get(name)
        return " ".join(words) if words is not None else written
    # a whole word only ("${A[@]}" or ${A[@]} between blanks): "${A[*]}" inside an echo's string stays as written
    return re.sub(r'(?<!\S)(?:"\$\{([A-Za-z_][A-Za-z0-9_]*)\[@\]\}"|\$\{([A-Za-z_][A-Za-z0-9_]*)\[@\]\})(?!\S)',
                  lambda m: use_name(m.group(1) or m.group(2), m.group(0)), text)


_SYSTEMD_SECTION = re.compile(r"^\s*\[Service\]\s*$", re.M)
_SYSTEMD_ASSIGN = re.compile(r'"([^"]*)"|\'([^\']*)\'|(\S+)')


def _systemd_service(text: str, base_dir: str | Path | None,
                     variables: dict[str, str] | None) -> tuple[str, dict[str, str]]:
    """A systemd unit (``[Service]`` with ``Environment=`` and ``ExecStart=``): the command it starts and the environment
    it starts it in. ``ExecStart`` naming a script that lies beside the unit (a repository ships both) is that script;
    a script the unit's folder lacks is an error that says what to pass."""
    env = dict(variables or {})
    lines = re.sub(r"\\\n", " ", text).splitlines()
    exec_start = None
    section = None
    for ln in lines:
        st = ln.strip()
        if st.startswith("[") and st.endswith("]"):
            section = st
            continue
        if section != "[Service]" or "=" not in st or st.startswith(("#", ";")):
            continue
        key, _, value = st.partition("=")
        if key.strip() == "Environment":
            for m in _SYSTEMD_ASSIGN.finditer(value):
                word = next(g for g in m.groups() if g is not None)
                if "=" in word:
                    k, _, v = word.partition("=")
                    env[k] = v
        elif key.strip() == "ExecStart" and value.strip():
            exec_start = value.strip().lstrip("-@+!:")  # systemd's prefixes (ignore failure, privileges)
    if exec_start is None:
        raise InputError("a systemd unit without an ExecStart= in its [Service] section")
    first = exec_start.split()[0]
    if _A_COMMAND.search(exec_start) or Path(first).name == "vllm":
        return exec_start, env
    if (body := _script_beside(base_dir, Path(first).name)) is not None:
        return body, env
    raise InputError(f"a systemd unit whose ExecStart= runs {first}, not vLLM: pass that script with "
                     "--serve (the unit's Environment= lines are read when it lies beside the unit)")


def _script_beside(base_dir: str | Path | None, name: str) -> str | None:
    """The text of the script a unit or a Dockerfile runs, when it lies beside that file (a repository ships both);
    None otherwise."""
    path = Path(base_dir) / name if base_dir is not None else None
    if path is None or not path.is_file():
        return None
    from kvdoctor.safeio import read_document

    return read_document(path, "--serve").decode("utf-8", "replace")


# a Dockerfile: its first instruction (after comments and ARGs) is FROM
# (upper case, as Dockerfiles write it: Python's `from x import y` is no FROM)
_DOCKERFILE = re.compile(r"\A(?:\s*(?:#[^\n]*|ARG\s[^\n]*)?\n)*\s*FROM\s+\S+(?:\s+AS\s+\S+)?\s*$", re.M)
_DF_INSTR = re.compile(r"^\s*([A-Za-z]+)\s+(.*)$")


def _dockerfile(text: str, base_dir: str | Path | None,
                variables: dict[str, str] | None) -> tuple[str, dict[str, str], str | None]:
    """A Dockerfile: the command its image runs (ENTRYPOINT + CMD, the last of each; vllm/vllm-openai's own
    ``vllm serve`` entrypoint when it sets none), the ENV and ARG defaults it runs with, and its base image. A
    command that runs a script the Dockerfile copies in is that script, when it lies beside the Dockerfile; anything
    else is an error that says what to pass."""
    env = dict(variables or {})
    image: str | None = None
    entry: list[str] | str | None = None
    cmd: list[str] | str | None = None
    copies: dict[str, str] = {}  # path in the image -> source beside the Dockerfile
    for line in re.sub(r"\\[ \t]*\r?\n", " ", text).splitlines():
        m = _DF_INSTR.match(line)
        if m is None or line.lstrip().startswith("#"):
            continue
        op, rest = m.group(1).upper(), m.group(2).strip()
        if op in ("ENV", "ARG"):
            try:
                words = shlex.split(rest, comments=True) if "=" in rest else rest.split(None, 1)
            except ValueError:  # an unbalanced quote: the words as they stand
                words = rest.split()
            if "=" in rest:
                for w in words:
                    k, sep, v = w.partition("=")
                    if sep and (op == "ENV" or k not in env):
                        env[k] = _expand_word(v, env)
            elif op == "ENV" and len(words) == 2:  # the legacy `ENV KEY value` form
                env[words[0]] = _expand_word(words[1], env)
        elif op == "FROM":
            image = _expand_word(rest.split()[0], env)
            entry = cmd = None  # a new stage starts from its own image
        elif op in ("ENTRYPOINT", "CMD"):
            try:
                form: list[str] | str = json.loads(rest) if rest.startswith("[") else rest
            except ValueError:
                form = rest
            if op == "ENTRYPOINT":
                entry, cmd = form, None  # Docker resets CMD when ENTRYPOINT is set
            else:
                cmd = form
        elif op in ("COPY", "ADD"):
            words = [w for w in rest.split() if not w.startswith("--")]
            if len(words) >= 2:
                dest = words[-1]
                for src in words[:-1]:
                    copies[dest.rstrip("/") + "/" + Path(src).name if dest.endswith("/") else dest] = src
    if entry is None and image and "vllm" in image.split(":")[0].lower():
        entry = ["vllm", "serve"]  # vllm/vllm-openai's ENTRYPOINT
    words: list[str] = []
    for part in (entry, cmd if not isinstance(entry, str) else None):
        if isinstance(part, list):
            words += [str(w) for w in part]
        elif isinstance(part, str) and part:
            words += ["sh", "-c", part]
    if not words:
        raise InputError("a Dockerfile without an ENTRYPOINT or CMD (and not built on vLLM's image)")
    line = shlex.join(words) if words[:2] != ["sh", "-c"] else words[2]
    if _A_COMMAND.search(line) or Path(words[0]).name == "vllm":
        return line, env, image
    script = next((w for w in words if w.endswith((".sh", ".bash")) or "/" in w and not w.startswith("-")), words[0])
    if (body := _script_beside(base_dir, copies.get(script) or Path(script).name)) is not None:
        return body, env, image
    raise InputError(f"a Dockerfile whose command runs {script}, not vLLM: pass that script with --serve (the "
                     "Dockerfile's ENV lines are read when the script lies beside it)")


def parse_offline_line(text: str) -> EngineConfig:
    """The engine of a ``vllm bench throughput`` / ``vllm bench latency`` line (or ``benchmark_throughput.py`` /
    ``benchmark_latency.py``): the line's engine flags (EngineArgs; the bench's own flags are its workload:
    ``sim.benchline.parse_offline_cmd``), in vLLM's offline usage context ("llm": the LLM class's batch table).
    ``vllm bench latency`` turns prefix caching off unless the line turns it on (latency.py's set_defaults)."""
    from kvdoctor.evidence.offline import command_args, split_args

    got = command_args(text)
    if got is None:
        raise InputError("not a `vllm bench throughput` or `vllm bench latency` command line")
    tool, args = got
    _bench, engine = split_args(tool, args)
    if tool == "latency":
        engine = ["--no-enable-prefix-caching", *engine]  # a later --enable-prefix-caching on the line wins
    cfg = EngineConfig(origin="serve-line", usage_context="llm")
    notes: list[str] = []
    _parse_args(engine, cfg, positional_model=False, base_dir=None, notes=notes)
    cfg.notes.extend(notes)
    cfg.notes.append(f"the deployment of a `vllm bench {tool}` line: vLLM's LLM class in the bench's process "
                     "(offline defaults), no API server")
    return cfg


# a shell or compose variable ($MODEL, ${TP}, ${PORT:-8000}), a Kubernetes one ($(LWS_GROUP_SIZE)), a template's
# placeholder ({{ .Values.model }}, {max_model_len})
# a default may hold one nested reference: ${A:-${B}} (a script's fallback to another variable)
_DEFAULT = r"[^{}]*(?:\$\{[^{}]*\}[^{}]*)*"
_VAR_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=+?]|##?|%%?)(" + _DEFAULT + r"))?\}|\$([A-Za-z_][A-Za-z0-9_]*)"
                      r"|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_BRACE_REF = re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(?::?[-=+?]" + _DEFAULT + r")?\}")
# `NAME=value` / `export NAME=value` at the start of a script line (the value one shell word)
_ASSIGN_LINE = re.compile(r"^[ \t]*(?:export[ \t]+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.M)
_TEMPLATE = re.compile(r"\{\{.*?\}\}|^\{[A-Za-z_][A-Za-z0-9_.]*\}$|^__[A-Z][A-Z0-9_]*__$")  # {{ }}, {x}, __X__ (sed)


def _shell_assignments(tokens: list[str]) -> dict[str, str]:
    """``NAME=value`` and ``export NAME=value`` words anywhere before the vLLM command: a script's own variables."""
    start = next((i for i in range(len(tokens)) if _is_command_start(tokens, i)), len(tokens))
    out: dict[str, str] = {}
    for tok in tokens[:start]:
        if _ENV_RE.match(tok):
            k, v = tok.split("=", 1)
            out[k] = _expand_word(v, out)
    return out


def _expand_word(word: str, variables: dict[str, str]) -> str:
    """``$V``, ``${V}``, ``$(V)`` from ``variables``; ``${V:-default}`` takes its default when V is not set or empty,
    ``${V:+word}`` is ``word`` when V is set and not empty, else nothing; ``${V:?message}`` is V or stays as written
    (the shell would stop there); anything else is left as written."""
    def one(m: re.Match) -> str:
        name, op, arg = m.group(1) or m.group(4) or m.group(5), m.group(2), m.group(3)
        value = variables.get(name)
        if op in (":+", "+"):
            return _expand_word(arg, variables) if value or (op == "+" and value is not None) else ""
        if op in (":?", "?"):  # ${V:?message}: the value, else the shell (and compose) stops: unresolved here
            return value if value is not None and (op == "?" or value != "") else m.group(0)
        if op in ("#", "##", "%", "%%"):  # ${V##*/}: V without its shortest/longest matching prefix or suffix
            return _trim(value, op, arg) if value is not None and not _unresolved(value) else m.group(0)
        if op is not None and (value is None or (op.startswith(":") and value == "")):
            return _expand_word(arg, variables)
        return value if value is not None else m.group(0)
    return _VAR_REF.sub(one, word)


def _text_assignments(text: str, outer: dict[str, str]) -> dict[str, str]:
    """A script's ``NAME=value`` lines, in order, each value expanded with what is known so far (``outer``: the
    environment it runs in). A value that is not one shell word (a command substitution, an array) is skipped."""
    known = dict(outer)
    out: dict[str, str] = {}
    for m in _ASSIGN_LINE.finditer(text):
        try:
            words = shlex.split(m.group(2), comments=True)
        except ValueError:
            continue
        if len(words) > 1 or "$(" in m.group(2) or "`" in m.group(2):
            continue
        out[m.group(1)] = known[m.group(1)] = _expand_word(words[0] if words else "", known)
    return out


def _expand_variables(args: list[str], variables: dict[str, str], notes: list[str]) -> list[str]:
    """The arguments with the text's own variables expanded (``${V:-default}`` takes its default when V is not set);
    a flag whose value is still a variable or a template placeholder is dropped with a note (its value is set where
    the file is rendered, not here), and a model that is one is kept for the error that names it."""
    out: list[str] = []
    dropped: list[str] = []
    words = [_expand_word(a, variables) for a in args]
    i = 0
    while i < len(words):
        w = words[i]
        name, has_eq, inline = w.partition("=")
        value_next = (not has_eq and w.startswith("--") and i + 1 < len(words) and not words[i + 1].startswith("-"))
        value = inline if has_eq and w.startswith("-") else (words[i + 1] if value_next else None)
        if value is not None and name not in ("--model",) and _unresolved(value):
            dropped.append(f"{name} {value}")
            i += 2 if value_next else 1
            continue
        out.append(w)
        i += 1
    if dropped:
        notes.append("not set in the text (a variable or template placeholder), so not used: " + ", ".join(dropped)
                     + "; pass the values explicitly")
    return out


def _trim(value: str, op: str, pattern: str) -> str:
    import fnmatch

    cuts = range(len(value) + 1)
    if op.startswith("#"):
        order = reversed(cuts) if op == "##" else cuts
        return next((value[k:] for k in order if fnmatch.fnmatchcase(value[:k], pattern)), value)
    order = cuts if op == "%%" else reversed(cuts)
    return next((value[:k] for k in order if fnmatch.fnmatchcase(value[k:], pattern)), value)


def _unresolved(word: str) -> bool:
    # a command substitution $(...) is the shell's to run: never resolved here
    return bool(_VAR_REF.search(word) or _TEMPLATE.search(word) or "$(" in word)


def unresolved_reference(word: str | None) -> bool:
    """A model or value still written as a variable or template placeholder."""
    return bool(word) and _unresolved(str(word))


def parse_llm_call(text: str) -> EngineConfig:
    """An offline ``LLM(model=..., gpu_memory_utilization=0.9, ...)`` call (usage context "llm").

    Only literal keyword values are read (``ast.literal_eval``); anything computed is reported.
    """
    import ast

    m = re.search(r"LLM\s*\(", text)
    assert m is not None
    call_text = text[m.start():]
    # Cut at the matching parenthesis so trailing code does not break parsing.
    depth, end = 0, None
    for k, ch in enumerate(call_text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                end = k + 1
                break
    if end is None:
        raise InputError("LLM(...): unbalanced parentheses")
    import warnings

    try:
        with warnings.catch_warnings():  # a pasted script's "invalid decimal literal": the error below says it
            warnings.simplefilter("ignore", SyntaxWarning)
            node = ast.parse(call_text[:end], mode="eval").body
    except SyntaxError as exc:
        raise InputError(f"LLM(...): not valid Python: {exc.msg}") from None
    assert isinstance(node, ast.Call)
    values: dict[str, Any] = {}
    notes: list[str] = []
    if node.args:
        try:
            values["model"] = ast.literal_eval(node.args[0])
        except ValueError:
            notes.append("LLM(...): the model is not a literal; pass --model")
    for kw in node.keywords:
        if kw.arg is None:
            notes.append("LLM(**kwargs): keyword unpacking not read")
            continue
        try:
            values[kw.arg] = ast.literal_eval(kw.value)
        except ValueError:
            notes.append(f"LLM(...): {kw.arg} is not a literal; ignored")
    cfg = from_flags(values, origin="llm-call")
    cfg.usage_context = "llm"
    cfg.notes.extend(notes)
    return cfg


# ---------------------------------------------------------------------------------------------
# YAML


def _yaml_model():
    """A pydantic model of the fields kvdoctor types, built on first use (pydantic is lazy)."""
    global _YAML_MODEL
    if _YAML_MODEL is not None:
        return _YAML_MODEL
    from typing import Annotated, Optional

    from pydantic import BeforeValidator, ConfigDict, create_model

    def wrap(conv):
        def v(x):
            if x is None:
                return None
            try:
                return conv(x)
            except ValueError as exc:
                raise ValueError(str(exc)) from None  # pydantic reports "Value error, <msg>"
        return v

    fields = {name: (Optional[Annotated[Any, BeforeValidator(wrap(conv))]], None)
              for name, conv in CONVERTERS.items()}
    _YAML_MODEL = create_model("VllmYamlConfig", __config__=ConfigDict(extra="allow"), **fields)
    return _YAML_MODEL


_YAML_MODEL = None


def load_yaml(path: str | Path) -> EngineConfig:
    """A vLLM ``--config`` YAML file (keys kebab or snake case), validated with one-line errors; or a deployment file
    that runs vLLM (a Kubernetes manifest, a compose file, production-stack Helm values, a KubeAI Model:
    ``engine.manifests``), whose server's flags are read as its tool would start it. ``FILE#NAME`` picks one server
    of several (a container, a compose service, a modelSpec entry)."""
    p, selector = split_selector(Path(path).expanduser())
    # vLLM refuses other extensions too ("Config file must be of a yaml/yml type"); a .json file may be Triton's
    # vLLM-backend model.json (_triton_model_json), refused the same way when it is not one
    wrong_type = InputError(f"{p}: config file must be of a yaml/yml type")
    triton = p.suffix.lower() == ".json" and selector is None
    if p.suffix.lower() not in (".yaml", ".yml") and not (triton and p.is_file()):
        raise wrong_type
    from kvdoctor.safeio import MAX_CONFIG_BYTES, check_input_file

    if not p.exists():
        raise InputError(f"{p}: no such file")
    check_input_file(p, "--config")  # a FIFO or device is refused before it is read
    try:
        with p.open("r", encoding="utf-8") as fh:
            raw_text = fh.read(MAX_CONFIG_BYTES + 1)
    except (OSError, UnicodeDecodeError) as exc:
        if triton:
            raise wrong_type from None
        raise InputError(f"{p}: cannot read: {exc}") from None
    if triton:
        cfg = _triton_model_json(raw_text, p)
        if cfg is None:
            raise wrong_type
        return cfg
    return config_from_yaml_text(raw_text, str(p), selector)


def config_from_yaml_text(raw_text: str, where: str, selector: str | None = None) -> EngineConfig:
    """``load_yaml`` on a text already read (``where`` names it in errors and origins)."""
    from kvdoctor.safeio import load_yaml_documents

    p = where
    import yaml

    try:
        docs = load_yaml_documents(raw_text, str(p))  # no alias bombs, size-capped
    except yaml.YAMLError as exc:
        marked = isinstance(exc, yaml.MarkedYAMLError)  # a scanner/parser error knows where; others do not
        mark = exc.problem_mark if marked else None
        where = f" (line {mark.line + 1})" if mark is not None else ""
        problem = (exc.problem if marked else None) or "invalid YAML"
        raise InputError(f"{p}: invalid YAML{where}: {problem}") from None
    from kvdoctor.engine import manifests

    if manifests.looks_like_deployment(docs):
        try:
            servers = manifests.find_servers(docs)
        except InputError as exc:  # a server's own text is wrong: say in which file
            raise InputError(f"{p}: {exc}") from None
        return from_server(manifests.pick(servers, selector, str(p)), str(p))
    if selector is not None:
        raise InputError(f"{p}: '#{selector}' picks a server of a deployment file; this is a vLLM config")
    docs = [d for d in docs if d is not None]
    if len(docs) > 1:
        raise InputError(f"{p}: {len(docs)} YAML documents; a vLLM config is one mapping of flags")
    data = docs[0] if docs else {}
    if not isinstance(data, dict):
        raise InputError(f"{p}: expected a mapping of vLLM flags, got {type(data).__name__}")
    return from_mapping(data, origin=f"yaml:{p}", where=str(p))


def _triton_model_json(raw_text: str, p: Path) -> "EngineConfig | None":
    """Triton's vLLM backend reads ``model_repository/<name>/1/model.json``: one JSON object of vLLM engine arguments
    (``AsyncEngineArgs``' names, values often strings: ``"gpu_memory_utilization": "0.9"``). Read as the same mapping a
    YAML config is; None when the text is not such an object (vLLM's own extension rule then refuses it)."""
    import json

    try:
        data = json.loads(raw_text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("model"), str):
        return None
    from kvdoctor.engine.serve_flags import SERVE_FLAGS

    engine = {k: v for k, v in data.items() if "--" + str(k).replace("_", "-") in SERVE_FLAGS}
    rest = sorted(k for k in data if k not in engine)
    cfg = from_mapping(engine, origin=f"triton:{p}", where=str(p))
    cfg.notes.append(f"read from {p} as Triton's vLLM backend reads it: the keys are engine arguments"
                     + (f"; not engine arguments (sampling defaults, Triton's own): {', '.join(rest)}" if rest else ""))
    return cfg


def split_selector(p: Path) -> tuple[Path, str | None]:
    """``deploy.yaml#vllm`` -> (deploy.yaml, "vllm") when the whole name is not itself a file."""
    if "#" not in p.name or p.exists():
        return p, None
    head, _, sel = str(p).rpartition("#")
    return Path(head), sel or None


def from_server(spec, where: str) -> EngineConfig:
    """The engine configuration of one server of a deployment file (``manifests.ServerSpec``): its command read as a
    serve line, its mapping settings (Helm ``vllmConfig``) under the line's flags (the chart renders them first,
    ``extraArgs`` after), its environment, image tag, and the accelerator the file pins."""
    # a plain command gets no shell expansion (Kubernetes' $(VAR) was expanded when the spec was read)
    text, shell = spec.command_line()
    env = {k: _expand_word(v, {}) for k, v in spec.env.items()}  # compose's ${V:-default} in its own environment
    try:
        line = parse_serve_line(text, variables=env if shell else None,
                                files={**_mounted_files(spec, where), **spec.files})
    except InputError as exc:
        raise InputError(f"{where}#{spec.name.rsplit('/', 1)[-1].rsplit('.', 1)[-1]}: {exc}") from None
    origin = f"deploy:{where}#{spec.name}"
    line.origin = origin
    cfg = from_mapping(spec.flags, origin=origin, where=f"{where}#{spec.name}").overlay(line) if spec.flags else line
    cfg.origin = origin
    cfg.env = {**env, **cfg.env}
    if spec.image and not cfg.vllm_version:
        cfg.vllm_version = version_from_image(spec.image)
    cfg.gpu_hint = spec.gpu_hint
    cfg.notes = [f"read from {where}: {spec.name}", *spec.notes, *cfg.notes]
    world = (cfg.tensor_parallel_size or 1) * (cfg.pipeline_parallel_size or 1) * (cfg.data_parallel_size or 1)
    # a server spread over several pods (LeaderWorkerSet, Ray, vLLM's own multi-node flags) asks each pod for its share
    multi_node = spec.multi_node or bool(_MULTI_NODE.search(text))
    if spec.gpu_count and spec.gpu_count != world and not multi_node:
        cfg.notes.append(f"the file gives the server {spec.gpu_count} GPU(s) and vLLM uses {world} (tensor x pipeline x "
                         "data parallel)" + ("; the others stay idle" if spec.gpu_count > world else
                                             "; vLLM would not start"))
    return cfg


def _mounted_files(spec, where: str) -> dict[str, str]:
    """The files a compose service's bind mounts put where its command reads them (``--config /etc/vllm/c.yaml`` from
    ``./configs/vllm.yaml:/etc/vllm/c.yaml``): the host file, relative to the deployment file, by its container path.
    A mount whose host side is unset (``${HOME}/...``) or absent is left out."""
    out: dict[str, str] = {}
    argv = spec.argv
    wanted = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--config"}
    wanted |= {a.split("=", 1)[1] for a in argv if a.startswith("--config=")}
    for target in wanted:
        for dst, src in spec.mounts.items():
            rel = os.path.relpath(target, dst) if target.startswith(dst.rstrip("/") + "/") else None
            if target != dst and rel is None:
                continue
            if "$" in src:
                continue
            host = Path(src).expanduser()
            host = (host if host.is_absolute() else Path(where).parent / host) / (rel or "")
            if host.is_file() and host.stat().st_size < (1 << 20):
                out[target] = host.read_text(errors="replace")
    return out


_MULTI_NODE = re.compile(r"--(?:nnodes|node[-_]rank|headless|data[-_]parallel[-_]size[-_]local|data[-_]parallel[-_]address)"
                         r"\b|--distributed[-_]executor[-_]backend[= ]+ray\b|\bray\s+start\b")


# Images whose tag is another project's release, not vLLM's: LMCache's vLLM image (lmcache/vllm-openai:v0.4.5), llm-d's,
# NGC's monthly container (nvcr.io/nvidia/vllm:25.09-py3), Dynamo's runtime.
FOREIGN_TAG_OWNERS = ("lmcache", "llm-d", "nvcr.io/nvidia", "ai-dynamo", "nvidia/dynamo")


def version_from_image(image: str) -> str | None:
    """The vLLM release a container image's tag names (``vllm/vllm-openai:v0.10.1``; ``rocm/vllm:rocm6.3.1_vllm_0.8.5_…``
    inside the tag), else None."""
    repo, colon, tag = image.rpartition(":")
    if not colon or "/" in tag:
        return None
    m = re.search(r"vllm[_-]v?(\d+\.\d+(?:\.\d+)?)", tag)
    if m:
        return m.group(1)
    if any(f"/{o}/" in f"/{repo.lower()}" for o in FOREIGN_TAG_OWNERS):
        return None
    m = re.fullmatch(r"v?(\d+\.\d+(?:\.\d+){0,2}(?:[.\-+]?(?:post|rc|dev)\d*)?)", tag)
    return m.group(1) if m else None


def from_mapping(data: Mapping[str, Any], *, origin: str, where: str) -> EngineConfig:
    """Validate ``{flag-or-dest: typed value}`` (YAML, JSON) with pydantic for one-line type errors."""
    from pydantic import ValidationError

    normal: dict[str, Any] = {}
    spelled: dict[str, str] = {}
    for key, value in data.items():
        dest, negated = _canonical(str(key))
        if negated:
            value = False if value in (True, None) else value
        spelled[dest] = str(key)
        normal[dest] = value
    known = {k: v for k, v in normal.items() if k in CONVERTERS}
    try:
        model = _yaml_model().model_validate(known)
    except ValidationError as exc:
        err = exc.errors()[0]
        key = spelled.get(str(err["loc"][0]), str(err["loc"][0])) if err.get("loc") else "?"
        msg = str(err.get("msg", "invalid value")).removeprefix("Value error, ")
        raise InputError(f"{where}: {key}: {msg}") from None
    cfg = EngineConfig(origin=origin)
    for k in known:
        setattr(cfg, k, getattr(model, k))  # untyped-ok: pydantic's validated model, read field by field
    for k, v in normal.items():
        if k not in CONVERTERS:
            cfg.extra[k] = v
    return cfg


# ---------------------------------------------------------------------------------------------
# Logs


def from_non_default_args(args: Mapping[str, Any], *, origin: str = "log") -> EngineConfig:
    """The start-up log's ``non-default args: {...}`` dict (snake_case dests, typed values).

    ``model_tag`` is the positional model of ``vllm serve``; vLLM copies it to ``model``. Values shown
    as ``'***'`` (secrets) and ``...`` (elided in pasted excerpts) are dropped.
    """
    if not isinstance(args, Mapping):
        raise InputError(f"non-default args: expected a dict, got {type(args).__name__}")
    data: dict[str, Any] = {}
    for key, value in args.items():
        if key in _LOG_NOISE or _elided(value):
            continue
        data[key] = value
    if "model" not in data and isinstance(args.get("model_tag"), str):
        data["model"] = args["model_tag"]
    return from_mapping(data, origin=origin, where="non-default args")


_ELIDED_RE = re.compile(r"^\s*[\[{(]?\s*(\.\.\.|…)\s*[\]})]?\s*$")


def _elided(value: object) -> bool:
    """Secrets ('***') and what a pasted excerpt cut out ('...', [...], {...}, or Ellipsis inside)."""
    if value is Ellipsis:
        return True
    if isinstance(value, str):
        return value.strip() == "***" or bool(_ELIDED_RE.match(value))
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(x is Ellipsis for x in value)
    if isinstance(value, dict):
        return Ellipsis in value
    return False


# StartupFacts field -> EngineConfig field for effective values a log shows.
def _measured_from_facts(f: StartupFacts) -> tuple[tuple[str, object], ...]:
    """The effective values a start-up shows that mirror engine fields (engine dest, value)."""
    return (("max_model_len", f.max_model_len), ("gpu_memory_utilization", f.gpu_memory_utilization),
            ("block_size", f.block_size), ("max_num_batched_tokens", f.max_num_batched_tokens),
            ("tensor_parallel_size", f.tensor_parallel_size), ("pipeline_parallel_size", f.pipeline_parallel_size),
            ("kv_cache_dtype", f.kv_cache_dtype), ("dtype", f.dtype))
# Keys of the "Initializing a V1 LLM engine ... with config:" line that mirror engine fields.
_ENGINE_LINE_KEYS = {
    "max_seq_len": "max_model_len", "tensor_parallel_size": "tensor_parallel_size",
    "pipeline_parallel_size": "pipeline_parallel_size", "data_parallel_size": "data_parallel_size",
    "kv_cache_dtype": "kv_cache_dtype", "dtype": "dtype", "quantization": "quantization",
    "enforce_eager": "enforce_eager", "enable_prefix_caching": "enable_prefix_caching",
    "enable_chunked_prefill": "enable_chunked_prefill", "model": "model",
    # the V0 engine line (and V1's up to ~0.10) names the effective setting this way
    "chunked_prefill_enabled": "enable_chunked_prefill",
}


_SPEC_REPR = re.compile(r"SpeculativeConfig\((.*)\)\s*$")
_SPEC_FIELD = re.compile(r"(\w+)=('(?:[^'\\]|\\.)*'|[^,]+)")


def speculative_from_engine_line(text: object) -> dict[str, Any] | None:
    """The engine config line's ``speculative_config=SpeculativeConfig(method='eagle3', model='…',
    num_spec_tokens=2)`` as --speculative-config's JSON keys; None when absent, None or cut."""
    m = _SPEC_REPR.match(str(text or "").strip())
    if not m:
        return None
    out: dict[str, Any] = {}
    for key, raw in _SPEC_FIELD.findall(m.group(1)):
        val = raw.strip()
        if val.startswith("'") and val.endswith("'"):
            out[key] = val[1:-1]
        elif val.isdigit():
            out[key] = int(val)
    if "num_spec_tokens" in out:
        out["num_speculative_tokens"] = out.pop("num_spec_tokens")
    return out if out.get("method") else None


# Platforms whose start-up kvdoctor reads but does not model (their workers print their own memory lines).
OTHER_PLATFORMS = {"xpu": "an Intel XPU (vLLM's xpu worker)", "npu": "an Ascend NPU (vllm-ascend)",
                   "tpu": "a TPU (tpu-inference)"}


def from_startup(facts: StartupFacts, *, origin: str | None = None) -> EngineConfig:
    """Config recovered from one start-up (``evidence.model.StartupFacts``).

    Given fields come from the non-default args (what the operator set); effective values the log
    shows land in ``measured`` (resolve() marks them "measured" where nothing was given).
    """
    origin = origin or "log"
    nda = facts.non_default_args or {}
    cfg = from_non_default_args(nda, origin=origin) if nda else EngineConfig(origin=origin)
    measured: dict[str, Any] = {}
    for key, dest in _ENGINE_LINE_KEYS.items():
        v = (facts.engine_config or {}).get(key)
        if v is None or v in ("None", "none"):
            continue
        try:
            measured[dest] = CONVERTERS[dest](v)
        except ValueError:
            continue
    for name, v in _measured_from_facts(facts):
        if v is not None:
            try:
                measured[name] = CONVERTERS[name](v)
            except ValueError:
                continue
    if cfg.model is None and facts.model:
        measured.setdefault("model", facts.model)
    spec = speculative_from_engine_line((facts.engine_config or {}).get("speculative_config"))
    if spec is not None and cfg.speculative_config is None:
        cfg.speculative_config = spec
    ec = facts.engine_config or {}
    if "block_size" not in measured and facts.num_gpu_blocks and facts.kv_cache_tokens:
        # the pool's tokens per block: the block size where the model has one KV group (resolve() decides; XPU's
        # 64, Ascend's 128 and a backend's own size are not in any line a log of that era prints)
        measured["pool_tokens_per_block"] = (facts.kv_cache_tokens, facts.num_gpu_blocks)
    elif "block_size" not in measured and facts.num_gpu_blocks and facts.max_concurrency and facts.max_concurrency_len:
        measured["pool_tokens_per_block"] = (facts.max_concurrency, facts.max_concurrency_len, facts.num_gpu_blocks)
    seen = ec.get("tp_ranks_seen")
    if isinstance(seen, int) and seen > 1 and "tensor_parallel_size" not in measured \
            and cfg.tensor_parallel_size is None:
        # no config line or arg says it, but workers printed as TP ranks 0..seen-1: at least that many (an excerpt
        # may not show every rank); resolve() marks it measured, and the note below says where it came from
        measured["tensor_parallel_size"] = seen
        cfg.notes = [*cfg.notes,
            f"--tensor-parallel-size {seen} taken from the log's worker prefixes (a worker up to TP rank {seen - 1} "
            "printed its own start-up lines, so at least that many); the log shows no TP setting, and an excerpt may "
            "not show every rank: pass --tensor-parallel-size if it was larger"]
    if ec.get("interleaved_services"):
        from kvdoctor.evidence.logs.startup import interleaved_services_note

        cfg.notes = [*cfg.notes, interleaved_services_note(list(ec["interleaved_services"]))]
    if ec.get("mamba_cache_mode"):
        measured["mamba_cache_mode"] = str(ec["mamba_cache_mode"])
    if ec.get("hma_disabled"):
        measured["disable_hybrid_kv_cache_manager"] = True  # vLLM's warning that it turned the manager off
    if ec.get("platform") == "cpu":
        measured["platform"] = "cpu"
    elif ec.get("platform") in OTHER_PLATFORMS:
        cfg.notes = [*cfg.notes, f"the log is from {OTHER_PLATFORMS[ec['platform']]}: the figures its own lines print "
                     "are read as printed; what kvdoctor predicts beside them (activation, non-torch, graphs, the "
                     "block size where the log does not imply it) follows vLLM's CUDA rules"]
    if ec.get("engine_formats") in ("v0", "v1"):
        measured["engine"] = ec["engine_formats"]
    if ec.get("interconnect"):
        measured["interconnect"] = ec["interconnect"]
    elif str(ec.get("disable_custom_all_reduce", "")).strip() in ("True", "true", "1"):
        measured["interconnect"] = "pcie"
    if ec.get("command"):
        cfg = _with_pasted_command(cfg, str(ec["command"]), ec.get("command_line"))
        if isinstance(seen, int) and measured.get("tensor_parallel_size") == seen \
                and (cfg.tensor_parallel_size or 0) >= seen:
            # the prefixes gave a lower bound; the pasted command names the size (sweep 147 item 05: TP0-TP2 printed,
            # "-tp 4" pasted): the command's, and no note about the prefixes
            del measured["tensor_parallel_size"]
            cfg.notes = [n for n in cfg.notes if "taken from the log's worker prefixes" not in n]
    cfg.measured = measured
    if facts.vllm_version:
        cfg.vllm_version = facts.vllm_version
    return cfg


def _with_pasted_command(cfg: EngineConfig, command: str, line: int | None) -> EngineConfig:
    """A server command pasted with the log: its flags fill what the log's own lines do not say (they win where both
    speak: the log shows what ran)."""
    try:
        pasted = parse_serve_line(command)
    except InputError:
        return cfg
    given = sorted(k for k in pasted.given() if not str(k).startswith(("extra.", "env.")) and k not in cfg.given())
    if not given:
        return cfg
    out = merge([pasted, cfg])
    out.origin = cfg.origin
    out.notes = [*cfg.notes, f"from the server command pasted with the log{f' (line {line})' if line else ''}: "
                 + ", ".join(f"--{k.replace('_', '-')}" for k in given) + "; the log's own lines win where both say"]
    return out


# Flags kept in ``extra`` (not EngineConfig fields, so the journal's schema stays put) that
# engine.defaults nevertheless reads: the forced attention backend decides the block size.
MODELLED_EXTRA = frozenset({"attention_backend", "attention_config.backend", "attention_config",
                            # LoRA adapter slots, the interconnect (non-torch row), V0 fallbacks (docs/engine.md)
                            "enable_lora", "max_loras", "max_lora_rank", "fully_sharded_loras",
                            "disable_custom_all_reduce", "interconnect", "num_scheduler_steps",
                            "distributed_executor_backend"})


def unknown_flags(cfg: EngineConfig) -> list[str]:
    """Flags kept verbatim in ``extra`` and not modelled, spelled as vLLM flags (for reporting)."""
    return sorted("--" + k.replace("_", "-") for k in cfg.extra if k not in MODELLED_EXTRA)


def merge(configs: Iterable[EngineConfig]) -> EngineConfig:
    """Overlay in order: later configs win (pass them lowest-precedence first)."""
    out = EngineConfig(origin="default")
    for c in configs:
        out = out.overlay(c)
    return out
