#!/usr/bin/env python3
"""How long `kvdoctor calibrate` takes on a long closed loop: a `vllm bench serve --max-concurrency 64` result of
20,000 requests (128 in / 128 out), the size of GuideLLM's six-minute throughput run that took 12 minutes to fit
before long closed loops were fitted on a steady slice (docs/simulation.md, "kvdoctor calibrate").

    python benchmarks/bench_calibrate_long.py [--requests 20000] [--concurrency 64] [--runs 1]

Writes /tmp/kvdoctor-bench/closed-loop-<requests>.json (its figures are the public run's: 7,251.6 output tok/s, mean TTFT
26.0 ms, mean TPOT 8.6 ms; at another --concurrency the throughput those latencies give; lengths rebuilt from the
totals, as for a result saved without --save-detailed), then times
``kvdoctor calibrate`` on it in a fresh process and prints what the fit re-simulated and the whole run's error.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def write_result(path: str, n: int, c: int) -> None:
    ttft, tpot = 26.0, 8.6
    e2e = ttft + 127 * tpot
    # the public run's throughput at its concurrency of 64; at another, what Little's law gives for the same latencies
    tput = 7251.6 if c == 64 else c * 128 / (e2e / 1e3)
    doc = {"backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B", "num_prompts": n, "request_rate": "inf",
           "burstiness": 1.0, "max_concurrency": c, "completed": n, "failed": 0,
           "total_input_tokens": 128 * n, "total_output_tokens": 128 * n, "duration": 128 * n / tput,
           "request_throughput": tput / 128, "output_throughput": tput,
           "mean_ttft_ms": ttft, "median_ttft_ms": ttft, "mean_tpot_ms": tpot, "median_tpot_ms": tpot,
           "mean_e2el_ms": e2e, "median_e2el_ms": e2e}
    with open(path, "w") as f:
        json.dump(doc, f)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=20000)
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--runs", type=int, default=1)
    a = ap.parse_args()
    os.makedirs("/tmp/kvdoctor-bench", exist_ok=True)
    src = f"/tmp/kvdoctor-bench/closed-loop-{a.requests}.json"
    write_result(src, a.requests, a.concurrency)
    walls = []
    for _ in range(a.runs):
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "cal.json")
            t = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "kvdoctor", "calibrate", src, "-m", "meta-llama/Llama-3.1-8B",
                                "--gpu", "A100-80GB", "--max-num-seqs", str(a.concurrency), "-o", out, "--quiet"],
                               capture_output=True, text=True)
            walls.append(time.perf_counter() - t)
            if p.returncode:
                print(p.stderr, file=sys.stderr)
                return 1
            fit = json.load(open(out))["fit"]
    err = next(iter(fit["runs"].values()))["error"]
    print(json.dumps({"requests": a.requests, "concurrency": a.concurrency,
                      "steady_slices": fit.get("steady_slices"),
                      "wall_s": {"min": round(min(walls), 1), "median": round(statistics.median(walls), 1)},
                      "whole_run_error": {k: round(err[k], 4) for k in ("output_throughput", "mean_ttft_ms",
                                                                        "mean_tpot_ms") if k in err},
                      "loadavg": os.getloadavg()[0]}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
