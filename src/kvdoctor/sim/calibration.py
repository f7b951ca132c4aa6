"""One deployment's own time model, fitted on its own `vllm bench serve` results (``kvdoctor calibrate``).

The public fit (``sim/coefficients.py``) is a prior for every GPU; an operator's runs of *their*
deployment pin it down. A calibration holds:

* a step time ``scale * roofline(batch) + base + per_token*T + per_kv_token*kv + per_pair*pairs
  + per_request*n`` (``kind="roofline+linear"``), or the linear part alone (``kind="linear"``:
  engines the roofline does not describe, e.g. vLLM's CPU backend, where a step is Python and
  oneDNN time, not HBM bytes);
* the API-server front end (``sim.frontend.FrontEnd``: per request, per prompt token, per output
  token, serial in one process);
* how it was fitted: the runs, each run's error, and the held-out error (fit on some runs, predict
  the others), which is the ± a prediction made with it carries.

Fitting: each run is re-simulated as the bench ran it (its saved per-request lengths and send
times when ``--save-detailed``, else its options: prompts, rate, burstiness, concurrency, mean
lengths), and a Nelder-Mead search on log-parameters minimises the squared log errors of the
bench's own summary figures (output throughput, mean/median/p99 TTFT, mean TPOT, median/p99 ITL,
mean E2E). Pure numpy; the simulator is the model, so one fit covers closed and open loops alike.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvdoctor.errors import InputError
from kvdoctor.sim.contracts import StepExtras
from kvdoctor.sim.frontend import SWITCHES, FrontEnd

if TYPE_CHECKING:  # pragma: no cover - annotations only
    from kvdoctor.engine.defaults import ResolvedEngine
    from kvdoctor.facts import GpuSpec, ModelShape
    from kvdoctor.sim.contracts import StepTimeModel
    from kvdoctor.sim.scheduler import SchedConfig
    from kvdoctor.sim.steptime import RooflineStepTime

SCHEMA = "kvdoctor.calibration/1"
LINEAR_KEYS = ("base_s", "per_token_s", "per_kv_token_s", "per_pair_s", "per_request_s", "per_token_sq_s",
               "per_cross_pair_s")
# the engine's state, not its batch (``sim.contracts.StepExtras``): kept beside LINEAR_KEYS in a calibration's "linear"
EXTRA_KEYS = ("wake_s", "new_shape_s", "new_shape_per_token_s")
FE_KEYS = ("per_request_s", "per_prompt_token_s", "per_output_token_s", "latency_s", "per_finish_s", "parse_s")
# the bench figures a fit matches, with the simulated counterpart computed by ``sim_figures``
FIGURES = ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
           "median_itl_ms", "p99_itl_ms", "mean_e2el_ms")
HEADLINE = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")
HEADLINE_LABELS = {"output_throughput": "output throughput", "mean_ttft_ms": "mean TTFT", "mean_tpot_ms": "mean TPOT"}
# what the fit matches: the means the operator plans with. Medians and tails of ITL are reported,
# not fitted: on a shared host they carry interference spikes (a run's p99 ITL 8x its median) that
# no step-time model should chase
FIT_FIGURES = ("output_throughput", "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "mean_e2el_ms")
# per-request spreads (from --save-detailed arrays) are reported beside the fit, not fitted: on a
# shared host they carry the host's interference, not the deployment's
_QS = ((10, "q10"), (25, "q25"), (75, "q75"), (90, "q90"))
# ... except (``fit(spread=True)``) for a run whose batch size varies (an open loop at a finite rate):
# there the quartiles of per-request TPOT are the only figures that see how the step grows with the
# batch (a request that lived through a crowded stretch has a longer TPOT; the simulation replays the
# same send times, so it sees the same crowding), and the TTFT quartiles how the first token grows
# with the prompt and the queue. Means alone see one sum ``base + n * per_request``
# The TTFT quartiles mix the queue with the prompt; the mean TTFT of the requests with the shorter and the longer half
# of the prompts (``_by_prompt``: where the run's prompts span at least 1.5x) is what tells a prompt token's cost from
# the front end's per-request cost in one run (noise-free, the quartiles alone left a closed loop of 256-token
# prompts 32 % short on TTFT: tests/unit/test_sim_calibration_fit.py)
SPREAD_FIGURES = ("ttft_q25_ms", "ttft_q75_ms", "tpot_q25_ms", "tpot_q75_ms", "ttft_short_ms", "ttft_long_ms")


def _spread(ttft_ms, tpot_ms) -> dict[str, float]:
    """Quantiles of per-request TTFT and TPOT (ms) — the same for a bench's arrays and a simulation."""
    import numpy as np

    out = {}
    t = np.asarray([x for x in ttft_ms if x == x], dtype=float)
    if len(t) >= 4:
        for q, name in _QS:
            out[f"ttft_{name}_ms"] = float(np.percentile(t, q))
    p = np.asarray([x for x in tpot_ms if x == x], dtype=float)
    if len(p) >= 4:
        for q, name in ((25, "q25"), (75, "q75")):
            out[f"tpot_{name}_ms"] = float(np.percentile(p, q))
    return out


def linear_step(terms: dict[str, float], k: float = 1.0):
    """The ``LinearStepTime`` of a calibration's (or a measurement's) linear terms, each times ``k`` (a host stretch);
    a term absent is 0."""
    from kvdoctor.sim.steptime import LinearStepTime

    return LinearStepTime(**{n: k * float(terms.get(n, 0.0)) for n in LINEAR_KEYS})


class CalibratedStepTime:
    """``scale * base.step(...) + linear.step(...)``; ``decode_line`` likewise (both are linear in kv)."""

    def __init__(self, base, scale: float, linear):
        self.base = base
        self.scale = scale if base is not None else 0.0
        self.linear = linear

    def step(self, tokens: int, sampled: int, kv_decode: int, prefill_pairs: float, num_reqs: int,
             cross_pairs: float = 0.0) -> float:
        t = self.linear.step(tokens, sampled, kv_decode, prefill_pairs, num_reqs, cross_pairs)
        if self.base is not None:
            t += self.scale * self.base.step(tokens, sampled, kv_decode, prefill_pairs, num_reqs)
        return t

    def decode_line(self, n: int) -> tuple[float, float]:
        a, b = self.linear.decode_line(n)
        if self.base is not None:
            a0, b0 = self.base.decode_line(n)
            a, b = a + self.scale * a0, b + self.scale * b0
        return a, b

    def decode_cpu_line(self, n: int) -> tuple[float, float] | None:
        """``scale * max(g, c) + lin = max(scale * g + lin, scale * c + lin)``: the base's CPU line, scaled,
        plus the linear part (None when the base has none)."""
        c = self.base.decode_cpu_line(n) if self.base is not None else None
        if c is None:
            return None
        a, b = self.linear.decode_line(n)
        return a + self.scale * c[0], b + self.scale * c[1]

    def describe(self) -> dict:
        d = {"coefficients": "calibration", "scale": self.scale,
             "linear": {k: vars(self.linear)[k] for k in LINEAR_KEYS}}  # LinearStepTime's own fields
        if self.base is not None:
            d["roofline"] = self.base.describe()
        return d


@dataclass
class Calibration:
    kind: str  # "linear" | "roofline+linear"
    scale: float
    linear: dict[str, float]
    frontend: FrontEnd | None
    deployment: dict[str, Any] = field(default_factory=dict)
    fit: dict[str, Any] = field(default_factory=dict)

    def step_model(self, shape: ModelShape | None = None, gpu: GpuSpec | None = None,
                   resolved: ResolvedEngine | None = None) -> StepTimeModel:
        from kvdoctor.sim.steptime import from_deployment

        lin = linear_step(self.linear)
        base = None
        if self.kind == "roofline+linear":
            if shape is None or gpu is None or resolved is None:
                raise InputError("this calibration scales the roofline model: it needs the model, GPU and configuration")
            base = from_deployment(shape, gpu, resolved)
        return CalibratedStepTime(base, self.scale, lin)

    def step_extras(self) -> StepExtras:
        """The engine-state terms this calibration measured (a server that has run no size yet: a prediction does not
        know which sizes the deployment ran before)."""
        return StepExtras(**{k: max(0.0, float(self.linear.get(k, 0.0))) for k in EXTRA_KEYS})

    def uncertainty(self) -> dict[str, float | None]:
        """Median absolute held-out error per headline figure (None: no held-out run)."""
        return dict(self.fit.get("held_out_median_abs_error") or {})

    def to_json(self) -> dict:
        return {"schema_version": SCHEMA, "kind": self.kind, "scale": self.scale, "linear": self.linear,
                "frontend": self.frontend.as_dict() if self.frontend else None,
                "deployment": self.deployment, "fit": self.fit}


def load_calibration(path: str | Path) -> Calibration:
    from kvdoctor.safeio import read_json_file

    p = Path(path)
    doc = read_json_file(p, missing=f"calibration file not found: {p}",
                         unreadable=lambda exc: f"{p}: not a calibration file ({type(exc).__name__})")
    if not isinstance(doc, dict) or doc.get("schema_version") != SCHEMA:
        raise InputError(f"{p}: not a kvdoctor calibration file (schema_version {SCHEMA} expected)")
    try:
        kind = str(doc["kind"])
        if kind not in ("linear", "roofline+linear"):
            raise ValueError(kind)
        lin = {k: float(doc["linear"].get(k, 0.0)) for k in LINEAR_KEYS + EXTRA_KEYS}
        fe = doc.get("frontend")
        flags = {k: fe[k] for k in SWITCHES if k in fe} if fe else {}
        if any(not isinstance(v, bool) for v in flags.values()):
            raise ValueError("a front-end switch must be true or false")
        frontend = FrontEnd(**{k: float(fe.get(k, 0.0)) for k in FE_KEYS}, **flags) if fe else None
        scale = float(doc.get("scale", 1.0))
        fit = dict(doc.get("fit") or {})
        _check_fit_read_back(fit)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise InputError(f"{p}: malformed calibration file") from None
    if any(v < 0 or not math.isfinite(v) for v in (*lin.values(), scale)):
        raise InputError(f"{p}: calibration coefficients must be finite and non-negative")
    return Calibration(kind=kind, scale=scale, linear=lin, frontend=frontend,
                       deployment=dict(doc.get("deployment") or {}), fit=fit)


def _check_fit_read_back(fit: dict) -> None:
    """ValueError unless what predictions read back from a file's ``fit`` has its shape: the held-out error (numbers
    or null per figure) and the calibrated range (two finite edges, low to high, per quantity). Files written before
    either was recorded have neither key and pass."""
    err = fit.get("held_out_median_abs_error")
    if err is not None and not all(v is None or isinstance(v, (int, float)) for v in dict(err).values()):
        raise ValueError("held_out_median_abs_error")
    rng = fit.get("calibrated_range")
    if rng is None:
        return
    for key in ("prompt_tokens", "running_requests", "step_tokens"):
        if key == "step_tokens" and key not in rng:
            continue  # written before the step's size was recorded
        lo, hi = (float(x) for x in rng[key])
        if not (math.isfinite(lo) and math.isfinite(hi) and 0 <= lo <= hi):
            raise ValueError(key)


# ---- bench runs ----------------------------------------------------------------------------------

@dataclass
class BenchRun:
    """One `vllm bench serve` result as the simulator replays it."""

    name: str
    figures: dict[str, float]  # the bench's own summary figures (ms / tok/s)
    prompt: list[int]
    output: list[int]
    send: list[float] | None  # per-request send times (s from start) when saved, else None
    request_rate: float
    burstiness: float
    max_concurrency: int | None
    seed: int = 0
    cfg: SchedConfig | None = None  # of this run when it differs from the setup's (another --max-num-seqs ...)
    # seconds from the bench's start to its first send: the bench's duration (the denominator of its output
    # throughput) starts before its first request's own gamma gap; the simulated workload starts at that send
    lead_s: float = 0.0
    # how much the host stretched the server's time during this run ((cpu + runqueue wait) / cpu of its
    # threads, kvdoctor.testbed.series.host_stretch); 1.0 = not measured / a dedicated host. Simulated
    # step and front-end times are multiplied by it: a calibration then holds the engine's own times
    host_stretch: float = 1.0
    # tokens of each request's prompt (in the order of ``prompt``: the bench's request i) already in the server's
    # prefix cache when the run started: earlier runs on the same server sent the same prompt heads, or the bench's
    # untimed test request sent request 0 (``warm_prefixes``); None = a cold cache. The simulator serves them as
    # cached, evictable blocks (sim.workload.Workload.warm_prefix), so only with prefix caching on
    warm_prefix: list[int] | None = None
    # from the result file: when the bench finished (``date``, "YYYYmmdd-HHMMSS") and the model it asked for; used
    # to check the order and the one-server claim of --same-server, never to simulate
    date: str | None = None
    model_id: str | None = None
    # ``vllm bench serve --ramp-up-strategy linear|exponential --ramp-up-start-rps A --ramp-up-end-rps B``: the rate
    # rises request by request from A to B (the result JSON keeps all three); None = a fixed --request-rate
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: float | None = None
    ramp_up_end_rps: float | None = None
    # per request (bench order): when each of its tokens reached the client, seconds from the first send
    # (``--save-detailed``: start_times + ttfts + itls); None = not saved. ``token_steps`` rebuilds the engine's steps
    token_times: list[list[float]] | None = None
    # the bench's own speculative-decoding figure (``spec_decode_acceptance_length``, "Acceptance length:"): tokens
    # per drafting step; None = the server did not draft (or the bench did not say). Not simulated: a note says so
    spec_acceptance_length: float | None = None
    # the step sizes (tokens) the server had already run when this run started (``LinearStepTime.new_shape_s``: a size
    # run before costs no new primitive); None = none known. Read off the server's own log (``step_sizes_before``)
    warm_shapes: frozenset[int] | None = None
    # what the reader said of the file this run came from (a GuideLLM CSV's rows it could not read): shown as notes
    read_notes: tuple[str, ...] = ()
    # "throughput" / "latency": an offline `vllm bench` run (LLM class, no API server): simulated without the front
    # end, every request sent at t=0, on the offline usage context's engine (``cfg``, set by the caller)
    offline: str | None = None

    def __post_init__(self):
        # Invariant: a warm prefix is a head of each request's own prompt, one entry per request
        if self.warm_prefix is not None:
            if len(self.warm_prefix) != len(self.prompt):
                raise InputError(f"{self.name}: warm_prefix has {len(self.warm_prefix)} entries, "
                                 f"the run has {len(self.prompt)} requests")
            if any(not 0 <= w <= p for w, p in zip(self.warm_prefix, self.prompt)):
                raise InputError(f"{self.name}: a warm prefix must lie between 0 and its request's prompt length")

    def workload(self):
        from kvdoctor.sim.workload import Workload, bench_arrivals

        n = len(self.prompt)
        if self.send is not None and self.max_concurrency is None:
            arrival = list(self.send)
        else:
            # closed loop: the saved start times already include the semaphore wait; the simulator
            # recreates the wait itself from the bench's own arrival process (its ramp-up, if any)
            arrival = bench_arrivals(n, self.request_rate, self.burstiness, self.seed, self.ramp_up_strategy,
                                     self.ramp_up_start_rps, self.ramp_up_end_rps)
        order = sorted(range(n), key=arrival.__getitem__)
        warm = None if self.warm_prefix is None else [self.warm_prefix[i] for i in order]
        return Workload(arrival=[arrival[i] - arrival[order[0]] for i in order], prompt=[self.prompt[i] for i in order],
                        output=[self.output[i] for i in order], max_concurrency=self.max_concurrency,
                        name=self.name, source=self.name, warm_prefix=warm, offline=self.offline)


