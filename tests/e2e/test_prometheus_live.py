"""kvdoctor's Prometheus client against a real Prometheus server (no mock).

The session fixture installs Debian's ``prometheus`` package when ``prometheus``/``promtool`` are
missing (apt-get; skipped with the reason only when installing is impossible), builds OpenMetrics
series from the real runtime samples in shared/data/real (stats lines of two servers, a real TTFT
histogram), backfills a TSDB with ``promtool tsdb create-blocks-from openmetrics``, starts Prometheus
on 127.0.0.1:<free port> on that TSDB, waits until it is ready, and stops it at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kvdoctor.errors import InputError
from kvdoctor.evidence.logs.reader import read_log
from kvdoctor.evidence.prometheus import load_prometheus, parse_snapshot


def _ensure_prometheus() -> tuple[str, str]:
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    if prom and tool:
        return prom, tool
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("prometheus/promtool missing and apt-get is not usable here (not root or no apt-get)")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    try:
        subprocess.run(["apt-get", "update"], check=True, capture_output=True, timeout=600, env=env)
        subprocess.run(["apt-get", "install", "-y", "--no-install-recommends", "prometheus"], check=True,
                       capture_output=True, timeout=900, env=env)
    except (subprocess.SubprocessError, OSError) as exc:
        pytest.skip(f"could not install Debian's prometheus package: {exc}")
    prom, tool = shutil.which("prometheus"), shutil.which("promtool")
    if not (prom and tool):
        pytest.skip("apt-get installed prometheus but the binaries are not on PATH")
    return prom, tool


def _die_with_parent() -> None:
    """Runs in the child before exec: a pytest killed by `timeout` (SIGTERM, no fixture teardown) or
    SIGKILL would otherwise leave this Prometheus orphaned; Linux delivers SIGTERM to it instead.
    The fixture starts it from the main thread, so the parent thread lives as long as the session."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _series_from_real_samples(shared_data: Path, tmp: Path, t0: float) -> tuple[str, dict]:
    """OpenMetrics text: two instances replaying real stats lines (rt013: 8 running with KV filling
    93.9 → 95.8 %; rt020: 1 running, 14 waiting), counters accumulated from their real throughputs,
    and md005's real TTFT histogram as the second observation of instance a."""
    rows = {json.loads(x)["log_id"]: json.loads(x) for x in
            (shared_data / "real" / "runtime_logs.jsonl").read_text().splitlines() if x.strip()}
    dumps = {json.loads(x)["dump_id"]: json.loads(x) for x in
             (shared_data / "real" / "metrics_dumps.jsonl").read_text().splitlines() if x.strip()}
    out: dict[str, list[str]] = {"running": [], "waiting": [], "kv": [], "pre": [], "gen": [], "ttft": []}
    expect = {}
    for inst, log_id, model in (("a:8000", "rt013", "llama"), ("b:8000", "rt020", "qwen")):
        p = tmp / f"{log_id}.log"
        p.write_text(rows[log_id]["excerpt"])
        tl = read_log(p).segments[0].timeline
        gen_total, pre_total = 0.0, 0
        lab = f'instance="{inst}",model_name="{model}",engine="0"'
        for i in range(len(tl)):
            t = t0 + 10.0 * i
            if i:
                gen_total += float(tl.gen_tps[i]) * 10.0
                pre_total += i % 2  # one preemption every other interval (the v1 line shows none)
            out["running"].append(f"vllm:num_requests_running{{{lab}}} {tl.running[i]} {t:.3f}")
            out["waiting"].append(f"vllm:num_requests_waiting{{{lab}}} {tl.waiting[i]} {t:.3f}")
            out["kv"].append(f"vllm:kv_cache_usage_perc{{{lab}}} {tl.kv_usage_pct[i] / 100.0} {t:.3f}")
            out["pre"].append(f"vllm:num_preemptions_total{{{lab}}} {pre_total} {t:.3f}")
            out["gen"].append(f"vllm:generation_tokens_total{{{lab}}} {gen_total} {t:.3f}")
        expect[inst] = {"max_running": float(max(tl.running)), "max_waiting": float(max(tl.waiting)),
                        "max_kv": float(max(tl.kv_usage_pct)), "preemptions": pre_total, "model": model,
                        "gen_tps": [float(x) for x in tl.gen_tps[1:]]}
    snap = parse_snapshot(dumps["md005"]["dump"])
    hist = snap.series[("bigscience/bloom-560m", "")].hists["ttft"]
    if hist.buckets[-1][0] != float("inf"):
        # the excerpt is cut after le="0.08"; close it with +Inf = the last visible count
        hist.buckets.append((float("inf"), hist.buckets[-1][1]))
    lab = 'instance="a:8000",model_name="llama",engine="0"'
    for k, t in enumerate((t0, t0 + 10.0)):
        for le, c in hist.buckets:
            le_s = "+Inf" if le == float("inf") else repr(le)
            out["ttft"].append(f'vllm:time_to_first_token_seconds_bucket{{{lab},le="{le_s}"}} {c * k} {t:.3f}')
    expect["ttft_buckets"] = hist.buckets
    text = ["# TYPE vllm:num_requests_running gauge", *out["running"],
            "# TYPE vllm:num_requests_waiting gauge", *out["waiting"],
            "# TYPE vllm:kv_cache_usage_perc gauge", *out["kv"],
            "# TYPE vllm:num_preemptions counter", *out["pre"],
            "# TYPE vllm:generation_tokens counter", *out["gen"],
            "# TYPE vllm:time_to_first_token_seconds histogram", *_sorted_by_series(out["ttft"]),
            "# EOF"]
    return "\n".join(text) + "\n", expect


