"""A real engine death on the test bed: the ``healthy_full`` scenario's server under load, its EngineCore killed.

What the kernel's OOM killer does to a serving host that runs out of RAM: SIGKILL to the engine core process. The
API server then logs the death as vLLM does in production ("engine core exited unexpectedly", an EngineDeadError
per request in flight). The engine core is found in the process group of the server started here (a child of it):
nothing outside that group is touched. Used by scripts/realvllm_engine_crash.py (the frozen fixture
tests/fixtures/realvllm/engine_killed) and the live test tests/realvllm/test_engine_crash_live.py.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from kvdoctor.testbed.build import TestBed


def _is_engine_core(pid: int) -> bool:
    # vLLM names its processes with setproctitle ("VLLM::EngineCore"); comm holds the first 15 bytes
    for f in ("cmdline", "comm"):
        try:
            if b"EngineCore" in Path(f"/proc/{pid}/{f}").read_bytes():
                return True
        except OSError:
            pass
    return False


def _max_running(log: Path) -> int:
    try:
        return max((int(m) for m in re.findall(r"Running: (\d+) reqs", log.read_text(errors="replace"))), default=0)
    except OSError:
        return 0


def record(tb: TestBed, out: Path, *, kill_engine: bool = True, serve_for_s: float = 3.0,
           log: Callable[[str], None] = lambda m: None) -> dict:
    """Serve ``healthy_full``'s load, then (``kill_engine``) SIGKILL the engine core once requests run, or stop the
    server with SIGINT as an operator would. Writes serve.log, bench.log, bench.json (when the client wrote one) and
    crash.json into ``out``; returns crash.json's content. Both process groups are stopped before it returns."""
    from kvdoctor.experiment.measure import bench_argv, serve_argv
    from kvdoctor.experiment.server import free_port, group_members, spawn, start_server
    from kvdoctor.testbed.scenarios import SCENARIOS

    sc = SCENARIOS["healthy_full"]
    load = replace(sc.load, requests=64)  # long enough to be killed mid-run
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    argv = serve_argv([str(tb.vllm)], str(tb.model), sc.all_flags(), "127.0.0.1", port)
    server = start_server(argv, env=tb.env(**sc.env), host="127.0.0.1", port=port, log_path=out / "serve.log",
                          health_timeout_s=600, log=log)
    info: dict = {"serve_line": sc.serve_line("$TESTBED/tiny"), "load": load.as_dict(), "killed": None,
                  "groups": {"server": server.managed.pgid}}
    bench = None
    try:
        bench = spawn(bench_argv([str(tb.vllm)], server.base_url, str(tb.model), load, out), env=tb.env(),
                      log_path=out / "bench.log")
        info["groups"]["bench"] = bench.pgid
        t0 = time.monotonic()
        while _max_running(out / "serve.log") == 0 and time.monotonic() - t0 < 300 and server.managed.alive():
            time.sleep(0.5)
        time.sleep(serve_for_s)  # a few stats lines of steady serving before the end
        if kill_engine:
            engines = [p for p in group_members(server.managed.pgid) if _is_engine_core(p)]
            if not engines:
                raise RuntimeError(f"no EngineCore process in the server's group {server.managed.pgid}")
            os.kill(engines[0], signal.SIGKILL)
            info["killed"] = {"pid": engines[0], "signal": "SIGKILL", "after_s": round(time.monotonic() - t0, 1)}
            t1 = time.monotonic()
            while server.managed.alive() and time.monotonic() - t1 < 60:
                time.sleep(0.5)
            info["server_exit_s"] = round(time.monotonic() - t1, 1)
            info["server_returncode"] = server.managed.proc.poll()
    finally:
        if bench is not None:
            info["bench_stop"] = bench.stop(grace_s=5)
        info["server_stop"] = server.stop()
    (out / "crash.json").write_text(json.dumps(info, indent=1) + "\n")
    return info
