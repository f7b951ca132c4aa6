"""What-if API for the decision chains: one call per plan level.

    from kvdoctor.sim.whatif import predict
    summary = predict(shape, gpu, resolved, ledger.num_blocks, workload)

``workload`` is a ``sim.workload.Workload``, a trace path, a list of evidence ``RequestRecord`` s,
or a dict for a synthetic workload (``{"rate": 5, "requests": 2000, "lengths": "lognormal:1024:256"}``,
keys = ``sim.workload.synthetic`` arguments; ``seed`` fills in the seed). The same seed and
workload give the same answer, so two plan levels differ only by the configuration change.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvdoctor.errors import InputError
from kvdoctor.sim.result import SimResult, SimSummary
from kvdoctor.sim.scheduler import SchedConfig
from kvdoctor.sim.workload import Workload

if TYPE_CHECKING:  # the boundary types (annotations only: no import cost)
    from kvdoctor.engine.defaults import ResolvedEngine
    from kvdoctor.facts import GpuSpec, ModelShape


def kv_layout(grouping: Any) -> dict[str, int]:
    """Group counts for ``SchedConfig`` from the ledger's KV grouping (``ledger.kv.Grouping``)."""
    out = {"full_groups": 0, "sliding_groups": 0, "sliding_window": 0, "const_blocks": 0}
    bs = None
    for g in getattr(grouping, "groups", ()) or ():
        spec = g.spec
        kind = spec.kind
        if kind == "full":
            out["full_groups"] += 1
        elif kind in ("sliding", "chunked"):
            # chunked local attention holds at most one chunk: a window of chunk_size for the pool
            out["sliding_groups"] += 1
            w = spec.sliding_window if kind == "sliding" else spec.chunk_size
            out["sliding_window"] = max(out["sliding_window"], int(w or 0))
        elif kind in ("mamba", "linear"):
            out["const_blocks"] += int(getattr(spec, "mamba_blocks", 1) or 1)
            continue
        else:
            continue
        bs = bs or spec.block_size
    if out["full_groups"] + out["sliding_groups"] == 0:
        return {}
    if bs:
        out["block_size"] = int(bs)
    return out


def layout_of(shape: ModelShape, gpu: GpuSpec | None, resolved: ResolvedEngine) -> dict[str, int]:
    """The KV group layout of this deployment, via the ledger (empty: one full-attention group)."""
    from kvdoctor.errors import KvdoctorError
    from kvdoctor.ledger.build import build_ledger

    try:
        plan = build_ledger(shape, gpu, resolved).plan
    except KvdoctorError:
        return {}
    return kv_layout(getattr(plan, "grouping", None)) if plan is not None else {}


def sched_config(resolved: ResolvedEngine, num_blocks: int, layout: dict[str, int] | None = None) -> SchedConfig:
    """The scheduler limits from a resolved engine (``engine.defaults.ResolvedEngine``) and, for
    hybrid models, the KV group layout (``kv_layout``)."""

    def val(name, default):
        v = getattr(resolved, name, None)
        return default if v is None else v

    if num_blocks is None or int(num_blocks) < 2:
        raise InputError(f"the KV pool has {num_blocks} blocks: nothing can run (vLLM would refuse to start)")
    override = getattr(resolved, "num_gpu_blocks_override", None)
    layout = dict(layout or {})
    block_size = int(layout.pop("block_size", None) or val("block_size", 16))
    return SchedConfig(
        num_blocks=int(override) if override else int(num_blocks),
        block_size=block_size,
        max_model_len=int(val("max_model_len", 8192)),
        max_num_seqs=int(val("max_num_seqs", 256)),
        max_num_batched_tokens=int(val("max_num_batched_tokens", 8192)),
        enable_prefix_caching=bool(val("enable_prefix_caching", True)),
        enable_chunked_prefill=bool(val("enable_chunked_prefill", True)),
        long_prefill_token_threshold=int(val("long_prefill_token_threshold", 0)),
        scheduling_policy=str(val("scheduling_policy", "fcfs")),
        async_scheduling=bool(val("async_scheduling", False)),
        **layout,
    )


