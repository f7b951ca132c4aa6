#!/usr/bin/env python3
"""How long a long Prometheus window takes: a saved query_range reply of 8 instances over 24 h at a 15 s step.

    python benchmarks/bench_prometheus_file.py [--instances 8] [--hours 24] [--runs 3]

Writes /tmp/kvdoctor-bench/prom-<instances>x<hours>h.json (six vLLM families per instance: running, waiting, KV
usage near full, and the preemption, prompt and generation counters; seeded), then times ``kvdoctor evidence`` and
``kvdoctor diagnose`` on it in fresh processes. The file is what a live ``--prometheus`` query of that window would
read (the same ``series_to_segments``), at a finer step than the live query's ~1,000 points a series. Target: the
CLI answers such a window in about a second or two.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

FAMILIES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
            "vllm:num_preemptions_total", "vllm:prompt_tokens_total", "vllm:generation_tokens_total")


def generate(path: str, instances: int, hours: float, seed: int = 1) -> int:
    rnd = random.Random(seed)
    t0, n = 1764800000, int(hours * 3600 / 15)
    result = []
    for k in range(instances):
        lab = {"instance": f"10.0.0.{k}:8000", "job": "vllm", "model_name": "Qwen/Qwen3-8B", "engine": "0"}
        for name in FAMILIES:
            v, vals = 0.0, []
            for i in range(n):
                if name.endswith("_total"):
                    v += rnd.randint(0, 5) if "preemptions" in name else rnd.randint(500, 5000)
                elif "perc" in name:  # a saturated server, the case diagnose is run on: the pool near full
                    v = min(1.0, max(0.85, v + rnd.uniform(-0.02, 0.02)))
                else:
                    v = float(rnd.randint(0, 64))
                vals.append([t0 + 15 * i, repr(v)])
            result.append({"metric": {"__name__": name, **lab}, "values": vals})
    with open(path, "w") as f:
        json.dump({"status": "success", "data": {"resultType": "matrix", "result": result}}, f)
    return instances * len(FAMILIES) * n


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--instances", type=int, default=8)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args(argv)
    os.makedirs("/tmp/kvdoctor-bench", exist_ok=True)
    path = f"/tmp/kvdoctor-bench/prom-{a.instances}x{a.hours:g}h.json"
    points = generate(path, a.instances, a.hours)
    out = {"file": path, "bytes": os.path.getsize(path), "points": points}
    for verb in ("evidence", "diagnose"):
        walls = []
        for _ in range(a.runs):
            t = time.perf_counter()
            r = subprocess.run([sys.executable, "-m", "kvdoctor", verb, path, "-q"], capture_output=True, text=True)
            walls.append(time.perf_counter() - t)
            if r.returncode not in (0, 1):
                raise SystemExit(f"{verb} failed: {r.stderr[-400:]}")
        out[f"{verb}_s"] = walls
        out[f"{verb}_median_s"] = statistics.median(walls)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
