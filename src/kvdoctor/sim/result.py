"""What a simulation returns: a summary (for the chains and --json) and the full detail.

``SimResult`` keeps per-request arrays and the step log; the evidence views (``Timeline``,
``RequestRecord``) are built from them on demand so a what-if call pays only for the summary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - annotations only
    import numpy as np

    from kvdoctor.evidence.model import Timeline


@dataclass(frozen=True)
class SimSummary:
    requests: int
    completed: int
    rejected: int
    preemptions: int
    output_tokens_per_s: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tbt_p50_s: float | None
    tbt_p99_s: float | None
    e2e_p50_s: float | None = None
    e2e_p99_s: float | None = None
    queue_p50_s: float | None = None
    queue_p99_s: float | None = None
    queue_mean_s: float | None = None  # what vLLM's request_queue_time_seconds histogram's sum / count measures
    preempted_requests: int = 0  # requests preempted at least once
    duration_s: float = 0.0  # first arrival -> last completion (simulated)
    steps: int = 0  # engine steps simulated
    mean_running: float = 0.0
    max_step_tokens: int = 0  # the most tokens one engine step scheduled (prompt chunks and decodes)
    peak_kv_usage_pct: float = 0.0
    mean_kv_usage_pct: float = 0.0
    prefix_cache_hit_pct: float | None = None
    wall_s: float = 0.0  # how long the simulation took to run (not simulated time)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SimResult:
    """Invariant: every per-request array has one entry per workload request, in workload order."""

    summary: SimSummary
    # per request, index = workload order (numpy arrays; NaN where not applicable)
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray  # generated (capped at max_model_len - prompt)
    requested_output_tokens: np.ndarray
    status: np.ndarray  # 2 finished, 3 rejected (scheduler.FINISHED / REJECTED)
    queue_s: np.ndarray
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    preemptions: np.ndarray
    cached_tokens: np.ndarray
    step_end_s: np.ndarray  # end time of every engine step
    timeline: Timeline  # interval samples
    interval_s: float
    config: dict[str, Any] = field(default_factory=dict)
    itl_runs: list = field(default_factory=list, repr=False)  # per request: [[first_step, last_step], ...]
    histograms: dict[str, Any] = field(default_factory=dict, repr=False)  # metric -> (buckets, counts, sum)
    counters: dict[str, float] = field(default_factory=dict)
    t0: float = 0.0  # epoch offset added to every time when written as evidence

    def itl(self, i: int):
        """Inter-token latencies of request ``i`` (seconds), rebuilt from the step log."""
        import numpy as np

        runs = self.itl_runs[i]
        if not runs:
            return np.zeros(0)
        idx = np.concatenate([np.arange(a, b + 1) for a, b in runs])
        return np.diff(self.step_end_s[idx])

    def request_records(self):
        """The simulated requests as evidence ``RequestRecord`` s (what ``load_trace`` would give)."""
        import numpy as np

        from kvdoctor.evidence.model import RequestRecord

        out = []
        for i in range(len(self.arrival_s)):
            rejected = int(self.status[i]) != 2

            def f(a):
                v = float(a[i])
                return None if (rejected or np.isnan(v)) else v

            ttft, e2e, q = f(self.ttft_s), f(self.e2e_s), f(self.queue_s)
            out.append(RequestRecord(
                request_id=str(i),
                arrival_s=self.t0 + float(self.arrival_s[i]),
                prompt_tokens=int(self.prompt_tokens[i]),
                output_tokens=None if rejected else int(self.output_tokens[i]),
                queue_s=q,
                prefill_s=None if ttft is None or q is None else ttft - q,
                decode_s=None if ttft is None or e2e is None else e2e - ttft,
                ttft_s=ttft,
                e2e_s=e2e,
                preemptions=None if rejected else int(self.preemptions[i]),
                itl_s=None if rejected else self.itl(i),
            ))
        return out


def offline_figures(result: SimResult, tool: str) -> dict[str, float]:
    """The figures an offline bench prints, from a simulated run of its requests (all sent at t=0, no API server):
    ``vllm bench throughput``'s ``requests_per_second``, ``tokens_per_second`` (prompt + output) and
    ``output_tokens_per_second`` over the run's elapsed time (first send to last finish; the bench times
    ``llm.generate`` over every request, vLLM 0.33 throughput.py), with ``total_prompt_tokens`` /
    ``total_output_tokens`` of the finished requests; ``vllm bench latency``'s ``avg_latency``: one batch from send to
    its last finish (every iteration runs the same batch, so the mean is that one time)."""
    import numpy as np

    done = result.status == 2
    elapsed = float(result.summary.duration_s)
    if tool == "latency":
        return {"avg_latency": elapsed}
    prompt = float(np.sum(result.prompt_tokens[done]))
    output = float(np.sum(result.output_tokens[done]))
    n = int(np.sum(done))
    if not elapsed > 0:
        return {"total_prompt_tokens": prompt, "total_output_tokens": output, "num_requests": float(n)}
    return {"requests_per_second": n / elapsed, "tokens_per_second": (prompt + output) / elapsed,
            "output_tokens_per_second": output / elapsed, "total_prompt_tokens": prompt,
            "total_output_tokens": output, "num_requests": float(n), "elapsed_time": elapsed}
