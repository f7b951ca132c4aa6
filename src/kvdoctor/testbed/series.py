"""One calibration series on the real CPU engine: ONE server session, a short calibration run and
other loads interleaved with it, every run saved with ``--save-detailed``.

Why one session, interleaved: on a shared machine the host's speed drifts between sessions (the
same load, repeated 16 minutes later in the first recorded series, moved by 8-30 %), so a
calibration must be checked against loads measured in the same stretch of time as the run it was
fitted on. The last run repeats the calibration run's load (other prompts: another seed) and
measures what drift the session itself had.

The series and the tolerance the tests apply are fixed HERE, before any run is looked at
(``tests/realvllm/test_calibration_live.py`` runs it live; ``scripts/realvllm_calibration_series.py``
records the frozen copy in ``tests/fixtures/realvllm_bench/series1/``). Each run uses its own seed:
the bench's random prompts depend only on the seed, so two runs with one seed would send the same
prompts and the second would hit the first one's prefix cache.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kvdoctor.experiment.load import LoadSpec
from kvdoctor.testbed.scenarios import COMMON_ENV, COMMON_FLAGS

# the server: the first recorded series' configuration (tests/fixtures/realvllm_bench/README.md)
SERVER_FLAGS = ["--max-model-len", "512", "--max-num-seqs", "8", "--max-num-batched-tokens", "2048",
                "--num-gpu-blocks-override", "256", *COMMON_FLAGS]
# scheduler limits of that server, for the simulator (prefix caching and chunked prefill on: vLLM's defaults)
SCHED = {"num_blocks": 256, "block_size": 32, "max_model_len": 512, "max_num_seqs": 8, "max_num_batched_tokens": 2048}
# the tiny model's tokenizer adds no special token (no post-processor): the server's prompt is the bench's
SPECIAL_TOKENS = 0


@dataclass(frozen=True)
class SeriesRun:
    name: str
    load: LoadSpec
    role: str  # "calibration" | "validation" | "drift"


SERIES: tuple[SeriesRun, ...] = (
    SeriesRun("cal_c4", LoadSpec(prompt_len=128, output_len=64, requests=40, max_concurrency=4, seed=10),
              "calibration"),
    # Poisson at a middle load
    SeriesRun("val_r4", LoadSpec(prompt_len=128, output_len=64, requests=60, rate=4.0, seed=11), "validation"),
    # another concurrency and other lengths (longer prompts, shorter outputs, spread lengths)
    SeriesRun("val_c12_in256", LoadSpec(prompt_len=256, output_len=32, range_ratio=0.25, requests=48,
                                        max_concurrency=12, seed=12), "validation"),
    # bursty arrivals (gamma, burstiness 0.5 = CV 1.41) at twice the rate
    SeriesRun("val_g8", LoadSpec(prompt_len=128, output_len=64, requests=60, rate=8.0, arrival="gamma",
                                 cv=2 ** 0.5, seed=13), "validation"),
    # the calibration run's load again (other prompts): the drift within this session
    SeriesRun("drift_c4", LoadSpec(prompt_len=128, output_len=64, requests=40, max_concurrency=4, seed=14), "drift"),
)
# the bar, applied to every validation run: output throughput, mean TTFT, mean TPOT
TOLERANCE = 0.10


def sched_totals(pgid: int) -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) summed over every thread of every live
    process in group ``pgid``, from the kernel's ``/proc/<pid>/task/<tid>/schedstat`` (fields 1 and 2, ns).
    The ratio of their increments over a run is how much the host stretched the engine's time."""
    import os

    run = wait = 0
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open(f"/proc/{e}/stat", "rb") as f:
                st = f.read().decode("ascii", "replace")
            if int(st[st.rfind(")") + 2:].split()[2]) != pgid:
                continue
            for t in os.listdir(f"/proc/{e}/task"):
                with open(f"/proc/{e}/task/{t}/schedstat") as f:
                    a, b, *_ = f.read().split()
                run, wait = run + int(a), wait + int(b)
        except (OSError, ValueError, IndexError):
            continue  # a process or thread that ended meanwhile
    return run / 1e9, wait / 1e9


def host_stretch(before: tuple[float, float], after: tuple[float, float]) -> dict:
    """How much longer the server's threads took than their CPU time alone: (run + wait) / run over one
    bench run (1.0: every thread got a CPU whenever it was ready)."""
    run, wait = after[0] - before[0], after[1] - before[1]
    return {"cpu_s": round(run, 3), "runqueue_wait_s": round(wait, 3),
            "stretch": round((run + wait) / run, 4) if run > 0 else None}