def _num(x, default=None):
    try:
        v = float(x)
    except (TypeError, ValueError):
        return default
    return v if math.isfinite(v) else (math.inf if v == math.inf else default)


def _by_prompt(ttft_ms, prompt) -> dict[str, float]:
    """Mean TTFT (ms) of the requests whose prompt is at most the median length and of those above it — the same for
    a bench's arrays and a simulation (pairs with a NaN TTFT are left out). Only where the prompts span at least
    1.5x; otherwise {}."""
    import numpy as np

    t = np.asarray(ttft_ms, dtype=float)
    p = np.asarray(prompt, dtype=float)
    ok = ~np.isnan(t)
    t, p = t[ok], p[ok]
    if len(t) < 8 or p.min() <= 0 or p.max() < 1.5 * p.min():
        return {}
    short = p <= np.median(p)
    if short.all() or not short.any():
        return {}
    return {"ttft_short_ms": float(t[short].mean()), "ttft_long_ms": float(t[~short].mean())}


MAX_BENCH_REQUESTS = 10_000_000  # requests in one saved result (a long GuideLLM run has tens of thousands)
MAX_BENCH_LENGTH = 100_000_000  # tokens in one request's prompt or output


def _count(doc: dict, key: str, name: str) -> int:
    """A request count of the result (0 when absent); a value no bench writes is one line, not a traceback."""
    v = _num(doc.get(key), 0.0)
    if v is None or not 0 <= v <= MAX_BENCH_REQUESTS:
        raise InputError(f"{name}: {key}={doc.get(key)!r} is not a request count")
    return int(v)


def _length(x: object, name: str, key: str) -> int:
    v = _num(x)
    if v is None or not 0 <= v <= MAX_BENCH_LENGTH:
        raise InputError(f"{name}: {key} holds {x!r}, not a token count")
    return int(round(v))


def bench_run_from_json(doc: dict, name: str, special_tokens: int = 1, seed: int = 0) -> BenchRun:
    """A saved ``--save-result`` JSON (``--save-detailed`` adds per-request lengths and starts).
    The bench counts prompt tokens without the special tokens the server's tokenizer adds (a
    Llama-style BOS: 1; Qwen's, or the test bed's tiny model: 0): they are added back. ``seed`` is
    the bench's ``--seed`` (the JSON does not keep it): it fixes the send schedule of a closed loop
    with a finite ``--request-rate``."""
    figs = {k: float(doc[k]) for k in FIGURES if _num(doc.get(k)) is not None}
    if "output_throughput" not in figs:
        raise InputError(f"{name}: not a vllm bench serve result (no output_throughput)")
    completed = _count(doc, "completed", name)
    failed = _count(doc, "failed", name)
    if not completed and failed:  # its figures are all 0.0: a run that measured nothing, not a fast deployment
        raise InputError(f"{name}: every request failed ({failed} failed, 0 completed): nothing measured to fit on")
    rate = doc.get("request_rate")
    rate = math.inf if rate in (None, "inf", "Infinity") or _num(rate) in (None, math.inf) else float(rate)
    if not rate > 0:
        raise InputError(f"{name}: request_rate {rate:g} is not a rate (the bench's is positive or inf)")
    burst = _num(doc.get("burstiness"), 1.0) or 1.0
    if not 0 < burst < math.inf:
        raise InputError(f"{name}: burstiness {burst:g} is not the bench's (a positive number)")
    mc = _count(doc, "max_concurrency", name) or None
    inl, outl = doc.get("input_lens"), doc.get("output_lens")
    if isinstance(inl, list) and isinstance(outl, list) and len(inl) == len(outl) and inl:
        prompt = [_length(x, name, "input_lens") + special_tokens for x in inl]
        output = [max(1, _length(x, name, "output_lens")) for x in outl]
    else:
        n = completed or _count(doc, "num_prompts", name)
        if not n:
            raise InputError(f"{name}: the result has neither per-request lengths nor a request count")
        ti, to = _num(doc.get("total_input_tokens")), _num(doc.get("total_output_tokens"))
        if not ti or not to or not (0 < ti < math.inf and 0 < to < math.inf):
            raise InputError(f"{name}: the result has no token totals to rebuild its lengths from")
        prompt = [_length(ti / n, name, "total_input_tokens / requests") + special_tokens] * n
        output = [max(1, _length(to / n, name, "total_output_tokens / requests"))] * n
    ttfts, lats = doc.get("ttfts"), doc.get("latencies")
    if isinstance(ttfts, list) and isinstance(lats, list) and len(ttfts) == len(lats) == len(output):
        tt = [float(x) * 1e3 for x in ttfts if _num(x) is not None]
        tp = [(float(e) - float(t)) * 1e3 / (o - 1) for t, e, o in zip(ttfts, lats, output)
              if o > 1 and _num(t) is not None and _num(e) is not None]
        figs.update(_spread(tt, tp))
        figs.update(_by_prompt([float(x) * 1e3 if _num(x) is not None else math.nan for x in ttfts], prompt))
    send = None
    lead = 0.0
    ramp = (None, None, None)
    if doc.get("ramp_up_strategy") is not None:  # the bench saves the three with --ramp-up-strategy
        from kvdoctor.sim.workload import check_ramp_up

        ramp = (str(doc["ramp_up_strategy"]), _num(doc.get("ramp_up_start_rps")), _num(doc.get("ramp_up_end_rps")))
        try:
            check_ramp_up(*ramp, rate)
        except InputError as exc:
            raise InputError(f"{name}: {exc}") from None
    if not math.isinf(rate) or ramp[0]:  # the first request's own gap, as the bench draws it with --seed
        from kvdoctor.sim.workload import bench_arrivals

        lead = bench_arrivals(len(prompt), rate, burst, seed, *ramp)[0]
    st = doc.get("start_times")
    if isinstance(st, list) and len(st) == len(prompt) and all(_num(x) is not None for x in st):
        t0 = min(float(x) for x in st)
        send = [float(x) - t0 for x in st]
        dur = _num(doc.get("duration"))
        if dur and isinstance(lats, list) and len(lats) == len(st) and all(_num(x) is not None for x in lats):
            # measured: the bench's duration minus its first send -> last completion span
            lead = max(0.0, dur - (max(float(a) + float(b) for a, b in zip(st, lats)) - t0))
    date = doc.get("date") if isinstance(doc.get("date"), str) else None
    model_id = doc.get("model_id") if isinstance(doc.get("model_id"), str) else None
    spec = _num(doc.get("spec_decode_acceptance_length"))
    return BenchRun(name=name, figures=figs, prompt=prompt, output=output, send=send, request_rate=rate,
                    spec_acceptance_length=spec if spec and math.isfinite(spec) else None,
                    burstiness=burst, max_concurrency=mc, seed=seed, lead_s=lead, date=date, model_id=model_id,
                    ramp_up_strategy=ramp[0], ramp_up_start_rps=ramp[1], ramp_up_end_rps=ramp[2],
                    token_times=_token_times(send, ttfts, doc.get("itls")))


def _token_times(send, ttfts, itls) -> list[list[float]] | None:
    """Each request's token arrival times (s from the first send) from the bench's per-request arrays, or None when
    any is missing or malformed (a failed request's empty arrays are kept empty)."""
    if send is None or not isinstance(ttfts, list) or not isinstance(itls, list) or len(itls) != len(send) \
            or len(ttfts) != len(send):
        return None
    out: list[list[float]] = []
    for s, t, gaps in zip(send, ttfts, itls):
        if not isinstance(gaps, list) or _num(t) is None or not float(t) > 0:
            out.append([])
            continue
        x = s + float(t)
        times = [x]
        for g in gaps:
            v = _num(g)
            if v is None or v < 0:
                return None
            x += v
            times.append(x)
        out.append(times)
    return out


# ---- the engine's steps rebuilt from the client's token times ----------------------------------------

@dataclass(frozen=True)
class TokenStep:
    """One engine step as the client saw it: the tokens that reached it together (within ``threshold``) after the
    previous such group. ``duration_s`` is the time since the previous group; ``prefills`` requests got their first
    token (their whole prompt counted in ``tokens``), ``decodes`` their next one (context ``kv_decode``)."""

    duration_s: float
    num_reqs: int
    tokens: int
    kv_decode: int
    prefills: int


def token_steps(run: BenchRun, budget: int | None = None) -> tuple[list[TokenStep], dict]:
    """The engine's steps rebuilt from the bench's per-token times (``--save-detailed``): every running request gets
    one token per step, so the tokens that reach the client together are one step's outputs, and the time between
    two groups is one step. Grouping: arrival gaps above ``threshold`` (a quarter of the run's median inter-token
    gap, within 0.3-3 ms) start a new group, and so does a request's second token (one token per request per step).

    Kept only where the duration is one step of known content: the group has a decode (a running request kept the
    engine busy since the previous group, so no idle time is inside), and no prefill whose request was sent after
    the previous group (its step may have started later) or whose prompt plus the step's decodes exceed ``budget``
    (--max-num-batched-tokens: a chunked prompt's earlier chunks ran in steps the client cannot see). The API server
    may deliver one step's tokens a few ms apart on a busy host, which splits a step in two: the fit that uses these
    (``prefill_rate``) is robust to such outliers. Returns (steps, diagnostics)."""
    import numpy as np

    if not run.token_times or run.send is None:
        return [], {"reason": "no per-token times (vllm bench serve --save-detailed keeps them)"}
    ev = sorted((t, i, k) for i, times in enumerate(run.token_times) for k, t in enumerate(times))
    gaps = [b - a for times in run.token_times for a, b in zip(times, times[1:])]
    if len(ev) < 2 or not gaps:
        return [], {"reason": "too few tokens"}
    thr = min(3e-3, max(3e-4, 0.25 * float(np.median(gaps))))
    groups: list[list[tuple[float, int, int]]] = [[ev[0]]]
    seen = {ev[0][1]}
    for e in ev[1:]:
        if e[0] - groups[-1][-1][0] > thr or e[1] in seen:
            groups.append([e])
            seen = {e[1]}
        else:
            groups[-1].append(e)
            seen.add(e[1])
    steps: list[TokenStep] = []
    skipped = 0
    for prev, g in zip(groups, groups[1:]):
        t_prev = prev[0][0]
        pre = [i for _, i, k in g if k == 0]
        dec = [(i, k) for _, i, k in g if k > 0]
        tokens = sum(run.prompt[i] - (run.warm_prefix[i] if run.warm_prefix else 0) for i in pre) + len(dec)
        if not dec or any(run.send[i] >= t_prev for i in pre) or (budget and tokens > budget):
            skipped += 1
            continue
        steps.append(TokenStep(duration_s=g[0][0] - t_prev, num_reqs=len(pre) + len(dec), tokens=tokens,
                               kv_decode=sum(run.prompt[i] + k for i, k in dec), prefills=len(pre)))
    return steps, {"groups": len(groups), "steps": len(steps), "skipped": skipped, "threshold_ms": thr * 1e3,
                   "prefill_steps": sum(1 for s in steps if s.prefills)}


# the rebuilt steps' regression columns, in order (prefill_rate): 1, requests, tokens, decode context, tokens squared
_STEP_TERMS = ("base_s", "per_request_s", "per_token_s", "per_kv_token_s", "per_token_sq_s")


