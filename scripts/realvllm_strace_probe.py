#!/usr/bin/env python3
"""Where a decode step waits on this host (exploratory, issue 11; docs/simulation.md, "Where a step waits"): one
test-bed server as the live series runs it (SERVER_ENV: uni executor, one OpenMP thread; EngineCore pinned to the last
core), a long closed loop of 8 (so the batch stays full for the whole window), and `strace -f -c -w` attached to
EngineCore for a few seconds in the middle of it: the wall time each thread spent in each system call, the blocking
ones included. A second, short `strace -tt -T` of the step thread alone gives the order of its calls within a step.

    python scripts/realvllm_strace_probe.py OUT     # takes the test bed's servers.lock; ~2 min

strace slows every system call it sees, so the step is slower under it than without: the summary says where the
thread waits, not how long a step takes untraced (the bench figures of the same run, OUT/cl8.json, say that, with the
tracing window inside them). Not part of the series or any test."""
import fcntl
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from kvdoctor.experiment.load import LoadSpec
from kvdoctor.experiment.server import free_port, group_members, spawn, start_server, terminate_as_interrupt
from kvdoctor.testbed import ensure
from kvdoctor.testbed.series import SERVER_ENV, SERVER_FLAGS, bench_argv, pin_engine

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
LOAD = LoadSpec(prompt_len=128, output_len=64, requests=1600, max_concurrency=8, seed=30)
WINDOW_S = 6.0

tb = ensure(log=lambda m: print(m, file=sys.stderr, flush=True))
lock = open(tb.root / "servers.lock", "w")
fcntl.flock(lock, fcntl.LOCK_EX)
env = tb.env(**SERVER_ENV)
port = free_port()
argv = [str(tb.vllm), "serve", str(tb.model), *SERVER_FLAGS, "--host", "127.0.0.1", "--port", str(port)]
meta: dict = {"env": SERVER_ENV, "load": LOAD.__dict__, "window_s": WINDOW_S}
with terminate_as_interrupt():
    server = start_server(argv, env=env, host="127.0.0.1", port=port, log_path=out / "serve.log",
                          health_timeout_s=600, log=print)
    try:
        engine = [p for p in group_members(server.managed.pgid)
                  if Path(f"/proc/{p}/comm").read_text().strip().startswith("VLLM::EngineCor")]
        meta["engine_pid"] = engine[0]
        b = spawn(bench_argv(str(tb.vllm), server.base_url, str(tb.model), LOAD, out, "cl8"), env=env,
                  log_path=out / "cl8.bench.log")
        meta["pin"] = pin_engine(server.managed.pgid, [b.proc.pid])
        # the bench imports vLLM for ~20 s before its first request; wait for the engine to be busy
        log = out / "serve.log"
        t0 = time.monotonic()
        while "Running: 8 reqs" not in log.read_text(errors="replace") and time.monotonic() - t0 < 240:
            time.sleep(0.5)
        time.sleep(2.0)
        # first, untraced: the step thread's own scheduler accounting (run and run-queue wait, ns) and the engine
        # core's /proc/stat line (user/system/idle/steal ticks) over WINDOW_S, beside the wall clock
        core = meta["pin"].get("engine_core", [None])[0] if meta["pin"].get("pinned") else None

        def snap():
            run, wait, _ = (int(x) for x in Path(f"/proc/{engine[0]}/task/{engine[0]}/schedstat").read_text().split())
            cpu = next((ln.split() for ln in Path("/proc/stat").read_text().splitlines()
                        if core is not None and ln.startswith(f"cpu{core} ")), None)
            return time.monotonic(), run, wait, [int(x) for x in cpu[1:]] if cpu else None

        a = snap()
        time.sleep(WINDOW_S)
        z = snap()
        wall = z[0] - a[0]
        ticks = [y - x for x, y in zip(a[3], z[3])] if a[3] and z[3] else None
        meta["untraced"] = {"wall_s": wall, "step_thread_run_s": (z[1] - a[1]) / 1e9,
                            "step_thread_runqueue_wait_s": (z[2] - a[2]) / 1e9,
                            # /proc/stat columns: user nice system idle iowait irq softirq steal guest guest_nice
                            "engine_core_ticks": dict(zip(["user", "nice", "system", "idle", "iowait", "irq", "softirq",
                                                           "steal", "guest", "guest_nice"], ticks)) if ticks else None}
        print(json.dumps(meta["untraced"]), flush=True)
        # strace runs until interrupted: start it, let it watch WINDOW_S, then SIGINT it (it detaches cleanly)
        st = subprocess.Popen(["strace", "-f", "-c", "-w", "-o", str(out / "strace_summary.txt"), "-p", str(engine[0])],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(WINDOW_S)
        st.send_signal(2)
        st.wait(timeout=30)
        # the step thread is the process's main thread (tid == pid): its calls in order, with their durations
        st = subprocess.Popen(["strace", "-tt", "-T", "-o", str(out / "strace_main.txt"), "-p", str(engine[0])],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)
        st.send_signal(2)
        st.wait(timeout=30)
        threads = {}
        for tid in os.listdir(f"/proc/{engine[0]}/task"):
            try:
                threads[tid] = Path(f"/proc/{engine[0]}/task/{tid}/comm").read_text().strip()
            except OSError:
                pass
        meta["threads"] = threads
        while b.proc.poll() is None:
            time.sleep(0.5)
        meta["bench_rc"] = b.proc.returncode
    finally:
        meta["stop"] = server.stop(log=print)
        (out / "probe.json").write_text(json.dumps(meta, indent=1, default=str))
