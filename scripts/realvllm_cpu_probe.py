#!/usr/bin/env python3
"""The exploratory probe behind docs/simulation.md "Where the CPU goes" and the wave's per-step numbers (issue 11):
one test-bed server (the series' SERVER_ENV: OMP_NUM_THREADS=1 and, since series v3,
VLLM_ENABLE_V1_MULTIPROCESSING=0 — ``--v2`` runs version 2's env, with the Worker process; --enable-logging-iteration-details), runs warm (closed loop 8),
wave (closed loop 4, fixed 128/64: the synchronized wave), pois (Poisson 3/s), spread (closed loop 4, output
64 +- 75 %). A 25 Hz sampler sums /proc/<pid>/task/*/schedstat run and wait ns per process (the server's
process group: API server, EngineCore, Worker; and each bench client) into OUT/probe.json; the server log
holds one line per engine step.

    python scripts/realvllm_cpu_probe.py OUT [--v2]     # takes the test bed's servers.lock; ~4 min

Exploratory: not part of the series or any test."""
import fcntl, json, os, sys, threading, time
from pathlib import Path
from kvdoctor.testbed import ensure
from kvdoctor.testbed.scenarios import COMMON_ENV
from kvdoctor.testbed.series import SERVER_ENV, SERVER_ENV_V2, SERVER_FLAGS, bench_argv
from kvdoctor.experiment.load import LoadSpec
from kvdoctor.experiment.server import free_port, spawn, start_server, terminate_as_interrupt, group_members

V2 = "--v2" in sys.argv[2:]
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
RUNS = [("warm", LoadSpec(prompt_len=128, output_len=32, range_ratio=0.5, requests=16, max_concurrency=8, seed=20)),
        ("wave", LoadSpec(prompt_len=128, output_len=64, requests=32, max_concurrency=4, seed=21)),
        ("pois", LoadSpec(prompt_len=128, output_len=64, requests=36, rate=3.0, seed=22)),
        ("spread", LoadSpec(prompt_len=128, output_len=64, range_ratio=0.75, requests=32, max_concurrency=4, seed=23))]

def proc_ns(pid):
    run = wait = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                a, b, *_ = f.read().split()
            run += int(a); wait += int(b)
    except (OSError, ValueError):
        pass
    return run, wait

def role(pid):
    try:
        c = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        comm = open(f"/proc/{pid}/comm").read().strip()
    except OSError:
        return None
    return f"{comm}|{c[:80]}"

samples = []
stop = threading.Event()
watch = {}
def sampler():
    while not stop.is_set():
        t = time.monotonic()
        samples.append((t, {str(p): proc_ns(p) for p in list(watch)}))
        time.sleep(0.04)

tb = ensure(log=lambda m: print(m, file=sys.stderr, flush=True))
lock = open(tb.root / "servers.lock", "w"); fcntl.flock(lock, fcntl.LOCK_EX)
env = tb.env(**(SERVER_ENV_V2 if V2 else SERVER_ENV))
port = free_port()
argv = [str(tb.vllm), "serve", str(tb.model), *SERVER_FLAGS, "--enable-logging-iteration-details", "--host", "127.0.0.1", "--port", str(port)]
meta = {"runs": [], "roles": {}, "env": SERVER_ENV_V2 if V2 else SERVER_ENV}
th = threading.Thread(target=sampler, daemon=True)
with terminate_as_interrupt():
    server = start_server(argv, env=env, host="127.0.0.1", port=port, log_path=out / "serve.log", health_timeout_s=600, log=print)
    try:
        for p in group_members(server.managed.pgid):
            watch[p] = 1; meta["roles"][str(p)] = role(p)
        th.start()
        for name, load in RUNS:
            b = spawn(bench_argv(str(tb.vllm), server.base_url, str(tb.model), load, out, name), env=env, log_path=out / f"{name}.bench.log")
            watch[b.proc.pid] = 1; meta["roles"][str(b.proc.pid)] = "bench:" + name
            t1 = time.monotonic()
            while b.proc.poll() is None:
                time.sleep(0.2)
            watch.pop(b.proc.pid, None)
            meta["runs"].append({"name": name, "t0": t1, "t1": time.monotonic(), "bench_pid": b.proc.pid, "rc": b.proc.returncode})
            print(name, "done", round(time.monotonic() - t1, 1), flush=True)
    finally:
        stop.set()
        meta["stop"] = server.stop(log=print)
        meta["samples"] = samples
        (out / "probe.json").write_text(json.dumps(meta))
