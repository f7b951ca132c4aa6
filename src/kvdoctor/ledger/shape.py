"""Model shape exactly as vLLM derives it from a Hugging Face ``config.json``.

The same function (``shape_from_hf_config``) builds the embedded catalog (scripts/build_catalog.py)
and reads a user's ``config.json`` at run time, so the two can never disagree.
See docs/architecture.md for the contract; vllm-reference.md §3 for the rules, and docs/catalog.md
for where kvdoctor follows vLLM 0.33's source where the reference is silent.

Pure functions over plain dicts: no transformers, no numpy. Where vLLM relies on a transformers
config class to fill a default (Gemma-2 ``layer_types``, Qwen2 ``use_sliding_window``, Falcon's
``multi_query``, ChatGLM's attribute map), the default is reproduced here and named in a comment.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from kvdoctor.errors import InputError
from kvdoctor.safeio import shipped_table
# The types live in the bottom layer (kvdoctor.facts); re-exported here for existing importers.
from kvdoctor.facts.model import LAYER_KINDS, ModelShape, MoeShape, ParamCounts, QuantInfo  # noqa: F401
from kvdoctor.ledger.tensors import param_counts


# --------------------------------------------------------------------------------------------
# small typed readers: every malformed field becomes one InputError that names it
# --------------------------------------------------------------------------------------------

_MISSING = object()


def _where(name: str) -> str:
    return f" in {name}" if name else ""


def _get_int(cfg: dict, keys: tuple[str, ...], name: str, *, default: int | None | object = _MISSING,
             positive: bool = True) -> Any:  # untyped-ok: an int, or the caller's default (None or a sentinel)
    """First present key of ``keys`` as an int (vLLM getattr_iter semantics)."""
    for key in keys:
        if key in cfg and cfg[key] is not None:
            v = cfg[key]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or (
                isinstance(v, float) and not v.is_integer()
            ):
                raise InputError(f"config field {key!r} must be an integer, got {v!r}{_where(name)}")
            v = int(v)
            if positive and v <= 0:
                raise InputError(f"config field {key!r} must be positive, got {v}{_where(name)}")
            if not positive and v < 0:
                raise InputError(f"config field {key!r} must not be negative, got {v}{_where(name)}")
            return v
    if default is _MISSING:
        raise InputError(f"config field {keys[0]!r} is missing{_where(name)}")
    return default


def _get_bool(cfg: dict, key: str, default: bool, name: str) -> bool:
    v = cfg.get(key, default)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise InputError(f"config field {key!r} must be true/false, got {v!r}{_where(name)}")
    return v


# --------------------------------------------------------------------------------------------
# the text config and per-family attribute maps
# --------------------------------------------------------------------------------------------

# transformers' get_text_config() looks for these sub-configs (first one that exists wins).
_TEXT_CONFIG_KEYS = ("text_config", "language_config", "llm_config", "thinker_config")

# Attribute maps of the config classes vLLM instantiates for these model types: vLLM reads the
# canonical name, the class maps it to the family's own key.
_ATTRIBUTE_MAPS: dict[str, dict[str, str]] = {
    # vllm/transformers_utils/configs/chatglm.py
    "chatglm": {"num_hidden_layers": "num_layers", "n_head_kv": "multi_query_group_num",
                "vocab_size": "padded_vocab_size", "intermediate_size": "ffn_hidden_size"},
    # transformers FalconConfig (old "RefinedWeb" checkpoints spell n_layer / n_head)
    "falcon": {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head"},
    "gpt2": {"num_hidden_layers": "n_layer", "num_attention_heads": "n_head", "hidden_size": "n_embd",
             "max_position_embeddings": "n_positions", "intermediate_size": "n_inner"},
    "opt": {"intermediate_size": "ffn_dim"},
}

# get_model_architecture maps these old Falcon spellings onto FalconForCausalLM.
_FALCON_ARCHS = {"RWForCausalLM", "FalconForCausalLM"}

# vLLM is_deepseek_mla(): model types whose attention is MLA when kv_lora_rank is present.
_MLA_TYPES = {
    "axk1", "deepseek_v2", "deepseek_v3", "deepseek_v32", "deepseek_v4", "deepseek_v41", "dots3_note",
    "deepseek_mtp", "k3_dspark", "glm5_next", "glm5_next_text", "glm_moe_dsa", "glm4_moe_lite",
    "glm4_moe_lite_mtp", "kimi_k2", "kimi_linear", "longcat_flash", "pangu_ultra_moe",
    "pangu_ultra_moe_mtp", "bailing_hybrid", "bailing_hybrid_mtp", "bailing_hybrid_v3_mtp", "hy_v4",
    "hy_v4_mtp",
}

# vLLM 0.33 models/deepseek_v4: per-layer compress_rates (1 / 4 / 128) over a sliding-window cache, KV specs of their own
_COMPRESSED_SPARSE_TYPES = {"deepseek_v4", "deepseek_v41"}

_QWEN_SLIDING_TYPES = {"qwen2", "qwen2_moe", "qwen3", "qwen3_moe"}
# Gated-delta-net hybrids (Qwen3-Next, Qwen3.5/3.6): linear-attention layers hold a constant-size state
GDN_TYPES = {"qwen3_next", "qwen3_5", "qwen3_5_text", "qwen3_5_moe", "qwen3_5_moe_text"}

_LAYER_TYPE_NAMES = {
    "full_attention": "full", "attention": "full", "global": "full", "full": "full",
    "sliding_attention": "sliding", "sliding_window": "sliding", "local": "sliding", "sliding": "sliding",
    "chunked_attention": "chunked", "chunked": "chunked",
    "linear_attention": "linear", "gated_deltanet": "linear", "linear": "linear",
    "mamba": "mamba", "mamba2": "mamba",
}


def _normalise(raw: dict, name: str) -> tuple[dict, dict, str, bool]:
    """Return (root config, text config with canonical keys filled in, model_type, is_multimodal)."""
    if not isinstance(raw, dict):
        raise InputError(f"config must be a JSON object, got {type(raw).__name__}{_where(name)}")
    text, text_key = raw, None
    for key in _TEXT_CONFIG_KEYS:
        sub = raw.get(key)
        if isinstance(sub, dict):
            text, text_key = sub, key
            break
    model_type = raw.get("model_type")
    archs = raw.get("architectures") or []
    if not isinstance(archs, list) or not all(isinstance(a, str) for a in archs):
        raise InputError(f"config field 'architectures' must be a list of strings{_where(name)}")
    if model_type is None and set(archs) & _FALCON_ARCHS:
        model_type = "falcon"
    if model_type in ("RefinedWeb", "RefinedWebModel"):
        model_type = "falcon"
    if not isinstance(model_type, str) or not model_type:
        raise InputError(f"config field 'model_type' is missing{_where(name)}")
    root_defaults = class_defaults(model_type)
    text_type = model_type if text is raw else (
        text.get("model_type") or root_defaults.get(f"{text_key}.model_type") or model_type)
    amap = _ATTRIBUTE_MAPS.get(text_type, {})
    t = dict(text)
    for canon, own in amap.items():
        if canon not in t and own in t:
            t[canon] = t[own]
    # what the file leaves out, transformers' config class fills (Gemma 3's short text_config): vLLM sees those values
    # (an MLA model's head size is its latent's, not head_dim)
    # A top-level file without its size fields is a broken file, not a short form: those stay required there.
    filled = {k: v for k, v in class_defaults(text_type).items() if "." not in k and k not in t
              and not (k == "head_dim" and "kv_lora_rank" in t) and (text_key is not None or k not in _CORE_FIELDS)
              and not (k == "tie_word_embeddings" and k in raw)}  # a multimodal file says it at its top level
    t.update(filled)
    if text_key is not None and "num_attention_heads" not in t:
        # vLLM get_hf_text_config raises the same way.
        raise InputError(f"config {text_key!r} has no 'num_attention_heads'{_where(name)}")
    if filled:
        t["_class_defaults"] = sorted(filled)
    # (Qwen2-VL and Qwen2.5-VL keep the language model's fields at the top, beside their vision_config)
    return raw, t, model_type, text is not raw or isinstance(raw.get("vision_config"), dict)


_CORE_FIELDS = {"hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size", "intermediate_size"}
_DEFAULTS_FILE = Path(__file__).resolve().parent.parent / "catalog" / "data" / "config_defaults.json"


@lru_cache(maxsize=1)
def _defaults_table() -> dict[str, dict]:
    """transformers' declared defaults per model_type (scripts/build_config_defaults.py); read on first need."""
    return shipped_table(_DEFAULTS_FILE, "model_types", "config defaults")


