"""`kvdoctor report` end to end: saved payloads of real verbs, real logs / bench outputs, bad inputs."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from kvdoctor.cli import app
from kvdoctor.errors import KvdoctorError

runner = CliRunner()


def kvd(*args: str) -> tuple[int, str]:
    res = runner.invoke(app, list(args))
    if isinstance(res.exception, KvdoctorError):
        return res.exception.exit_code, str(res.exception)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res.exit_code, res.output


def _sections(doc: str) -> list[str]:
    return re.findall(r'<section id="([^"]+)"', doc)


def _real_log(shared_data: Path, tmp: Path, log_id: str) -> Path:
    for line in (shared_data / "real" / "runtime_logs.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["log_id"] == log_id:
            p = tmp / f"{log_id}.log"
            p.write_text(d["excerpt"])
            return p
    raise AssertionError(log_id)


def test_saved_ledger_and_a_real_log(tmp_path, shared_data):
    code, out = kvd("ledger", "-m", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--json")
    assert code == 0, out
    led = tmp_path / "ledger.json"
    led.write_text(out)
    log = _real_log(shared_data, tmp_path, "rt013")
    html = tmp_path / "r.html"
    code, out = kvd("report", str(led), str(log), "-o", str(html), "--json")
    assert code == 0, out
    info = json.loads(out)
    assert info["schema_version"] == "kvdoctor.report/1"
    assert info["kind"] == "report"  # every verb's payload names its kind
    assert [p["kind"] for p in info["payloads"]] == ["ledger", "evidence"]
    doc = html.read_text()
    secs = _sections(doc)
    assert secs.index("memory") < secs.index("timeline")
    assert "summary-evidence" in secs and secs[0] == "verdict" and secs[-1] == "appendix"
    # the raw payloads sit in one collapsed appendix at the end; --no-raw leaves them out
    assert doc.index('<details class="appendix">') > doc.index('id="summary-evidence"')
    code, _ = kvd("report", str(led), str(log), "-o", str(html), "--no-raw")
    assert code == 0 and 'id="appendix"' not in html.read_text()
    assert "rt013.log" in doc


def test_list_of_payloads_and_bench_output(tmp_path, shared_data):
    code, out = kvd("ledger", "-m", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "A100-80GB", "--json")
    assert code == 0
    both = tmp_path / "both.json"
    both.write_text(json.dumps([json.loads(out), json.loads(out)]))
    d = json.loads((shared_data / "real" / "bench_outputs.jsonl").read_text().splitlines()[1])
    bench = tmp_path / "bench.txt"
    bench.write_text(d["output"] if isinstance(d["output"], str) else json.dumps(d["output"]))
    html = tmp_path / "r.html"
    code, out = kvd("report", str(both), str(bench), "-o", str(html), "--title", "two GPUs <b>")
    assert code == 0, out
    doc = html.read_text()
    assert "<title>two GPUs &lt;b&gt;</title>" in doc
    assert _sections(doc).count("memory") == 1 and "memory-2" in _sections(doc)  # unique anchors
    shown = doc[:doc.index('id="appendix"')]
    # the bench result's summary in words (human labels), never as flattened JSON keys
    assert "request throughput" in shown and "summary.request_throughput" not in shown


def test_bad_inputs_exit_2(tmp_path):
    junk = tmp_path / "junk.txt"
    junk.write_text("nothing to see\nhere\n")
    assert kvd("report", str(tmp_path / "missing.json"))[0] == 2
    assert kvd("report", str(tmp_path))[0] == 2
    code, msg = kvd("report", str(junk), "-o", str(tmp_path / "x.html"))
    assert code == 2 and "nothing kvdoctor recognises" in msg
    # a real dump whose only vllm:* family is one kvdoctor does not read (vllm#13303's LoRA scrape): said as such
    lora = tmp_path / "lora.txt"
    lora.write_text('vllm:lora_requests_info{max_lora="1",running_lora_adapters="",waiting_lora_adapters=""} '
                    '1.7395575657589855e+09\n')
    code, msg = kvd("report", str(lora), "-o", str(tmp_path / "y.html"))
    assert code == 2 and "a /metrics dump, but none of its vllm:* series is one kvdoctor reads" in msg
    fake = tmp_path / "fake.json"
    fake.write_text('{"schema_version": "kvdoctor.ledger/1"}')
    assert kvd("report", str(fake), "-o", str(tmp_path / "nodir" / "x.html"))[0] == 2
    assert not (tmp_path / "x.html").exists()


def test_payload_from_stdin(tmp_path):
    code, out = kvd("ledger", "-m", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100", "--json")
    assert code == 0
    res = runner.invoke(app, ["report", "-", "-o", str(tmp_path / "p.html")], input=out)
    assert res.exit_code == 0, res.output
    assert 'id="memory"' in (tmp_path / "p.html").read_text()
    res = runner.invoke(app, ["report", "-", "-o", str(tmp_path / "q.html")], input="not json")
    assert isinstance(res.exception, KvdoctorError) and res.exception.exit_code == 2
