"""One measured run: start vLLM with a configuration, drive the load with `vllm bench serve`, sample
/metrics while it runs, stop the server, and read what was measured.

Everything a run produces lands in its own directory and stays there, complete or not:

    serve.log            the server's whole stdout+stderr (the start-up log included)
    metrics_before.txt   /metrics right after /health answered
    metrics_after.txt    /metrics right after the load finished
    metrics_samples.jsonl  one line per second during the load: running, waiting, KV usage, preemptions
    bench.json           `vllm bench serve --save-result` (its own file name is fixed by us)
    bench.log            the bench client's output
    run.json             this run's record (status, reason, argv, timings, figures)

Invariant: ``measure_run`` never leaves a process it started running — the server and the bench client each
live in their own process group and both are stopped in ``finally`` (Ctrl-C included).
"""

from __future__ import annotations

import json
import math
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvdoctor.experiment.load import LoadSpec
from kvdoctor.experiment.probe import probe
from kvdoctor.experiment.server import (
    ExperimentError,
    Managed,
    Server,
    http_get,
    last_error_line,
    spawn,
    start_server,
)

_SAMPLE_RE = re.compile(r'^(vllm:[a-z_]+)(?:\{([^}]*)\})?\s+([-+0-9.eEinfINFNa]+)')
# the gauges/counters sampled during the load (names as vLLM 0.32/0.33 export them)
_SAMPLED = {
    "vllm:num_requests_running": "running",
    "vllm:num_requests_waiting": "waiting",
    "vllm:kv_cache_usage_perc": "kv_usage",
    "vllm:gpu_cache_usage_perc": "kv_usage",  # before 0.10
    "vllm:num_preemptions_total": "preemptions",
    "vllm:generation_tokens_total": "generation_tokens",
    "vllm:prompt_tokens_total": "prompt_tokens",
}
# read from the before/after scrapes only: every request's time from queued to first scheduled, as the engine
# measured it (a 1 Hz sample of the waiting gauge misses a queue that drains in a few seconds)
TOTALS = {
    "vllm:request_queue_time_seconds_sum": "queue_time_sum",
    "vllm:request_queue_time_seconds_count": "queue_time_count",
}
# the prefix cache's counters in prompt tokens (V1): hits over queries during the load
PREFIX = {
    "vllm:prefix_cache_hits_total": "prefix_hits",
    "vllm:prefix_cache_queries_total": "prefix_queries",
}


