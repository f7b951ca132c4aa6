#!/usr/bin/env python3
"""Simulator speed: the 1-hour Azure conversation trace (19,366 requests) for Llama-3.1-8B-Instruct
on one H100 with vLLM 0.33 defaults. Target: <= 5 s wall on one core (issue 5).

    python benchmarks/bench_sim.py [--runs 3] [--trace PATH] [--json]

Pins itself to one CPU (os.sched_setaffinity) and one BLAS thread, times the whole
``kvdoctor.sim.whatif.run`` call (trace load + ledger-sized pool + simulation + result arrays),
and prints min/median/max plus what was simulated.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parent.parent
DEFAULT_TRACE = REPO.parent / "shared" / "data" / "traces" / "splitwise_conv.csv"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--model", default="meta-llama/Llama-3.1-8B-Instruct")
    ap.add_argument("--gpu", default="H100")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if not args.trace.exists():
        print(f"trace not found: {args.trace}", file=sys.stderr)
        return 2
    try:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
        pinned = True
    except (AttributeError, OSError):
        pinned = False

    from kvdoctor.catalog.gpus import lookup_gpu
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.engine.config import EngineConfig
    from kvdoctor.engine.defaults import resolve
    from kvdoctor.ledger.build import build_ledger
    from kvdoctor.sim.whatif import run
    from kvdoctor.sim.workload import load_trace

    shape, gpu = lookup_model(args.model), lookup_gpu(args.gpu)
    resolved = resolve(EngineConfig(), shape, gpu)
    blocks = build_ledger(shape, gpu, resolved).num_blocks
    walls, cpus, result = [], [], None
    for _ in range(args.runs):
        t, c = time.perf_counter(), time.process_time()
        result = run(shape, gpu, resolved, blocks, load_trace(args.trace))
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)  # CPU seconds: what the run costs when the core is shared
    s = result.summary
    out = {
        "model": shape.name, "gpu": gpu.name, "trace": str(args.trace), "requests": s.requests,
        "num_gpu_blocks": blocks, "max_num_seqs": resolved.max_num_seqs,
        "max_num_batched_tokens": resolved.max_num_batched_tokens, "max_model_len": resolved.max_model_len,
        "pinned_one_cpu": pinned, "load_average": os.getloadavg(),
        "wall_s": {"min": min(walls), "median": statistics.median(walls), "max": max(walls)},
        "cpu_s": {"min": min(cpus), "median": statistics.median(cpus), "max": max(cpus)},
        "simulated_s": s.duration_s, "steps": s.steps,
        "ttft_p50_s": s.ttft_p50_s, "ttft_p99_s": s.ttft_p99_s, "tbt_p50_s": s.tbt_p50_s, "tbt_p99_s": s.tbt_p99_s,
        "e2e_p50_s": s.e2e_p50_s, "e2e_p99_s": s.e2e_p99_s, "output_tokens_per_s": s.output_tokens_per_s,
        "preemptions": s.preemptions,
    }
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        w = out["wall_s"]
        print(f"{s.requests} requests, {s.duration_s:.0f} s simulated in {s.steps} engine steps")
        print(f"wall (whole run incl. trace load): min {w['min']:.2f} s, median {w['median']:.2f} s, max {w['max']:.2f} s "
              f"({'one CPU' if pinned else 'not pinned'}, load average {out['load_average'][0]:.1f}); "
              f"CPU time min {min(cpus):.2f} s, median {statistics.median(cpus):.2f} s")
        print(f"TTFT p50/p99 {s.ttft_p50_s * 1e3:.1f}/{s.ttft_p99_s * 1e3:.1f} ms, TBT p50/p99 {s.tbt_p50_s * 1e3:.2f}/"
              f"{s.tbt_p99_s * 1e3:.2f} ms, E2E p50/p99 {s.e2e_p50_s:.2f}/{s.e2e_p99_s:.2f} s, "
              f"{s.output_tokens_per_s:.0f} output tok/s, {s.preemptions} preemptions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
