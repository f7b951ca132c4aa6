"""Shared CLI options for every verb that takes a configuration, and ``resolve_inputs`` (options ->
``kvdoctor.deployment.resolve_deployment``, the one input path).

Engine flags are spelled exactly like vLLM's (``--max-model-len``, ``-tp`` ...), so an operator can
paste their own flags. A configuration can come from four places; **precedence: explicit flags >
``--serve`` line > ``--config`` YAML > ``--from-log``** (a log shows what ran; what you type now is
what you want to know about). See docs/engine.md.

Usage (the bundle pattern: one decorator adds every option and hands the verb one object)::

    from kvdoctor.cli import app
    from kvdoctor.cli import common

    @app.command()
    @common.config_options
    def ledger(opts: common.ConfigOptions, json_out: common.JsonOpt = False) -> None:
        dep = common.resolve_inputs(opts)   # -> deployment.Deployment(shape, gpu, config, resolved, ledger ...)
        ...

The individual ``Annotated`` aliases (``ModelOpt``, ``GpuOpt``, ``MaxModelLenOpt`` ...) are exported
too, for a verb that wants only a few of them (e.g. ``swap`` takes two models).
Heavy modules (catalog tables, evidence readers, pydantic) are imported inside functions.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, fields
from typing import Annotated, Any, Callable, Optional

import typer

from kvdoctor.errors import InputError  # noqa: F401  (verbs raise it through this module)

_ENGINE = "Engine (vLLM flags)"
_SOURCES = "Configuration sources"

# ---------------------------------------------------------------------------------------------
# Annotated aliases. Integer flags are typed str so "32k" / "8K" / "auto" reach vLLM's own
# human-readable-int rules (engine.sources) instead of click's int parser.

ModelOpt = Annotated[Optional[str], typer.Option(
    "--model", "-m", help="Model: catalog id / HF id, a config.json, or a model directory.",
    rich_help_panel=_SOURCES)]
GpuOpt = Annotated[Optional[str], typer.Option(
    "--gpu", help="GPU: catalog name or alias as nvidia-smi prints it (H100, 'NVIDIA A100-SXM4-80GB'), or a size like 24GiB.",
    rich_help_panel=_SOURCES)]
ServeOpt = Annotated[Optional[str], typer.Option(
    "--serve", help="A full server command line: 'vllm serve MODEL --flag v ...', 'python -m vllm.entrypoints.openai.api_server ...' or 'docker run ... vllm/vllm-openai:TAG ...'; or the path of a script, a systemd unit or a Dockerfile that runs one (its own variables expanded).",
    rich_help_panel=_SOURCES)]
ConfigFileOpt = Annotated[Optional[str], typer.Option(
    "--config", help="A vLLM YAML config file (keys as vLLM flags, kebab or snake case), or the file that deploys vLLM: a Kubernetes manifest, a compose file, production-stack Helm values, a KubeAI Model, a KServe LLMInferenceService, a Ray Serve LLM config, a SkyPilot task (FILE#NAME picks one server of several).",
    rich_help_panel=_SOURCES)]
FromLogOpt = Annotated[Optional[str], typer.Option(
    "--from-log", help="A vLLM start-up log: the configuration is recovered from its 'non-default args' line; its measured figures are used too. Explicit flags win.",
    rich_help_panel=_SOURCES)]
VllmVersionOpt = Annotated[Optional[str], typer.Option(
    "--vllm-version", help="vLLM version whose defaults and formulas to apply (default: from the docker tag or log, else 0.33.0).",
    rich_help_panel=_SOURCES)]

MaxModelLenOpt = Annotated[Optional[str], typer.Option(
    "--max-model-len", help="Context limit (human-readable: 32k = 32000, 32K = 32768; 'auto' = fit to memory).",
    rich_help_panel=_ENGINE)]
GpuMemUtilOpt = Annotated[Optional[float], typer.Option(
    "--gpu-memory-utilization", help="Fraction of total GPU memory vLLM may use (0, 1].", rich_help_panel=_ENGINE)]
MaxNumSeqsOpt = Annotated[Optional[int], typer.Option(
    "--max-num-seqs", help="Cap on running requests.", rich_help_panel=_ENGINE)]
MaxNumBatchedTokensOpt = Annotated[Optional[str], typer.Option(
    "--max-num-batched-tokens", help="Token budget per step (human-readable).", rich_help_panel=_ENGINE)]
BlockSizeOpt = Annotated[Optional[int], typer.Option(
    "--block-size", help="Tokens per KV block.", rich_help_panel=_ENGINE)]
KvCacheDtypeOpt = Annotated[Optional[str], typer.Option(
    "--kv-cache-dtype", help="auto, fp8, fp8_e4m3, fp8_e5m2, bfloat16, ...", rich_help_panel=_ENGINE)]
KvCacheMemoryBytesOpt = Annotated[Optional[str], typer.Option(
    "--kv-cache-memory-bytes", help="Fixed KV-cache size per GPU in bytes (human-readable: 20G); overrides the utilization.",
    rich_help_panel=_ENGINE)]
NumGpuBlocksOverrideOpt = Annotated[Optional[int], typer.Option(
    "--num-gpu-blocks-override", help="Force the number of KV blocks.", rich_help_panel=_ENGINE)]
QuantizationOpt = Annotated[Optional[str], typer.Option(
    "--quantization", help="Weight quantization method (awq, gptq, fp8, ...); default: from the checkpoint.",
    rich_help_panel=_ENGINE)]
DtypeOpt = Annotated[Optional[str], typer.Option(
    "--dtype", help="Model dtype: auto, bfloat16, float16, float32.", rich_help_panel=_ENGINE)]
TpOpt = Annotated[Optional[int], typer.Option(
    "--tensor-parallel-size", "-tp", help="Tensor-parallel GPUs.", rich_help_panel=_ENGINE)]
PpOpt = Annotated[Optional[int], typer.Option(
    "--pipeline-parallel-size", "-pp", help="Pipeline-parallel stages.", rich_help_panel=_ENGINE)]
EnforceEagerOpt = Annotated[Optional[bool], typer.Option(
    "--enforce-eager/--no-enforce-eager", help="Disable CUDA graphs.", rich_help_panel=_ENGINE)]
PrefixCachingOpt = Annotated[Optional[bool], typer.Option(
    "--enable-prefix-caching/--no-enable-prefix-caching", help="Automatic prefix caching (default on).",
    rich_help_panel=_ENGINE)]
ChunkedPrefillOpt = Annotated[Optional[bool], typer.Option(
    "--enable-chunked-prefill/--no-enable-chunked-prefill", help="Chunked prefill (default on).",
    rich_help_panel=_ENGINE)]

InterconnectOpt = Annotated[Optional[str], typer.Option(
    "--interconnect", metavar="nvlink|pcie|multi-node",
    help="How TP ranks talk (picks the non-torch memory row): nvlink = custom all-reduce on; pcie = off "
         "(vLLM disables it on >2 PCIe-only GPUs or without P2P); multi-node = Ray/NCCL across hosts. "
         "Default: the GPU's NVLink in the catalog, or the start-up log.", rich_help_panel=_ENGINE)]

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (schema_version inside).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="Print only what the verb exists to give (docs/cli.md, \"--quiet\"); no progress bars.")]


# ---------------------------------------------------------------------------------------------
# The bundle


@dataclass
class ConfigOptions:
    """What the shared options collected. Field names = the verb-function parameter names."""

    model: str | None = None
    gpu: str | None = None
    serve: str | None = None
    config: str | None = None
    from_log: str | None = None
    vllm_version: str | None = None
    max_model_len: str | None = None
    gpu_memory_utilization: float | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: str | None = None
    block_size: int | None = None
    kv_cache_dtype: str | None = None
    kv_cache_memory_bytes: str | None = None
    num_gpu_blocks_override: int | None = None
    quantization: str | None = None
    dtype: str | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    enforce_eager: bool | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    interconnect: str | None = None

    def engine_flags(self) -> dict[str, Any]:
        """The explicit engine flags (dest -> value as typed), for ``engine.sources.from_flags``."""
        skip = {"model", "gpu", "serve", "config", "from_log", "vllm_version"}
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        out["model"] = self.model
        return {k: v for k, v in out.items() if v is not None}


_OPTION_TYPES: dict[str, Any] = {
    "model": ModelOpt, "gpu": GpuOpt, "serve": ServeOpt, "config": ConfigFileOpt,
    "from_log": FromLogOpt, "vllm_version": VllmVersionOpt,
    "max_model_len": MaxModelLenOpt, "gpu_memory_utilization": GpuMemUtilOpt,
    "max_num_seqs": MaxNumSeqsOpt, "max_num_batched_tokens": MaxNumBatchedTokensOpt,
    "block_size": BlockSizeOpt, "kv_cache_dtype": KvCacheDtypeOpt,
    "kv_cache_memory_bytes": KvCacheMemoryBytesOpt, "num_gpu_blocks_override": NumGpuBlocksOverrideOpt,
    "quantization": QuantizationOpt, "dtype": DtypeOpt, "tensor_parallel_size": TpOpt,
    "pipeline_parallel_size": PpOpt, "enforce_eager": EnforceEagerOpt,
    "enable_prefix_caching": PrefixCachingOpt, "enable_chunked_prefill": ChunkedPrefillOpt,
    "interconnect": InterconnectOpt,
}
assert set(_OPTION_TYPES) == {f.name for f in fields(ConfigOptions)}


def option_bundle(name: str, bundle: type, types: dict[str, Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator factory: replace the verb's parameter ``name`` (a ``bundle`` dataclass) by one option
    per field (annotation from ``types``, default from the dataclass).

    typer reads the wrapper's ``__signature__``; the wrapper collects those options into one
    ``bundle`` and calls the verb with ``name=...`` plus its own parameters. The verb's positional
    arguments (typer Arguments) stay first, then its options, then the bundle's, so bundles stack
    (``config_options`` over ``workload_opts.workload_options`` over a verb's own).
    """
    defaults = {f.name: f.default for f in fields(bundle)}
    assert set(types) == set(defaults), f"{bundle.__name__}: options and fields differ"

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(func, eval_str=True)
        own = [p for p in sig.parameters.values() if p.name != name]
        if len(own) == len(sig.parameters):
            raise TypeError(f"{func.__name__}: the {bundle.__name__} decorator needs a parameter named {name!r}")
        clash = {p.name for p in own} & set(types)
        if clash:
            raise TypeError(f"{func.__name__}: parameters {sorted(clash)} clash with the shared options")
        shared = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=defaults[n], annotation=ann)
                  for n, ann in types.items()]
        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p.kind is inspect.Parameter.VAR_KEYWORD
                  else p for p in own]
        params = [p.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in params] + shared
        new_sig = sig.replace(parameters=_ordered(params))

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            collected = {n: kwargs.pop(n, defaults[n]) for n in types}
            return func(*args, **{name: bundle(**collected)}, **kwargs)

        wrapper.__signature__ = new_sig  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in new_sig.parameters.values()
                                   if p.annotation is not inspect.Parameter.empty}
        if sig.return_annotation is not inspect.Signature.empty:
            wrapper.__annotations__["return"] = sig.return_annotation
        del wrapper.__wrapped__  # typer must see the new signature, not the verb's
        return wrapper

    return decorate


