"""The workload options of ``vllm bench serve``, shared by ``simulate``, ``plan``, ``swap`` and
``experiment``, and ``--calibration FILE``.

    @app.command()
    @workload_opts.workload_options
    def verb(wl: workload_opts.WorkloadOptions, ...):
        spec = wl.spec(trace=...)            # sim.workload.WorkloadSpec, or None when none was asked for
        cal = wl.load_calibration()          # sim.calibration.Calibration or None

Names and defaults are the bench's (vLLM 0.33 ``benchmarks/serve.py``/``datasets``), so a bench
command line's workload part can be pasted. Nothing heavy is imported here (start-up budget).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Annotated, Any, Callable, Optional

import typer

from kvdoctor.cli.common import option_bundle

_P = "Workload (vllm bench serve)"


@dataclass
class WorkloadOptions:
    dataset_name: Optional[str] = None
    num_prompts: Optional[int] = None
    request_rate: Optional[str] = None
    burstiness: Optional[float] = None
    max_concurrency: Optional[int] = None
    random_input_len: Optional[int] = None
    random_output_len: Optional[int] = None
    random_range_ratio: Optional[float] = None
    random_prefix_len: Optional[int] = None
    ignore_eos: bool = False
    dataset_path: Optional[str] = None
    sharegpt_output_len: Optional[int] = None
    ramp_up_strategy: Optional[str] = None
    ramp_up_start_rps: Optional[int] = None
    ramp_up_end_rps: Optional[int] = None
    seed: int = 0
    calibration: Optional[str] = None
    bench_cmd: Optional[str] = None

    def asked(self) -> bool:
        """Was any bench-style workload option given?"""
        return any(getattr(self, f.name) not in (None, False) for f in fields(self)
                   if f.name not in ("seed", "calibration"))

    def _with_bench_cmd(self, vllm_version: str | None = None) -> tuple["WorkloadOptions", list[str], str | None]:
        """These options with the pasted bench command line's workload flags filling what was not given here
        (an option given on kvdoctor's own command line wins), the line's flags that were not read, and the offline
        bench it is ("throughput" / "latency", else None)."""
        from dataclasses import replace

        from kvdoctor.sim.benchline import parse_bench_cmd

        got, ignored, notes = parse_bench_cmd(self.bench_cmd, vllm_version)
        offline = got.pop("offline", None)
        fill = {k: v for k, v in got.items()
                if getattr(self, k) in (None, False) or (k == "seed" and self.seed == 0)}
        if ignored:
            notes = [f"--bench-cmd: not read (no effect on the load kvdoctor models): {', '.join(ignored)}", *notes]
        return replace(self, bench_cmd=None, **fill), notes, offline

    def rate(self) -> float:
        from kvdoctor.errors import InputError

        if self.request_rate is None:
            return math.inf
        s = str(self.request_rate).strip().lower()
        try:
            v = math.inf if s in ("inf", "infinity") else float(s)
        except ValueError:
            raise InputError(f"--request-rate must be a number or inf, got {self.request_rate!r}") from None
        return v

    def spec(self, trace: str | None = None, default_prompts: int = 1000, vllm_version: str | None = None):
        """The ``WorkloadSpec`` these options describe (None when no bench option was given and no
        trace: the verb then uses its own workload options). ``vllm_version``: the deployment's, where the bench's
        reading of its own flags changed between releases (``vllm bench throughput``'s lengths)."""
        from kvdoctor.errors import InputError
        from kvdoctor.sim.workload import WorkloadSpec

        if self.bench_cmd:
            opts, notes, offline = self._with_bench_cmd(vllm_version)
            if not opts.asked() and not trace:  # a line with only defaults is still the bench's workload
                opts.dataset_name = "random"
            if offline and trace:
                raise InputError(f"vllm bench {offline} draws its own requests: give --trace or the offline bench's "
                                 "command, not both")
            spec = opts.spec(trace=trace, default_prompts=1000)  # the bench's own default count
            if spec is not None and (notes or offline):
                from dataclasses import replace

                spec = replace(spec, notes=tuple(notes), offline=offline)
                spec.validate()
            return spec
        if not self.asked() and not trace:
            return None
        name = self.dataset_name or ("trace" if trace else "random")
        if trace and name != "trace":
            raise InputError(f"give either --trace or --dataset-name {name}, not both")
        d = WorkloadSpec()
        spec = WorkloadSpec(
            dataset_name=name,
            num_prompts=self.num_prompts if self.num_prompts is not None else (0 if trace else default_prompts),
            request_rate=self.rate(),
            burstiness=self.burstiness if self.burstiness is not None else 1.0,
            max_concurrency=self.max_concurrency,
            seed=self.seed,
            random_input_len=self.random_input_len if self.random_input_len is not None else d.random_input_len,
            random_output_len=self.random_output_len if self.random_output_len is not None else d.random_output_len,
            random_range_ratio=self.random_range_ratio if self.random_range_ratio is not None else 0.0,
            random_prefix_len=self.random_prefix_len or 0,
            ignore_eos=self.ignore_eos,
            dataset_path=trace or self.dataset_path,
            sharegpt_output_len=self.sharegpt_output_len,
            ramp_up_strategy=self.ramp_up_strategy,
            ramp_up_start_rps=self.ramp_up_start_rps,
            ramp_up_end_rps=self.ramp_up_end_rps,
        )
        if name != "trace":
            spec.validate()
        else:
            from kvdoctor.sim.workload import check_ramp_up

            check_ramp_up(self.ramp_up_strategy, self.ramp_up_start_rps, self.ramp_up_end_rps, trace=True)
        return spec

    def load_calibration(self):
        if not self.calibration:
            return None
        from kvdoctor.sim.calibration import load_calibration

        return load_calibration(self.calibration)


_TYPES: dict[str, Any] = {
    "dataset_name": Annotated[Optional[str], typer.Option("--dataset-name", help="random or sharegpt (as vllm bench serve); trace with --trace.", rich_help_panel=_P)],
    "num_prompts": Annotated[Optional[int], typer.Option("--num-prompts", help="Number of requests (bench default 1000).", rich_help_panel=_P)],
    "request_rate": Annotated[Optional[str], typer.Option("--request-rate", help="Requests per second, or inf (all at t=0; bench default).", rich_help_panel=_P)],
    "burstiness": Annotated[Optional[float], typer.Option("--burstiness", help="Gamma shape of inter-arrival gaps (1 = Poisson, <1 burstier).", rich_help_panel=_P)],
    "max_concurrency": Annotated[Optional[int], typer.Option("--max-concurrency", help="Closed loop: at most this many requests in flight (a new one is sent when one finishes).", rich_help_panel=_P)],
    "random_input_len": Annotated[Optional[int], typer.Option("--random-input-len", help="random: input tokens (bench default 1024).", rich_help_panel=_P)],
    "random_output_len": Annotated[Optional[int], typer.Option("--random-output-len", help="random: output tokens (bench default 128).", rich_help_panel=_P)],
    "random_range_ratio": Annotated[Optional[float], typer.Option("--random-range-ratio", help="random: lengths uniform in [L(1-r), L(1+r)], 0 <= r < 1.", rich_help_panel=_P)],
    "random_prefix_len": Annotated[Optional[int], typer.Option("--random-prefix-len", help="random: tokens of one prefix shared by every request (on top of the input length).", rich_help_panel=_P)],
    "ignore_eos": Annotated[bool, typer.Option("--ignore-eos", help="Every request generates exactly its output length (else it may stop at EOS).", rich_help_panel=_P)],
    "dataset_path": Annotated[Optional[str], typer.Option("--dataset-path", help="sharegpt: a length file (prompt/output token columns); default: the bench's own ShareGPT sample embedded in kvdoctor (200 requests, seed 0, Llama-3 tokenizer).", rich_help_panel=_P)],
    "sharegpt_output_len": Annotated[Optional[int], typer.Option("--sharegpt-output-len", help="sharegpt: override every output length.", rich_help_panel=_P)],
    "ramp_up_strategy": Annotated[Optional[str], typer.Option("--ramp-up-strategy", help="linear or exponential: each request's rate moves from --ramp-up-start-rps to --ramp-up-end-rps over the run (--request-rate stays inf).", rich_help_panel=_P)],
    "ramp_up_start_rps": Annotated[Optional[int], typer.Option("--ramp-up-start-rps", help="Ramp-up: the first request's rate (requests/s, an integer as in the bench).", rich_help_panel=_P)],
    "ramp_up_end_rps": Annotated[Optional[int], typer.Option("--ramp-up-end-rps", help="Ramp-up: the last request's rate (requests/s, >= the start).", rich_help_panel=_P)],
    "seed": Annotated[int, typer.Option("--seed", help="Seed of the workload (bench: --seed).", rich_help_panel=_P)],
    "bench_cmd": Annotated[Optional[str], typer.Option("--bench-cmd", help="A `vllm bench serve` (or benchmark_serving.py) command line, pasted: its workload flags are read; a workload option given here too wins.", rich_help_panel=_P)],
    "calibration": Annotated[Optional[str], typer.Option("--calibration", help="A calibration file from `kvdoctor calibrate` (this deployment's step-time and front-end coefficients).", rich_help_panel="Time model")],
}
assert set(_TYPES) == {f.name for f in fields(WorkloadOptions)}


# Decorator: the verb's ``wl: WorkloadOptions`` parameter becomes the workload options (the mechanism of
# ``common.config_options``; stack it under ``@common.config_options``).
workload_options = option_bundle("wl", WorkloadOptions, _TYPES)