def metric_values(text: str, names: dict[str, str] = _SAMPLED) -> dict[str, float]:
    """Sum of each series in ``names`` over its labels (one engine here; several are summed, as a pool would)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("vllm:"):
            continue
        m = _SAMPLE_RE.match(line)
        if not m or m.group(1) not in names:
            continue
        try:
            v = float(m.group(3))
        except ValueError:
            continue
        if not math.isfinite(v):  # NaN / ±Inf is no reading: left out, as a missing series is (never a traceback)
            continue
        key = names[m.group(1)]
        out[key] = out.get(key, 0.0) + v
    return out


@dataclass
class RunResult:
    """What one run measured. ``status`` is ``complete`` or ``incomplete`` (then ``reason`` says why)."""

    label: str
    directory: Path
    status: str = "incomplete"
    reason: str | None = None
    reason_code: str | None = None
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    ready_s: float | None = None
    bench_s: float | None = None
    stop: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)
    samples: list[dict[str, float]] = field(default_factory=list)
    groups: dict[str, int] = field(default_factory=dict)  # "server"/"bench" -> process group id it ran in
    # serve.log's byte offsets when the load started and after the last scrape: the window whose periodic stats
    # lines the readout takes beside the /metrics samples (a starved sampler can miss a short load entirely)
    log_span: list[int] | None = None
    # the discarded warm-up load (--warmup-requests): {"requests", "seed", "s"}; None when none was sent
    warmup: dict[str, Any] | None = None
    # the host probe (experiment.probe) before and after the timed load: {"pre": {...}, "post": {...}}
    probes: dict[str, Any] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.status == "complete"

    def file(self, key: str) -> Path | None:
        p = self.files.get(key)
        return Path(p) if p and Path(p).exists() else None

    @classmethod
    def from_dir(cls, directory: Path, label: str | None = None) -> "RunResult":
        """A run read back from its folder (a copy moved elsewhere works: files are found by name)."""
        d = Path(directory)
        meta: dict[str, Any] = {}
        if (d / "run.json").exists():
            meta = json.loads((d / "run.json").read_text())
        names = {"serve_log": "serve.log", "metrics_before": "metrics_before.txt", "metrics_after": "metrics_after.txt",
                 "metrics_samples": "metrics_samples.jsonl", "bench": "bench.json", "bench_log": "bench.log",
                 "warmup_bench": "warmup/bench.json", "run": "run.json"}
        res = cls(label=label or meta.get("label") or d.name, directory=d, status=meta.get("status", "incomplete"),
                  reason=meta.get("reason"), reason_code=meta.get("reason_code"), argv=meta.get("argv", []),
                  env=meta.get("env", {}), ready_s=meta.get("ready_s"), bench_s=meta.get("bench_s"),
                  stop=meta.get("stop", {}), groups=meta.get("groups", {}), log_span=meta.get("serve_log_load_span"),
                  warmup=meta.get("warmup"), probes=meta.get("probes") or {},
                  files={k: str(d / v) for k, v in names.items() if (d / v).exists()})
        if (d / "metrics_samples.jsonl").exists():
            res.samples = [json.loads(x) for x in (d / "metrics_samples.jsonl").read_text().splitlines() if x.strip()]
        return res

    def as_dict(self) -> dict[str, Any]:
        return {"label": self.label, "directory": str(self.directory), "status": self.status,
                "reason": self.reason, "reason_code": self.reason_code, "argv": self.argv, "env": self.env,
                "ready_s": self.ready_s, "bench_s": self.bench_s, "stop": self.stop, "files": self.files,
                "samples": len(self.samples), "groups": self.groups, "serve_log_load_span": self.log_span,
                "warmup": self.warmup, "probes": self.probes}


class _Sampler(threading.Thread):
    """Scrapes /metrics every ``interval_s`` while the load runs (peak waiting/running/KV usage are
    gauges: a before/after pair of scrapes would miss them)."""

    def __init__(self, url: str, path: Path, interval_s: float = 1.0):
        super().__init__(daemon=True)
        self.url, self.path, self.interval_s = url, path, interval_s
        self.samples: list[dict[str, float]] = []
        self._halt = threading.Event()
        self.t0 = time.monotonic()

    def run(self) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            while not self._halt.is_set():
                status, body = http_get(self.url, timeout=2.0)
                if status == 200:
                    s = {"t": round(time.monotonic() - self.t0, 2), **metric_values(body)}
                    self.samples.append(s)
                    f.write(json.dumps(s) + "\n")
                    f.flush()
                self._halt.wait(self.interval_s)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=5)


def serve_argv(vllm_cmd: list[str], model: str, flags: list[str], host: str, port: int) -> list[str]:
    return [*vllm_cmd, "serve", model, *flags, "--host", host, "--port", str(port)]


def bench_argv(vllm_cmd: list[str], base_url: str, model: str, load: LoadSpec, out_dir: Path,
               served_name: str | None = None, tokenizer: str | None = None) -> list[str]:
    argv = [*vllm_cmd, "bench", "serve", "--backend", "vllm", "--base-url", base_url,
            "--model", served_name or model, *load.bench_args(out_dir),
            "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,90,99",
            "--save-result", "--result-dir", str(out_dir), "--result-filename", "bench.json"]
    if tokenizer or served_name:
        argv += ["--tokenizer", tokenizer or model]
    return argv


def measure_run(label: str, out_dir: Path, *, vllm_cmd: list[str], model: str, flags: list[str],
                env: dict[str, str], load: LoadSpec, host: str = "127.0.0.1", port: int,
                health_timeout_s: float = 600.0, bench_timeout_s: float = 1800.0,
                served_name: str | None = None, tokenizer: str | None = None,
                log: Callable[[str], None] = lambda m: None, attach_url: str | None = None,
                warmup: LoadSpec | None = None, host_probe: bool = False) -> RunResult:
    """Start, load, scrape, stop. With ``attach_url`` no server is started or stopped: the load goes to
    that server (measure-only) and its /metrics are scraped. ``warmup``: a load sent first and discarded (its own
    ``warmup/`` folder), before /metrics is scraped, so the counters, samples and log span are the timed load's alone.
    ``host_probe``: time a lone decode (experiment.probe) after the warm-up and again after the last scrape, outside
    the timed load's counters and log window (an experiment's default; off for the test bed's scenario runs, whose
    logs stand for an operator's and must hold the load's requests only).
    Raises nothing for a run that fails: the RunResult says why, and every file
    written so far stays. KeyboardInterrupt is re-raised after the processes are stopped and run.json written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    res = RunResult(label=label, directory=out_dir)
    res.argv = serve_argv(vllm_cmd, model, flags, host, port) if attach_url is None else []
    res.env = {k: v for k, v in env.items() if k.startswith("VLLM_")}
    res.files["serve_log"] = str(out_dir / "serve.log")
    server: Server | None = None
    bench: Managed | None = None
    sampler: _Sampler | None = None
    interrupted: BaseException | None = None
    try:
        if attach_url is None:
            log(f"[{label}] starting: {' '.join(res.argv)}")
            server = start_server(res.argv, env=env, host=host, port=port, log_path=out_dir / "serve.log",
                                  health_timeout_s=health_timeout_s, log=log)
            res.ready_s = server.ready_s
            res.groups["server"] = server.managed.pgid
            log(f"[{label}] ready after {server.ready_s} s at {server.base_url}")
            target = server
        else:
            res.files.pop("serve_log", None)
            target = _Attached(attach_url.rstrip("/"))
            status, _ = http_get(f"{target.base_url}/health", timeout=5.0)
            if status != 200:
                raise ExperimentError(f"--attach {attach_url}: /health did not answer 200 (got "
                                      f"{status or 'no answer'})", "attach-unreachable")
        if warmup is not None:
            wdir = out_dir / "warmup"
            wdir.mkdir(exist_ok=True)
            log(f"[{label}] warm-up (discarded): {warmup.describe()}")
            bench, secs = _bench(bench_argv(vllm_cmd, target.base_url, model, warmup, wdir, served_name, tokenizer),
                                 env, wdir, server, bench_timeout_s, "the warm-up",
                                 on_start=lambda b: res.groups.__setitem__("warmup_bench", b.pgid))
            if bench.proc.returncode != 0 or not (wdir / "bench.json").exists():
                raise ExperimentError(f"the warm-up's `vllm bench serve` failed (exit {bench.proc.returncode}): "
                                      f"{last_error_line(wdir / 'bench.log')} (full log: {wdir / 'bench.log'})",
                                      "bench-failed")
            res.files["warmup_bench"] = str(wdir / "bench.json")
            res.warmup = {"requests": warmup.requests, "seed": warmup.seed, "s": secs}
            bench = None
        if host_probe:
            res.probes["pre"] = _probe(target, served_name or model, label, "before the load", log)
        _scrape(target, out_dir / "metrics_before.txt", res, "metrics_before")
        sampler = _Sampler(f"{target.base_url}/metrics", out_dir / "metrics_samples.jsonl")
        res.files["metrics_samples"] = str(out_dir / "metrics_samples.jsonl")
        sampler.start()
        argv = bench_argv(vllm_cmd, target.base_url, model, load, out_dir, served_name, tokenizer)
        log(f"[{label}] load: {load.describe()}")
        span_start = file_size(out_dir / "serve.log") if server is not None else None
        res.files["bench_log"] = str(out_dir / "bench.log")
        bench, res.bench_s = _bench(argv, env, out_dir, server, bench_timeout_s, "the load",
                                    on_start=lambda b: res.groups.__setitem__("bench", b.pgid))
        sampler.stop()
        _scrape(target, out_dir / "metrics_after.txt", res, "metrics_after")
        if span_start is not None:
            res.log_span = [span_start, file_size(out_dir / "serve.log")]
        if host_probe and bench.proc.returncode == 0:
            res.probes["post"] = _probe(target, served_name or model, label, "after the load", log)
        if bench.proc.returncode != 0 or not (out_dir / "bench.json").exists():
            raise ExperimentError(f"`vllm bench serve` failed (exit {bench.proc.returncode}): "
                                  f"{last_error_line(out_dir / 'bench.log')} (full log: {out_dir / 'bench.log'})",
                                  "bench-failed")
        res.files["bench"] = str(out_dir / "bench.json")
        log(f"[{label}] load done in {res.bench_s} s")
        res.status = "complete"
    except ExperimentError as exc:
        res.reason, res.reason_code = str(exc), exc.reason
        log(f"[{label}] incomplete: {exc}")
    except KeyboardInterrupt as exc:
        res.reason, res.reason_code = f"interrupted ({exc or 'Ctrl-C'})", "interrupted"
        interrupted = exc
        log(f"[{label}] interrupted: stopping what was started")
    finally:
        # Each clean-up step is guarded on its own: a failure in one (a bug, a full disk) must never
        # keep the next from stopping a process this run started.
        if sampler is not None:
            _guard(sampler.stop, log)
            res.samples = sampler.samples
        if bench is not None:
            _guard(lambda: bench.stop(grace_s=5.0, log=log), log)
        if server is not None:
            if res.files.get("metrics_after") is None and server.managed.proc.poll() is None:
                # what was measured so far
                _guard(lambda: _scrape(server, out_dir / "metrics_after.txt", res, "metrics_after"), log)
            res.stop = server.stop(log=log)
            log(f"[{label}] server stopped ({', '.join(res.stop.get('signals') or ['already exited'])}, "
                f"{res.stop.get('stop_s')} s)")
        elif (out_dir / "serve.log").exists():
            res.stop = {"signals": [], "note": "the server never became ready; its group was stopped"}
        (out_dir / "run.json").write_text(json.dumps(res.as_dict(), indent=1, default=str) + "\n")
        res.files["run"] = str(out_dir / "run.json")
    if interrupted is not None:
        raise interrupted
    return res