def _defaults_note(t: dict, text_type: str) -> list[str]:
    filled = t.get("_class_defaults")
    return [f"not in the file, as transformers' {text_type} config class fills them for vLLM: "
            + ", ".join(f"{k} {t[k]}" for k in filled)] if filled else []


def class_defaults(model_type: str | None) -> dict[str, Any]:
    """The defaults transformers' config class for ``model_type`` declares for the fields kvdoctor reads ({} when
    transformers has no class for it)."""
    return _defaults_table().get(model_type, {}) if isinstance(model_type, str) else {}


# --------------------------------------------------------------------------------------------
# quantization
# --------------------------------------------------------------------------------------------

# vLLM get_min_capability per config class (vllm-reference.md §4.3).
_MIN_CAPABILITY = {
    "fp8": 75, "gptq": 60, "auto_gptq": 60, "gptq_marlin": 60, "awq": 75, "auto_awq": 75,
    "awq_marlin": 75, "modelopt": 80, "modelopt_fp4": 75, "modelopt_mxfp8": 80, "modelopt_mixed": 75,
    "mxfp4": 80, "gpt_oss_mxfp4": 80, "compressed-tensors": 70, "quark": 70, "moe_wna16": 70,
    "experts_int8": 80, "fbgemm_fp8": 80, "fp_quant": 100, "torchao": 75, "online": 75, "humming": 75,
    "inc": 60, "mxfp8": 80, "fp8_per_tensor": 75, "fp8_per_block": 75, "fp8_per_channel": 75,
}
_NOT_IN_CORE = {"bitsandbytes", "gguf"}


def _as_patterns(v: object) -> tuple[str, ...]:
    if v is None:
        return ()
    if isinstance(v, str):
        return (v,)
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return tuple(v)
    raise InputError(f"quantization ignore list must be a list of strings, got {v!r}")


def _gptq_like_bpw(bits: int, group: int | None) -> float:
    """Packed weight + fp16 scales + packed int32 zeros per group (GPTQ/AWQ create_weights).

    Group size -1 / None means one group per input row; a 4096-wide input is assumed, which is
    how the per-row overhead is stated in the note.
    """
    g = group if group and group > 0 else 4096
    return bits / 8 + 2 / g + (bits / 8) / g


def _ct_scheme(qc: dict) -> tuple[int | None, str, str | None, int | None, tuple[int, int] | None]:
    """compressed-tensors: (bits, type, strategy, group_size, block) of the first weight scheme."""
    groups = qc.get("config_groups")
    if not isinstance(groups, dict) or not groups:
        raise InputError("compressed-tensors quantization_config has no 'config_groups'")
    first = next(iter(groups.values()))
    w = first.get("weights") if isinstance(first, dict) else None
    if not isinstance(w, dict):
        raise InputError("compressed-tensors config group has no 'weights' scheme")
    bits = w.get("num_bits")
    if not isinstance(bits, int) or isinstance(bits, bool):
        raise InputError(f"compressed-tensors weights.num_bits must be an integer, got {bits!r}")
    block = w.get("block_structure")
    blk = tuple(block) if isinstance(block, list) and len(block) == 2 else None
    return bits, str(w.get("type", "int")), w.get("strategy"), w.get("group_size"), blk  # type: ignore[return-value]


