"""What changed between two engine configurations (the journal's one-variable rule).

Compares the fields the operator *gave*, after normalisation, so the same setting written as a
serve line, a YAML file, kvdoctor flags or a log's non-default args compares equal:
``--max-model-len 32k`` == ``max-model-len: 32000`` == ``{'max_model_len': 32000}``;
``--dtype half`` == ``dtype: float16``; ``--kv-cache-dtype auto`` == not given (auto is the default);
unknown flags compare by value (``--port 8000`` == ``port: 8000``). Effective values seen in a log
(``EngineConfig.measured``), notes and the origin label are not settings and never count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvdoctor.engine.config import ENGINE_FIELDS, EngineConfig

# Writing the default explicitly is the same setting as leaving it out.
_EXPLICIT_DEFAULTS: dict[str, tuple[Any, ...]] = {
    "dtype": ("auto",),
    "kv_cache_dtype": ("auto",),
}


@dataclass(frozen=True)
class Change:
    """One changed setting between two configurations (before/after, None = not given)."""
    field: str  # an EngineConfig field, "extra.<flag dest>", "env.<VAR>" or "vllm_version"
    before: object  # None = not given
    after: object

    def __str__(self) -> str:
        show = lambda v: "unset" if v is None else str(v)  # noqa: E731
        return f"{self.field}: {show(self.before)} -> {show(self.after)}"


def _norm_scalar(v: object) -> object:
    """Loose typing for values kvdoctor does not model (``extra``): "8000" == 8000, "true" == True."""
    if isinstance(v, str):
        s = v.strip()
        low = s.lower()
        if low in ("true", "false"):
            return low == "true"
        try:
            return int(s)
        except ValueError:
            pass
        try:
            return float(s)
        except ValueError:
            pass
        if s[:1] in "{[":
            import json

            try:
                return _norm_scalar(json.loads(s))
            except json.JSONDecodeError:
                return s
        return s
    if isinstance(v, float) and v.is_integer():
        return int(v)
    if isinstance(v, dict):
        return {str(k): _norm_scalar(x) for k, x in sorted(v.items(), key=lambda kv: str(kv[0]))}
    if isinstance(v, (list, tuple)):
        return [_norm_scalar(x) for x in v]
    return v


def _norm_field(name: str, v: object) -> object:
    if v is None:
        return None
    if name in _EXPLICIT_DEFAULTS and v in _EXPLICIT_DEFAULTS[name]:
        return None
    if name == "model" and isinstance(v, str):
        return v.rstrip("/")
    if name == "speculative_config":
        return _norm_scalar(v)
    if isinstance(v, float) and v.is_integer() and name != "gpu_memory_utilization":
        return int(v)
    return v


def normalised(cfg: EngineConfig) -> dict[str, Any]:
    """The given settings of ``cfg`` as comparable values (absent = not given)."""
    out: dict[str, Any] = {}
    for f in ENGINE_FIELDS:
        v = _norm_field(f, cfg.value_of(f))
        if v is not None:
            out[f] = v
    for k, v in cfg.extra.items():
        out[f"extra.{k.replace('-', '_')}"] = _norm_scalar(v)
    for k, v in cfg.env.items():
        out[f"env.{k}"] = str(v)
    return out


def diff(a: EngineConfig, b: EngineConfig) -> list[Change]:
    """Changes from ``a`` to ``b``: engine fields first (in vLLM's field order), then extras, env."""
    na, nb = normalised(a), normalised(b)
    order = {f: i for i, f in enumerate(ENGINE_FIELDS)}
    keys = sorted(set(na) | set(nb), key=lambda k: (order.get(k, len(order)), k))
    changes = [Change(k, na.get(k), nb.get(k)) for k in keys if na.get(k) != nb.get(k)]
    # A version is only a variable when both sides state one (most sources do not reveal it).
    if a.vllm_version and b.vllm_version:
        from kvdoctor.engine.version import parse_version

        if parse_version(a.vllm_version) != parse_version(b.vllm_version):
            changes.append(Change("vllm_version", a.vllm_version, b.vllm_version))
    # Same for the usage context (vllm serve vs the offline LLM class): it picks vLLM's batch table.
    if a.usage_context and b.usage_context and a.usage_context != b.usage_context:
        changes.append(Change("usage_context", a.usage_context, b.usage_context))
    return changes