def _bench(argv: list[str], env: dict[str, str], out_dir: Path, server: Server | None, timeout_s: float, what: str,
           on_start: Callable[[Managed], None] = lambda b: None) -> tuple[Managed, float]:
    """Run one `vllm bench serve` (output to ``out_dir/bench.log``) to its end: (the bench, its seconds). A server
    that dies meanwhile, or a bench past ``timeout_s``, raises ExperimentError after the bench's group is stopped; the
    group is passed to ``on_start`` as soon as it runs, so the run's record names it."""
    t0 = time.monotonic()
    bench = spawn(argv, env=env, log_path=out_dir / "bench.log")
    on_start(bench)
    try:
        while bench.proc.poll() is None:
            if server is not None and server.managed.proc.poll() is not None:
                raise ExperimentError(f"vLLM died during {what} (exit {server.managed.proc.returncode}): "
                                      f"{last_error_line(server.log_path)} (full log: {server.log_path})",
                                      "server-died")
            if time.monotonic() - t0 > timeout_s:
                raise ExperimentError(f"`vllm bench serve` did not finish {what} within {timeout_s:.0f} s",
                                      "bench-timeout")
            time.sleep(0.5)
    except BaseException:
        bench.stop(grace_s=5.0)
        raise
    return bench, round(time.monotonic() - t0, 1)