def prefill_rate(steps: list[TokenStep], square: bool = False) -> dict | None:
    """A prompt token's cost from rebuilt steps: least squares of each step's duration on (1, requests, tokens,
    decode context), refitted without the steps more than 5 robust standard deviations off (host interruptions,
    split steps), terms that come out negative dropped. Only the per-token cost is used by ``calibrate``: the other
    terms are collinear in most runs (a decode's context grows with the batch) and split steps bias them; the prefill
    steps stand far apart (a 200-token prompt adds tens of ms) and pin it. None: fewer than 5 prefill steps or 30
    steps, or no positive cost."""
    import numpy as np

    if len(steps) < 30 or sum(1 for s in steps if s.prefills) < 5:
        return None
    y = np.array([s.duration_s for s in steps])
    # ``square``: also the step's tokens squared (a token's cost rising with the step's size, column 4)
    names = _STEP_TERMS[:5 if square else 4]
    X = np.array([[1.0, s.num_reqs, s.tokens, s.kv_decode, float(s.tokens) ** 2][:len(names)] for s in steps],
                 dtype=float)
    def solve(keep, cols):
        # least squares on the kept steps, terms other than the per-token cost dropped while they come out negative
        while True:
            c, *_ = np.linalg.lstsq(X[keep][:, cols], y[keep], rcond=None)
            neg = [cols[j] for j, v in enumerate(c) if v < 0 and cols[j] != 2]
            if not neg:
                return cols, c
            cols = [x for x in cols if x not in neg]

    cols, keep = list(range(len(names))), np.ones(len(y), bool)
    for _ in range(4):
        cols, c = solve(keep, cols)
        fit_y = X[:, cols] @ c
        # relative residuals: a prefill step's time is several decode steps', and so is its spread
        res = (y - fit_y) / np.maximum(fit_y, 1e-6)
        mad = float(np.median(np.abs(res[keep] - np.median(res[keep]))))
        new_keep = np.abs(res) <= 5 * 1.4826 * mad + 1e-9
        if (new_keep == keep).all():
            break
        keep = new_keep
    cols, c = solve(keep, cols)
    coef = dict(zip(cols, c))
    per_token = float(coef.get(2, 0.0))
    if not per_token > 0:
        return None
    return {"per_token_s": per_token, "steps_used": int(keep.sum()), "steps": len(steps),
            "prefill_steps": int(sum(1 for s, k in zip(steps, keep) if k and s.prefills)),
            "all_terms": {name: float(coef.get(j, 0.0)) for j, name in enumerate(names)}}


def load_bench_runs(paths: list[str], special_tokens: int = 1, seed: int = 0) -> list[BenchRun]:
    """Each file: a ``--save-result`` JSON, or what ``vllm bench serve`` printed (a terminal capture, a ticket's
    paste): every ``Serving Benchmark Result`` block in it is one run, named ``FILE`` or ``FILE#k`` when it holds
    several. A printed block has the JSON's figures and totals but no per-request arrays (lengths are rebuilt
    from the totals, as for a JSON saved without --save-detailed)."""
    from kvdoctor.evidence.bench import client_results, decode_capture, json_documents, looks_like_bench_json
    from kvdoctor.safeio import read_document

    runs = []
    for p in paths:
        if not Path(p).exists():
            raise InputError(f"bench result not found: {p}")
        raw = read_document(p, "bench result")
        text = decode_capture(raw)
        if text.lstrip()[:1] in ("{", "["):
            # one result, a list of them, or one per line (--append-result)
            try:
                all_docs = json_documents(text)
            except InputError as exc:
                raise InputError(f"{p}: {exc}") from None
            rows = client_results(text, p, all_docs)
            if rows:  # a GuideLLM report or a GenAI-Perf export
                runs += _client_runs(rows, p, special_tokens, seed)
                continue
            docs = [d for d in all_docs if looks_like_bench_json(d)
                    or (isinstance(d, dict) and ("completed" in d or "output_throughput" in d))]
            from kvdoctor.evidence.offline import looks_like_offline_json

            tool = next((looks_like_offline_json(d) for d in all_docs if looks_like_offline_json(d)), None)
            if not docs and tool:
                raise InputError(f"{p}: a `vllm bench {tool} --output-json` file keeps no lengths or command: give "
                                 "what the bench printed, with its command above it")
            if not docs:
                raise InputError(f"{p}: not a vllm bench serve JSON result (--save-result): no object with "
                                 "completed / mean_ttft_ms")
            for k, doc in enumerate(docs, 1):
                name = Path(p).name if len(docs) == 1 else f"{Path(p).name}#{k}"
                runs.append(bench_run_from_json(doc, name, special_tokens=special_tokens, seed=seed))
            continue
        runs += _printed_runs(text, p, special_tokens, seed)
    if not runs:
        raise InputError("no bench result given")
    return runs


def offline_runs(text: str, p: str, special_tokens: int = 1) -> list[BenchRun]:
    """Each `vllm bench throughput` / `vllm bench latency` result printed in ``text`` as a run: its workload from the
    command (or Namespace) printed above it (``sim.benchline.offline_workload``; the lengths its own totals show),
    its figure the bench's output throughput (throughput) or its batch's mean latency (latency, as mean E2E)."""
    from kvdoctor.evidence.offline import parse_offline_text
    from kvdoctor.sim.benchline import offline_workload
    from kvdoctor.sim.workload import WorkloadSpec, build_workload

    found = parse_offline_text(text, p)
    out = []
    for k, r in enumerate(found, 1):
        name = Path(p).name if len(found) == 1 else f"{Path(p).name}#{k}"
        if not r.command:
            raise InputError(f"{name}: a `vllm bench {r.tool}` result without its command or Namespace(...) above "
                             "it: its lengths are unknown (paste the command with the output)")
        wl, _ = offline_workload(r.tool, r.command, total_prompt_tokens=r.fields.get("total_prompt_tokens"))
        wl.pop("request_rate")
        tool = wl.pop("offline")
        spec = WorkloadSpec(**wl, offline=tool, special_tokens=special_tokens)
        w = build_workload(spec)
        f = r.fields
        if tool == "latency":
            # one batch, sent together, every request exactly its length: its output throughput is the batch's
            # tokens over the latency (an identity, the same quantity the simulation's throughput is)
            figs = {"mean_e2el_ms": 1000.0 * f["avg_latency"], "output_throughput": sum(w.output) / f["avg_latency"]}
        elif "output_tokens_per_second" in f:
            figs = {"output_throughput": f["output_tokens_per_second"]}
        else:  # the older line prints all tokens/s: its output share from the workload's own lengths
            figs = {"output_throughput": f["tokens_per_second"] * sum(w.output) / (sum(w.prompt) + sum(w.output))}
        out.append(BenchRun(name=name, figures=figs, prompt=list(w.prompt), output=list(w.output),
                            send=[0.0] * len(w), request_rate=math.inf, burstiness=1.0, max_concurrency=None,
                            offline=tool))
    return out


def _printed_runs(text: str, p: str, special_tokens: int, seed: int) -> list[BenchRun]:
    from kvdoctor.evidence.bench import (client_results, embedded_json_results, looks_like_sweep_csv, parse_text,
                                         sweep_csv_results)
    from kvdoctor.evidence.offline import looks_like_offline_text

    if looks_like_sweep_csv(text[:65536]):  # vllm bench sweep serve's summary.csv: one run per row
        docs = sweep_csv_results(text, p)
        return [bench_run_from_json(d, f"{Path(p).name}#{k}", special_tokens=special_tokens, seed=seed)
                for k, d in enumerate(docs, 1)]
    blocks = [b for b in parse_text(text, p) if b.raw.get("format") == "block"]
    if not blocks:
        rows = client_results(text, p)  # GuideLLM's or GenAI-Perf's tables, GenAI-Perf's CSV
        if rows:
            return _client_runs(rows, p, special_tokens, seed)
        if looks_like_offline_text(text):
            return offline_runs(text, p, special_tokens)
    docs = [] if blocks else embedded_json_results(text)
    if docs:  # saved results pasted inside text (a report's inline code, another tool's record)
        return [bench_run_from_json(d, Path(p).name if len(docs) == 1 else f"{Path(p).name}#{k}",
                                    special_tokens=special_tokens, seed=seed) for k, d in enumerate(docs, 1)]
    if not blocks:
        from kvdoctor.evidence.guidellm import NEWER_TABLES, looks_like_newer_guidellm

        if looks_like_newer_guidellm(text):
            raise InputError(f"{p}: {NEWER_TABLES}")
        raise InputError(f"{p}: neither a vllm bench serve JSON result (--save-result) nor its printed "
                         "'Serving Benchmark Result' block (nor GuideLLM's 'Benchmarks Stats' table)")
    out = []
    for k, b in enumerate(blocks, 1):
        name = Path(p).name if len(blocks) == 1 else f"{Path(p).name}#{k}"
        # the bench prints 'Traffic request rate:' (and the concurrency) just before the block; without it an open
        # loop and a burst at t=0 are the same text, and the fit would silently take the wrong one
        if "request_rate" not in b.fields:
            raise InputError(f"{name}: the printed result does not say its request rate: keep the 'Traffic request "
                             "rate:' line that vllm bench serve prints before the block (or the bench command above it), "
                             "or give the --save-result JSON")
        out.append(bench_run_from_json(dict(b.fields), name, special_tokens=special_tokens, seed=seed))
    return out


def _client_runs(rows: list, p: str, special_tokens: int, seed: int) -> list[BenchRun]:
    """One run per result: a GuideLLM benchmark named by its strategy (FILE#synchronous), GenAI-Perf's FILE#k."""
    out = []
    for k, r in enumerate(rows, 1):
        strategy = r.raw.get("strategy")
        name = (f"{Path(p).name}#{strategy}" if strategy
                else Path(p).name if len(rows) == 1 else f"{Path(p).name}#{k}")
        if "request_rate" not in r.fields and r.raw.get("format") == "guidellm":
            raise InputError(f"{name}: {r.raw.get('send') or 'its send pattern is unknown'}: leave this benchmark "
                             "out (give the others' file without it) or use a bench result whose load kvdoctor knows")
        if "request_rate" not in r.fields:  # GenAI-Perf's table, printed without its command
            raise InputError(f"{name}: GenAI-Perf's table does not say its load: keep the genai-perf command (its "
                             "--concurrency or --request-rate) above it, or give profile_export_genai_perf.json")
        run = bench_run_from_json(dict(r.fields), name, special_tokens=special_tokens, seed=seed)
        if r.raw.get("skipped"):
            run.read_notes = (str(r.raw["skipped"]),)
        out.append(run)
    return out


# ---- a warm prefix cache: earlier runs on the same server, the bench's test request ---------------

RETOKENIZE_MARGIN = 8  # tokens not counted as shared where two runs cut one prompt stream at different lengths


def _fixed_lengths(r: BenchRun, margin: int) -> bool:
    """A run sent with fixed lengths (``--random-range-ratio 0``): its prompts differ by no more than the
    re-tokenisation jitter (vLLM 0.32 re-encodes the decoded text: 128 asked gives 128-130)."""
    return not r.prompt or max(r.prompt) - min(r.prompt) <= margin


def _same_stream(earlier: BenchRun, later: BenchRun, margin: int) -> bool:
    """Whether ``earlier``'s prompt i is a head of ``later``'s prompt i (same --seed assumed). The random dataset
    draws the lengths, then the per-request vocabulary offsets, from one ``default_rng(seed)``: a one-value length
    range draws nothing, so with fixed lengths the offsets are the same for any length and count. A ranged run's
    offsets come after draws that depend on its count and range, so it shares only with a run of the very same
    lengths (the same draws)."""
    if _fixed_lengths(earlier, margin) and _fixed_lengths(later, margin):
        return True
    return earlier.prompt == later.prompt


def _stream(r: BenchRun, margin: int) -> object:
    """The prompt stream a run's request i comes from (one --seed): every fixed-length run shares one; a ranged
    run shares only with runs of the very same lengths (``_same_stream``)."""
    return "fixed" if _fixed_lengths(r, margin) else tuple(r.prompt)


def warm_prefixes(runs: list[BenchRun], *, same_server: bool = False, test_request: bool = False,
                  retokenize_margin: int = RETOKENIZE_MARGIN, block_size: int | None = None,
                  num_blocks: int | None = None) -> list[BenchRun]:
    """The runs with the prefix cache each started on (``BenchRun.warm_prefix``), from the procedure alone.

    ``same_server``: the runs ran in this order, back to back, on one server with prefix caching on, with the
    random dataset and one ``--seed``: request i of a later run finds the head it shares with request i of every
    earlier run (``sim.workload.warm_prefix_after_runs``; only runs given here count). ``test_request``: the bench sent request 0 once, untimed, before the run (``benchmark_serving.py``
    and ``vllm bench serve`` before vllm#30975; later ones only with ``--ready-check-timeout-sec`` > 0 or
    ``--num-warmups``), so request 0 finds its whole prompt cached. Neither: the runs as given (cold).
    ``block_size`` and ``num_blocks`` (the server's KV pool): only what the pool still holds when the run starts
    counts (``sim.workload.cached_heads``: vLLM's least-recently-freed eviction over every request served before
    and the run's own earlier ones, output blocks and other streams included); without them the pool is taken to
    hold everything."""
    from dataclasses import replace

    from kvdoctor.sim.workload import cached_heads, warm_prefix_after_runs

    if not same_server and not test_request:
        return list(runs)
    out = []
    history: list[tuple[object, int, int, int]] = []  # every request the server served before the current run
    for k, r in enumerate(runs):
        prior = [q.prompt for q in runs[:k] if same_server and _same_stream(q, r, retokenize_margin)]
        warm = warm_prefix_after_runs(r.prompt, [], test_prompt=test_request, retokenize_margin=retokenize_margin,
                                      prior_prompts=prior)
        st = _stream(r, retokenize_margin)
        if not same_server:
            history = []  # other servers, or unknown: only the run's own test request
        if test_request and r.prompt:
            history.append((st, 0, r.prompt[0], r.output[0]))
        if block_size and num_blocks:
            held = cached_heads(history, r.prompt, r.output, st, block_size, num_blocks, retokenize_margin)
            warm = [min(w, h) for w, h in zip(warm, held)]
        out.append(replace(r, warm_prefix=warm))
        history += [(st, i, p, o) for i, (p, o) in enumerate(zip(r.prompt, r.output))]
    return out


