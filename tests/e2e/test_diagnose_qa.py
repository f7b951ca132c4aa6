"""``kvdoctor diagnose`` terminal output: severity shown, operator strings never read as markup."""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_rules_cli import invoke


def _excerpt(shared_data, log_id: str) -> str:
    for line in (shared_data / "real" / "runtime_logs.jsonl").read_text().splitlines():
        d = json.loads(line)
        if d["log_id"] == log_id:
            return d["excerpt"]
    raise KeyError(log_id)


def test_severity_word_is_printed_and_file_names_stay_literal(shared_data, tmp_path):
    pytest.importorskip("kvdoctor.evidence.load", reason="the evidence reader is not built yet")
    # rt013: 60 s, 8 running, 0 waiting, KV 94-96 % → healthy with one info finding (full ≠ tight)
    log = tmp_path / "[red]prod[bold].log"
    log.write_text(_excerpt(shared_data, "rt013"))
    code, err, out = invoke("diagnose", str(log))
    assert code == 0, err
    # was: "[info]" eaten by rich as an unknown style tag, and "[red]"/"[bold]" eaten from the path
    assert "[info] step 0 memory.full-not-tight" in out
    assert "[red]prod[bold].log" in out


def test_log_text_with_a_closing_tag_does_not_crash_the_renderer(shared_data, tmp_path):
    pytest.importorskip("kvdoctor.evidence.load", reason="the evidence reader is not built yet")
    # a Ray-style prefix carrying "[/x]" ends up in engine names and citations; rich raised
    # MarkupError on an unmatched closing tag (exit 3) before the strings were escaped
    text = "\n".join(f"([/x] pid=1, ip=10.0.0.1) {ln}" for ln in _excerpt(shared_data, "rt013").splitlines())
    (tmp_path / "ray[").mkdir()  # so the path itself reads ".../ray[/x].log"
    log = tmp_path / "ray[" / "x].log"
    log.write_text(text)
    code, err, out = invoke("diagnose", str(log))
    assert code == 0, err
    assert "ray[/x].log" in out


def test_full_not_tight_beside_a_worst_case_far_over_the_pool(shared_data, tmp_path):
    pytest.importorskip("kvdoctor.evidence.load", reason="the evidence reader is not built yet")
    log = tmp_path / "rt013.log"
    log.write_text(_excerpt(shared_data, "rt013"))
    code, err, out = invoke("diagnose", str(log), "-m", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "H100",
                            "--max-model-len", "131072", "--max-num-seqs", "512", "--json")
    assert code == 0, err
    j = json.loads(out)
    # 512 × 131,072 is the chapter's worst case, far over the pool: a bound, not the verdict. 8 requests
    # fill 95.8 % with nothing waiting: full, not tight; the step-1 finding advises what the pool holds
    # at the demand seen (floor(8 / 0.958) = 8), never max-num-seqs 1
    assert j["verdict"] == "healthy"
    ids = {f["rule_id"]: f for f in j["findings"]}
    assert "memory.full-not-tight" in ids and "Healthy" not in ids["memory.full-not-tight"]["summary"]
    st = ids["sched.concurrency-starved"]
    assert st["severity"] == "warn" and st["action"].startswith("--max-num-seqs 8 ")
    assert "conservative bound" in st["summary"]
    code, err, out = invoke("diagnose", str(log), "--json")
    assert json.loads(out)["verdict"] == "healthy"


def test_binary_or_empty_evidence_is_bad_input_but_odd_text_is_not(shared_data, tmp_path):
    pytest.importorskip("kvdoctor.evidence.load", reason="the evidence reader is not built yet")
    # was: exit 0 "insufficient-evidence" with a list of evidence to collect, for a PNG or an empty file
    blob = tmp_path / "screenshot.png"
    blob.write_bytes(bytes(range(256)) * 16)
    empty = tmp_path / "vllm.log"
    empty.write_bytes(b"")
    for bad, words in ((blob, "binary file"), (empty, "empty file")):
        code, err, _ = invoke("diagnose", str(bad))
        assert code == 2 and words in err and "\n" not in err, err
    # a real log with one undecodable byte (an echoed prompt) is still read, and still healthy
    log = tmp_path / "latin.log"
    log.write_bytes(b"prompt echo \xff\xfe here\n" + _excerpt(shared_data, "rt013").encode())
    code, err, out = invoke("diagnose", str(log), "--json")
    assert code == 0 and json.loads(out)["verdict"] == "healthy", err
    # gzip'd logs are evidence too
    import gzip
    gz = tmp_path / "vllm.log.gz"
    gz.write_bytes(gzip.compress(_excerpt(shared_data, "rt013").encode()))
    code, err, out = invoke("diagnose", str(gz), "--json")
    assert code == 0 and json.loads(out)["verdict"] == "healthy", err