def _probe(target: Server | _Attached, model: str, label: str, when: str, log: Callable[[str], None]) -> dict[str, Any]:
    got = probe(target.base_url, model)
    if "error" in got:
        log(f"[{label}] host probe {when}: {got['error']} (the host's drift stays unknown)")
    else:
        log(f"[{label}] host probe {when}: a lone decode at {got['tpot_s'] * 1e3:.2f} ms/token (spread {got['spread']:.0%})")
    return got


def file_size(path: Path) -> int:
    """Bytes in ``path`` now (0 when absent): a growing log's offset."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _guard(fn: Callable[[], Any], log: Callable[[str], None]) -> None:
    try:
        fn()
    except Exception as exc:  # noqa: BLE001 - clean-up continues; the reason is reported
        log(f"warning: clean-up step failed: {type(exc).__name__}: {exc}")


@dataclass
class _Attached:
    """A server kvdoctor did not start: only read from, never stopped."""

    base_url: str


def _scrape(server: Server | _Attached, path: Path, res: RunResult, key: str) -> None:
    status, body = http_get(f"{server.base_url}/metrics", timeout=10.0)
    if status == 200:
        path.write_text(body)
        res.files[key] = str(path)


def environ_for(base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    env = dict(base if base is not None else os.environ)
    env.update(extra)
    return env