def as_workload(workload: Any, seed: int = 0) -> Workload:
    if isinstance(workload, Workload):
        return workload
    from kvdoctor.sim.workload import WorkloadSpec, build_workload

    if isinstance(workload, WorkloadSpec):
        return build_workload(workload)
    if isinstance(workload, dict):
        from kvdoctor.sim.workload import synthetic

        return synthetic(**{"seed": seed, **workload})
    if isinstance(workload, (str, bytes)) or hasattr(workload, "__fspath__"):
        from kvdoctor.sim.workload import load_trace

        return load_trace(workload)
    if isinstance(workload, (list, tuple)):
        return Workload.from_records(workload)
    raise InputError(f"cannot simulate a workload of type {type(workload).__name__}")


def step_model(shape: ModelShape, gpu: GpuSpec | None, resolved: ResolvedEngine, calibration: Any = None):
    """The step-time model of this deployment: the fitted roofline, or the deployment's own
    calibration (``kvdoctor calibrate``) on top of it (or instead of it, for a linear fit)."""
    from kvdoctor.sim.steptime import from_deployment

    if calibration is not None:
        return calibration.step_model(shape, gpu, resolved)
    return from_deployment(shape, gpu, resolved)


def front_end(calibration: Any = None):
    """The API-server model: the deployment's calibration, else the fit on public results."""
    from kvdoctor.sim import coefficients as C
    from kvdoctor.sim.frontend import FrontEnd

    if calibration is not None and calibration.frontend is not None:
        return calibration.frontend
    return FrontEnd(**C.FRONTEND)


def uncertainty(calibration: Any = None) -> dict:
    """How far to trust a prediction: the median absolute error on results the time model was not
    fitted on (the deployment's held-out runs with a calibration, else the public held-out set)."""
    from kvdoctor.sim import coefficients as C

    if calibration is not None and calibration.uncertainty():
        return {"source": "calibration held-out runs", "median_abs_error": calibration.uncertainty()}
    fit = getattr(C, "SERVING_FIT", {}) or {}
    err = (fit.get("median_abs_error") or {}).get("held_out")
    return {"source": "public vllm bench results held out of the fit (docs/simulation.md)",
            "median_abs_error": {k: v for k, v in (err or {}).items() if k != "n"}}


def run(shape: ModelShape, gpu: GpuSpec | None, resolved: ResolvedEngine, num_blocks: int, workload: Any, *,
        seed: int = 0, detail: bool = False, progress=None, interval_s: float = 10.0, layout: dict | None = None,
        calibration: Any = None, on_step=None) -> SimResult:
    """The full result (timeline, per-request arrays) for one configuration. ``layout``: the KV
    group layout (``kv_layout(ledger.plan.grouping)``); computed from the ledger when omitted.
    ``calibration``: a ``sim.calibration.Calibration`` (``--calibration FILE``). ``on_step``: a
    step observer (``sim.contracts.StepRecord`` per engine step, ``--steps-out``)."""
    from kvdoctor.sim.run import simulate

    if layout is None:
        layout = layout_of(shape, gpu, resolved)
    cfg = sched_config(resolved, num_blocks, layout)
    model = step_model(shape, gpu, resolved, calibration)
    w = as_workload(workload, seed)
    if len(w) == 0:
        raise InputError("the workload has no requests")
    return simulate(w, cfg, model, detail=detail, progress=progress, interval_s=interval_s,
                    frontend=front_end(calibration), on_step=on_step)


def predict(shape: ModelShape, gpu: GpuSpec | None, resolved: ResolvedEngine, num_blocks: int, workload: Any, *,
            seed: int = 0, calibration: Any = None) -> SimSummary:
    """Simulated TTFT / TBT / throughput / preemptions for one configuration (fast: summary only)."""
    return run(shape, gpu, resolved, num_blocks, workload, seed=seed, detail=False, calibration=calibration).summary