def _sorted_by_series(lines: list[str]) -> list[str]:
    # OpenMetrics wants one series' samples together, in time order
    return sorted(lines, key=lambda s: (s.split(" ")[0], float(s.rsplit(" ", 1)[1])))


@pytest.fixture(scope="session")
def prometheus_server(shared_data, tmp_path_factory):
    prom, tool = _ensure_prometheus()
    tmp = tmp_path_factory.mktemp("prom")
    t0 = float(int(time.time()) - 1800)
    text, expect = _series_from_real_samples(shared_data, tmp, t0)
    om = tmp / "series.om"
    om.write_text(text)
    data = tmp / "tsdb"
    r = subprocess.run([tool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    cfg = tmp / "prometheus.yml"
    cfg.write_text("global:\n  scrape_interval: 15s\nscrape_configs: []\n")
    port = _free_port()
    log = open(tmp / "prometheus.log", "w")
    proc = subprocess.Popen([prom, f"--config.file={cfg}", f"--storage.tsdb.path={data}",
                             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=30d"],
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=_die_with_parent)
    url = f"http://127.0.0.1:{port}"
    import httpx

    deadline = time.time() + 90
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"prometheus exited: {(tmp / 'prometheus.log').read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    else:
        proc.kill()
        pytest.fail("prometheus did not become ready in 90 s")
    yield url, expect, t0
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()


def test_one_timeline_per_instance(prometheus_server):
    url, expect, t0 = prometheus_server
    segs = load_prometheus(url, f"{t0 - 60:.0f}..{t0 + 120:.0f}", step=10)
    by = {s.engine.split(" ")[0]: s for s in segs}
    assert set(by) == {"a:8000", "b:8000"}
    for inst in ("a:8000", "b:8000"):
        tl, e = by[inst].timeline, expect[inst]
        assert e["model"] in by[inst].engine
        assert float(max(tl.running)) == e["max_running"] and float(max(tl.waiting)) == e["max_waiting"]
        assert float(max(tl.kv_usage_pct)) == pytest.approx(e["max_kv"])
        import numpy as np

        assert float(np.nansum(tl.preemptions)) == e["preemptions"]
        gen = [x for x in tl.gen_tps if not np.isnan(x)]
        assert gen[: len(e["gen_tps"])] == pytest.approx(e["gen_tps"])  # rates recovered from the counter


def test_histogram_percentiles_from_prometheus(prometheus_server):
    url, expect, t0 = prometheus_server
    segs = load_prometheus(url, f"{t0 - 60:.0f}..{t0 + 120:.0f}", labels=["instance=a:8000"], step=10)
    (seg,) = segs
    import numpy as np

    from kvdoctor.evidence.prometheus import quantile

    p99 = seg.timeline.ttft_p99
    vals = [x for x in p99 if not np.isnan(x)]
    assert vals and vals[0] == pytest.approx(quantile(0.99, expect["ttft_buckets"]))


def test_window_ending_now_and_label_filters(prometheus_server):
    url, expect, _ = prometheus_server
    segs = load_prometheus(url, "1h", labels={"model_name": "qwen"})
    assert [s.engine.split(" ")[0] for s in segs] == ["b:8000"]
    with pytest.raises(InputError, match="no vllm:\\* series"):
        load_prometheus(url, "1h", labels=["model_name=absent"])


def test_cli_against_prometheus(prometheus_server):
    from typer.testing import CliRunner

    from kvdoctor.cli import app

    url, expect, t0 = prometheus_server
    r = CliRunner().invoke(app, ["evidence", "--prometheus", url, "--window", f"{t0 - 60:.0f}..{t0 + 120:.0f}", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["schema_version"] == "kvdoctor.evidence/1"
    assert doc["summary"]["max_waiting"] == 14.0 and len(doc["segments"]) == 2


def test_unreachable_server_is_one_clear_error():
    port = _free_port()
    with pytest.raises(InputError, match="unreachable"):
        load_prometheus(f"http://127.0.0.1:{port}", "1h")
    with pytest.raises(InputError, match="http"):
        load_prometheus("prom:9090", "1h")


def test_a_saved_reply_reads_as_the_live_query(prometheus_server, tmp_path):
    """What an operator attaches when kvdoctor cannot reach their Prometheus: the server's own query_range replies
    (the raw bytes, as curl saves them), appended in one file, give the timelines the live query gives."""
    import httpx
    import numpy as np

    from kvdoctor.evidence.load import load_evidence

    url, expect, t0 = prometheus_server
    window = (t0 - 60, t0 + 120)
    raw = b""
    for query in ('{__name__=~"vllm:(num_requests_.*|kv_cache_usage_perc|.*_total)"}',
                  '{__name__=~"vllm:time_to_first_token_seconds_bucket"}'):
        r = httpx.get(f"{url}/api/v1/query_range",
                      params={"query": query, "start": window[0], "end": window[1], "step": 10}, timeout=10)
        assert r.status_code == 200 and b'"resultType":"matrix"' in r.content
        raw += r.content + b"\n"
    saved = tmp_path / "query_range.json"
    saved.write_bytes(raw)
    ev = load_evidence([str(saved)])
    live = load_prometheus(url, f"{window[0]:.0f}..{window[1]:.0f}", step=10)
    assert ev.kinds[str(saved)] == "prometheus" and not ev.notes
    got = {s.engine: s.timeline for s in ev.segments}
    want = {s.engine: s.timeline for s in live}
    assert set(got) == set(want) and len(got) == 2
    for eng, tl in want.items():
        for col in ("t", "running", "waiting", "kv_usage_pct", "preemptions", "gen_tps", "ttft_p99"):
            np.testing.assert_allclose(np.asarray(getattr(got[eng], col), dtype=float),
                                       np.asarray(getattr(tl, col), dtype=float), equal_nan=True, err_msg=col)
    a = next(s for s in ev.segments if s.engine.startswith("a:8000"))
    assert float(max(a.timeline.running)) == expect["a:8000"]["max_running"]
