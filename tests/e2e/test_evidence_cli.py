"""``kvdoctor evidence`` end to end on the real samples (every one parses, JSON contract holds)."""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from kvdoctor.cli import app

runner = CliRunner()


def _jsonl(shared_data, name):
    return [json.loads(x) for x in (shared_data / "real" / name).read_text().splitlines() if x.strip()]


def _run(*args):
    r = runner.invoke(app, ["evidence", *map(str, args)])
    return r


@pytest.fixture(scope="module")
def sample_files(shared_data, tmp_path_factory):
    d = tmp_path_factory.mktemp("samples")
    files = []
    for row in _jsonl(shared_data, "runtime_logs.jsonl"):
        p = d / f"{row['log_id']}.log"
        p.write_text(row["excerpt"])
        files.append(p)
    for row in _jsonl(shared_data, "kv_capacity_cases.jsonl"):
        p = d / f"{row['case_id']}.log"
        p.write_text(row["log_excerpt"])
        files.append(p)
    for row in _jsonl(shared_data, "metrics_dumps.jsonl"):
        p = d / f"{row['dump_id']}.prom"
        p.write_text(row["dump"])
        files.append(p)
    for row in _jsonl(shared_data, "bench_outputs.jsonl"):
        p = d / f"{row['bench_id']}.txt"
        p.write_text(row["output"])
        files.append(p)
    return files


def test_every_real_sample_parses_via_cli(sample_files):
    for p in sample_files:
        r = _run(p, "--json")
        assert r.exit_code == 0, (p.name, r.output[-500:])
        doc = json.loads(r.output)
        assert doc["schema_version"] == "kvdoctor.evidence/1"
        kind = doc["sources"][0]["kind"]
        expected = {"log": "log", "prom": "metrics", "txt": "bench"}[p.suffix[1:]]
        assert kind == expected, (p.name, kind)


def test_json_contract_on_a_real_log(sample_files):
    p = next(f for f in sample_files if f.name == "rt013.log")
    doc = json.loads(_run(p, "--json").output)
    s = doc["summary"]
    for k in ("samples", "span_seconds", "max_running", "max_waiting", "max_kv_usage_pct", "preemptions",
              "skipped_lines"):
        assert k in s
    # 6 lines 10 s apart cover 60 s (each reports the interval before it) — the window diagnose states too
    assert (s["samples"], s["span_seconds"], s["interval_s"], s["max_running"], s["max_waiting"],
            s["max_kv_usage_pct"]) == (6, 60.0, 10.0, 8.0, 0.0, 95.8)
    # rt013 (no version, no line with "Preemptions:"): a v1 line without the field does not say 0 — vLLM
    # 0.12-0.33 never print it — so the count is unknown (null + a note), not 0 (docs/evidence.md "Preemptions")
    assert s["preemptions"] is None and s["preemptions_per_min"] is None and s["skipped_lines"] == 0
    assert s["preemptions_unknown_segments"] == 1 and s["preemptions_known"] is None
    assert "unknown for 1 of 1 timeline" in s["preemptions_note"]
    (seg,) = doc["segments"]
    assert seg["engine"] == "Engine 000" and seg["first_line"] == 1 and seg["last_line"] == 6
    # the timeline itself (NaN -> null), and the longest one at the top level for `kvdoctor report`
    tl = seg["timeline"]
    assert tl["kv_usage_pct"] == [93.9, 94.3, 94.7, 95.0, 95.4, 95.8] and tl["running"] == [8.0] * 6
    assert tl["preemptions"] == [None] * 6 and len(tl["t"]) == 6 and tl["line_no"] == [1, 2, 3, 4, 5, 6]
    assert doc["timeline"] == tl and doc["timeline_segment"] == 0


def test_v0_warning_preemptions_counted(sample_files):
    p = next(f for f in sample_files if f.name == "rt008.log")
    s = json.loads(_run(p, "--json").output)["summary"]
    assert s["preemptions"] == 101 and s["preemption_warnings"] == 1


def test_human_output_and_gzip(sample_files, tmp_path):
    src = next(f for f in sample_files if f.name == "rt002.log")
    gz = tmp_path / "rt002.log.gz"
    gz.write_bytes(gzip.compress(src.read_bytes()))
    r = _run(gz)
    assert r.exit_code == 0
    assert "samples 4 over 40 s (one sample every 10 s)" in r.output and "KV usage 79.9%" in r.output


def test_startup_facts_in_segments(sample_files):
    p = next(f for f in sample_files if f.name == "kv061.log")
    doc = json.loads(_run(p, "--json").output)
    st = doc["segments"][0]["startup"]
    assert round(st["kv_cache_bytes"] / 2**30, 2) == 12.26 and st["era"] == "v1-0.2x"


def test_mixed_inputs_and_trace(shared_data, sample_files):
    files = [next(f for f in sample_files if f.name == n) for n in ("rt020.log", "md007.prom", "bo002.txt")]
    files.append(shared_data / "traces" / "splitwise_code.csv")
    doc = json.loads(_run(*files, "--json").output)
    kinds = [x["kind"] for x in doc["sources"]]
    assert kinds == ["log", "metrics", "bench", "trace"]
    s = doc["summary"]
    assert s["requests"] == 8819 and s["bench_results"] == 1 and s["max_waiting"] == 14.0
    assert s["ttft_p99_s"] == pytest.approx(12.66673)  # from the bench block (no timeline percentiles)


def test_bad_input_exit_2(tmp_path):
    from kvdoctor.cli import main  # noqa: F401  (the app raises KvdoctorError; main maps it to exit 2)

    r = _run(tmp_path / "missing.log")
    assert r.exit_code != 0 and "no such file" in str(r.exception or r.output)
    r = _run()
    assert r.exit_code != 0


def test_subprocess_exit_codes(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "kvdoctor", "evidence", str(tmp_path / "nope")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.startswith("kvdoctor: error: no such file")
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 4000)
    r = subprocess.run([sys.executable, "-m", "kvdoctor", "evidence", str(junk), "--json"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["summary"]["samples"] == 0


def test_a_start_up_cut_after_its_banner_names_its_release(tmp_path):
    """sweep 45 (GPUStack's worker log, cut after the API server's banner): the start-up line said "start-up: " and
    nothing; it names the release (and the model when the log gives one)."""
    log = tmp_path / "worker.log"
    log.write_text("2026-02-25 09:58:45.638180+08:00 - gpustack.worker.serve_manager - INFO - Finished provisioning\n"
                   "(APIServer pid=57) INFO 02-25 09:58:54 [api_server.py:1351] vLLM API server version 0.13.0\n")
    r = CliRunner().invoke(app, ["evidence", str(log)])
    assert r.exit_code == 0, r.output
    assert "start-up: vLLM 0.13.0" in r.output
