"""Log parser benchmark: speed vs ``grep -c 'KV cache usage'`` and peak RSS, on a generated big log.

Targets (issue 3): peak RSS < 300 MB and at least one third of grep's speed on a 1 GB log built
from the real line formats (benchmarks/gen_log.py). Also checks the parser's counts against what the
generator wrote (stats lines, v0 warnings, engine starts), so a fast wrong parser fails.

    python benchmarks/bench_parse.py --size 1G --runs 3
    python benchmarks/bench_parse.py --size 1G --gzip          # same log gzipped (decompression included)

Runs grep and the parser alternately in fresh processes (the page cache is warmed first) and
reports medians; on a shared machine, compare the two only within one run of this script.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

PARSER = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from kvdoctor.evidence.logs.reader import read_log
r = read_log(sys.argv[1])
dt = time.perf_counter() - t0
samples = sum(len(s.timeline) for s in r.segments if s.timeline is not None)
warnings = sum(1 for s in r.segments for e in s.events if e.kind == "preemption-warning")
print(json.dumps({"seconds": dt, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "samples": samples, "warnings": warnings, "starts": len(r.startups),
                  "engine_dead": sum(1 for s in r.segments for e in s.events if e.kind == "engine-dead"),
                  "total_lines": r.skipped.total_lines, "skipped": dict(r.skipped.reasons)}))
"""


def _wall(cmd: list[str]) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of the child processes, stdout)."""
    import resource

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    dt = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if out.returncode not in (0, 1):
        raise SystemExit(f"{cmd[0]} failed: {out.stderr[-500:]}")
    return dt, cpu, out.stdout


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", default="1G")
    ap.add_argument("--log", default="/tmp/kvdoctor-bench/vllm-{size}.log")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--rps", type=float, default=20.0, help="generator: requests/s per server")
    ap.add_argument("--dense", action="store_true", help="generator: stats lines only (worst case)")
    ap.add_argument("--gzip", action="store_true", help="benchmark the gzipped log (zcat | grep vs parser)")
    ap.add_argument("--json", dest="json_out", help="also write the result here")
    a = ap.parse_args(argv)
    log = a.log.format(size=a.size + ("-dense" if a.dense else ""))
    sys.path.insert(0, HERE)
    import gen_log

    if not os.path.exists(log) or not os.path.exists(log + ".expected.json"):
        print(f"generating {log} ({a.size}) ...", file=sys.stderr)
        os.makedirs(os.path.dirname(log), exist_ok=True)
        gen_log.generate(log, gen_log.parse_size(a.size), a.rps, False, a.dense, 1)
    expected = json.load(open(log + ".expected.json"))
    target = log
    if a.gzip:
        target = log + ".gz"
        if not os.path.exists(target):
            with open(log, "rb") as src, gzip.open(target, "wb", compresslevel=6) as dst:
                shutil.copyfileobj(src, dst, 16 << 20)
    with open(target, "rb") as fh:  # warm the page cache for both contenders
        while fh.read(64 << 20):
            pass
    grep_cmd = (["sh", "-c", f"zcat '{target}' | grep -c 'KV cache usage'"] if a.gzip
                else ["grep", "-c", "KV cache usage", target])
    py = [sys.executable, "-c", PARSER, target]
    env_ok = subprocess.run([sys.executable, "-c", "import kvdoctor"], capture_output=True).returncode == 0
    if not env_ok:
        raise SystemExit("kvdoctor is not importable by this interpreter (pip install -e .)")
    greps, parses, results, gcpu, pcpu = [], [], [], [], []
    for _ in range(a.runs):
        g, gc, gout = _wall(grep_cmd)
        p, pc, pout = _wall(py)
        greps.append(g)
        parses.append(p)
        gcpu.append(gc)
        pcpu.append(pc)
        results.append(json.loads(pout.strip().splitlines()[-1]))
    size = os.path.getsize(log)
    g_med, p_med = statistics.median(greps), statistics.median(parses)
    res = results[-1]
    out = {
        "log": log, "gzip": a.gzip, "bytes": size, "lines": res["total_lines"],
        "grep_s": greps, "parse_s": parses, "grep_median_s": g_med, "parse_median_s": p_med,
        "speed_ratio_vs_grep": g_med / p_med, "parse_mb_per_s": size / p_med / 1e6,
        # CPU seconds are less sensitive than wall time to other load on a shared machine
        "grep_cpu_s": gcpu, "parse_cpu_s": pcpu,
        "cpu_ratio_vs_grep": statistics.median(gcpu) / statistics.median(pcpu),
        "peak_rss_mb": max(r["rss_mb"] for r in results),
        "counts_ok": (res["samples"] == expected["stats_lines"] and res["warnings"] == expected["warnings"]
                      and res["starts"] == expected["starts"]),
        "parser": res, "expected": expected,
        "load_average": os.getloadavg(),
    }
    print(json.dumps(out, indent=2))
    verdict = (f"ratio {out['speed_ratio_vs_grep']:.2f} of grep's speed (wall; CPU-time ratio "
               f"{out['cpu_ratio_vs_grep']:.2f}; target >= 0.33), peak RSS "
               f"{out['peak_rss_mb']:.0f} MB (target < 300), counts {'ok' if out['counts_ok'] else 'WRONG'}")
    print(verdict, file=sys.stderr)
    if a.json_out:
        with open(a.json_out, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