# Decorator: the verb's ``opts: ConfigOptions`` parameter becomes every shared engine option.
config_options = option_bundle("opts", ConfigOptions, _OPTION_TYPES)


def _ordered(params: list[inspect.Parameter]) -> list[inspect.Parameter]:
    # Python signatures need parameters without defaults before those with defaults.
    no_default = [p for p in params if p.default is inspect.Parameter.empty]
    with_default = [p for p in params if p.default is not inspect.Parameter.empty]
    return no_default + with_default


# ---------------------------------------------------------------------------------------------
# resolve_inputs: the options -> kvdoctor.deployment.resolve_deployment (the one input path)

# The configured deployment a verb works on (kvdoctor.deployment.Deployment); the old name stays.
from kvdoctor.deployment import (  # noqa: E402,F401  (light: its heavy imports are inside functions)
    DEFAULT_VLLM_VERSION, V0_LOG_VERSION, Deployment, DeploymentInputs,
)

Inputs = Deployment


def deployment_inputs(opts: ConfigOptions) -> DeploymentInputs:
    """The shared options as the library's ``DeploymentInputs`` (text as typed; nothing looked up)."""
    return DeploymentInputs(model=opts.model, gpu=opts.gpu, serve=opts.serve, config=opts.config,
                            from_log=opts.from_log, vllm_version=opts.vllm_version,
                            engine_flags=opts.engine_flags())