def quant_from_config(qc: dict | None, *, source: str = "quantization_config") -> QuantInfo | None:
    """Turn a checkpoint's quantization config (or ModelOpt ``hf_quant_config.json``) into QuantInfo.

    Mirrors ``ModelArchConfigConvertorBase._normalize_quantization_config``: ModelOpt producers are
    recognised by ``producer.name == "modelopt"`` and their ``quantization.quant_algo``.
    """
    if qc is None:
        return None
    if not isinstance(qc, dict):
        raise InputError(f"{source} must be a JSON object, got {type(qc).__name__}")
    producer = qc.get("producer") if isinstance(qc.get("producer"), dict) else {}
    mo = qc.get("quantization") if isinstance(qc.get("quantization"), dict) else None
    if producer.get("name") == "modelopt" or (mo and "modelopt_quant_config" in mo):
        mo = mo or {}
        algo = str(mo.get("quant_algo", "")).upper()
        kv_algo = str(mo.get("kv_cache_quant_algo") or "").upper()
        kv = "fp8_e4m3" if kv_algo == "FP8" else ("nvfp4" if kv_algo == "NVFP4" else None)
        ignored = _as_patterns(mo.get("exclude_modules"))
        if algo in ("FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO"):
            return QuantInfo("modelopt", bits=8, bytes_per_weight=1.0, ignored=ignored, kv_cache_dtype=kv,
                             min_capability=80, note="ModelOpt FP8: 1 B/weight + fp32 per-tensor scales")
        if algo == "NVFP4":
            g = mo.get("group_size") or 16
            return QuantInfo("modelopt_fp4", bits=4, group_size=g, bytes_per_weight=0.5 + 1 / g,
                             ignored=ignored, kv_cache_dtype=kv, min_capability=75,
                             note=f"NVFP4: 0.5 B/weight + fp8 scale per {g}")
        if algo == "MIXED_PRECISION":
            return QuantInfo("modelopt_mixed", bytes_per_weight=0.5625, ignored=ignored, kv_cache_dtype=kv,
                             min_capability=75, note="ModelOpt mixed precision: assumed NVFP4-sized")
        raise InputError(f"unknown ModelOpt quant_algo {mo.get('quant_algo')!r} in {source}")

    method = str(qc.get("quant_method", "")).lower().replace("compressed_tensors", "compressed-tensors")
    if not method:
        raise InputError(f"{source} has no 'quant_method'")
    mincap = _MIN_CAPABILITY.get(method)
    if method in ("fp8", "fbgemm_fp8"):
        blk = qc.get("weight_block_size")
        ignored = _as_patterns(qc.get("ignored_layers")) + _as_patterns(qc.get("modules_to_not_convert"))
        if blk is not None:
            if not (isinstance(blk, list) and len(blk) == 2 and all(isinstance(b, int) and b > 0 for b in blk)):
                raise InputError(f"weight_block_size must be two positive integers, got {blk!r}")
            bpw = 1 + 4 / (blk[0] * blk[1])
            return QuantInfo(method, bits=8, weight_block_size=(blk[0], blk[1]), bytes_per_weight=bpw,
                             ignored=ignored, min_capability=mincap,
                             note=f"fp8 block {blk[0]}x{blk[1]}: 1 B/weight + fp32 scale per block")
        return QuantInfo(method, bits=8, bytes_per_weight=1.0, ignored=ignored, min_capability=mincap,
                         note="fp8 per-tensor: 1 B/weight + one fp32 scale per tensor")
    if method in ("mxfp4", "gpt_oss_mxfp4"):
        return QuantInfo(method, bits=4, group_size=32, bytes_per_weight=0.5 + 1 / 32,
                         ignored=_as_patterns(qc.get("modules_to_not_convert")), min_capability=80,
                         experts_only=True,
                         note="MXFP4 experts: 0.5 B/weight + e8m0 scale per 32; linear layers unquantized")
    if method in ("gptq", "auto_gptq", "gptq_marlin", "awq", "auto_awq", "awq_marlin"):
        bits = qc.get("bits", qc.get("w_bit"))
        group = qc.get("group_size", qc.get("q_group_size"))
        if not isinstance(bits, int) or isinstance(bits, bool) or bits not in (2, 3, 4, 8):
            raise InputError(f"{source} 'bits' must be 2, 3, 4 or 8 for {method}, got {bits!r}")
        if group is not None and (not isinstance(group, int) or isinstance(group, bool)):
            raise InputError(f"{source} 'group_size' must be an integer, got {group!r}")
        bpw = _gptq_like_bpw(bits, group)
        fam = "GPTQ" if "gptq" in method else "AWQ"
        return QuantInfo(method, bits=bits, group_size=group, bytes_per_weight=bpw,
                         ignored=_as_patterns(qc.get("modules_to_not_convert")), min_capability=mincap,
                         note=(f"{fam} {bits}-bit g={group}: {bits}/8 B packed + fp16 scale + packed zero "
                               f"per group = {bpw:.4f} B/weight"))
    if method == "compressed-tensors":
        bits, typ, strategy, group, blk = _ct_scheme(qc)
        ignored = _as_patterns(qc.get("ignore"))
        assert bits is not None
        if typ == "float" and bits == 8:
            bpw = 1 + (4 / (blk[0] * blk[1]) if blk else 0.0)
            return QuantInfo(method, bits=8, weight_block_size=blk, bytes_per_weight=bpw, ignored=ignored,
                             min_capability=75,
                             note=(f"compressed-tensors FP8 ({strategy}): 1 B/weight + fp32 scales; W8A8 needs "
                                   "SM89, vLLM falls back to W8A16 (Marlin) from SM75"))
        if typ == "float" and bits == 4:
            g = group or 16
            return QuantInfo(method, bits=4, group_size=g, bytes_per_weight=0.5 + 1 / g, ignored=ignored,
                             min_capability=75, note=f"compressed-tensors FP4: 0.5 B/weight + fp8 scale per {g}")
        if typ == "int" and bits == 8 and strategy in ("channel", "tensor"):
            return QuantInfo(method, bits=8, bytes_per_weight=1.0, ignored=ignored, min_capability=75,
                             note="compressed-tensors INT8 W8A8: 1 B/weight + fp32 per-channel scales")
        bpw = bits / 8 + (2 / group if group and group > 0 else 0.0)
        return QuantInfo(method, bits=bits, group_size=group, bytes_per_weight=bpw, ignored=ignored,
                         min_capability=75,
                         note=f"compressed-tensors WNA16 {bits}-bit g={group}: packed weight + bf16 scales")
    if method in _NOT_IN_CORE:
        bits = 4 if qc.get("load_in_4bit") else 8
        return QuantInfo(method, bits=bits, bytes_per_weight=0.5 + 4 / 64 if bits == 4 else 1.0,
                         supported=False,
                         note=(f"{method} is not in vLLM 0.33 core (it moved to the vllm-project plugin "
                               f"repos); install the plugin or pick another checkpoint"
                               + ("; in core to 0.27.1 (vllm #43529), where it is sized at 0.5 B a weight plus an "
                                  "fp32 absmax per 64" if method == "bitsandbytes" else "")))
    if method in _MIN_CAPABILITY:
        # Known to vLLM but its storage is not modelled: say so rather than guess a size.
        return QuantInfo(method, bytes_per_weight=2.0, min_capability=mincap,
                         note=f"{method}: bytes per weight not modelled by kvdoctor; counted as 2 B")
    raise InputError(f"unknown quantization method {method!r} in {source}")


