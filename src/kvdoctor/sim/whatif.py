"""What-if API for the decision chains: one call per plan level.

    from kvdoctor.sim.whatif import predict
    summary = predict(shape, gpu, resolved, ledger.num_blocks, workload)

``workload`` is a ``sim.workload.Workload``, a trace path, a list of evidence ``RequestRecord`` s,
or a dict for a synthetic workload (``{"rate": 5, "requests": 2000, "lengths": "lognormal:1024:256"}``,
keys = ``sim.workload.synthetic`` arguments; ``seed`` fills in the seed). The same seed and
workload give the same answer, so two plan levels differ only by the configuration change.
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING, Union

from kvdoctor.errors import InputError
from kvdoctor.sim.result import SimResult, SimSummary
from kvdoctor.sim.scheduler import SchedConfig
from kvdoctor.sim.workload import Workload

if TYPE_CHECKING:  # the boundary types (annotations only: no import cost)
    from kvdoctor.engine.defaults import ResolvedEngine
    from kvdoctor.evidence.model import RequestRecord
    from kvdoctor.facts import GpuSpec, ModelShape
    from kvdoctor.ledger.kv import Grouping
    from kvdoctor.sim.calibration import Calibration
    from kvdoctor.sim.contracts import StepTimeModel
    from kvdoctor.sim.frontend import FrontEnd
    from kvdoctor.sim.workload import WorkloadSpec

# Every way a caller may name a workload (see the module docstring); ``as_workload`` turns it into one.
WorkloadInput = Union[Workload, "WorkloadSpec", dict, str, bytes, os.PathLike, "list[RequestRecord]",
                      "tuple[RequestRecord, ...]"]


def kv_layout(grouping: Grouping | None) -> dict[str, int]:
    """Group counts for ``SchedConfig`` from the ledger's KV grouping (``ledger.kv``; None: no plan)."""
    out = {"full_groups": 0, "sliding_groups": 0, "sliding_window": 0, "const_blocks": 0}
    bs = None
    for g in (grouping.groups if grouping is not None else ()):
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
            out["const_blocks"] += int(spec.mamba_blocks or 1)
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
    return kv_layout(plan.grouping) if plan is not None else {}


def sched_config(resolved: ResolvedEngine, num_blocks: int, layout: dict[str, int] | None = None) -> SchedConfig:
    """The scheduler limits from a resolved engine (``engine.defaults.ResolvedEngine``) and, for
    hybrid models, the KV group layout (``kv_layout``)."""

    r = resolved  # every field concrete (engine.defaults.resolve)
    if num_blocks is None or int(num_blocks) < 2:
        raise InputError(f"the KV pool has {num_blocks} blocks: nothing can run (vLLM would refuse to start)")
    override = r.num_gpu_blocks_override
    layout = dict(layout or {})
    block_size = int(layout.pop("block_size", None) or r.block_size)
    return SchedConfig(
        num_blocks=int(override) if override else int(num_blocks),
        block_size=block_size,
        max_model_len=int(r.max_model_len),
        max_num_seqs=int(r.max_num_seqs),
        max_num_batched_tokens=int(r.max_num_batched_tokens),
        enable_prefix_caching=bool(r.enable_prefix_caching),
        enable_chunked_prefill=bool(r.enable_chunked_prefill),
        long_prefill_token_threshold=int(r.long_prefill_token_threshold),
        scheduling_policy=str(r.scheduling_policy),
        async_scheduling=bool(r.async_scheduling),
        **layout,
    )


def as_workload(workload: WorkloadInput, seed: int = 0) -> Workload:
    if isinstance(workload, Workload):
        return workload
    from kvdoctor.sim.workload import WorkloadSpec, build_workload

    if isinstance(workload, WorkloadSpec):
        return build_workload(workload)
    if isinstance(workload, dict):
        from kvdoctor.sim.workload import synthetic

        return synthetic(**{"seed": seed, **workload})
    if isinstance(workload, (str, bytes, os.PathLike)):
        from kvdoctor.sim.workload import load_trace

        return load_trace(workload)
    if isinstance(workload, (list, tuple)):
        return Workload.from_records(workload)
    raise InputError(f"cannot simulate a workload of type {type(workload).__name__}")