def calibrated_deployment(opts: ConfigOptions, calibration: Any) -> tuple[ConfigOptions, str | None]:
    """With no model source given, the deployment a calibration was fitted on (its model, engine flags, GPU and vLLM
    release, as `kvdoctor calibrate` recorded them): --calibration alone then predicts other loads of that
    deployment. Options given here win. (options, the note that says so, or None)."""
    import dataclasses
    import re
    import shlex

    from kvdoctor.chains.plan import flag_text

    if calibration is None or opts.model or opts.serve or opts.config or opts.from_log:
        return opts, None
    dep = getattr(calibration, "deployment", None) or {}  # untyped-ok: a file written by any kvdoctor
    model = dep.get("model") if isinstance(dep, dict) else None
    if not isinstance(model, str) or not model:
        return opts, None
    engine = dep.get("engine") if isinstance(dep.get("engine"), dict) else {}
    flags = [flag_text(str(k), v if isinstance(v, bool) else shlex.quote(str(v))) for k, v in engine.items()
             if k != "model" and v is not None and not isinstance(v, (dict, list))]
    gpu = opts.gpu
    if gpu is None and isinstance(dep.get("gpu"), str):
        m = re.fullmatch(r"GPU with ([\d.]+) GiB", dep["gpu"])  # an anonymous GPU known by its memory
        gpu = f"{m.group(1)}GiB" if m else dep["gpu"]
    version = opts.vllm_version or (dep.get("vllm_version") if isinstance(dep.get("vllm_version"), str) else None)
    serve = " ".join(["vllm", "serve", shlex.quote(model), *flags])
    return (dataclasses.replace(opts, serve=serve, gpu=gpu, vllm_version=version),
            f"deployment from the calibration file: {serve} on {gpu or '?'}, vLLM {version or 'default'}")


