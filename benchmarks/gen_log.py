"""Build a big vLLM log from the real line formats, for the parser benchmark.

The line templates are the real formats of shared/data/real (runtime_logs.jsonl, kv_capacity_cases.jsonl)
and vllm-reference.md §0/§1/§8: v1 stats lines of several DP engines behind one API server (with and
without ``Preemptions:``), uvicorn access lines, request logging, SpecDecoding lines, a v0 server
section (v0 stats line, ``total_num_cumulative_preemption`` warnings every 50th preemption), engine
(re)starts with 0.33 / 0.2x / v0 start-up blocks, ERROR bursts with a traceback, and hostile lines:
terminal-wrapped and glued stats lines, NUL runs, invalid UTF-8, binary junk, a 200 KB line.
Timestamps start on 12-31 so the log crosses New Year (year rollover).

A realistic mix: per 10 s stats interval and engine, ``--rps`` requests/s give that many access
lines (and, with ``--log-requests``, "Received/Added request" lines), so stats lines are a few percent of
the lines — as in a production log. ``--dense`` writes stats lines only (the worst case for the parser).

Writes ``<out>`` and ``<out>.expected.json`` (how many stats lines / warnings / starts were written) so
the benchmark can check the parser's counts, not only its speed.

    python benchmarks/gen_log.py /tmp/kvdoctor-bench/vllm-1g.log --size 1G
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

STATS_V1 = ("(APIServer pid=1) INFO {ts} [loggers.py:271] Engine {eng:03d}: Avg prompt throughput: {p:.1f} tokens/s, "
            "Avg generation throughput: {g:.1f} tokens/s, Running: {r} reqs, Waiting: {w} reqs, {pre}"
            "GPU KV cache usage: {kv:.1f}%, Prefix cache hit rate: {h:.1f}%")
STATS_V0 = ("INFO {ts} metrics.py:486] Avg prompt throughput: {p:.1f} tokens/s, Avg generation throughput: {g:.1f} "
            "tokens/s, Running: {r} reqs, Swapped: 0 reqs, Pending: {w} reqs, GPU KV cache usage: {kv:.1f}%, "
            "CPU KV cache usage: 0.0%.")
WARN_V0 = ("WARNING {ts} scheduler.py:1754] Sequence group {sg} is preempted by PreemptionMode.RECOMPUTE mode because "
           "there is not enough KV cache space. This can affect the end-to-end performance. Increase "
           "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
           "total_num_cumulative_preemption={c}")
ACCESS = '(APIServer pid=1) INFO:     172.31.{a}.{b}:{port} - "POST /v1/chat/completions HTTP/1.1" 200 OK'
ACCESS_V0 = 'INFO:     10.0.{a}.{b}:{port} - "POST /v1/completions HTTP/1.1" 200 OK'
RECEIVED = ("(APIServer pid=1) INFO {ts} [logger.py:39] Received request chatcmpl-{rid:032x}: prompt: '<|im_start|>user\\n"
            "{text}<|im_end|>', params: SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, "
            "temperature=0.7, top_p=1.0, max_tokens={mt}), prompt_token_ids: None, lora_request: None.")
ADDED = "(APIServer pid=1) INFO {ts} [async_llm.py:228] Added request chatcmpl-{rid:032x}."
SPEC = ("(APIServer pid=1) INFO {ts} [metrics.py:101] SpecDecoding metrics: Mean acceptance length: 2.63, Accepted "
        "throughput: 76.80 tokens/s, Drafted throughput: 235.49 tokens/s, Accepted: 768 tokens, Drafted: 2355 "
        "tokens, Per-position acceptance rate: 0.726, 0.467, 0.240, Avg Draft acceptance rate: 32.6%")
START_033 = [
    "(APIServer pid=1) INFO {ts} [startup.py:96] non-default args: {{'model_tag': 'meta-llama/Llama-3.1-8B-Instruct', "
    "'model': 'meta-llama/Llama-3.1-8B-Instruct', 'max_model_len': 32768, 'gpu_memory_utilization': 0.92, "
    "'data_parallel_size': 2}}",
    "(EngineCore_DP0 pid={pid}) INFO {ts} [core.py:100] Initializing a V1 LLM engine (v0.33.0) with config: "
    "model='meta-llama/Llama-3.1-8B-Instruct', dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=1, "
    "pipeline_parallel_size=1, data_parallel_size=2, kv_cache_dtype=auto, enable_prefix_caching=True",
    "(EngineCore_DP0 pid={pid}) INFO {ts} [model_runner.py:429] Model loading took 14.99 GiB memory and 5.312874 seconds",
    "(EngineCore_DP0 pid={pid}) INFO {ts} [gpu_worker.py:772] Available KV cache memory: {kv} GiB",
    "(EngineCore_DP0 pid={pid}) INFO {ts} [gpu_worker.py:787] CUDA graph memory profiling is enabled (default since "
    "v0.21.0). The current --gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization=0.9133 "
    "without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase "
    "--gpu-memory-utilization to 0.9267. To disable, set VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.",
    "(EngineCore_DP0 pid={pid}) INFO {ts} [kv_cache_utils.py:1147] GPU KV cache size: 451,344 tokens, Maximum "
    "concurrency for 32,768 tokens per request: 13.77x",
    "(EngineCore_DP0 pid={pid}) INFO {ts} [gpu_worker.py:1066] Free memory on device (78.62/79.19 GiB) on startup. "
    "Desired GPU memory utilization is (0.92, 72.86 GiB). Actual usage is 16.04 GiB for consumed memory (weights "
    "+ non-torch), 1.72 GiB for peak activation, and 0.49 GiB for CUDAGraph memory. Replace "
    "gpu_memory_utilization config with `--kv-cache-memory=58476102946` (54.46 GiB) to fit into requested "
    "memory, or `--kv-cache-memory=64664507517` (60.22 GiB) to fully utilize gpu memory. Current kv cache "
    "memory in use is {kv} GiB.",
    "(EngineCore_DP0 pid={pid}) INFO {ts} [core.py:411] init engine (profile, create kv cache, warmup model) took 61.20 s",
]
START_V0 = [
    "INFO {ts} llm_engine.py:70] Initializing an LLM engine (v0.6.3) with config: model='Qwen/Qwen2.5-7B-Instruct', "
    "dtype=torch.bfloat16, max_seq_len=32768, tensor_parallel_size=1, kv_cache_dtype=auto, seed=0",
    "INFO {ts} model_runner.py:1115] Loading model weights took 14.2487 GB",
    "INFO {ts} worker.py:266] Memory profiling takes 1.42 seconds",
    "INFO {ts} worker.py:266] the current vLLM instance can use total_gpu_memory (79.22GiB) x "
    "gpu_memory_utilization (0.90) = 71.29GiB",
    "INFO {ts} worker.py:266] model weights take 14.25GiB; non_torch_memory takes 0.30GiB; PyTorch activation "
    "peak memory takes 1.40GiB; the rest of the memory reserved for KV Cache is 55.34GiB.",
    "INFO {ts} executor_base.py:108] # cuda blocks: 64766, # CPU blocks: 4681",
    "INFO {ts} executor_base.py:113] Maximum concurrency for 32768 tokens per request: 31.62x",
]
ERROR_BURST = [
    "(EngineCore_DP1 pid={pid}) ERROR {ts} [core.py:843] EngineCore encountered a fatal error.",
    "(EngineCore_DP1 pid={pid}) ERROR {ts} [core.py:843] Traceback (most recent call last):",
    "(EngineCore_DP1 pid={pid}) ERROR {ts} [core.py:843]   File \"vllm/v1/engine/core.py\", line 834, in run_engine_core",
    "(EngineCore_DP1 pid={pid}) ERROR {ts} [core.py:843] torch.OutOfMemoryError: CUDA out of memory. Tried to "
    "allocate 2.00 GiB. GPU 1 has a total capacity of 79.19 GiB of which 1.50 GiB is free.",
]
WORDS = ("the quick brown fox jumps over a lazy dog while kv cache blocks fill and requests queue up for "
         "prefill then decode tokens stream out").split()


class Clock:
    DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

    def __init__(self):
        self.mon, self.day, self.s = 12, 31, 20 * 3600  # 12-31 20:00:00: New Year inside the log

    def tick(self, secs: int) -> None:
        self.s += secs
        while self.s >= 86400:
            self.s -= 86400
            self.day += 1
            if self.day > self.DAYS[self.mon - 1]:
                self.day, self.mon = 1, self.mon % 12 + 1

    def ts(self) -> str:
        h, r = divmod(self.s, 3600)
        m, s = divmod(r, 60)
        return f"{self.mon:02d}-{self.day:02d} {h:02d}:{m:02d}:{s:02d}"


def parse_size(text: str) -> int:
    t = text.strip().upper()
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    return int(float(t[:-1] if t[-1:] in "KMG" else t) * mult)


def generate(out: str, size: int, rps: float, log_requests: bool, dense: bool, seed: int) -> dict:
    rnd = random.Random(seed)
    clock = Clock()
    exp = {"stats_lines": 0, "stats_wrapped": 0, "stats_glued": 0, "warnings": 0, "starts": 0, "error_bursts": 0,
           "hostile_lines": 0, "bytes": 0}
    written = 0
    buf: list[str] = []
    pid = 1000
    era = "v1"
    kv = 60.0
    cum_pre = 0
    next_restart = size // 4
    next_v0 = size // 2
    next_back = 3 * size // 4
    next_hostile = 7 << 20
    next_error = 23 << 20

    with open(out, "wb") as fh:
        def flush() -> int:
            data = ("\n".join(buf) + "\n").encode()
            fh.write(data)
            buf.clear()
            return len(data)

        def start(kind: str) -> None:
            nonlocal pid
            pid += 7
            tpl = START_033 if kind == "v1" else START_V0
            kvg = f"{rnd.uniform(40, 56):.2f}".rstrip("0").rstrip(".")
            for line in tpl:
                buf.append(line.format(ts=clock.ts(), pid=pid, kv=kvg))
                clock.tick(1)
            exp["starts"] += 1

        start("v1")
        while written < size:
            clock.tick(10)
            ts = clock.ts()
            kv = min(99.9, max(0.0, kv + rnd.gauss(0, 3)))
            if era == "v1":
                for eng in (0, 1):
                    pre = rnd.random() < 0.05
                    line = STATS_V1.format(ts=ts, eng=eng, p=rnd.uniform(0, 8000), g=rnd.uniform(0, 3000),
                                           r=rnd.randint(0, 256), w=rnd.randint(0, 64),
                                           pre=f"Preemptions: {rnd.randint(1, 9)}, " if pre else "", kv=kv,
                                           h=rnd.uniform(0, 90))
                    roll = rnd.random()
                    if roll < 0.00005:  # terminal-wrapped at 120 columns (a pasted excerpt)
                        buf.extend(line[i:i + 120] for i in range(0, len(line), 120))
                        exp["stats_wrapped"] += 1
                    elif roll < 0.0001 and buf and "Avg prompt" in buf[-1]:  # newline lost: glued to the previous one
                        buf[-1] += line
                        exp["stats_glued"] += 1
                    else:
                        buf.append(line)
                    exp["stats_lines"] += 1
                if rnd.random() < 0.1:
                    buf.append(SPEC.format(ts=ts))
            else:
                buf.append(STATS_V0.format(ts=ts, p=rnd.uniform(0, 8000), g=rnd.uniform(0, 3000),
                                           r=rnd.randint(0, 256), w=rnd.randint(0, 64), kv=kv))
                exp["stats_lines"] += 1
                for _ in range(rnd.randint(0, 30)):  # preemptions this interval; warn on 1st, 51st, ...
                    cum_pre += 1
                    if cum_pre % 50 == 1:
                        buf.append(WARN_V0.format(ts=ts, sg=rnd.randint(1, 99999), c=cum_pre))
                        exp["warnings"] += 1
            if not dense:
                n = int(rnd.gauss(rps * 10, (rps * 10) ** 0.5))
                tpl = ACCESS if era == "v1" else ACCESS_V0
                for _ in range(max(0, n)):
                    buf.append(tpl.format(a=rnd.randint(0, 255), b=rnd.randint(0, 255), port=rnd.randint(30000, 60000)))
                    if log_requests and era == "v1":
                        rid = rnd.getrandbits(128)
                        text = " ".join(rnd.choice(WORDS) for _ in range(rnd.randint(5, 60)))
                        buf.append(RECEIVED.format(ts=ts, rid=rid, text=text, mt=rnd.randint(16, 2048)))
                        buf.append(ADDED.format(ts=ts, rid=rid))
            if len(buf) > 20000:
                written += flush()
                if written >= next_hostile:
                    next_hostile += 64 << 20
                    fh.write(b"\x00" * 4096 + b"\n" + bytes(rnd.getrandbits(8) for _ in range(2000)).replace(b"\n", b"")
                             + b"\n\xff\xfe\xc3\x28 invalid utf-8 INFO\n" + b"X" * 200_000 + b"\n")
                    exp["hostile_lines"] += 4
                if written >= next_error and era == "v1":
                    # an engine dies (OOM): the server goes down and is restarted two minutes later
                    next_error += 211 << 20
                    for line in ERROR_BURST:
                        buf.append(line.format(ts=clock.ts(), pid=pid + 1))
                    exp["error_bursts"] += 1
                    clock.tick(120)
                    start("v1")
                if written >= next_restart:
                    next_restart = size * 10
                    start("v1")
                if written >= next_v0 and era == "v1":
                    next_v0 = size * 10
                    era = "v0"
                    start("v0")
                if written >= next_back and era == "v0":
                    next_back = size * 10
                    era = "v1"
                    start("v1")
        written += flush()
    exp["bytes"] = written
    with open(out + ".expected.json", "w") as fh:
        json.dump(exp, fh, indent=2)
    return exp


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--size", default="1G", help="approximate size (e.g. 64M, 1G)")
    ap.add_argument("--rps", type=float, default=4.0, help="requests/s per server (access lines)")
    ap.add_argument("--log-requests", action="store_true", help="also write Received/Added request lines")
    ap.add_argument("--dense", action="store_true", help="stats lines only (worst case for the parser)")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args(argv)
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    exp = generate(a.out, parse_size(a.size), a.rps, a.log_requests, a.dense, a.seed)
    json.dump(exp, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