def online_quantization(method: str) -> QuantInfo:
    """``--quantization fp8`` (and friends) applied while loading an unquantized checkpoint.

    vLLM loads bf16 then quantizes each linear weight per tensor; ``Model loading took`` reports the
    final (quantized) size.
    """
    m = method.lower()
    if m in ("fp8", "fp8_per_tensor", "fp8_per_channel", "online"):
        return QuantInfo("fp8", bits=8, bytes_per_weight=1.0, min_capability=75, online=True,
                         note="online fp8: linear weights quantized per tensor at load, 1 B/weight")
    if m == "fp8_per_block":
        return QuantInfo("fp8", bits=8, weight_block_size=(128, 128), bytes_per_weight=1 + 4 / 16384,
                         min_capability=75, online=True, note="online fp8 per 128x128 block")
    if m in ("int8_per_channel_weight_only", "experts_int8"):
        return QuantInfo(m, bits=8, bytes_per_weight=1.0, min_capability=_MIN_CAPABILITY.get(m, 75),
                         online=True, experts_only=m == "experts_int8", note="online int8 weights")
    if m in _NOT_IN_CORE:
        raise InputError(f"--quantization {method}: not in vLLM 0.33 core (plugin only)")
    raise InputError(
        f"--quantization {method} needs a pre-quantized checkpoint; online choices are fp8, "
        "fp8_per_tensor, fp8_per_block, fp8_per_channel, int8_per_channel_weight_only, experts_int8"
    )


# --------------------------------------------------------------------------------------------
# max_model_len and RoPE
# --------------------------------------------------------------------------------------------

_MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                 "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")
_NO_FACTOR_ROPE = {"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"}


def _rope_params(t: dict, name: str) -> dict | None:
    rp = t.get("rope_parameters")
    if not isinstance(rp, dict) or not rp:
        rp = t.get("rope_scaling")
    if rp is None:
        return None
    if not isinstance(rp, dict):
        raise InputError(f"config field 'rope_scaling' must be an object, got {rp!r}{_where(name)}")
    rp = dict(rp)
    rtype = rp.get("rope_type", rp.get("type", "default"))
    # patch_legacy_rope_type: 'su' -> longrope, 'mrope' -> default
    rtype = {"su": "longrope", "mrope": "default"}.get(rtype, rtype)
    rp["rope_type"] = rtype
    return rp


def derive_max_model_len(t: dict, model_type: str, name: str = "") -> tuple[int, str]:
    """vLLM ``_get_and_verify_max_len`` with no user value (no tokenizer_config available)."""
    derived = math.inf
    key = None
    for k in _MAX_LEN_KEYS:
        v = t.get(k)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise InputError(f"config field {k!r} must be a number, got {v!r}{_where(name)}")
        if v < derived:
            key = k
        derived = min(derived, v)
    if t.get("model_max_length"):
        key, derived = "model_max_length", t["model_max_length"]
    how = f"{key}={derived}" if key else "no length key in config.json: vLLM assumes 2048"
    if derived == math.inf:
        derived = 2048
    rp = _rope_params(t, name)
    if rp and "gemma3" not in model_type:
        rtype = rp["rope_type"]
        if rtype not in _NO_FACTOR_ROPE and rp.get("factor") is not None:
            f = rp["factor"]
            if isinstance(f, bool) or not isinstance(f, (int, float)):
                raise InputError(f"rope_scaling.factor must be a number, got {f!r}{_where(name)}")
            derived *= f
            how += f" x rope {rtype} factor {f}"
        if rtype == "longrope":
            orig = t.get("original_max_position_embeddings")
            if isinstance(orig, int) and not isinstance(orig, bool):
                return orig, f"longrope: original_max_position_embeddings={orig}"
    return int(derived), how


def _rope_cache(t: dict, model_type: str, head_dim: int, name: str, *, mla_rope: int | None) -> tuple[int, int]:
    """(rotary_dim, rows) of the cos_sin_cache buffer vLLM's get_rope creates (one per model).

    The buffer is part of what ``Model loading took`` reports: max_positions x rotary_dim in the
    model dtype (cos and sin halves of rotary_dim/2 each). Rows by scaling type, from
    model_executor/layers/rotary_embedding: YaRN/DeepSeek-YaRN, linear and dynamic-NTK build
    ``original_max x factor`` rows; longrope builds short + long caches; others max_positions.
    """
    if model_type in ("opt", "gpt2", "bloom"):
        return 0, 0
    if mla_rope:
        rot = mla_rope
    else:
        prf = t.get("partial_rotary_factor", t.get("rotary_pct", 1.0))
        if model_type == "chatglm":
            prf = 0.5  # ChatGLM rotates half of each head (rotary_dim = head_dim // 2)
        if isinstance(prf, bool) or not isinstance(prf, (int, float)):
            raise InputError(f"config field 'partial_rotary_factor' must be a number{_where(name)}")
        rot = int(head_dim * prf)
    maxpos = t.get("max_position_embeddings") or t.get("seq_length") or t.get("n_positions") or 2048
    rp = _rope_params(t, name)
    if not rp or rp["rope_type"] == "default":
        return rot, int(maxpos)
    rtype, factor = rp["rope_type"], rp.get("factor") or 1
    orig = rp.get("original_max_position_embeddings") or t.get("original_max_position_embeddings") or maxpos
    if rtype in ("yarn", "deepseek_yarn"):
        return rot, int(orig * factor)
    if rtype in ("linear", "dynamic"):
        return rot, int(maxpos * factor)
    if rtype == "longrope":
        return rot, int(orig + maxpos)
    return rot, int(maxpos)


# --------------------------------------------------------------------------------------------
# layer kinds
# --------------------------------------------------------------------------------------------