def resolve_with_calibration(opts: ConfigOptions, calibration: Any) -> Deployment:
    """``resolve_inputs``, on the calibration's deployment when no model source is given (``calibrated_deployment``)."""
    opts, from_cal = calibrated_deployment(opts, calibration)
    inputs = resolve_inputs(opts)
    if from_cal:
        inputs.notes.append(from_cal)
    return inputs


def resolve_inputs(opts: ConfigOptions, *, need_gpu: bool = True, usage: str | None = None,
                   startup: Any = None) -> Deployment:
    """``kvdoctor.deployment.resolve_deployment`` on the shared options: call it once per verb.

    ``startup``: start-up facts the caller already parsed from ``opts.from_log`` (the log is then
    not read again). Raises InputError (one line).
    """
    from kvdoctor.deployment import resolve_deployment

    return resolve_deployment(deployment_inputs(opts), need_gpu=need_gpu, usage=usage, startup=startup)


# ---------------------------------------------------------------------------------------------
# Numbers at the edge (issue 14). click's float accepts "nan", "inf" and "1e308", its int any size:
# each one reached the library and came back as a hang, an OverflowError or NaN in --json. Every
# int/float option and argument of every verb is bounded here, once, before the verb runs; a verb
# still checks what only it knows (--requests with --trace, a percentile's meaning).

# long option name -> (low, high, low is exclusive). Unlisted ints: [0, 2**53]; unlisted floats:
# finite and in [0, 2**53] (no kvdoctor number is negative).
NUMERIC_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "--duration": (0.0, 1e7, True),  # seconds of arrivals: 116 days
    "--rate": (0.0, 1e6, True),  # requests per second
    "--rate-scale": (0.0, 1e6, True),
    "--cv": (0.0, 100.0, True),
    "--interval": (0.001, 86400.0, False),
    "--seed": (0, 2**32 - 1, False),  # numpy's default_rng takes non-negative seeds
    "--requests": (1, 1_000_000, False),  # a simulation holds every request in memory
    "--prefix-len": (0, 10_000_000, False),
    "--prefix-groups": (0, 1_000_000, False),
    "--ttft-slo": (0.0, 1e6, True),
    "--max-ratio": (0.0, 1e6, True),
    "--align-tolerance": (0.0, 1e6, False),
    "--percentile": (0.0, 100.0, True),
    "--gpu-memory-utilization": (-1e6, 1e6, False),  # finite only: (0, 1] is vLLM's own check, in its words
    "--year": (1970, 9999, False),
}
_DEFAULT_BOUNDS = (0, 2**53, False)