def bench_argv(vllm: str, base_url: str, model: str, load: LoadSpec, out_dir: Path, name: str) -> list[str]:
    return [vllm, "bench", "serve", "--backend", "vllm", "--base-url", base_url, "--model", model,
            *load.bench_args(out_dir), "--percentile-metrics", "ttft,tpot,itl,e2el",
            "--save-result", "--save-detailed", "--result-dir", str(out_dir), "--result-filename", f"{name}.json"]


def record_series(tb, out_dir: Path, *, runs: tuple[SeriesRun, ...] = SERIES, health_timeout_s: float = 600.0,
                  bench_timeout_s: float = 600.0, log: Callable[[str], None] | None = None) -> dict:
    """Start one server on 127.0.0.1, run every load of ``runs`` against it in order, stop it (also on
    failure). Writes ``<name>.json`` per run, ``serve.log`` and ``series.json`` (what ran, when, how
    long); returns the series.json content. Never leaves a process it started."""
    from kvdoctor.experiment.server import free_port, spawn, start_server, terminate_as_interrupt

    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    out_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = tb.env(**COMMON_ENV)
    argv = [str(tb.vllm), "serve", str(tb.model), *SERVER_FLAGS, "--host", "127.0.0.1", "--port", str(port)]
    meta: dict = {"serve_argv": ["vllm", "serve", "$TESTBED/tiny", *SERVER_FLAGS], "env": COMMON_ENV,
                  "vllm": tb.info.get("vllm_version"), "runs": [], "status": "incomplete"}
    server = None
    with terminate_as_interrupt():
        try:
            t0 = time.monotonic()
            server = start_server(argv, env=env, host="127.0.0.1", port=port, log_path=out_dir / "serve.log",
                                  health_timeout_s=health_timeout_s, log=log)
            meta["ready_s"] = round(time.monotonic() - t0, 1)
            log(f"[series] server ready after {meta['ready_s']} s")
            for r in runs:
                s0 = sched_totals(server.managed.pgid)
                b = spawn(bench_argv(str(tb.vllm), server.base_url, str(tb.model), r.load, out_dir, r.name),
                          env=env, log_path=out_dir / f"{r.name}.bench.log")
                t1 = time.monotonic()
                try:
                    while b.proc.poll() is None:
                        if server.managed.proc.poll() is not None:
                            raise RuntimeError(f"vLLM died during {r.name} (see {out_dir / 'serve.log'})")
                        if time.monotonic() - t1 > bench_timeout_s:
                            raise RuntimeError(f"{r.name}: the bench did not finish in {bench_timeout_s:.0f} s")
                        time.sleep(0.5)
                finally:
                    b.stop(grace_s=5.0)
                host = host_stretch(s0, sched_totals(server.managed.pgid))
                if b.proc.returncode != 0 or not (out_dir / f"{r.name}.json").exists():
                    raise RuntimeError(f"{r.name}: vllm bench serve failed (see {out_dir / f'{r.name}.bench.log'})")
                meta["runs"].append({"name": r.name, "role": r.role, "bench_args": r.load.bench_args(out_dir),
                                     "wall_s": round(time.monotonic() - t1, 1), "ended_at": time.time(),
                                     "host": host})
                log(f"[series] {r.name} done in {meta['runs'][-1]['wall_s']} s (host stretch {host['stretch']})")
            meta["status"] = "complete"
        except Exception as exc:  # noqa: BLE001 - reported in series.json and re-raised below
            meta["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            if server is not None:
                meta["stop"] = server.stop(log=log)
            (out_dir / "series.json").write_text(json.dumps(meta, indent=1) + "\n")
    if meta["status"] != "complete":
        raise RuntimeError(meta.get("error", "series incomplete"))
    return meta


def load_series_runs(directory: Path, host_corrected: bool = False) -> list:
    """The series' runs as ``sim.calibration.BenchRun`` s, in series order: wall-clock figures as the bench
    reported them, or (``host_corrected``) each with the host stretch series.json recorded for it applied
    (docs/simulation.md: it did not explain the drift, so it is not the default)."""
    from kvdoctor.sim.calibration import load_bench_runs

    meta = json.loads((Path(directory) / "series.json").read_text())
    runs = load_bench_runs([str(Path(directory) / f"{r['name']}.json") for r in meta["runs"]],
                           special_tokens=SPECIAL_TOKENS)
    for run, r in zip(runs, meta["runs"]):
        st = (r.get("host") or {}).get("stretch")
        if host_corrected and st:
            run.host_stretch = float(st)
    return runs


def calibrate_series(runs: list, fit_on: str = "cal_c4"):
    """Calibrate (linear CPU-engine model) on the one calibration run; every other run is held out."""
    from kvdoctor.sim import calibration as C
    from kvdoctor.sim.scheduler import SchedConfig

    return C.calibrate(runs, C.Setup(cfg=SchedConfig(**SCHED)), kind="linear", fit_on=[f"{fit_on}.json"])
