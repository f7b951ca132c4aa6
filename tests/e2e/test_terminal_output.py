"""What the terminal shows a user (issue 14, "a terminal that respects its user"): tables fold into
blocks instead of breaking ids mid-word, ratios are rounded, the swap table speaks in words, a note
is printed once; the journal says why a predicted cell is empty, carries TTFT/TBT/TPOT, labels
simulated evidence as simulated and says where it created its database."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvdoctor.cli import app
from kvdoctor.journal.api import SIMULATED_MARKERS, looks_simulated

M = ["-m", "Qwen/Qwen2.5-14B", "--gpu", "L40S", "--max-model-len", "32768"]

# the first real result of bench_outputs.jsonl (vllm PR 18566, `vllm bench serve`), verbatim
BENCH = """============ Serving Benchmark Result ============
Successful requests:                     1000
Benchmark duration (s):                  30.85
Total input tokens:                      229711
Total generated tokens:                  203068
Request throughput (req/s):              32.42
Output token throughput (tok/s):         6582.87
Total Token throughput (tok/s):          14029.44
---------------Time to First Token----------------
Mean TTFT (ms):                          9626.13
Median TTFT (ms):                        9459.70
P99 TTFT (ms):                           12666.73
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          77.86
Median TPOT (ms):                        48.84
P99 TPOT (ms):                           211.21
---------------Inter-token Latency----------------
Mean ITL (ms):                           38.13
Median ITL (ms):                         25.44
P99 ITL (ms):                            214.35
==================================================
"""


def run(*args: str, columns: int = 80, env: dict | None = None):
    res = CliRunner().invoke(app, list(args), env={"COLUMNS": str(columns), **(env or {})})
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception
    return res


def test_catalog_models_at_80_columns_never_breaks_an_id():
    from kvdoctor.catalog.models import list_models

    out = run("catalog", "models").stdout
    lines = out.splitlines()
    assert max(len(x) for x in lines) <= 80
    for mid in list_models():
        assert mid in lines, mid  # each id whole, on a line of its own
    assert "layer s" not in out and "01-ai /Yi" not in out
    wide = run("catalog", "models", columns=220).stdout
    assert "┃ id" in wide  # a wide terminal still gets the table


def test_swap_in_words_ratios_rounded_and_each_note_once():
    out = run("swap", "--from", "meta-llama/Llama-3.1-8B-Instruct", "--to", "Qwen/Qwen2.5-14B", "--gpu", "L40S",
              "--max-model-len", "32768", columns=160).stdout
    table = out[: out.index("Capacity change")]
    assert "KV pool (tokens)" in table and "worst case ÷ pool" in table and "146×" in table
    assert "pool_tokens" not in table and "146.4492" not in table and "kv_bytes_per_token" not in table
    notes = [x for x in out.splitlines() if x.startswith("note: ")]
    assert notes and len(notes) == len(set(notes))
    plan = run("plan", *M, columns=160).stdout
    assert "146×" in plan and "146.4492" not in plan.split("note:")[0]


def test_journal_tells_where_why_and_what(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("KVDOCTOR_JOURNAL", raising=False)
    bench = tmp_path / "bench.txt"
    bench.write_text(BENCH)
    # the database it creates in the working directory is named, on stderr
    r = run("journal", "start", "t", "-c", "vllm serve Qwen/Qwen2.5-14B --max-model-len 32768", "--bench", str(bench))
    assert r.exit_code == 0, r.output
    assert f"created journal file {tmp_path / 'kvdoctor-journal.sqlite'}" in r.stderr
    # latency figures: TTFT, TBT (= ITL) and TPOT, kept apart
    for label in ("TTFT p99", "TBT p99", "TPOT p99", "TPOT p50"):
        assert label in r.stdout, label
    step0 = json.loads(run("journal", "show", "--json").stdout)["steps"][0]["figures"]
    assert round(step0["tpot_p99_s"]["value"], 5) == 0.21121 and round(step0["tbt_p99_s"]["value"], 5) == 0.21435
    # a plan without a workload predicts no serving figures: the step says so instead of a bare "—"
    plan = tmp_path / "plan.json"
    plan.write_text(run("plan", *M, "--json").stdout)
    r = run("journal", "record", "-c", "vllm serve Qwen/Qwen2.5-14B --max-model-len 32768 --kv-cache-dtype fp8",
            "--bench", str(bench), "--prediction", str(plan))
    assert r.exit_code == 0, r.output
    assert "predicted: — because plan level 2 (kv_cache_dtype) predicts no serving figures" in " ".join(r.stdout.split())
    show = " ".join(run("journal", "show", columns=160).stdout.split())
    assert "no prediction: plan level 2" in show
    assert "No prediction: plan level 2" in " ".join(run("journal", "handbook").stdout.split())
    # no second "created" line once the file exists
    assert "created journal file" not in r.stderr
    # at 80 columns the steps fold into blocks with every figure (none hidden), latencies included
    narrow = run("journal", "show").stdout
    assert "not shown at this width" not in narrow and max(len(x) for x in narrow.splitlines()) <= 80
    for label in ("TTFT p99 ms 12,666.7", "TBT p99 ms 214.3", "TPOT p99 ms 211.2"):
        assert label in narrow, label


def test_simulated_evidence_is_labelled_simulated(tmp_path):
    log = tmp_path / "sim.log"
    r = run("simulate", *M, "--rate", "2", "--duration", "30", "--log-out", str(log), "--quiet")
    assert r.exit_code == 0, r.output
    head = log.read_text()[:4000]
    assert all(m in head for m in SIMULATED_MARKERS) and looks_simulated(str(log))  # the writer and the reader agree
    db = tmp_path / "j.sqlite"
    r = run("journal", "start", "s", "--db", str(db), "-c", "vllm serve Qwen/Qwen2.5-14B", "--evidence", str(log))
    assert r.exit_code == 0, r.output
    figs = json.loads(run("journal", "show", "--db", str(db), "--json").stdout)["steps"][0]["figures"]
    assert figs and {f["source"] for f in figs.values()} == {"simulated"}
    assert "measured" not in r.stdout
    # a real log (no simulator envelope) stays measured; --simulated marks any evidence
    real = tmp_path / "real.log"
    real.write_text(log.read_text().replace("pid=4242", "pid=17").replace("pid=4343", "pid=18"))
    assert not looks_simulated(str(real))
    db2 = tmp_path / "k.sqlite"
    run("journal", "start", "r", "--db", str(db2), "-c", "vllm serve Qwen/Qwen2.5-14B", "--evidence", str(real))
    figs = json.loads(run("journal", "show", "--db", str(db2), "--json").stdout)["steps"][0]["figures"]
    assert {f["source"] for f in figs.values()} == {"measured"}
    db3 = tmp_path / "l.sqlite"
    run("journal", "start", "f", "--db", str(db3), "-c", "vllm serve Qwen/Qwen2.5-14B", "--evidence", str(real),
        "--simulated")
    figs = json.loads(run("journal", "show", "--db", str(db3), "--json").stdout)["steps"][0]["figures"]
    assert {f["source"] for f in figs.values()} == {"simulated"}