def _numeric_kind(param: Any) -> str | None:
    names = {c.__name__ for c in type(param.type).__mro__}
    if "FloatParamType" in names:
        return "float"
    if "IntParamType" in names:
        return "int"
    return None


def _bounds_for(param: Any) -> tuple[float, float, bool]:
    for opt in param.opts:
        if opt in NUMERIC_BOUNDS:
            return NUMERIC_BOUNDS[opt]
    return _DEFAULT_BOUNDS


def _num(x: float) -> str:
    return f"{int(x):,}" if float(x).is_integer() and abs(x) >= 1e4 and abs(x) < 1e16 else f"{x:g}"


def check_number(param: Any, value: Any) -> Any:
    """Raise InputError (one line, exit 2, like the verbs' own checks) unless ``value`` (already
    converted by click, one item of a repeatable option) is finite and within the option's bounds."""
    import math

    name = max(param.opts, key=len) if param.opts else param.name
    lo, hi, lo_open = _bounds_for(param)
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"{name} must be a finite number, got {value!r}")
    if value < lo or (lo_open and value == lo):
        raise InputError(f"{name} must be {'>' if lo_open else '>='} {_num(lo)}, got {value!r}")
    if value > hi:
        raise InputError(f"{name} must be <= {_num(hi)}, got {value!r}")
    return value


def bound_numeric_options(command: Any) -> None:
    """Give every int/float parameter under ``command`` (a click group or command) the bounds check,
    chained before its own callback. Idempotent."""
    _harden(command, lambda param: _numeric_kind(param) is not None, check_number, "_kvdoctor_bounded")


# Parameters that name files kvdoctor reads (by dest name). A FIFO, socket or device given there
# (``<(cmd)``, ``/dev/zero``) blocks or never ends: refused before the verb runs. ``-`` (stdin, where
# a verb reads it) and names that are not paths (a model id, a serve line) pass through.
INPUT_FILE_PARAMS = frozenset({"trace", "lengths", "config", "from_log", "evidence", "bench", "prediction",
                               "files", "inputs", "db", "prompt_dist", "model", "old", "new",
                               "previous_model"})


def check_input_path(param: Any, value: Any) -> Any:
    import os

    from kvdoctor.safeio import check_input_file

    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str) or text == "-" or "\n" in text:
        return value
    try:
        exists = os.path.exists(text)
    except (OSError, ValueError):
        return value
    if exists and not os.path.isdir(text):
        opts = [o for o in param.opts if o.startswith("-")]
        check_input_file(text, max(opts, key=len) if opts else "input")
    return value


def harden_options(command: Any) -> None:
    """Bound every number and guard every input path under ``command`` (called once per run by the
    root callback, before the verb's own options are parsed). Idempotent."""
    bound_numeric_options(command)
    _harden(command, lambda param: param.name in INPUT_FILE_PARAMS, check_input_path, "_kvdoctor_path_guard")


def _harden(command: Any, wanted: Callable[[Any], bool], check: Callable[[Any, Any], Any], marker: str) -> None:
    """Chain ``check`` onto every parameter under ``command`` that ``wanted`` selects and ``marker``
    does not already mark."""
    for sub in getattr(command, "commands", {}).values():
        _harden(sub, wanted, check, marker)
    for param in getattr(command, "params", []):
        if wanted(param) and not getattr(param, marker, False):
            _chain_callback(param, check, marker)


def _chain_callback(param: Any, check: Callable[[Any, Any], Any], marker: str) -> None:
    """Run ``check(param, item)`` on the value (each item of a repeatable option; nothing when unset)
    before the parameter's own click callback (if any); ``marker`` is set on the parameter so that
    hardening it twice is a no-op."""
    own = param.callback

    def callback(ctx: Any, p: Any, value: Any) -> Any:
        if isinstance(value, (tuple, list)):
            for item in value:
                check(p, item)
        elif value is not None:
            check(p, value)
        return own(ctx, p, value) if own is not None else value

    param.callback = callback
    setattr(param, marker, True)