def _layer_kinds(t: dict, model_type: str, n: int, name: str) -> tuple[tuple[str, ...], int | None, int | None,
                                                                           list[str]]:
    notes: list[str] = []
    sw = t.get("sliding_window")
    if sw is not None and (isinstance(sw, bool) or not isinstance(sw, int)):
        raise InputError(f"config field 'sliding_window' must be an integer or null, got {sw!r}{_where(name)}")
    if sw == 0:
        sw = None  # vLLM treats 0 as disabled
    if model_type in _QWEN_SLIDING_TYPES:
        # transformers Qwen2/Qwen3 configs null the window unless use_sliding_window is true, and
        # then only layers >= max_window_layers slide.
        if not t.get("use_sliding_window", False):
            if sw is not None:
                notes.append(f"sliding_window={sw} ignored: use_sliding_window is false (Qwen config)")
            sw = None
        elif "layer_types" not in t:
            mwl = _get_int(t, ("max_window_layers",), name, default=n, positive=False)
            t = dict(t, layer_types=["sliding_attention" if i >= mwl else "full_attention" for i in range(n)])
    chunk = None
    # Hybrids (vLLM get_num_layers_by_block_type): layers_block_type (Jamba-style; the transformers
    # config derives it from attn_layer_period/offset or Nemotron-H's hybrid_override_pattern),
    # then MiniMax's attn_type_list (1 = softmax attention, 0 = linear), then layer_types below.
    lbt = t.get("layers_block_type")
    if lbt is None and "attn_layer_period" in t:
        period = _get_int(t, ("attn_layer_period",), name)
        offset = _get_int(t, ("attn_layer_offset",), name, default=0, positive=False)
        lbt = ["attention" if i % period == offset else "mamba" for i in range(n)]
    if lbt is None and isinstance(t.get("hybrid_override_pattern"), str):
        sym = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
        lbt = [sym.get(c, c) for c in t["hybrid_override_pattern"]]
    if lbt is not None:
        if not isinstance(lbt, list) or len(lbt) != n:
            raise InputError(f"config field 'layers_block_type' must be a list of {n} entries{_where(name)}")
        kind_of = {"attention": "sliding" if sw else "full", "hybrid": "full", "mamba": "mamba",
                   "mamba2": "mamba", "linear_attention": "linear", "mlp": "none", "moe": "none"}
        bad = [x for x in lbt if x not in kind_of]
        if bad:
            raise InputError(f"config field 'layers_block_type' has unknown entry {bad[0]!r}{_where(name)}")
        kinds = tuple(kind_of[x] for x in lbt)
        return kinds, (sw if "sliding" in kinds else None), None, notes
    lac = t.get("linear_attn_config")
    if model_type == "kimi_linear" and isinstance(lac, dict) and isinstance(lac.get("kda_layers"), list):
        # Kimi-Linear: kda_layers / full_attn_layers count from 1 (vLLM kimi_linear.py is_kda_layer: layer_idx + 1)
        kda = {x - 1 for x in lac["kda_layers"] if isinstance(x, int)}
        return tuple("linear" if i in kda else "full" for i in range(n)), None, None, notes
    atl = t.get("attn_type_list")
    if isinstance(atl, list) and atl:
        if len(atl) != n:
            raise InputError(f"config field 'attn_type_list' must have {n} entries{_where(name)}")
        return tuple("full" if x == 1 else "linear" for x in atl), None, None, notes
    lt = t.get("layer_types")
    if model_type in ("llama4", "llama4_text") and t.get("attention_chunk_size"):
        chunk = _get_int(t, ("attention_chunk_size",), name)
        nope = t.get("no_rope_layers") or [int((i + 1) % 4 != 0) for i in range(n)]
        if len(nope) != n:
            raise InputError(f"config field 'no_rope_layers' must have {n} entries{_where(name)}")
        # vLLM llama4: RoPE layers use chunked local attention, NoPE layers (every 4th) are global.
        return tuple("chunked" if nope[i] else "full" for i in range(n)), None, chunk, notes
    if lt is not None:
        if not isinstance(lt, list) or len(lt) != n:
            raise InputError(f"config field 'layer_types' must be a list of {n} entries{_where(name)}")
        kinds = []
        for x in lt:
            k = _LAYER_TYPE_NAMES.get(x) if isinstance(x, str) else None
            if k is None:
                raise InputError(f"config field 'layer_types' has unknown entry {x!r}{_where(name)}")
            if k == "sliding" and sw is None:
                k = "full"
            kinds.append(k)
        return tuple(kinds), (sw if "sliding" in kinds else None), None, notes
    if model_type in GDN_TYPES and t.get("full_attention_interval"):
        # transformers Qwen3NextConfig's default layer_types: every interval-th layer is full attention, the rest
        # gated-delta-net linear attention
        every = _get_int(t, ("full_attention_interval",), name)
        return tuple("full" if (i + 1) % every == 0 else "linear" for i in range(n)), None, None, notes
    if model_type in ("gemma2", "cohere2") and sw:
        # transformers Gemma2Config default layer_types: even layers slide, odd layers are global.
        return tuple("sliding" if (i + 1) % 2 else "full" for i in range(n)), sw, None, notes
    if model_type in ("gemma3", "gemma3_text") and sw:
        pat = _get_int(t, ("sliding_window_pattern",), name, default=6)
        return tuple("sliding" if (i + 1) % pat else "full" for i in range(n)), sw, None, notes
    if model_type == "gpt_oss" and sw:
        return tuple("sliding" if i % 2 == 0 else "full" for i in range(n)), sw, None, notes
    if sw:
        # No layer_types: vLLM sets CacheConfig.sliding_window, which applies to every layer.
        return ("sliding",) * n, sw, None, notes
    return ("full",) * n, None, None, notes


# --------------------------------------------------------------------------------------------
# family layout facts (biases, norms, MoE placement)
# --------------------------------------------------------------------------------------------


# DeepSeek-style MoE layout (n_shared_experts, first_k_dense_replace, moe_layer_freq): vLLM serves GLM-5's glm_moe_dsa
# with DeepseekV32ForCausalLM and GLM-4.7-Flash's glm4_moe_lite with DeepseekV2's decoder layer
_DEEPSEEK_MOE_TYPES = ("deepseek_v2", "deepseek_v3", "deepseek_v32", "kimi_k2", "glm4_moe", "glm_moe_dsa",
                       "glm4_moe_lite", "glm4v_moe", "glm4v_moe_text")


