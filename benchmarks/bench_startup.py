#!/usr/bin/env python
"""Wall time of ``kvdoctor ledger --model meta-llama/Llama-3.1-8B-Instruct --gpu H100`` (target < 0.3 s).

Runs the command with the real interpreter (``sys.executable``, not a pyenv shim), the ``kvdoctor``
entry-point script installed next to it, and the ``kvdoctor`` first on PATH when that is another file
(a pyenv shim); prints min / median / max wall time and the child's CPU time
(user + sys, less sensitive to other processes on a shared box) over ``--runs``, the machine's load
average, ``python -c pass`` for scale, and the top ``python -X importtime`` offenders (cumulative and
self). Results are recorded by hand in benchmarks/README.md ("## CLI start-up"). Not a test: timings
depend on the machine and its load.

Bytecode: an installed package has ``.pyc`` files. In a shell with ``PYTHONDONTWRITEBYTECODE=1`` (the
shared development box) an editable checkout never gets them, and every run recompiles every kvdoctor
module (~60 ms more). The children run without that variable, so the warm-up run writes the cache
(``src/**/__pycache__``, git-ignored) and the timed runs see the package as installed.

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
ENV = {**os.environ, "NO_COLOR": "1"}


def wall(cmds: dict[str, list[str]], runs: int) -> dict[str, tuple[list[float], list[float]]]:
    """(wall seconds, child CPU seconds) per command and run. The commands are interleaved round by
    round, so a burst of load on the shared box hits all of them alike; one warm-up run each first
    (page cache, .pyc files)."""
    for cmd in cmds.values():
        subprocess.run(cmd, capture_output=True, env=ENV, check=True)
    out: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in cmds}
    for _ in range(runs):
        for label, cmd in cmds.items():
            before = os.times()
            t0 = time.perf_counter()
            subprocess.run(cmd, capture_output=True, env=ENV, check=True)
            out[label][0].append(time.perf_counter() - t0)
            after = os.times()
            out[label][1].append(after.children_user + after.children_system
                                 - before.children_user - before.children_system)
    return out


def importtime(top: int) -> tuple[list[tuple[int, int, str]], int]:
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "kvdoctor", *ARGS], capture_output=True, text=True,
                       env=ENV)
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
    ENV.pop("PYTHONDONTWRITEBYTECODE", None)
    cmds = {"python -m kvdoctor": [sys.executable, "-m", "kvdoctor", *ARGS]}
    # The console script pip wrote next to the interpreter; a `kvdoctor` found first on PATH may be a
    # pyenv shim (a bash script running `pyenv exec`, 0.1-0.2 s by itself), timed separately.
    script = os.path.join(os.path.dirname(sys.executable), "kvdoctor")
    if os.access(script, os.X_OK):
        cmds["kvdoctor (entry point)"] = [script, *ARGS]
    on_path = shutil.which("kvdoctor")
    if on_path and os.path.realpath(on_path) != os.path.realpath(script):
        cmds[f"kvdoctor via PATH ({'pyenv shim' if 'shims' in on_path else on_path})"] = [on_path, *ARGS]
    cmds["python -c pass (scale)"] = [sys.executable, "-c", "pass"]
    print(f"interpreter: {sys.executable}; bytecode cache on; "
          f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    for label, (ts, cpu) in wall(cmds, a.runs).items():
        med = statistics.median(ts)
        flag = "" if "scale" in label else f"; target {TARGET_S} s: {'OK' if med < TARGET_S else 'OVER TARGET'}"
        print(f"{label:34s} wall min {min(ts):.3f} s  median {med:.3f} s  max {max(ts):.3f} s | CPU min "
              f"{min(cpu):.3f} s  median {statistics.median(cpu):.3f} s  ({a.runs} runs{flag})")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
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
