#!/usr/bin/env python3
"""How much vLLM's per-request lines cost the log reader (evidence/logs/requests.py).

    python benchmarks/bench_request_lines.py [--mb 200] [--runs 3]

Writes two logs under /tmp/kvdoctor-bench/: one v1 stats line a second, and the same with three requests a second,
each logged as vLLM 0.33 does with --enable-log-requests (a ``Received request ...: params: SamplingParams(...)``
line and an ``Added request <id>-<8 chars>.`` line). Times ``read_log`` on each in fresh processes and checks the
request count it read. Target: the request lines cost at most ~5 us each on the development box.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

STATS = ("INFO {md} {hms} [loggers.py:87] Engine 000: Avg prompt throughput: 10.8 tokens/s, Avg generation throughput: "
         "34.3 tokens/s, Running: {r} reqs, Waiting: {w} reqs, GPU KV cache usage: 12.5%, Prefix cache hit rate: 0.0%\n")
RECEIVED = ("INFO {md} {hms} [logger.py:66] Received request chatcmpl-{i:032x}: params: SamplingParams(n=1, "
            "presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, temperature=0.7, top_p=1.0, top_k=0, "
            "min_p=0.0, seed=None, stop=[], stop_token_ids=[], bad_words=[], include_stop_str_in_output=False, "
            "ignore_eos=False, max_tokens={mt}, min_tokens=0, logprobs=None), lora_request: None.\n")
ADDED = "INFO {md} {hms} [async_llm.py:300] Added request chatcmpl-{i:032x}-a1b2c3d4.\n"


def generate(path: str, mb: int, requests: bool) -> int:
    n = t = 0
    with open(path, "w") as f:
        while f.tell() < mb * 1_000_000:
            t += 1
            md = f"{1 + t // 2_000_000:02d}-{1 + (t // 86400) % 20:02d}"
            hms = f"{(t // 3600) % 24:02d}:{(t // 60) % 60:02d}:{t % 60:02d}"
            f.write(STATS.format(md=md, hms=hms, r=t % 8, w=t % 3))
            if requests:
                for _ in range(3):
                    n += 1
                    f.write(RECEIVED.format(md=md, hms=hms, i=n, mt=(128, 512, 2048)[n % 3]))
                    f.write(ADDED.format(md=md, hms=hms, i=n))
    return n


def timed(path: str) -> tuple[float, int]:
    code = ("import json, sys; from kvdoctor.evidence.logs.reader import read_log; r = read_log(sys.argv[1]); "
            "print(json.dumps(r.requests.received if r.requests else 0))")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, path], check=True, capture_output=True, text=True).stdout
    return time.perf_counter() - t0, json.loads(out)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=200)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    os.makedirs("/tmp/kvdoctor-bench", exist_ok=True)
    with_req, stats_only = "/tmp/kvdoctor-bench/requests.log", "/tmp/kvdoctor-bench/requests-stats-only.log"
    n = generate(with_req, a.mb, True)
    generate_stats = sum(1 for _ in open(with_req)) - 2 * n
    with open(stats_only, "w") as f:  # the same stats lines alone
        for line in open(with_req):
            if "Avg prompt" in line:
                f.write(line)
    for k in range(a.runs):
        ts, _ = timed(stats_only)
        tr, got = timed(with_req)
        assert got == n, (got, n)
        print(f"run {k + 1}: stats only {ts:.2f} s; with {2 * n:,} request lines {tr:.2f} s "
              f"({(tr - ts) / (2 * n) * 1e6:.1f} us per request line; {generate_stats:,} stats lines in both)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