def _moe(t: dict, model_type: str, n: int, hidden: int, inter: int, name: str) -> tuple[MoeShape | None, int]:
    """Return (MoeShape or None, dense intermediate size)."""
    e = _get_int(t, ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts"), name,
                 default=0, positive=False)
    if not e:
        return None, inter
    k = _get_int(t, ("num_experts_per_tok", "num_experts_per_token", "top_k_experts", "moe_topk", "moe_top_k",
                     "top_k", "experts_per_token"), name)
    moe_i = _get_int(t, ("moe_intermediate_size",), name, default=inter)
    dense_i = inter
    shared_n, shared_i, dense_layers = 0, 0, []
    first_k, freq = 0, 1
    router_bias = expert_bias = corr = sgate = False
    if model_type in _DEEPSEEK_MOE_TYPES:
        shared_n = _get_int(t, ("n_shared_experts",), name, default=0, positive=False)
        shared_i = shared_n * moe_i
        first_k = _get_int(t, ("first_k_dense_replace",), name, default=0, positive=False)
        freq = _get_int(t, ("moe_layer_freq",), name, default=1)
        dense_layers = [i for i in range(n) if not (i >= first_k and i % freq == 0)]
        # glm4_moe's gate always carries e_score_correction_bias; the DeepSeek decoder only for noaux_tc
        corr = t.get("topk_method") == "noaux_tc" or model_type in ("glm4_moe", "glm4v_moe", "glm4v_moe_text")
    elif model_type in ("qwen2_moe", "qwen3_moe"):
        step = _get_int(t, ("decoder_sparse_step",), name, default=1)
        only = t.get("mlp_only_layers") or []
        if not isinstance(only, list):
            raise InputError(f"config field 'mlp_only_layers' must be a list{_where(name)}")
        dense_layers = [i for i in range(n) if i in only or (i + 1) % step != 0]
        shared_i = _get_int(t, ("shared_expert_intermediate_size",), name, default=0, positive=False)
        shared_n = 1 if shared_i else 0
        sgate = bool(shared_i)
    elif model_type in ("llama4", "llama4_text"):
        step = _get_int(t, ("interleave_moe_layer_step",), name, default=1)
        dense_layers = [i for i in range(n) if (i + 1) % step != 0]
        shared_n, shared_i = 1, moe_i
        dense_i = _get_int(t, ("intermediate_size_mlp",), name, default=inter)
    elif model_type == "gpt_oss":
        router_bias = expert_bias = True
    elif model_type == "nemotron_h" and isinstance(t.get("hybrid_override_pattern"), str):
        # Nemotron-H: each layer is one block, a mixer OR an MLP: experts on "E" layers, a dense MLP on "-" layers (the
        # Mamba "M" and attention "*" layers carry none: extra["no_mlp_layers"])
        pat = t["hybrid_override_pattern"]
        dense_layers = [i for i, c in enumerate(pat) if c == "-"]
        shared_i = _get_int(t, ("moe_shared_expert_intermediate_size",), name, default=0, positive=False)
        shared_n = _get_int(t, ("n_shared_experts",), name, default=1 if shared_i else 0, positive=False)
        corr = True  # NemotronH's router carries e_score_correction_bias (vLLM nemotron_h.py NemotronHMoE)
    elif model_type == "jamba":
        period = _get_int(t, ("expert_layer_period",), name, default=1)
        offset = _get_int(t, ("expert_layer_offset",), name, default=0, positive=False)
        dense_layers = [i for i in range(n) if i % period != offset]
    # Mixtral and others: every layer MoE, no shared experts.
    moe = MoeShape(
        num_experts=e, experts_per_token=k, moe_intermediate_size=moe_i, num_shared_experts=shared_n,
        shared_expert_intermediate_size=shared_i, first_dense_layers=first_k, moe_layer_freq=freq,
        dense_layers=tuple(dense_layers), router_bias=router_bias, expert_bias=expert_bias,
        score_correction_bias=corr, shared_expert_gate=sgate,
    )
    return moe, dense_i


