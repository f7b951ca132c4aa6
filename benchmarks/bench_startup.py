#!/usr/bin/env python
"""Wall time of ``kvdoctor ledger --model meta-llama/Llama-3.1-8B-Instruct --gpu H100`` (target < 0.3 s).

Runs the command with the real interpreter (``sys.executable``, not a pyenv shim) and, when present, the
installed ``kvdoctor`` entry-point script; prints min / median / max over ``--runs`` and the top
``python -X importtime`` offenders (cumulative and self). Results are recorded by hand in
benchmarks/README.md ("## CLI start-up"). Not a test: timings depend on the machine and its load.

Usage: python benchmarks/bench_startup.py [--runs 15] [--top 12]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time

ARGS = ["ledger", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100"]
TARGET_S = 0.3


def wall(cmd: list[str], runs: int) -> list[float]:
    env = {**os.environ, "NO_COLOR": "1"}
    subprocess.run(cmd, capture_output=True, env=env, check=True)  # warm the page cache and .pyc files
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, env=env, check=True)
        out.append(time.perf_counter() - t0)
    return out


def importtime(top: int) -> tuple[list[tuple[int, int, str]], int]:
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "kvdoctor", *ARGS], capture_output=True, text=True)
    rows = []
    for line in p.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cum_us, name = line.replace("import time:", "").split("|", 2)
        rows.append((int(self_us), int(cum_us), name.rstrip()[1:]))  # keep the indent: it marks nesting
    total = sum(r[0] for r in rows)
    return rows, total


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    cmds = {"python -m kvdoctor": [sys.executable, "-m", "kvdoctor", *ARGS]}
    script = shutil.which("kvdoctor")
    if script:
        cmds["kvdoctor (entry point)"] = [script, *ARGS]
    print(f"interpreter: {sys.executable}")
    for label, cmd in cmds.items():
        ts = wall(cmd, a.runs)
        med = statistics.median(ts)
        flag = "OK" if med < TARGET_S else "OVER TARGET"
        print(f"{label:28s} min {min(ts):.3f} s  median {med:.3f} s  max {max(ts):.3f} s  ({a.runs} runs; "
              f"target {TARGET_S} s: {flag})")
    rows, total = importtime(a.top)
    print(f"\nimports: {total / 1e6:.3f} s self-time in total; top {a.top} by cumulative time (top-level only):")
    top_level = [r for r in rows if not r[2].startswith(" ")]
    for self_us, cum_us, name in sorted(top_level, key=lambda r: -r[1])[: a.top]:
        print(f"  {cum_us / 1e3:8.1f} ms cumulative  {self_us / 1e3:7.1f} ms self  {name}")
    print(f"\ntop {a.top} by self time:")
    for self_us, cum_us, name in sorted(rows, key=lambda r: -r[0])[: a.top]:
        print(f"  {self_us / 1e3:8.1f} ms self  {name.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