def step_model(shape: ModelShape, gpu: GpuSpec | None, resolved: ResolvedEngine,
               calibration: Calibration | None = None) -> StepTimeModel:
    """The step-time model of this deployment: the fitted roofline, or the deployment's own
    calibration (``kvdoctor calibrate``) on top of it (or instead of it, for a linear fit)."""
    from kvdoctor.sim.steptime import from_deployment

    if calibration is not None:
        return calibration.step_model(shape, gpu, resolved)
    return from_deployment(shape, gpu, resolved)


def front_end(calibration: Calibration | None = None) -> FrontEnd:
    """The API-server model: the deployment's calibration, else the fit on public results."""
    from kvdoctor.sim import coefficients as C
    from kvdoctor.sim.frontend import FrontEnd

    if calibration is not None and calibration.frontend is not None:
        return calibration.frontend
    return FrontEnd(**C.FRONTEND)


# How a load is sent, as the bench's options say it: the public held-out errors differ by it (UNCERTAINTY_BANDS)
REGIMES = ("one at a time", "closed loop", "all at once", "open loop")
BAND_MIN_RESULTS = 15  # fewer held-out results of a regime for a figure: that figure's band is all results'


def regime_of(max_concurrency: int | None, all_at_once: bool) -> str:
    """``--max-concurrency 1``; another cap; every request sent at t=0 (rate inf, no cap); else a rate or a trace."""
    if max_concurrency is not None:
        return "one at a time" if int(max_concurrency) == 1 else "closed loop"
    return "all at once" if all_at_once else "open loop"


def workload_regime(w: Workload) -> str:
    return regime_of(w.max_concurrency, bool(w.arrival) and max(w.arrival) == min(w.arrival))


# The public held-out results behind the bands ran on NVIDIA GPUs only (tests/fixtures/bench_public): no AMD run was
# fitted or checked, and the one public offline pair on an MI325X (docs/simulation.md, "Offline benchmarks") ran at
# about half the predicted speed.
UNCHECKED_VENDORS = {"AMD": "no public run on an AMD GPU was fitted or held out: the band comes from NVIDIA GPUs, and "
                            "the one public offline pair on an MI325X (ROCm) ran at about half the predicted speed; "
                            "calibrate on this deployment's own runs (kvdoctor calibrate) before trusting a figure"}


def uncertainty(calibration: Calibration | None = None, result: SimResult | None = None,
                regime: str | None = None, gpu: GpuSpec | None = None) -> dict:
    """How far to trust a prediction: the median absolute error on results the time model was not
    fitted on (the deployment's held-out runs with a calibration, else the public held-out set). With a
    calibration and the predicted ``result``: where that load leaves the calibrated range (``outside_range``,
    with a sentence each in ``notes``), the case in which the held-out error understates the miss. Without a
    calibration and with the load's ``regime`` (``workload_regime``): the public held-out results sent that way
    (``coefficients.UNCERTAINTY_BANDS``), their median and 80th-percentile error per figure."""
    # the range a calibration measured holds whatever band is quoted: one run's calibration has no held-out error,
    # and it is then that a load outside the run's range is most likely to miss
    checked = calibrated_range_check(calibration, result) if calibration is not None and result is not None else {}
    out = _band(calibration, regime, gpu)
    if checked:
        out.update({k: v for k, v in checked.items() if k != "notes"})
        out["notes"] = [*out.get("notes", []), *checked["notes"]]
    return out


def _band(calibration: Calibration | None, regime: str | None, gpu: GpuSpec | None) -> dict:
    """``uncertainty``'s error band: the calibration's held-out runs, else the public band of the load's regime, else
    the public fit's held-out error."""
    from kvdoctor.sim import coefficients as C

    if calibration is not None and calibration.uncertainty():
        return {"source": "calibration held-out runs", "median_abs_error": calibration.uncertainty()}
    if regime is not None and C.UNCERTAINTY_BANDS.get("all"):
        band = public_band(C.UNCERTAINTY_BANDS, regime)
        if calibration is not None:
            # which way the uncalibrated model missed says nothing of a deployment's own fit: only the spread is kept
            for k in ("median_error", "low", "lean"):
                band.pop(k, None)
        vendor = next((v for v in UNCHECKED_VENDORS if gpu is not None and gpu.name.startswith(v + " ")), None)
        if vendor and calibration is None:
            band["notes"] = [*band.get("notes", []), UNCHECKED_VENDORS[vendor]]
            band["unchecked_gpu"] = gpu.name
        return band
    fit = C.SERVING_FIT or {}
    err = (fit.get("median_abs_error") or {}).get("held_out")
    return {"source": "public vllm bench results held out of the fit (docs/simulation.md)",
            "median_abs_error": {k: v for k, v in (err or {}).items() if k != "n"}}