def _vision_params(raw: dict) -> tuple[int, str]:
    """Estimate of the vision tower + projector vLLM loads for a multimodal checkpoint."""
    v = raw.get("vision_config")
    if not isinstance(v, dict):
        return 0, ""
    # Qwen2.5-VL / Qwen3-VL / Qwen3.5 name the depth "depth" and the channels "in_channels"
    h, inter = v.get("hidden_size"), v.get("intermediate_size")
    layers = v.get("num_hidden_layers", v.get("depth"))
    if not all(isinstance(x, int) and not isinstance(x, bool) for x in (h, inter, layers)):
        return 0, "vision tower not counted (vision_config lacks hidden/intermediate sizes)"
    if str(v.get("model_type", "")).startswith("glm4v") and isinstance(v.get("out_hidden_size"), int):
        # GLM-4.xV's vision blocks are out_hidden_size wide (transformers Glm4vVisionBlock); intermediate_size is the
        # merger's
        inter = v["out_hidden_size"]
    per_layer = 4 * (h * h + h) + (h * inter + inter) + (inter * h + h) + 4 * h
    if v.get("hidden_act") == "silu":
        # a gated MLP (Qwen2.5-VL's and Pixtral's vision blocks: gate, up and down): one more h x inter matrix
        per_layer += h * inter + inter
    total = layers * per_layer
    patch, ch, img = v.get("patch_size"), v.get("num_channels", v.get("in_channels", 3)), v.get("image_size")
    if isinstance(patch, int) and isinstance(img, int):
        total += ch * patch * patch * h + ((img // patch) ** 2 + 1) * h + 4 * h
    elif isinstance(patch, int) and isinstance(ch, int):
        # Qwen-VL's 3-D patch embedding over temporal_patch_size frames and its learned position table
        total += ch * int(v.get("temporal_patch_size", 1) or 1) * patch * patch * h
        if isinstance(v.get("num_position_embeddings"), int):
            total += v["num_position_embeddings"] * h
    merge, out_h = v.get("spatial_merge_size"), v.get("out_hidden_size")
    if isinstance(merge, int) and isinstance(out_h, int):
        # Qwen-VL's patch merger (and one more per deepstack layer): an MLP over merge x merge patches
        m = h * merge * merge
        total += (1 + len(v.get("deepstack_visual_indexes") or ())) * (m * m + m + m * out_h + out_h)
    out = v.get("vision_output_dim") or v.get("projector_output_dim")
    pin = v.get("projector_input_dim")
    ratio = v.get("pixel_shuffle_ratio")
    text_h = (raw.get("text_config") or {}).get("hidden_size")
    if isinstance(ratio, (int, float)) and ratio and isinstance(pin, int) and isinstance(out, int):
        total += int(h / (ratio * ratio)) * pin + pin * out  # Llama-4 pixel-shuffle MLP adapter
    if isinstance(out, int) and isinstance(text_h, int):
        total += out * text_h  # multi_modal_projector
    return total, "vision tower counted from vision_config as a plain ViT (estimate)"


# --------------------------------------------------------------------------------------------
# the entry point
# --------------------------------------------------------------------------------------------


def shape_from_hf_config(cfg: dict, name: str, *, hf_quant_config: dict | None = None) -> ModelShape:
    """Derive the ModelShape vLLM 0.33 would from ``config.json`` (+ ModelOpt ``hf_quant_config.json``)."""
    raw, t, model_type, is_mm = _normalise(cfg, name)
    text_type = t.get("model_type", model_type) if is_mm else model_type
    archs = tuple(raw.get("architectures") or ())
    notes: list[str] = _defaults_note(t, text_type)

    hidden = _get_int(t, ("hidden_size", "n_embd", "d_model"), name)
    heads = _get_int(t, ("num_attention_heads", "n_head", "num_heads"), name)
    layers = _get_int(t, ("num_hidden_layers", "n_layer", "num_layers"), name)
    vocab = _get_int(t, ("vocab_size",), name)
    is_falcon = model_type == "falcon"
    if is_falcon and "multi_query" not in t and "n_head_kv" not in t and "num_kv_heads" not in t:
        notes.append("falcon config lacks multi_query: transformers FalconConfig default (True) applied")

    # ---- KV heads: vLLM get_total_num_kv_heads (+ the Falcon and DBRX convertors) ----
    if is_falcon and not t.get("new_decoder_architecture", False) and t.get("multi_query", True):
        kv_heads = 1
    elif model_type == "dbrx" and isinstance(t.get("attn_config"), dict):
        kv_heads = _get_int(t["attn_config"], ("kv_n_heads",), name, default=heads)
    else:
        kv_heads = _get_int(t, ("n_head_kv", "num_kv_heads", "num_key_value_heads", "multi_query_group_num",
                                "num_attention_groups"), name, default=heads)
    if kv_heads > heads or heads % kv_heads:
        raise InputError(f"num_attention_heads ({heads}) is not a multiple of the KV heads ({kv_heads}){_where(name)}")

    _refuse_compressed_sparse(t, text_type, name)
    # ---- head size ----
    is_mla = text_type in _MLA_TYPES and t.get("kv_lora_rank") is not None
    kv_lora = rope_dim = q_lora = nope = v_head = None
    if is_mla:
        kv_lora = _get_int(t, ("kv_lora_rank",), name)
        rope_dim = _get_int(t, ("qk_rope_head_dim",), name)
        nope = _get_int(t, ("qk_nope_head_dim",), name)
        v_head = _get_int(t, ("v_head_dim",), name)
        q_lora = _get_int(t, ("q_lora_rank",), name, default=None)
        head_size, head_size_v = kv_lora + rope_dim, 0
        attn_head_dim = nope + rope_dim
    else:
        hd = t.get("head_dim")
        if hd is not None and (isinstance(hd, bool) or not isinstance(hd, int)):
            raise InputError(f"config field 'head_dim' must be an integer, got {hd!r}{_where(name)}")
        if hd and hd > 0:
            head_size = hd
        elif t.get("hidden_size_per_head") is not None:
            head_size = _get_int(t, ("hidden_size_per_head",), name)
        else:
            head_size = hidden // heads
        head_size_v = attn_head_dim = head_size

    inter = _get_int(t, ("intermediate_size", "ffn_hidden_size", "ffn_dim", "n_inner"), name, default=4 * hidden)
    moe, dense_inter = _moe(t, text_type, layers, hidden, inter, name)
    kinds, sw, chunk, kind_notes = _layer_kinds(t, text_type, layers, name)
    notes += kind_notes
    if any(k in ("mamba", "linear") for k in kinds) and not (t.get("linear_num_value_heads") and "linear" in kinds) \
            and not (text_type in _MAMBA2_KEYS and _MAMBA2_KEYS[text_type][0] in t):
        notes.append("hybrid model: mamba / linear-attention mixer weights are not modelled, so parameter "
                     "counts and weight bytes are low by those layers' mixers")
    max_len, max_len_how = derive_max_model_len(t, text_type, name)

    tie_default = model_type in ("gemma", "gemma2", "gemma3", "opt", "falcon", "gpt2")
    tie = _get_bool(raw if "tie_word_embeddings" in raw else t, "tie_word_embeddings", tie_default, name)
    if model_type == "chatglm":
        tie = False  # ChatGLMModel always has its own output_layer

    dtype = raw.get("dtype") or raw.get("torch_dtype") or t.get("dtype") or t.get("torch_dtype")
    if dtype is None:
        dtype = "float32"
        notes.append("config has no dtype: vLLM treats it as float32 (--dtype auto then picks bf16/fp16)")
    if dtype not in ("bfloat16", "float16", "float32", "half", "float", "bf16", "fp16"):
        raise InputError(f"config field 'torch_dtype' has unsupported value {dtype!r}{_where(name)}")
    dtype = {"half": "float16", "fp16": "float16", "bf16": "bfloat16", "float": "float32"}.get(dtype, dtype)

    # ---- quantization: config.json first, then ModelOpt hf_quant_config.json ----
    qc = raw.get("quantization_config") or raw.get("compression_config")
    if qc is None and isinstance(raw.get("text_config"), dict):
        qc = raw["text_config"].get("quantization_config")
    quant = quant_from_config(qc) if qc is not None else None
    if quant is None and hf_quant_config is not None:
        quant = quant_from_config(hf_quant_config, source="hf_quant_config.json")
    if quant is not None and not quant.supported:
        notes.append(quant.note)

    # ---- layout facts for the weight inventory ----
    attn_bias = bool(t.get("attention_bias", False)) or bool(t.get("bias", False))
    qkv_bias = attn_bias or text_type in ("qwen2", "qwen2_moe") or (
        model_type == "chatglm" and t.get("add_qkv_bias", False)) or model_type == "opt"
    o_bias = attn_bias or model_type == "opt" or (model_type == "chatglm" and t.get("add_bias_linear", False))
    mlp_bias = bool(t.get("mlp_bias", False)) or model_type == "opt" or (
        model_type == "chatglm" and t.get("add_bias_linear", False))
    if is_falcon:
        qkv_bias = o_bias = mlp_bias = bool(t.get("bias", False))
    norms = {"gemma2": 4, "gemma3": 4, "gemma3_text": 4}.get(text_type, 2)
    if is_falcon and t.get("parallel_attn", True) and not t.get("new_decoder_architecture", False):
        norms = 1
    rot, rope_rows = _rope_cache(t, text_type, attn_head_dim, name, mla_rope=rope_dim if is_mla else None)
    vis, vis_note = _vision_params(raw) if is_mm else (0, "")
    if vis_note:
        notes.append(vis_note)

    shape = ModelShape(
        name=name, model_type=model_type, architectures=archs, num_layers=layers, hidden_size=hidden,
        num_attention_heads=heads, num_kv_heads=kv_heads, head_size=head_size, head_size_v=head_size_v,
        intermediate_size=dense_inter, vocab_size=vocab, tie_word_embeddings=tie, max_model_len=max_len,
        dtype=dtype, layer_kinds=kinds, sliding_window=sw, is_mla=is_mla, kv_lora_rank=kv_lora,
        qk_rope_head_dim=rope_dim, moe=moe, quant=quant, is_multimodal=is_mm, source=name,
        extra={"max_model_len_how": max_len_how, **_gdn_state(t, kinds, name), **_global_attention(t, name),
               **_mamba2_state(t, text_type, kinds, hidden, name), **_dsa_indexer(t, is_mla, layers, name)},
        attention_chunk_size=chunk, q_lora_rank=q_lora, qk_nope_head_dim=nope, v_head_dim=v_head,
        attn_head_dim=attn_head_dim, qkv_bias=qkv_bias, o_bias=o_bias, mlp_bias=mlp_bias,
        qk_norm=text_type in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text", "olmo2"),
        attn_sinks=text_type == "gpt_oss",
        mlp_kind="plain" if model_type in ("opt", "falcon", "gpt2", "nemotron_h") else "gated",
        norms_per_layer=1 if model_type == "nemotron_h" else norms, norm_bias=model_type in ("opt", "falcon", "gpt2"),
        learned_positions=(t.get("max_position_embeddings", 2048) + 2) if model_type == "opt" else 0,
        rotary_dim=rot, rope_cache_len=rope_rows, vision_params=vis, notes=tuple(notes),
    )
    return replace(shape, params=param_counts(shape))


def _refuse_compressed_sparse(t: dict, text_type: str, name: str) -> None:
    """Sized as MLA or as plain attention, DeepSeek-V4 would come out silently wrong: refused, with the way around."""
    if text_type in _COMPRESSED_SPARSE_TYPES or t.get("compress_rates") is not None:
        raise InputError(
            f"{text_type}: DeepSeek-V4's attention (a sliding-window cache beside MLA caches compressed 4x and 128x, "
            f"their compressor states and the indexer, packed into one pool) is not modelled; kvdoctor cannot size "
            f"its KV cache (a start-up log's own figures: kvdoctor ledger --from-log LOG without --model){_where(name)}")


def _dsa_indexer(t: dict, is_mla: bool, layers: int, name: str) -> dict:
    """DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5's glm_moe_dsa: any MLA config with ``index_topk``): the lightning
    indexer's heads and head size and the layers that build one (``extra["dsa_indexer"]``; ledger.kv adds its K cache
    to those layers' pages, ledger.tensors its weights). vLLM's DeepseekV32Attention skips the indexer on a layer when
    ``max(layer - index_skip_topk_offset + 1, 0) % index_topk_freq != 0``, or where ``index_topk_pattern`` says "S"."""
    if not is_mla or "index_topk" not in t:
        return {}
    freq = _get_int(t, ("index_topk_freq",), name, default=1)
    offset = _get_int(t, ("index_skip_topk_offset",), name, default=2, positive=False)
    pattern = t.get("index_topk_pattern")
    if isinstance(pattern, (str, list)):
        with_indexer = [i for i in range(layers) if i >= len(pattern) or pattern[i] != "S"]
    else:
        with_indexer = [i for i in range(layers) if max(i - offset + 1, 0) % freq == 0]
    return {"dsa_indexer": {"n_heads": _get_int(t, ("index_n_heads",), name, default=64),
                            "head_dim": _get_int(t, ("index_head_dim",), name, default=128),
                            "layers": tuple(with_indexer)}}


def _global_attention(t: dict, name: str) -> dict:
    """Gemma 4's full-attention layers have heads of their own (``extra["full_attn"]``: vLLM's per_layer_config gives
    them num_global_key_value_heads of global_head_dim; a k_eq_v layer still fills both the K and the V slot)."""
    if "global_head_dim" not in t or "num_global_key_value_heads" not in t:
        return {}
    return {"full_attn": {"num_kv_heads": _get_int(t, ("num_global_key_value_heads",), name),
                          "head_size": _get_int(t, ("global_head_dim",), name)}}


# Mamba2 mixers' state dimensions by config family (vLLM's get_mamba_state_shape_from_config of each model): heads,
# head dim, groups, state size, conv kernel; the inner width is heads x head dim (Nemotron-H) or mamba_expand x hidden
_MAMBA2_KEYS = {
    "nemotron_h": ("mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size", "conv_kernel"),
    "granitemoehybrid": ("mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_d_state", "mamba_d_conv"),
}


def _mamba2_state(t: dict, model_type: str, kinds: tuple[str, ...], hidden: int, name: str) -> dict:
    """A Mamba2 hybrid's state dimensions (``extra["mamba2"]``; ledger.kv sizes its page per TP rank, ledger.tensors its
    mixer weights), and for Nemotron-H the layers that carry no MLP; {} for other models. The recurrent state's dtype:
    the config's mamba_ssm_cache_dtype, else float32 for Nemotron-H (vLLM's NemotronHForCausalLMConfig: "only float32
    is known to have no accuracy issues") and the model dtype for the others."""
    keys = _MAMBA2_KEYS.get(model_type)
    if keys is None or "mamba" not in kinds or keys[0] not in t:
        return {}
    heads, head_dim, groups, state, kernel = (_get_int(t, (k,), name) for k in keys)
    inner = heads * head_dim if model_type == "nemotron_h" else int(float(t.get("mamba_expand", 2)) * hidden)
    ssm = t.get("mamba_ssm_cache_dtype") or ("float32" if model_type == "nemotron_h" else None)
    out: dict = {"mamba2": {"num_heads": heads, "head_dim": head_dim, "n_groups": groups, "state_size": state,
                            "conv_kernel": kernel, "intermediate": inner, "ssm_dtype": ssm,
                            "conv_bias": bool(t.get("use_conv_bias", True))}}
    pat = t.get("hybrid_override_pattern")
    if model_type == "nemotron_h" and isinstance(pat, str):
        out["no_mlp_layers"] = tuple(i for i, c in enumerate(pat) if c in "M*")
        out["moe_gated"] = False  # relu2 experts: up and down projections only
    return out


def _gdn_state(t: dict, kinds: tuple[str, ...], name: str) -> dict:
    """The gated-delta-net state's dimensions (``extra["gdn"]``; ledger.kv sizes its page per TP rank), for a model
    with linear-attention layers whose config names them; {} otherwise."""
    if "linear" not in kinds or "linear_num_value_heads" not in t:
        return {}
    dims = {k: _get_int(t, (k,), name) for k in ("linear_num_key_heads", "linear_num_value_heads",
                                                  "linear_key_head_dim", "linear_value_head_dim",
                                                  "linear_conv_kernel_dim")}
    ssm = t.get("mamba_ssm_dtype")
    return {"gdn": {**dims, "mamba_ssm_dtype": str(ssm) if ssm else None},
            "attn_output_gate": bool(t.get("attn_output_gate", True))}


# --------------------------------------------------------------------------------------------
# plain-dict round trip (the catalog stores shapes as JSON)
# --------------------------------------------------------------------------------------------


def shape_to_dict(shape: ModelShape) -> dict:
    from dataclasses import asdict

    d = asdict(shape)
    return d


def shape_from_dict(d: dict) -> ModelShape:
    d = dict(d)
    if d.get("moe"):
        m = dict(d["moe"])
        m["dense_layers"] = tuple(m.get("dense_layers", ()))
        d["moe"] = MoeShape(**m)
    if d.get("quant"):
        q = dict(d["quant"])
        q["ignored"] = tuple(q.get("ignored", ()))
        if q.get("weight_block_size"):
            q["weight_block_size"] = tuple(q["weight_block_size"])
        d["quant"] = QuantInfo(**q)
    if d.get("params"):
        d["params"] = ParamCounts(**d["params"])
    for k in ("architectures", "layer_kinds", "notes"):
        d[k] = tuple(d.get(k, ()))
    return ModelShape(**d)
