"""Run one scenario on the test bed: a real `vllm serve` + `vllm bench serve`, everything kept in a folder."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path

from kvdoctor.experiment.load import LoadSpec
from kvdoctor.experiment.measure import RunResult, measure_run
from kvdoctor.experiment.server import free_port
from kvdoctor.testbed.build import TestBed
from kvdoctor.testbed.scenarios import Scenario

# A load for a scenario that must not start: never driven, but measure_run wants one.
_UNUSED = LoadSpec(prompt_len=8, output_len=8, requests=1)


def run_scenario(tb: TestBed, sc: Scenario, out_dir: Path, *, port: int | None = None,
                 health_timeout_s: float = 900.0, bench_timeout_s: float = 900.0,
                 log: Callable[[str], None] | None = None) -> RunResult:
    """Start the scenario's server on 127.0.0.1:<free port>, drive its load, stop it. The run folder also gets
    ``scenario.json`` (the exact serve line, env and load)."""
    load = sc.load
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    out_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    from kvdoctor.experiment.server import terminate_as_interrupt

    with terminate_as_interrupt():
        res = measure_run(sc.name, out_dir, vllm_cmd=[str(tb.vllm)], model=str(tb.model), flags=sc.all_flags(),
                          env=tb.env(**sc.env), load=load or _UNUSED, port=port,
                          health_timeout_s=health_timeout_s, bench_timeout_s=bench_timeout_s, log=log)
    (out_dir / "scenario.json").write_text(json.dumps({
        "scenario": sc.name, "what": sc.what, "serve_line": sc.serve_line("$TESTBED/tiny"),
        "flags": sc.all_flags(), "env": sc.env, "load": load.as_dict() if load else None,
        "bench_args": load.bench_args() if load else None,
        "expect_startup_failure": sc.expect_startup_failure, "status": res.status, "reason": res.reason,
        "vllm": tb.info.get("vllm_version"), "vllm_dist": tb.info.get("vllm_dist"), "torch": tb.info.get("torch"),
        "ready_s": res.ready_s, "bench_s": res.bench_s,
    }, indent=1) + "\n")
    return res