def check_same_server(runs: list[BenchRun]) -> None:
    """What the result files can say against a --same-server claim: the bench's ``date`` (when it finished) must
    not go backwards in the given order, and the ``model_id`` must be one. The seed, the dataset and the server
    are not in the file: those stay the operator's word."""
    ids = {r.model_id for r in runs if r.model_id}
    if len(ids) > 1:
        raise InputError(f"--same-server: the results asked for different models ({', '.join(sorted(ids))}): "
                         "not one server")
    dated = [r for r in runs if r.date]
    for a, b in zip(dated, dated[1:]):
        if b.date < a.date:  # "YYYYmmdd-HHMMSS" sorts as text
            raise InputError(f"--same-server: {b.name} ({b.date}) finished before {a.name} ({a.date}); "
                             "give the results in the order they ran")


def same_server_hint(runs: list[BenchRun], window_s: float = 3 * 3600) -> list[str]:
    """A note when the files look like one back-to-back session that --same-server was not given for: two or more
    fixed-length runs of one ``model_id`` whose ``date`` stamps lie within ``window_s``. Only a hint: the files keep
    no seed or server (``vllm bench serve``'s default ``--seed`` is 0, so a sweep left at the default shares its
    prompts)."""
    from datetime import datetime

    if len(runs) < 2 or any(not r.date or not r.model_id for r in runs):
        return []
    if len({r.model_id for r in runs}) > 1 or not all(_fixed_lengths(r, RETOKENIZE_MARGIN) for r in runs):
        return []
    try:
        when = sorted((datetime.strptime(r.date, "%Y%m%d-%H%M%S"), r.name) for r in runs)
    except ValueError:
        return []
    span = (when[-1][0] - when[0][0]).total_seconds()
    if span > window_s:
        return []
    return [f"these results ran within {span / 60:.0f} minutes against one model ({', '.join(n for _, n in when)}, "
            "by their dates): if that was one server with prefix caching and one --seed (the bench's default is 0), "
            "later runs found earlier prompts cached — give --same-server with the files in that order"]


def cached_prompt_hint(runs: list[BenchRun], margin: float = 0.05) -> list[str]:
    """A note when the figures themselves point to a warm prefix cache that --same-server was not given for: of two
    runs with the same fixed prompt length, the one holding at least twice as many requests in flight (its
    --max-concurrency, or all its prompts at rate inf) has a mean TTFT more than ``margin`` below the lighter one's.
    On a cold engine more requests in flight only queue for the same prefills; a cached prompt skips its prefill.
    Batch 24's RTX 3090 sweep shows it (c4 56 ms below c1 61 ms) and its prompts were cached (docs/simulation.md,
    "Protocol 24"). Only a hint: noise on a light load can do the same."""
    def load(r: BenchRun) -> int | None:
        if r.max_concurrency:
            return int(r.max_concurrency)
        return len(r.prompt) if math.isinf(r.request_rate) and not r.ramp_up_strategy else None

    fixed = [r for r in runs if r.prompt and load(r) and r.figures.get("mean_ttft_ms")
             and _fixed_lengths(r, RETOKENIZE_MARGIN)]
    pairs = [(a, b) for a in fixed for b in fixed
             if abs(a.prompt[0] - b.prompt[0]) <= RETOKENIZE_MARGIN and load(b) >= 2 * load(a)
             and b.figures["mean_ttft_ms"] < (1 - margin) * a.figures["mean_ttft_ms"]]
    if not pairs:
        return []
    a, b = max(pairs, key=lambda ab: ab[0].figures["mean_ttft_ms"] / ab[1].figures["mean_ttft_ms"])
    return [f"{b.name} held {load(b)} requests in flight against {a.name}'s {load(a)}, yet its mean TTFT is lower "
            f"({b.figures['mean_ttft_ms']:.0f} against {a.figures['mean_ttft_ms']:.0f} ms): on a cold server more "
            "requests only queue for the same prefills, so its prompts were probably cached by an earlier run on the "
            "same server with the same --seed (the bench's default is 0); if so, give --same-server with the files "
            "in the order they ran"]


# ---- simulated figures, errors, fit --------------------------------------------------------------

def sim_figures(result, lead_s: float = 0.0, skip: int = 0) -> dict[str, float]:
    """The bench's summary figures computed on a simulated run (same definitions as
    ``benchmarks/serve.py``: TPOT per request excluding the first token, ITLs over all gaps; output
    throughput over the bench's duration, which starts ``lead_s`` before the first send).
    ``skip`` > 0 (a closed loop's steady slice, ``steady_slice``): the per-request figures count requests ``skip`` to
    n - ``skip`` only, and the throughput is the output of the requests that finished between the send of request
    ``skip`` and the last send, over that time: the loop's steady state, without its first wave and its drain."""
    import numpy as np

    fin = result.status == 2
    if skip:
        done = result.arrival_s + result.e2e_s  # NaN where not finished: never inside the window
        t_a, t_b = float(result.arrival_s[skip]), float(result.arrival_s[-1])
        counted = np.zeros(len(fin), dtype=bool)
        counted[skip:len(fin) - skip] = True
        in_window = fin & (done > t_a) & (done <= t_b)
        tput = float(result.output_tokens[in_window].sum()) / max(t_b - t_a, 1e-9)
        fin = fin & counted
    out = result.output_tokens[fin].astype(float)
    ttft = result.ttft_s[fin]
    e2e = result.e2e_s[fin]
    if not skip:
        tput = float(result.summary.output_tokens_per_s)
        if lead_s > 0 and result.summary.duration_s > 0:
            tput = float(out.sum()) / (result.summary.duration_s + lead_s)
    f: dict[str, float] = {"output_throughput": tput}
    if len(ttft):
        f["mean_ttft_ms"] = float(np.mean(ttft) * 1e3)
        f["median_ttft_ms"] = float(np.median(ttft) * 1e3)
        f["p99_ttft_ms"] = float(np.percentile(ttft, 99) * 1e3)
        f["mean_e2el_ms"] = float(np.mean(e2e) * 1e3)
        multi = out > 1
        if multi.any():
            tpot = (e2e[multi] - ttft[multi]) / (out[multi] - 1)
            f["mean_tpot_ms"] = float(np.mean(tpot) * 1e3)
            f.update(_spread(ttft * 1e3, tpot * 1e3))
        f.update(_by_prompt(ttft * 1e3, result.prompt_tokens[fin]))
    vals, w = result.histograms.get("itl", (None, None))
    if vals is not None and len(vals) and float(np.sum(w)) > 0:
        o = np.argsort(vals, kind="stable")
        cw = np.cumsum(w[o])
        for q, k in ((0.5, "median_itl_ms"), (0.99, "p99_itl_ms")):
            j = min(int(np.searchsorted(cw, q * cw[-1])), len(o) - 1)
            f[k] = float(vals[o][j] * 1e3)
    return f


def run_errors(measured: dict[str, float], predicted: dict[str, float], keys=FIGURES) -> dict[str, float]:
    """Relative error predicted/measured - 1 per figure both have (measured > 0)."""
    return {k: predicted[k] / measured[k] - 1.0 for k in keys
            if k in measured and k in predicted and measured[k] > 0 and predicted[k] > 0}


@dataclass
class Setup:
    """What stays fixed while fitting: the scheduler limits and (for roofline+linear) the roofline."""

    cfg: SchedConfig
    base: RooflineStepTime | None = None


def simulate_run(run: BenchRun, setup: Setup, cal: Calibration, detail: bool = False, on_step=None):
    from kvdoctor.sim.run import simulate

    k = run.host_stretch if run.host_stretch > 0 else 1.0
    lin = linear_step(cal.linear, k)
    model = CalibratedStepTime(setup.base, cal.scale * k, lin)
    base = cal.step_extras()
    extras = replace(base, wake_s=k * base.wake_s, new_shape_s=k * base.new_shape_s,
                     new_shape_per_token_s=k * base.new_shape_per_token_s, warm_shapes=run.warm_shapes or frozenset())
    fe = None if run.offline else cal.frontend  # an offline bench has no API server
    if fe is not None and k != 1.0:
        fe = replace(fe, **{n: k * v for n, v in fe.as_dict().items() if n in FE_KEYS})
    return simulate(run.workload(), run.cfg or setup.cfg, model, detail=detail, frontend=fe, on_step=on_step,
                    extras=extras)


# ---- a long closed loop is fitted on a steady slice ---------------------------------------------------------------
# Every fit iteration re-simulates the fitted runs: ~1 s per 20,000 requests, so GuideLLM's six-minute throughput run
# (a closed loop of 64, 20,353 requests) took 12 minutes to fit. A closed loop keeps its slots full from its first
# wave to its last send, so past the first wave it is stationary, and its whole-run figures are its steady state's
# (the start and the drain are a wave or two of hundreds). Such a run is fitted on its first ``STEADY_WAVES`` waves,
# counted without the first and the last wave (``sim_figures(skip=)``); the calibration's own errors, the fitted
# run's included, are still computed on whole runs, so the slice is checked every time it is used. An open loop is
# not sliced: past its capacity its queue grows with its length, so a slice would not be its average.
STEADY_WAVES = 32
STEADY_MIN_REQUESTS = 2000  # a slice never holds fewer (a closed loop of 1 with spread lengths needs many)
STEADY_SPEEDUP = 4  # ... and a run is sliced only when it is at least this many times longer than its slice


def steady_slice(run: BenchRun) -> tuple[BenchRun, int] | None:
    """(the run cut to its first waves, the requests not counted at each end), or None when ``run`` is fitted whole:
    not a closed loop at an unlimited rate, or not long enough for a slice to save much."""
    if not run.max_concurrency or run.ramp_up_strategy or math.isfinite(run.request_rate):
        return None
    c = int(run.max_concurrency)
    keep = max(STEADY_WAVES * c, STEADY_MIN_REQUESTS)
    if len(run.prompt) < STEADY_SPEEDUP * keep:
        return None

    def cut(xs):
        return None if xs is None else list(xs[:keep])

    return replace(run, prompt=cut(run.prompt), output=cut(run.output), send=cut(run.send),
                   warm_prefix=cut(run.warm_prefix), token_times=cut(run.token_times)), c


def steady_slices(runs: list[BenchRun]) -> dict[str, dict]:
    """What ``fit`` re-simulated of each sliced run (for ``Calibration.fit``)."""
    out = {}
    for r in runs:
        s = steady_slice(r)
        if s:
            out[r.name] = {"requests": len(r.prompt), "simulated": len(s[0].prompt), "not_counted_each_end": s[1]}
    return out


_PARAMS_LINEAR = ("base_s", "per_token_s", "per_request_s", "per_pair_s", "fe_request_s", "fe_output_token_s",
                  "fe_latency_s")
# Protocol 25's candidate R (scripts/calibrate_public_later.py): the per-request term's start scaled to the runs' batch
SHAPED_START = False
_PARAMS_ROOF = ("scale", "base_s", "per_request_s", "fe_request_s", "fe_output_token_s", "fe_latency_s")


def _unpack(names, x, kind, fixed: dict[str, float] | None = None,
            fe_flags: dict[str, bool] | None = None) -> Calibration:
    v = {**(fixed or {}), **{n: float(math.exp(xi)) for n, xi in zip(names, x)}}
    lin = {k: v.get(k, 0.0) for k in LINEAR_KEYS + EXTRA_KEYS}
    fe = FrontEnd(per_request_s=v.get("fe_request_s", 0.0), per_output_token_s=v.get("fe_output_token_s", 0.0),
                  latency_s=v.get("fe_latency_s", 0.0), per_finish_s=v.get("fe_finish_s", 0.0),
                  **(fe_flags or {}))
    return Calibration(kind=kind, scale=v.get("scale", 1.0), linear=lin, frontend=fe)


def _initial(runs: list[BenchRun], kind: str) -> dict[str, float]:
    """A starting point read off the runs themselves: the fastest median ITL is roughly one step
    of a small batch, the fastest TTFT one prefill of its prompt."""
    # in the engine's own time: a run the host stretched k-fold (BenchRun.host_stretch) ran k times slower,
    # and the starting point (which also anchors the weak pull of ``fit``) must not depend on that
    itl = min((r.figures.get("mean_tpot_ms") or r.figures.get("median_itl_ms") or 20.0) / r.host_stretch
              for r in runs) / 1e3
    ttft = min((r.figures.get("median_ttft_ms") or 50.0) / r.host_stretch for r in runs) / 1e3
    p = min(sum(r.prompt) / len(r.prompt) for r in runs)
    if kind == "linear":
        return {"fe_finish_s": 0.05 * ttft, "base_s": 0.8 * itl, "per_request_s": 0.03 * itl, "per_token_s": max(1e-7, 0.1 * ttft / p),
                "per_pair_s": 1e-9, "fe_request_s": 0.25 * ttft, "fe_output_token_s": 0.001 * itl,
                "fe_latency_s": 0.25 * ttft}
    # per_token_s (fitted only with prefill_term): a computed token's cost beyond the scaled roofline.
    # SHAPED_START (protocol 25): the roofline already grows with the batch, so the linear per-request term starts
    # at 1 % of a step at the largest batch the runs could hold, not 1 % per request. With 1 % per request a
    # saturated closed loop of 64 starts with 64 % of its step in that term; a run at one batch level cannot move
    # it back, and the weak pull keeps it there while the roofline is scaled down to fit (scale 0.24 on batch 24's
    # anchor, decode below the HBM floor at one request)
    batch = max((r.max_concurrency or len(r.prompt) for r in runs), default=1) if SHAPED_START else 1
    return {"fe_finish_s": 0.02 * ttft, "scale": 1.0, "base_s": 0.05 * itl, "per_request_s": 0.01 * itl / max(batch, 1),
            "fe_request_s": 0.1 * ttft, "fe_output_token_s": 0.01 * itl, "fe_latency_s": 0.1 * ttft,
            "per_token_s": max(1e-9, 0.1 * ttft / p)}