LEAN_P = 0.05  # a band's misses lean one way when a two-sided sign test rejects "either way alike" at this level
LEAN_MIN = 0.05  # ... and their signed median is at least this far from 0 (a 2 % lean is nothing to act on)


def lean(low: int, n: int) -> str | None:
    """Which way ``n`` held-out predictions missed, ``low`` of them below the measured figure: "low" or "high" when
    an exact two-sided sign test puts the split beyond chance (``LEAN_P``), else None. Ties (an error of exactly 0)
    are counted as high by the bands; with a few hundred results at most, that moves nothing."""
    if n <= 0 or not 0 <= low <= n:
        return None
    k = min(low, n - low)
    p = min(1.0, 2.0 * sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n)
    if p >= LEAN_P:
        return None
    return "low" if low * 2 > n else "high"


def public_band(bands: dict, regime: str) -> dict:
    """The band of ``regime`` per figure (``BAND_MIN_RESULTS`` or more held-out results sent that way), else of all
    held-out results; which one each figure took is in ``from``. Where the band's results were missed mostly one
    way (``lean``), ``lean`` says which, with how many (``low`` of ``results`` predicted below the measured figure)
    and the signed median error (``median_error``, at least ``LEAN_MIN`` from 0): a direction to read the prediction
    in, not a correction."""
    own, every = bands.get(regime) or {}, bands["all"]
    med, p80, n, src, signed, low, leans = {}, {}, {}, {}, {}, {}, {}
    for m, row in every.items():
        pick = own.get(m) if (own.get(m) or {}).get("n", 0) >= BAND_MIN_RESULTS else row
        med[m], p80[m], n[m] = pick["median"], pick["p80"], pick["n"]
        src[m] = regime if pick is not row else "all"
        if "bias" in pick and "low" in pick:  # bands written before the signed errors were kept have neither
            signed[m], low[m] = pick["bias"], pick["low"]
            if abs(pick["bias"]) >= LEAN_MIN and (way := lean(pick["low"], pick["n"])) is not None:
                leans[m] = way
    out = {"source": "public vllm bench results held out of the fit (docs/simulation.md)", "regime": regime,
           "median_abs_error": med, "p80_abs_error": p80, "results": n, "from": src}
    if signed:
        out.update(median_error=signed, low=low, lean=leans)
    return out


_FIGURE_NAMES = {"output_throughput": "throughput", "mean_ttft_ms": "TTFT", "mean_tpot_ms": "TPOT"}


def uncertainty_text(unc: dict) -> str:
    """``uncertainty``'s result in words, as every verb that predicts prints it: "typical error ± throughput 8%, TTFT
    18%, TPOT 5%; 1 in 5 missed by more than ... (up to 34 public vllm bench results held out of the fit, sent one at a
    time; docs/simulation.md)[; the predictions ran low on TTFT in ...]", or with a calibration "(calibration held-out
    runs)". Empty when nothing is known."""
    names = _FIGURE_NAMES
    err = {k: v for k, v in (unc.get("median_abs_error") or {}).items() if v is not None}
    if not err:
        return ""
    line = "typical error ± " + ", ".join(f"{names.get(k, k)} {v:.0%}" for k, v in err.items())
    p80 = unc.get("p80_abs_error") or {}
    if p80:  # the public band of this load's regime: also how wide the worse fifth of results missed
        line += "; 1 in 5 missed by more than " + " / ".join(f"{p80[k]:.0%}" for k in err if k in p80)
        n = max((unc.get("results") or {}).values(), default=0)
        line += (f" (up to {n} public vllm bench results held out of the fit, {_band_source(unc, err, names)}; "
                 "docs/simulation.md)")
        line += _lean_text(unc, err, names)
    else:
        line += f" ({unc.get('source')})"
    return line