def _nelder_mead(f, x0, step=0.7, iters=300, tol=1e-5, on_iter=None):
    """Minimise ``f`` from ``x0``; ``on_iter()`` after each of at most ``iters`` iterations (a progress bar)."""
    import numpy as np

    n = len(x0)
    pts = [np.array(x0, dtype=float)]
    for i in range(n):
        p = np.array(x0, dtype=float)
        p[i] += step
        pts.append(p)
    vals = [f(p) for p in pts]
    for _ in range(iters):
        if on_iter is not None:
            on_iter()
        order = np.argsort(vals)
        pts = [pts[i] for i in order]
        vals = [vals[i] for i in order]
        if abs(vals[-1] - vals[0]) < tol * (abs(vals[0]) + 1e-12):
            break
        c = np.mean(pts[:-1], axis=0)
        xr = c + (c - pts[-1])
        fr = f(xr)
        if fr < vals[0]:
            xe = c + 2 * (c - pts[-1])
            fe = f(xe)
            pts[-1], vals[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < vals[-2]:
            pts[-1], vals[-1] = xr, fr
        else:
            xc = c + 0.5 * (pts[-1] - c)
            fc = f(xc)
            if fc < vals[-1]:
                pts[-1], vals[-1] = xc, fc
            else:
                for i in range(1, len(pts)):
                    pts[i] = pts[0] + 0.5 * (pts[i] - pts[0])
                    vals[i] = f(pts[i])
    j = int(np.argmin(vals))
    return pts[j], vals[j]


# ---- server stats logs -----------------------------------------------------------------------------

@dataclass
class StatsObs:
    """One stats-log interval of a busy engine: tokens/s it reported and the requests it ran."""

    running: float
    prompt_tps: float
    gen_tps: float


def load_stats_observations(paths: list[str]) -> list[StatsObs]:
    """Busy intervals from vLLM server logs (the periodic ``Avg prompt throughput ... Running: N``
    line, every era the evidence reader knows): intervals with running requests and generation."""
    from kvdoctor.evidence.load import load_evidence

    # read as diagnose reads them, streamed with bounded memory: every era, the CPU backend's "CPU KV cache usage"
    # and XPU's spelling included
    ev = load_evidence(list(paths))
    obs = []
    for seg in ev.segments:
        tl = seg.timeline
        if tl is None:
            continue
        for run, pr, gen in zip(tl.running, tl.prompt_tps, tl.gen_tps):
            if run == run and gen == gen and run >= 1 and gen > 0:
                obs.append(StatsObs(float(run), float(pr) if pr == pr else 0.0, float(gen)))
    if not obs:
        raise InputError(f"{', '.join(paths)}: no stats line with running requests and generation throughput")
    return obs


_SPEC_LINE = re.compile(rb"(?:SpecDecoding|Speculative) metrics:")
_SPEC_MAL = re.compile(rb"Mean acceptance length: ([0-9.]+)")


def _finite(text: bytes) -> float | None:
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def speculative_decoding_note(paths: list[str], num_speculative_tokens: int = 0,
                              bench_lengths: list[float] | None = None) -> str | None:
    """A note when the server ran speculative decoding (its log's ``SpecDecoding metrics`` lines, vLLM V1, or
    ``Speculative metrics``, V0; the bench results' own acceptance length, ``bench_lengths``; or the configuration's
    ``num_speculative_tokens``): the stats lines' generation
    throughput then counts accepted draft tokens, and kvdoctor's simulator yields one token per decode step, so the
    fitted decode is a time per generated token at the server's acceptance rate, not the engine's step."""
    from kvdoctor.errors import InputError
    from kvdoctor.evidence.logs.chunks import file_chunks, works
    from kvdoctor.evidence.logs.limits import CHUNK
    from kvdoctor.evidence.model import SkipReport

    lines, lengths = 0, []
    for path in paths:
        try:
            # C-speed scans of whole-line chunks (bounded memory; the lines are rare in logs of gigabytes; a file
            # truncated while it is read ends the scan, chunks.FileShrank)
            for _, work in works(file_chunks(path, CHUNK, SkipReport())):
                for hit in _SPEC_LINE.finditer(work or b""):
                    end = work.find(b"\n", hit.end())
                    line = work[hit.end(): end if end >= 0 else len(work)]
                    lines += 1
                    m = _SPEC_MAL.search(line)
                    value = _finite(m.group(1)) if m else None
                    if value is not None:  # a garbled number ("1.2.3") drops that value, not the file's rest
                        lengths.append(value)
        except (OSError, ValueError, InputError):  # unreadable: the log adds nothing
            continue
    bench_lengths = [x for x in (bench_lengths or []) if x]
    if not lines and not num_speculative_tokens and not bench_lengths:
        return None
    if lines:
        seen = (f"the log has {lines} speculative-decoding metrics line(s)"
                + (f", mean acceptance length {min(lengths):.2f}-{max(lengths):.2f}" if lengths else ""))
    elif bench_lengths:
        seen = (f"{len(bench_lengths)} bench result(s) report an acceptance length of "
                f"{min(bench_lengths):.2f}" + (f"-{max(bench_lengths):.2f}" if max(bench_lengths) > min(bench_lengths)
                                               else ""))
    else:
        seen = f"the configuration drafts {num_speculative_tokens} token(s) per step"
    return (f"speculative decoding: {seen}. kvdoctor does not model it (one token per decode step), so the fitted "
            "decode cost is a time per generated token at this acceptance rate; predictions hold only while the "
            "acceptance rate stays as it was")


@dataclass(frozen=True)
class IterObs:
    """One engine step from vLLM's per-iteration log (``vllm serve --enable-logging-iteration-details``,
    0.32+: ``Iteration(i): C context requests, T context tokens, G generation requests, g generation
    tokens, iteration elapsed time: E ms``). ``elapsed_s`` is the wait for the model runner's output
    (``EngineCore.step``: ``future.result()``), so the scheduler's planning and output processing
    around it are not in it. That wait is the forward pass only when the model runs in another process
    (the multiprocessing executor: a Worker). With the uni executor (the model inside EngineCore — e.g. a
    CPU server with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``) ``UniProcExecutor`` runs the forward inside
    ``execute_model`` before the timed block, so the log times only the sampling (``iteration_log_notes``)."""

    ctx_reqs: int
    ctx_tokens: int
    gen_reqs: int
    gen_tokens: int
    elapsed_s: float


_ITER_RE = None


def parse_iteration_line(line: str) -> IterObs | None:
    """An ``Iteration(...)`` line as an ``IterObs`` (None: not one; dummy data-parallel steps are skipped)."""
    global _ITER_RE
    if "Iteration(" not in line or "(dummy)" in line:
        return None
    if _ITER_RE is None:
        import re

        _ITER_RE = re.compile(r"Iteration\(\d+\): (\d+) context requests, (\d+) context tokens, (\d+) generation "
                              r"requests, (\d+) generation tokens, iteration elapsed time: ([\d.]+) ms")
    m = _ITER_RE.search(line)
    if m is None:
        return None
    c, t, g, gt = (int(x) for x in m.groups()[:4])
    e = float(m.group(5)) / 1e3
    if c + g <= 0 or not e > 0 or not math.isfinite(e):
        return None
    return IterObs(c, t, g, gt, e)


# a server log line stamped with its wall-clock time in front (a logging config whose format starts with
# "%(created).6f"; scripts/realvllm_arrival_probe.py), after the process prefix vLLM's output wrapper may add
_STAMP = re.compile(r"^(?:\(\w+ pid=\d+\) )?(\d{9,}\.\d+) ")


def stamped_lines(path: str | Path):
    """(wall-clock seconds, line) for each line of a server log that carries its time in front (``_STAMP``); a frozen
    session's cut log is gzipped. Streams the file."""
    import gzip

    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for line in f:
            m = _STAMP.search(line)
            if m is not None:
                yield float(m.group(1)), line


def run_window(result: dict, offset: float) -> tuple[float, float]:
    """A bench result's span (``--save-detailed``: its ``start_times`` to its last request's end, on the bench's
    ``time.perf_counter()`` clock) on the server log's wall clock (``offset``: time.time() - perf_counter() on that
    host), 50 ms wider at each end: the steps that served it."""
    st = [float(x) for x in result["start_times"]]
    end = max(s + float(lat) for s, lat in zip(st, result["latencies"]))
    return min(st) + offset - 0.05, end + offset + 0.05


def _stamped_events(path: str | Path):
    """(wall-clock time, ``IterObs`` or None for a hand-over ("Added request"), first step of its size) for each step
    and hand-over a stamped server log records, in order; a step is the first of its token count since the server
    started (``StepExtras.new_shape_s``)."""
    seen: set[int] = set()
    for t, line in stamped_lines(path):
        if (o := parse_iteration_line(line)) is not None:
            size = o.ctx_tokens + o.gen_tokens
            yield t, o, size not in seen
            seen.add(size)
        elif "Added request" in line:
            yield t, None, False


def _logged_steps(path: str | Path):
    """``_stamped_events``' steps."""
    return ((t, o, new) for t, o, new in _stamped_events(path) if o is not None)


def step_observations(path: str | Path, window: tuple[float, float] | None = None
                      ) -> list[tuple[float, int, int, int, int, bool]]:
    """The engine's step periods from a server log whose iteration lines carry their time: for each logged step with
    a request decoding (scheduled in the step before it too, so the engine did not idle between them), (seconds since
    the previous logged step, tokens scheduled, requests scheduled, prompt tokens, prompts, the first step of its
    size since the server started). ``window``: only steps logged in [start, end] (one run's share, ``run_window``;
    the sizes seen before it still count). The log's "iteration elapsed time" does not measure the step under the uni
    executor (``testbed.series.calibrate_series_v4``); the period between two steps' output lines does."""
    steps = list(_logged_steps(path))
    return [(t1 - t0, o.ctx_tokens + o.gen_tokens, o.ctx_reqs + o.gen_reqs, o.ctx_tokens, o.ctx_reqs, new)
            for (t0, _, _), (t1, o, new) in zip(steps, steps[1:])
            if o.gen_reqs >= 1 and (window is None or window[0] <= t0 and t1 <= window[1])]


def step_periods(path: str | Path, window: tuple[float, float] | None = None) -> list[tuple[float, int, int]]:
    """``step_observations`` as (seconds, tokens scheduled, requests scheduled)."""
    return [p[:3] for p in step_observations(path, window)]


def step_sizes_before(path: str | Path, t: float) -> frozenset[int]:
    """The step sizes (tokens) a stamped server log records before wall-clock time ``t``: what the engine had run
    when a bench run started there (``BenchRun.warm_shapes``)."""
    return frozenset(o.ctx_tokens + o.gen_tokens for tt, o, _ in _logged_steps(path) if tt < t)


def cross_pairs_logged(ctx_tokens: int, ctx_reqs: int) -> float:
    """The cross-prompt pairs (``LinearStepTime.per_cross_pair_s``) of a logged step: the log gives the step's prompt
    tokens and prompts, not each prompt's chunk, so they are taken equal (``T^2 (1 - 1/k)``, the most ``k`` chunks of
    ``T`` tokens can have)."""
    return float(ctx_tokens) ** 2 * (1.0 - 1.0 / ctx_reqs) if ctx_reqs > 1 else 0.0


def step_period_terms(periods: list[tuple], square: bool = True, cross: bool = False,
                      new_shape: bool = False) -> dict[str, float]:
    """Least squares of the step periods on a step, its tokens, its requests (and its tokens squared; or with
    ``cross`` its cross-prompt pairs, with ``new_shape`` whether it is the first of its size and that times its
    tokens: ``step_observations``' rows): the ``LinearStepTime`` terms they measure. InputError with fewer than 30
    periods."""
    import numpy as np

    if len(periods) < 30:
        raise InputError(f"{len(periods)} back-to-back engine steps with a time: at least 30 are needed")
    if (cross or new_shape) and any(len(p) < 6 for p in periods):
        raise InputError("the cross-prompt and new-size terms need step_observations' rows")
    sq = square and not (cross or new_shape)

    def row(p) -> list[float]:
        r = [1.0, p[1], p[2]]
        if sq:
            r.append(float(p[1]) * p[1])
        if cross:
            r.append(cross_pairs_logged(p[3], p[4]))
        if new_shape:
            r.append(float(p[5]) * p[1])  # proportional: a free intercept came out negative (-5 ms) in two sessions
        return r

    a = np.array([row(p) for p in periods])
    c, *_ = np.linalg.lstsq(a, np.array([p[0] for p in periods]), rcond=None)
    out = {"base_s": float(c[0]), "per_token_s": float(c[1]), "per_request_s": float(c[2]), "per_kv_token_s": 0.0,
           "per_token_sq_s": float(c[3]) if sq else 0.0}
    i = 3
    if cross:
        out["per_cross_pair_s"] = float(c[i])
        i += 1
    if new_shape:
        out["new_shape_per_token_s"] = float(c[i])
    return out


def logged_step_price(terms: dict[str, float], row: tuple) -> float:
    """A logged step's time under ``LinearStepTime`` terms; ``row`` as ``step_observations`` gives it (its first
    field, the measured time, is not read; prompt chunks taken equal: ``cross_pairs_logged``)."""
    _, tok, reqs, ctx_tokens, ctx_reqs, new = row
    lin = linear_step(terms)
    t = lin.step(tok, 0, 0, 0.0, reqs, cross_pairs_logged(ctx_tokens, ctx_reqs))  # the log gives no pairs or contexts
    if new:
        t += float(terms.get("new_shape_s", 0.0)) + float(terms.get("new_shape_per_token_s", 0.0)) * tok
    return t


def server_events(path: str | Path, offset: float = 0.0) -> tuple[list[float], list[tuple[float, int, int]]]:
    """From a stamped server log with ``--enable-log-requests``: the hand-overs' times ("Added request") and, per
    logged step, (time, prompts, decodes); times less ``offset`` (time.time() - perf_counter(): the bench's clock)."""
    added, steps = [], []
    for t, o, _ in _stamped_events(path):
        if o is None:
            added.append(t - offset)
        else:
            steps.append((t - offset, o.ctx_reqs, o.gen_reqs))
    return added, steps


def handover_split(result: dict, added: list[float], steps: list[tuple[float, int, int]]) -> list[dict]:
    """Per request of a bench result (``--save-detailed``; in send order), its TTFT split on the server's clock
    (``server_events`` on the bench's clock): ``front`` (send -> hand-over), ``engine`` (hand-over -> the first step
    with a prompt logged after it), ``out`` (-> the client's first token); ``i`` is its index in the result. The run's
    hand-overs are its first ``len(sends)`` after its first send, matched in send order: a load whose sends are
    milliseconds apart can hand them over out of order, and a request that waits for a free slot is prefilled in a
    later step than the first one after its hand-over, so ``engine`` and ``out`` hold for requests that did not."""
    sends = [float(s) for s in result["start_times"]]
    order = sorted(range(len(sends)), key=sends.__getitem__)
    mine = [a for a in added if a >= min(sends) - 0.001][:len(sends)]
    out = []
    for k, i in enumerate(order):
        a = mine[k] if k < len(mine) else float("nan")
        step = next((t for t, c, _ in steps if c > 0 and t >= a), float("nan"))
        first = sends[i] + float(result["ttfts"][i])
        before = [t for t, _, _ in steps if t < a]
        between = [t for t, _, _ in steps if a <= t < step]
        out.append({"i": i, "front": a - sends[i], "engine": step - a, "out": first - step,
                    "ttft": float(result["ttfts"][i]), "since_last_step": a - before[-1] if before else None,
                    "steps_between": len(between), "to_next_step": (between[0] if between else step) - a})
    return out


def wake_time(path: str | Path, terms: dict[str, float], window: tuple[float, float] | None = None) -> dict | None:
    """An idle engine's extra time on the step that starts it (``LinearStepTime.wake_s``), from a server log whose
    lines carry their time and that logs each hand-over (``--enable-log-requests``: "Added request"): for each
    logged step that decodes nothing and whose prompts were all handed over after the step before it was logged
    (the engine had nothing to run when they came), the time from the last hand-over to the step's line, less the
    busy step's price under ``terms`` (``step_period_terms``). The median, with the count; None when under 5 such
    steps."""
    import statistics

    resid = []
    last_step, added = None, []
    for t, o, new in _stamped_events(path):
        if o is None:
            added.append(t)
            continue
        if (o.gen_reqs == 0 and o.ctx_reqs >= 1 and last_step is not None and len(added) >= o.ctx_reqs
                and (window is None or window[0] <= t <= window[1])):
            row = (0.0, o.ctx_tokens + o.gen_tokens, o.ctx_reqs + o.gen_reqs, o.ctx_tokens, o.ctx_reqs, new)
            resid.append(t - added[-1] - logged_step_price(terms, row))
        last_step, added = t, []
    if len(resid) < 5:
        return None
    q = statistics.quantiles(resid, n=4)
    return {"wake_s": statistics.median(resid), "steps": len(resid), "q25_s": q[0], "q75_s": q[2]}


def load_iteration_observations(paths: list[str], spans: list[tuple[int, int]] | None = None) -> list[IterObs]:
    """Every engine step logged in ``paths`` (``spans``: per path, the byte range to read — one bench
    run's share of a server log that served several). Streams the file; other lines are skipped."""
    out: list[IterObs] = []
    for i, p in enumerate(paths):
        lo, hi = spans[i] if spans else (0, None)
        try:
            with open(p, "rb") as fh:
                fh.seek(lo)
                n = lo
                for raw in fh:
                    n += len(raw)
                    if hi is not None and n > hi:
                        break
                    o = parse_iteration_line(raw.decode("utf-8", "replace"))
                    if o is not None:
                        out.append(o)
        except OSError as exc:
            raise InputError(f"cannot read {p}: {exc.strerror or exc}") from None
    return out


def iteration_time(lin: dict[str, float], o: IterObs) -> float:
    """The linear step model's time for one logged step. The log gives totals, not each request's
    chunk, so prefill pairs are those of ``ctx_reqs`` equal fresh chunks (``T^2 / 2C``), and the
    decodes' context lengths are unknown (the linear fit leaves ``per_kv_token_s`` at 0 anyway)."""
    pairs = o.ctx_tokens * (o.ctx_tokens + o.ctx_reqs) / (2.0 * o.ctx_reqs) if o.ctx_reqs else 0.0
    tokens = o.ctx_tokens + o.gen_tokens
    return (lin.get("base_s", 0.0) + lin.get("per_token_s", 0.0) * tokens + lin.get("per_token_sq_s", 0.0) * tokens ** 2
            + lin.get("per_pair_s", 0.0) * pairs + lin.get("per_request_s", 0.0) * (o.ctx_reqs + o.gen_reqs))


def busy_fraction(cal: Calibration, o: StatsObs) -> float:
    """Seconds of engine work per second of one interval, by the linear step model: every running
    request gets one token per step, so steps/s = gen/running, and each step costs
    ``base + per_request*running``, each computed token ``per_token`` (base model terms ignored:
    stats logs are for the linear calibration). A busy engine reads 1."""
    lin = cal.linear
    steps = o.gen_tps / o.running
    return (steps * (lin.get("base_s", 0.0) + lin.get("per_request_s", 0.0) * o.running)
            + lin.get("per_token_s", 0.0) * (o.prompt_tps + o.gen_tps))


def batch_varies(r: BenchRun) -> bool:
    """An open loop at a finite rate (or a ramp-up: its rate rises during the run) replayed at its recorded send
    times: its batch size follows the arrivals."""
    return (r.max_concurrency is None and r.send is not None
            and (not math.isinf(r.request_rate) or r.ramp_up_strategy is not None))


def same_load(a: BenchRun, b: BenchRun, rel: float = 0.05) -> bool:
    """Two results of one load: the same number of requests, send pattern (rate, burstiness, concurrency, ramp) and
    prompt/output lengths within ``rel`` in total (another --seed draws other lengths around the same means), on the
    same prefix cache (warm tokens within ``rel`` of the prompt tokens)."""
    if len(a.prompt) != len(b.prompt) or not a.prompt:
        return False
    if (a.request_rate, a.burstiness, a.max_concurrency, a.ramp_up_strategy, a.ramp_up_start_rps, a.ramp_up_end_rps) \
            != (b.request_rate, b.burstiness, b.max_concurrency, b.ramp_up_strategy, b.ramp_up_start_rps, b.ramp_up_end_rps):
        return False
    if (a.cfg or None) != (b.cfg or None):
        return False
    pa, pb, oa, ob = sum(a.prompt), sum(b.prompt), sum(a.output), sum(b.output)
    if abs(pa - pb) > rel * max(pa, pb) or abs(oa - ob) > rel * max(oa, ob):
        return False
    wa, wb = sum(a.warm_prefix or ()), sum(b.warm_prefix or ())
    return abs(wa - wb) <= rel * max(pa, pb)


def repeat_moved(a: BenchRun, b: BenchRun) -> dict[str, float]:
    """How far the later result of one load moved from the earlier (measured / measured - 1) on the figures that
    measure the server's speed. A closed loop's or a rate-inf run's output throughput does; an open loop's below
    saturation (finite rate, ramp-up) is its send schedule's, so it is compared only when both sent the same
    requests (the same --seed, hence the same schedule; the recorded send times themselves jitter)."""
    same_sends = a.prompt == b.prompt and a.output == b.output
    keys = [m for m in HEADLINE if same_sends or not (m == "output_throughput" and batch_varies(a))]
    return {m: round(b.figures[m] / a.figures[m] - 1, 3) for m in keys
            if (a.figures.get(m) or 0) > 0 and (b.figures.get(m) or 0) > 0}


def repeatability(runs: list[BenchRun]) -> dict | None:
    """Every pair of results of one load (``same_load``) and how far the later moved from the earlier: the host's own
    repeatability. A held-out error below it says nothing about the model, and no calibration can promise less. None
    when no load was run twice."""
    pairs = [{"runs": [a.name, b.name], "moved": repeat_moved(a, b)}
             for i, a in enumerate(runs) for b in runs[i + 1:] if same_load(a, b)]
    pairs = [p for p in pairs if p["moved"]]
    if not pairs:
        return None
    floor = {m: max(abs(p["moved"][m]) for p in pairs if m in p["moved"]) for m in HEADLINE
             if any(m in p["moved"] for p in pairs)}
    return {"pairs": pairs, "max_abs_moved": floor}


def repeatability_notes(rep: dict | None, held_err: dict | None) -> list[str]:
    """Say when the held-out error is no larger than the host's own repeat (the model cannot be judged finer)."""
    if not rep or not held_err:
        return []
    below = [m for m, v in held_err.items() if v is not None and m in rep["max_abs_moved"]
             and v <= rep["max_abs_moved"][m]]
    if not below:
        return []
    names = HEADLINE_LABELS
    floor = rep["max_abs_moved"]
    moved = ", ".join(f"{names[m]} {floor[m]:.0%}" for m in below)
    return [f"the held-out error on {', '.join(names[m] for m in below)} is within what one load moved when it ran "
            f"again ({moved}): at that size the difference is the host's run-to-run noise, not the model's"]


def fit(runs: list[BenchRun], setup: Setup, kind: str = "linear", iters: int = 250,
        stats: list[StatsObs] | None = None, prefill_term: bool = False, finish_cost: bool = False,
        spread: bool = False, iterations: list[IterObs] | None = None, kv_term: bool = False,
        fixed: dict[str, float] | None = None, on_iter=None, fe_flags: dict[str, bool] | None = None) -> Calibration:
    """Fit one calibration on ``runs`` (bench runs of one deployment) and/or the busy intervals of
    its server stats log (``stats``; weighted as much as one run's figures in total).
    ``finish_cost``: also fit the front end's work per finished request (``FrontEnd.per_finish_s``: a
    closed loop's synchronized wave). ``spread``: also match the TTFT/TPOT quartiles of runs whose batch
    size varies (``SPREAD_FIGURES``; they identify how the step grows with the batch from one run).
    ``iterations``: the engine's logged steps (``IterObs``), weighted as much as one run's figures in
    total: each pins the step model's time for its batch directly, less ``engine_overhead_s`` (a fitted
    per-step time the log does not see: planning and output processing; the bench's ITLs include it).
    ``kv_term``: also fit ``per_kv_token_s``, a decode's cost per token of its context (attention reading the KV
    cache; the linear model leaves it at 0 otherwise). Only a fitted run whose decodes saw clearly different
    context lengths and batch sizes (a ramp-up, spread lengths) tells it from the per-request cost.
    ``fe_flags``: the front end's switches the fit simulates with (``FrontEnd.flags``: ``client_after_finish``, the
    finish work ends the client's response; ``finish_occupies`` False, that work delays only its own response)."""
    import numpy as np

    if not runs and not stats:
        raise InputError("nothing to calibrate on: give bench results and/or a server stats log")
    if not runs and kind != "linear":
        raise InputError("a stats log alone calibrates the linear step model only (--linear)")
    names = _PARAMS_LINEAR if kind == "linear" else _PARAMS_ROOF + (("per_token_s",) if prefill_term else ())
    if finish_cost:
        names = (*names, "fe_finish_s")
    if kv_term:
        names = (*names, "per_kv_token_s")
    if iterations:
        if kind != "linear":
            raise InputError("the per-iteration log calibrates the linear step model only (--linear)")
        names = (*names, "overhead_s")
    fixed = dict(fixed or {})
    names = tuple(n for n in names if n not in fixed)  # measured elsewhere (e.g. the prefill rate: token_steps)
    init = _initial(runs, kind) if runs else {"base_s": 0.01, "per_request_s": 0.001, "per_token_s": 1e-5,
                                               "per_pair_s": 1e-9, "fe_request_s": 0.005, "fe_output_token_s": 1e-5,
                                               "fe_latency_s": 0.005, "fe_finish_s": 0.001}
    init.setdefault("overhead_s", 0.1 * init.get("base_s", 0.01))
    # a decode's context cost starts small against its per-request cost: the data must raise it
    init.setdefault("per_kv_token_s", max(1e-9, 0.05 * init.get("per_request_s", 1e-4) / 128))
    x0 = np.log([max(init[n], 1e-12) for n in names])
    w_stats = len(FIT_FIGURES) / len(stats) if stats else 0.0
    w_iter = len(FIT_FIGURES) / len(iterations) if iterations else 0.0
    ov_i = names.index("overhead_s") if iterations else -1
    views = [steady_slice(r) or (r, 0) for r in runs]

    def objective(x) -> float:
        cal = _unpack(names, x, kind, fixed, fe_flags)
        total = 0.0
        for o in stats or ():
            # a busy interval's work fills it: log(busy fraction) = 0 (capped: idle gaps only lower it)
            total += w_stats * math.log(max(busy_fraction(cal, o), 1e-9)) ** 2
        if iterations:
            ov = math.exp(x[ov_i])
            for o in iterations:
                total += w_iter * math.log(max(iteration_time(cal.linear, o) - ov, 1e-6) / o.elapsed_s) ** 2
        for r, (sim_run, skip) in zip(runs, views):
            pred = sim_figures(simulate_run(sim_run, setup, cal), r.lead_s, skip)
            for k in (FIT_FIGURES + SPREAD_FIGURES if spread and batch_varies(r) else FIT_FIGURES):
                m, p = r.figures.get(k), pred.get(k)
                if m and m > 0:
                    total += (math.log(max(p, 1e-9) / m) if p else 5.0) ** 2
        # a weak pull toward the starting point keeps unidentified parameters where the data put them
        return total + 1e-3 * float(np.sum((x - x0) ** 2))

    best, _ = _nelder_mead(objective, x0, iters=iters, on_iter=on_iter)
    cal = _unpack(names, best, kind, fixed, fe_flags)
    if iterations:
        cal.fit["engine_overhead_s"] = float(math.exp(best[ov_i]))
    return cal


def evaluate(cal: Calibration, runs: list[BenchRun], setup: Setup, rng: dict | None = None,
             running: list[int] | None = None, step_tokens: list[int] | None = None) -> dict[str, dict]:
    """Per run: predicted figures and relative errors; with ``rng`` (``calibrated_range``), where the run lies
    outside the calibrated range (``outside_range``: the same test a prediction made with the calibration gets).
    ``running``: collects the number of requests running in every simulated step, ``step_tokens`` each run's largest
    step (what ``calibrated_range`` reads)."""
    out = {}
    on_step = (lambda rec: running.append(int(rec.running))) if running is not None else None
    for r in runs:
        res = simulate_run(r, setup, cal, on_step=on_step)
        if step_tokens is not None:
            step_tokens.append(res.summary.max_step_tokens)
        pred = sim_figures(res, r.lead_s)
        out[r.name] = {"predicted": pred, "measured": r.figures, "error": run_errors(r.figures, pred)}
        if rng is not None:
            out[r.name]["outside_range"] = outside_range(rng, _mean(r.prompt), res.summary.mean_running,
                                                         res.summary.max_step_tokens)
        if r.warm_prefix is not None:  # what the re-simulation took as already cached (of the prompt tokens)
            out[r.name]["warm_prompt_tokens"] = int(sum(r.warm_prefix))
            out[r.name]["prompt_tokens"] = int(sum(r.prompt))
    return out


def median_abs(per_run: dict[str, dict], keys=HEADLINE) -> dict[str, float | None]:
    import numpy as np

    out = {}
    for k in keys:
        v = [abs(x["error"][k]) for x in per_run.values() if k in x["error"]]
        out[k] = float(np.median(v)) if v else None
    return out


def evaluation(cal: Calibration, fit_runs: list[BenchRun], held: list[BenchRun], setup: Setup) -> dict:
    """What ``cal.fit`` records of a calibration's figures: every run's predicted figures and errors with its split,
    the median errors on the fitted and the held-out runs, and the calibrated range (``calibrated_range``) with each
    held-out run's place against it."""
    running: list[int] = []
    largest: list[int] = []
    on_fit = evaluate(cal, fit_runs, setup, running=running, step_tokens=largest)
    rng = calibrated_range(fit_runs, running, largest)
    on_held = evaluate(cal, held, setup, rng) if held else {}
    inside = {k: v for k, v in on_held.items() if not v.get("outside_range")}
    return {"runs": {**{k: {**v, "split": "fit"} for k, v in on_fit.items()},
                     **{k: {**v, "split": "held_out"} for k, v in on_held.items()}},
            "fit_median_abs_error": median_abs(on_fit),
            "held_out_median_abs_error": median_abs(on_held) if on_held else None,
            "calibrated_range": rng,
            # the uncertainty inside the range: held-out runs the range test passed (None: none did)
            "held_out_in_range_median_abs_error": median_abs(inside) if inside else None}


def steady_notes(sliced: dict[str, dict], per_run: dict[str, dict]) -> list[str]:
    """One note per run fitted on its steady slice, with the whole run's error that checks the slice."""
    notes = []
    for name, s in sliced.items():
        err = per_run.get(name, {}).get("error", {})
        worst = max((abs(err[k]) for k in HEADLINE if k in err), default=None)
        notes.append(f"{name}: a closed loop of {s['requests']:,} requests, fitted on a steady slice (its first "
                     f"{s['simulated']:,}, the first and the last {s['not_counted_each_end']} not counted) to keep "
                     "each fit iteration short; its error above is on the whole run"
                     + (f" (largest {worst:.1%})" if worst is not None else ""))
    return notes


# ---- the calibrated range ------------------------------------------------------------------------
# A calibration measures the deployment where its fitted runs went: the prompt lengths they sent and the batch sizes
# their steps ran at. Beyond that, a prediction rests on the shape of the step model (the roofline's prefill rate, the
# fit's starting point for how a step grows with the batch), not on a measurement. Public series calibrated on one run
# missed exactly there (docs/simulation.md, "The calibrated range": one 128-token run predicting 1,024-8,192-token
# prompts, TTFT off by ~40 %; one request at a time predicting 20-500 in flight, throughput 16-36 % short; a saturated
# run predicting a lone request, TTFT -45 %), while loads inside the range came within a few per cent. So every
# prediction made with a calibration says when it leaves the range, and by how much.
RANGE_FACTOR = 2.0  # a mean this many times beyond the range's edge leaves it
RANGE_SLACK_REQS = 2.0  # ... and, for the batch, at least this many requests beyond it (1 -> 2 in flight is near)
RANGE_QUANTILES = (5, 95)  # the range's edges: the fitted runs' requests and steps, trimmed of stragglers


def _mean(xs) -> float:
    return float(sum(xs)) / len(xs) if len(xs) else 0.0


def calibrated_range(fit_runs: list[BenchRun], running: list[int], largest: list[int] | None = None) -> dict | None:
    """Where the fitted runs measured the deployment: the 5th-95th percentile of their requests' prompt tokens and of
    ``running``, the number of requests running in each of their engine steps as re-simulated with the calibration
    (``evaluate``'s collector); and ``largest``, their largest re-simulated step's tokens (the most any step of theirs
    priced: one step of a much larger size, a burst's prompts prefilled together, is the step line extended). None
    without a fitted run."""
    import numpy as np

    prompts = [p for r in fit_runs for p in r.prompt]
    if not prompts or not running:
        return None
    lo, hi = RANGE_QUANTILES
    out = {"prompt_tokens": [float(np.percentile(prompts, lo)), float(np.percentile(prompts, hi))],
           "running_requests": [float(np.percentile(running, lo)), float(np.percentile(running, hi))],
           "from": "the fitted runs' requests and re-simulated steps, 5th-95th percentile"}
    if largest:
        out["step_tokens"] = [0.0, float(max(largest))]
    return out


def outside_range(rng: dict | None, mean_prompt: float, mean_running: float,
                  max_step_tokens: float | None = None) -> list[dict]:
    """Where a predicted load (its requests' mean prompt tokens, its time-weighted mean of running requests, its
    largest step's tokens) leaves the calibrated range: one entry per quantity, ``direction`` "above" or "below".
    Empty inside it or without one. Below the batch range counts only when the range starts at 2 or more running (a
    one-request range has no lighter load); the step's size is judged above only (a range written before it was
    recorded has none)."""
    if not rng:
        return []
    out = []
    for key, value, slack in (("prompt_tokens", mean_prompt, 0.0), ("running_requests", mean_running,
                                                                     RANGE_SLACK_REQS),
                              ("step_tokens", max_step_tokens, 0.0)):
        edges = rng.get(key)
        if not edges or value is None or not value == value:
            continue
        lo, hi = float(edges[0]), float(edges[1])
        if value > max(RANGE_FACTOR * hi, hi + slack):
            out.append({"quantity": key, "direction": "above", "value": round(float(value), 2), "range": [lo, hi]})
        elif key != "step_tokens" and (key == "prompt_tokens" or lo >= 2) and value < lo / RANGE_FACTOR:
            out.append({"quantity": key, "direction": "below", "value": round(float(value), 2), "range": [lo, hi]})
    return out


_RANGE_MEANS = {
    ("prompt_tokens", "above"): "the prefill rate beyond it is the model's, not measured: TTFT may be far off",
    ("prompt_tokens", "below"): "the front end and the prefill are split by the model there: TTFT may be off",
    ("running_requests", "above"): "how a step grows with the batch beyond it is assumed: throughput and TPOT may "
                                   "be far off",
    ("running_requests", "below"): "a lighter load's lone prefills and short queues were not measured: TTFT may be "
                                   "far off",
    ("step_tokens", "above"): "a step that size (a burst's prompts prefilled together) is priced by the step line "
                              "extended, not measured; a step's cost per token can grow with its size (a CPU's caches, "
                              "a GPU past its memory-bound knee): the TTFT of the requests in it may be far off",
}


def range_notes(items: list[dict]) -> list[str]:
    """One sentence per quantity ``outside_range`` found."""
    names = {"prompt_tokens": ("prompts average", "tokens", "the calibration's requests had"),
             "running_requests": ("the engine runs", "requests on average", "the calibration's steps ran"),
             "step_tokens": ("its largest step schedules", "tokens", "the calibration's largest")}
    out = []
    for it in items:
        what, unit, cal_had = names[it["quantity"]]
        lo, hi = it["range"]
        had = f"{hi:,.0f}" if it["quantity"] == "step_tokens" else f"{lo:,.0f}-{hi:,.0f}"
        out.append(f"outside the calibrated range: {what} {it['value']:,.1f} {unit}, {cal_had} {had}; "
                   + _RANGE_MEANS[(it["quantity"], it["direction"])])
    return out


def split_parse(fe: FrontEnd | None, share: float) -> FrontEnd | None:
    """The front end with ``share`` of its per-request work moved to ``parse_s`` (done as each request arrives, ahead
    of earlier requests' remaining work). A request alone sees the same total; a burst is released together."""
    if not 0.0 <= share < 1.0:
        raise InputError(f"the parse share must be in [0, 1), got {share}")
    if not share or fe is None:
        return fe
    return replace(fe, parse_s=fe.parse_s + share * fe.per_request_s, per_request_s=(1 - share) * fe.per_request_s)


def calibrate(runs: list[BenchRun], setup: Setup, *, kind: str = "linear", fit_on: list[str] | None = None,
              deployment: dict | None = None, stats: list[StatsObs] | None = None,
              prefill_term: bool = False, finish_cost: bool = False, spread: bool = False,
              iterations: list[IterObs] | None = None, kv_term: bool = False, iters: int = 250,
              use_token_steps: bool = False, on_iter=None, parse_share: float = 0.0,
              client_after_finish: bool = False, finish_occupies: bool = True,
              measure_finish: bool = False, output_per_step: bool = False, step_terms: bool = False,
              step_square: bool = False, given_step_terms: dict[str, float] | None = None,
              front_latency_s: float | None = None) -> Calibration:
    """Fit on ``fit_on`` (run names; default: the first run) plus the stats-log intervals, predict
    the other runs (held out), and return the calibration with both errors recorded. ``prefill_term``
    (roofline+linear): also fit a cost per computed token beyond the scaled roofline, i.e. the deployment's own
    prefill rate apart from its decode. Only runs at two or more prompt lengths tell it from the front end; the
    default leaves the prefill rate to the roofline (docs/simulation.md, public multi-load series).
    ``parse_share``: after the fit, that share of the front end's per-request work is done as each request arrives,
    ahead of earlier requests' remaining work (``FrontEnd.parse_s``). An isolated request sees the same front end, so
    the fit is unchanged where sends do not overlap; a burst is released together. One run whose sends rarely overlap
    cannot measure the share (fitted on the CPU engine's ramp it overshot: 7.9 of 13.5 ms, closed-loop TTFTs +18 to
    +40 %); docs/simulation.md gives the value measured on that engine's closed-loop bursts.
    ``client_after_finish``: fit and predict with ``FrontEnd.client_after_finish`` (the finish work ends the client's
    response and frees a closed loop's slot); ``finish_occupies`` False: that work is the response's own delay only.
    ``measure_finish`` (with ``finish_cost``): the finish work is measured on the fitted runs' last inter-token gaps
    (``finish_delay``) and held fixed, not fitted. ``output_per_step``: fit and predict with
    ``FrontEnd.output_per_step`` (the output work done as each step's tokens come out). ``step_terms`` (with
    ``use_token_steps``): every term the rebuilt steps' regression gives (``prefill_rate``'s ``all_terms``: per step, per
    request, per token, per context token; a term it dropped as negative is held at 0) is held fixed, not only the cost
    per token; the bench figures then fit the front end (and the prefill pairs) alone. ``step_square`` (with
    ``step_terms``): the regression also has the step's tokens squared (``LinearStepTime.per_token_sq_s``).
    ``given_step_terms``: the step terms measured elsewhere (``LinearStepTime`` fields, e.g. ``step_period_terms`` on
    a server log whose lines carry their time), held fixed instead of the token times' regression.
    ``front_latency_s``: the front end's delay (``FrontEnd.latency_s``) measured elsewhere (send to hand-over and
    step to client on a stamped server log: ``handover_split``), held fixed; the rest of the front end is fitted."""
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise InputError("two bench results have the same file name: rename one")
    chosen = fit_on or names[:1]
    unknown = [n for n in chosen if n not in names]
    if unknown:
        raise InputError(f"--fit-on {', '.join(unknown)}: not among the given results ({', '.join(names)})")
    fit_runs = [r for r in runs if r.name in chosen]
    held = [r for r in runs if r.name not in chosen]
    flags = FrontEnd(client_after_finish=client_after_finish, finish_occupies=finish_occupies,
                     output_per_step=output_per_step).flags()
    fixed, steps_info = None, None
    if given_step_terms is not None:
        fixed = {k: max(0.0, float(v)) for k, v in given_step_terms.items()}
        steps_info = {"given": dict(fixed)}
    elif use_token_steps:
        if step_square and not step_terms:
            raise InputError("the step's squared-size term is one of the step terms: it needs step_terms")
        steps_info = prefill_from_token_steps(fit_runs, setup.cfg.max_num_batched_tokens, square=step_square)
        if kind != "linear":
            raise InputError("the prefill rate from the token times sets the linear model's cost per token: --linear")
        fixed = {"per_token_s": steps_info["per_token_s"]}
        if step_terms:
            fixed = {k: max(0.0, float(v)) for k, v in steps_info["all_terms"].items()}
    elif step_terms:
        raise InputError("the step terms come from the token times: they need use_token_steps")
    if front_latency_s is not None:
        fixed = {**(fixed or {}), "fe_latency_s": max(0.0, float(front_latency_s))}
    finish_info = None
    if measure_finish:
        if not finish_cost:
            raise InputError("measuring the finish work sets the front end's per-finish cost: it needs finish_cost")
        finish_info = finish_delay(fit_runs)
        fixed = {**(fixed or {}), "fe_finish_s": finish_info["per_finish_s"]}
    cal = fit(fit_runs, setup, kind, stats=stats, prefill_term=prefill_term, finish_cost=finish_cost, spread=spread,
              iterations=iterations, kv_term=kv_term, iters=iters, fixed=fixed, on_iter=on_iter,
              fe_flags=flags)
    cal.frontend = split_parse(cal.frontend, parse_share)
    overhead = cal.fit.get("engine_overhead_s")
    ev = evaluation(cal, fit_runs, held, setup)
    cal.deployment = dict(deployment or {})
    cal.fit = {
        "fit_on": chosen,
        "stats_intervals": len(stats or ()),
        "finish_cost": finish_cost,
        "spread": spread,
        "kv_term": kv_term,
        "parse_share": parse_share,
        **flags,
        "token_steps": steps_info,
        **({"finish_delay": finish_info} if finish_info else {}),
        **({"step_terms": True} if step_terms else {}),
        **({"step_square": True} if step_square else {}),
        **({"front_latency_s": front_latency_s} if front_latency_s is not None else {}),
        "iterations": len(iterations or ()),
        "engine_overhead_s": overhead,
        "held_out": [r.name for r in held],
        **ev,
        "repeatability": repeatability(runs),
        "notes": list(dict.fromkeys(n for r in runs for n in r.read_notes))
        + identifiability_notes(fit_runs, stats) + prefill_notes(fit_runs, kind, prefill_term)
        + iteration_log_notes(fit_runs, iterations),
    }
    cal.fit["notes"] += repeatability_notes(cal.fit["repeatability"], ev["held_out_median_abs_error"])
    sliced = steady_slices(fit_runs)
    if sliced:
        cal.fit["steady_slices"] = sliced
        cal.fit["notes"] += steady_notes(sliced, ev["runs"])
    if finish_cost:
        seen, notes = finish_notes(cal, fit_runs)
        if seen is not None:
            cal.fit["finish_seen"] = seen
        cal.fit["notes"] += notes
    seen, notes = floor_notes(cal, setup)
    if seen is not None:
        cal.fit["decode_floor"] = seen
        cal.fit["notes"] += notes
    if prefill_term:
        cal.fit["prefill_term"] = True
    return cal


def prefill_from_token_steps(runs: list[BenchRun], budget: int | None, square: bool = False) -> dict:
    """The prefill rate measured on the fitted runs' rebuilt steps (``token_steps`` + ``prefill_rate``), with what
    was rebuilt; InputError when the runs do not have the per-token times or too few prefill steps."""
    steps: list[TokenStep] = []
    diag = {}
    for r in runs:
        st, d = token_steps(r, budget)
        steps += st
        diag[r.name] = d
    rate = prefill_rate(steps, square=square)
    if rate is None:
        why = "; ".join(f"{k}: " + (v.get("reason") or f"{v.get('steps', 0)} steps, {v.get('prefill_steps', 0)} with a prefill")
                        for k, v in diag.items())
        raise InputError("the prefill rate needs per-token times (vllm bench serve --save-detailed) with at least 30 "
                         f"rebuilt steps and 5 with a prefill in the fitted runs ({why})")
    return {**rate, "runs": diag}


def finish_delay(runs: list[BenchRun]) -> dict:
    """The front end's finish work as the client sees it, measured on the runs' per-token times: a response's last
    chunk carries its final token and the request's finish (``FrontEnd.per_finish_s`` with ``client_after_finish``), so
    per request its last inter-token gap minus the median of its other gaps is that work (plus noise: the step that
    finished it may also have carried another request's prefill); the median over requests, floored at 0. Requests
    with fewer than three gaps are skipped. InputError without per-token times or with fewer than 10 such requests.
    Why measured: fitted on a run's bench figures, the finish work trades off against the other front-end terms and
    came out 2.7-6.0 ms on the CPU engine's ramps, where the last gaps exceed the others by ~0.4 ms
    (docs/simulation.md, "Procedure 12")."""
    import numpy as np

    excess = []
    for r in runs:
        for times in r.token_times or ():
            gaps = np.diff(np.asarray(times, dtype=float))
            if len(gaps) >= 3:
                excess.append(float(gaps[-1] - np.median(gaps[:-1])))
    if len(excess) < 10:
        raise InputError("the finish work needs per-token times (vllm bench serve --save-detailed) of at least 10 "
                         f"requests with 4 or more output tokens in the fitted runs ({len(excess)} found)")
    return {"per_finish_s": max(0.0, float(np.median(excess))), "requests": len(excess),
            "excess_quartiles_s": [float(q) for q in np.percentile(excess, [25, 50, 75])]}


def prefill_notes(fit_runs: list[BenchRun], kind: str, prefill_term: bool) -> list[str]:
    """With the roofline model, a prompt token's cost is the roofline's (scaled with the decode) unless the fitted
    runs had two clearly different prompt lengths and ``prefill_term`` is on: say which (one 128-token run's TTFT
    cannot tell the prefill from the front end; on the public sweeps this was the TTFT miss, docs/simulation.md)."""
    if kind != "roofline+linear" or not fit_runs:
        return []
    means = [sum(r.prompt) / len(r.prompt) for r in fit_runs if r.prompt]
    two = bool(means) and max(means) >= 2 * min(means)
    if prefill_term and not two:
        return ["--fit-prefill with every fitted run at about one prompt length: the prefill rate and the front end "
                "cannot be told apart; fit on runs at two clearly different prompt lengths"]
    if not prefill_term and two:
        return ["the fitted runs have two prompt lengths: --fit-prefill would measure the prefill rate instead of "
                "taking the roofline's"]
    return []


def _batch_levels(r: BenchRun) -> set[int]:
    """The in-flight request counts a run's simulation saw for most of its time (its concurrency cap, or
    for an open loop the range its send times allow), as coarse levels: 1, 2-3, 4-7, 8-15, ..."""
    if r.max_concurrency is not None:
        return {max(1, int(r.max_concurrency)).bit_length()}
    if batch_varies(r):
        return set()  # an open loop at a finite rate, or a ramp-up: its batch varies with the arrivals
    return {len(r.prompt).bit_length()}


# below this fraction of the bench's mean TPOT, a logged decode step cannot hold the forward pass
LOG_TIMES_FORWARD_MIN = 0.2


def log_times_forward(iterations: list[IterObs], mean_tpot_s: float) -> bool | None:
    """Whether the per-step log's times can contain the model's forward pass: the median logged time of the
    decode-only steps against the bench's mean TPOT of the same run (a decode step is one token of each
    running request, so it cannot take much less than the TPOT's share of the step). False when it is under
    ``LOG_TIMES_FORWARD_MIN`` of it: the server ran the model inside EngineCore (uni executor) and vLLM timed
    only the sampling (measured on the CPU engine: 0.6-0.8 ms logged against an 11.8 ms TPOT; with a Worker
    process 11.6 ms against 20 ms). None: no decode-only step or no TPOT."""
    import statistics

    dec = [o.elapsed_s for o in iterations if o.ctx_reqs == 0 and o.gen_reqs > 0]
    if not dec or not mean_tpot_s or mean_tpot_s <= 0:
        return None
    return statistics.median(dec) >= LOG_TIMES_FORWARD_MIN * mean_tpot_s


def iteration_log_notes(fit_runs: list[BenchRun], iterations: list[IterObs] | None) -> list[str]:
    tpots = [r.figures.get("mean_tpot_ms") for r in fit_runs if r.figures.get("mean_tpot_ms")]
    if not iterations or not tpots:
        return []
    if log_times_forward(iterations, min(tpots) / 1e3) is False:
        return ["the per-step log's times are far below the bench's TPOT: the server probably ran the model "
                "inside EngineCore (uni executor), where vLLM's 'iteration elapsed time' is the sampling alone — "
                "the fit then puts the step into its overhead; calibrate without --iteration-log"]
    return []


def finish_notes(cal: Calibration, fit_runs: list[BenchRun]) -> tuple[dict | None, list[str]]:
    """The fitted finish work beside what the fitted runs' per-token times show of it (``finish_delay``): (the
    measurement or None, notes). A fitted value several times what the last chunks show is time the fit needed
    somewhere and placed at the finish: on the CPU engine's ramps it came out 2.7-6.0 ms against 0.2-1.2 ms seen, and
    the closed loops' TTFT ran high by about the difference (docs/simulation.md, "Procedure 12")."""
    fe = cal.frontend
    if fe is None or not fe.per_finish_s or "finish_delay" in cal.fit:
        return None, []
    try:
        seen = finish_delay(fit_runs)
    except InputError:
        return None, []
    fitted, shown = fe.per_finish_s, seen["per_finish_s"]
    if fitted <= max(3.0 * shown, shown + 1e-3):
        return seen, []
    return seen, [f"the fitted finish work ({fitted * 1e3:.1f} ms a request) is not where the runs show it: a "
                  f"response's last token came only {shown * 1e3:.1f} ms later than its usual inter-token gap (median "
                  f"of {seen['requests']} requests), so the fit put time at the finish that the bench figures needed "
                  "elsewhere; closed-loop TTFTs may be predicted high (on vLLM's CPU engine, by 8 % on average)"]


def floor_notes(cal: Calibration, setup: Setup) -> tuple[dict | None, list[str]]:
    """A scaled roofline's lone decode step against its weights read at the GPU's peak bandwidth
    (``RooflineStepTime.weight_floor_s``). One run at one batch level cannot tell the scaled roofline from the
    per-request term; a fit that scales the roofline down and loads the batch term can price a lone decode below what
    the memory allows (batch 24's RTX 3090 series, calibrated on its c64 run: 4.7 ms against an 8.6 ms read, docs/
    simulation.md). Said, not corrected: the fit matched its own runs."""
    if cal.kind != "roofline+linear" or setup.base is None:
        return None, []
    floor = setup.base.weight_floor_s()
    lin = linear_step(cal.linear)
    step = CalibratedStepTime(setup.base, cal.scale, lin).decode_line(1)[0]
    seen = {"decode_step_1_ms": round(step * 1e3, 3), "weight_read_floor_ms": round(floor * 1e3, 3)}
    if step >= floor:
        return seen, []
    return seen, [f"this calibration prices a lone request's decode step at {step * 1e3:.1f} ms, below the "
                  f"{floor * 1e3:.1f} ms its weights take to read at the GPU's peak bandwidth: the fitted runs did not "
                  f"measure the small-batch step (the roofline scaled to {cal.scale:.2f}, the rest put on the batch), "
                  "so light loads will be predicted too fast; add a run at --max-concurrency 1"]


def identifiability_notes(fit_runs: list[BenchRun], stats: list[StatsObs] | None) -> list[str]:
    """What the fitted runs cannot tell apart. A step costs ``base + per_request * n``; runs that all held
    about the same number n of requests in flight see only that sum, so how the step grows with n is the
    fit's starting point, not a measurement (docs/simulation.md: on a loaded CPU host it was wrong by 2x)."""
    if stats or len(fit_runs) > 1 and len(set().union(*(_batch_levels(r) for r in fit_runs))) > 1:
        return []
    if any(not _batch_levels(r) for r in fit_runs):
        return []
    return ["every run fitted on held about the same number of requests in flight: how the step time grows "
            "with the batch is assumed, not measured — predictions at other concurrencies may be far off; add a "
            "run at a clearly lighter or heavier load (e.g. --max-concurrency 1 and 16)"]