def _band_source(unc: dict, err: dict, names: dict[str, str]) -> str:
    """Which results a public band quotes: the load's regime for every figure, for some (too few results for the
    others: ``sim.whatif.BAND_MIN_RESULTS``), or for none."""
    regime = unc.get("regime")
    own = [k for k, v in (unc.get("from") or {}).items() if v == regime]
    if len(own) == len(err):
        return f"sent {regime}"
    if own:
        return f"{regime} for {', '.join(names.get(k, k) for k in own)}, all loads for the rest"
    return f"all loads: too few sent {regime}"


def _lean_text(unc: dict, err: dict, names: dict[str, str]) -> str:
    """The figures whose held-out misses lean one way (``sim.whatif.public_band``'s ``lean``), e.g. "; the predictions
    ran low on TTFT in 38 of 57 (median -19%)": the measured figure tends to land on the other side."""
    parts = []
    for k in err:
        way = (unc.get("lean") or {}).get(k)
        if way is None:
            continue
        n, low = unc["results"][k], unc["low"][k]
        parts.append(f"{way} on {names.get(k, k)} in {low if way == 'low' else n - low} of {n} "
                     f"(median {unc['median_error'][k]:+.0%})")
    if not parts:
        return ""
    return "; the predictions ran " + (", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0])


def calibrated_range_check(calibration: Calibration | None, result: SimResult) -> dict:
    """``{"calibrated_range": ..., "outside_range": [...], "notes": [...]}`` for a load predicted with a calibration:
    its requests' mean prompt, its mean running requests and its largest step against the range the calibration's
    fitted runs measured
    (``sim.calibration.outside_range``). Empty without a calibration or for a file written before the range was
    recorded."""
    from kvdoctor.sim.calibration import outside_range, range_notes

    rng = (calibration.fit.get("calibrated_range") if calibration is not None else None) or None
    if rng is None:
        return {}
    prompts = result.prompt_tokens
    mean_prompt = float(prompts.mean()) if len(prompts) else 0.0
    items = outside_range(rng, mean_prompt, result.summary.mean_running, result.summary.max_step_tokens)
    notes = range_notes(items)
    # a calibration whose lone decode is priced below its weights' read (calibration.floor_notes) is wrong most where
    # few requests run: said for a load lighter than any its fitted runs held
    fl = calibration.fit.get("decode_floor") or {}
    if fl and fl["decode_step_1_ms"] < fl["weight_read_floor_ms"] and result.summary.mean_running < rng[
            "running_requests"][0]:
        notes.append(f"this calibration prices a lone decode step at {fl['decode_step_1_ms']:.1f} ms, below the "
                     f"{fl['weight_read_floor_ms']:.1f} ms its weights take to read at peak bandwidth: at this lighter "
                     "load TPOT is predicted too low and throughput too high")
    return {"calibrated_range": rng, "outside_range": items, "notes": notes}


def run(shape: ModelShape, gpu: GpuSpec | None, resolved: ResolvedEngine, num_blocks: int, workload: WorkloadInput, *,
        seed: int = 0, detail: bool = False, progress=None, interval_s: float = 10.0, layout: dict | None = None,
        calibration: Calibration | None = None, on_step=None) -> SimResult:
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
    # an offline bench has no API server: the engine core's own work stays in the step model
    return simulate(w, cfg, model, detail=detail, progress=progress, interval_s=interval_s,
                    frontend=None if w.offline else front_end(calibration), on_step=on_step,
                    extras=calibration.step_extras() if calibration is not None else None)


def predict(shape: ModelShape, gpu: GpuSpec | None, resolved: ResolvedEngine, num_blocks: int,
            workload: WorkloadInput, *, seed: int = 0, calibration: Calibration | None = None) -> SimSummary:
    """Simulated TTFT / TBT / throughput / preemptions for one configuration (fast: summary only)."""
    return run(shape, gpu, resolved, num_blocks, workload, seed=seed, detail=False, calibration=calibration).summary
