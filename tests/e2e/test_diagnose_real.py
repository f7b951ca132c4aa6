"""``kvdoctor diagnose`` on every real runtime sample in ../shared/data/real/, with the verdict a careful
engineer gives and why. Each sample was read by hand first; the reasoning is written next to it.

Most samples are excerpts of a few stats lines from public issues. A careful engineer does not call
a capacity problem (or health) from 10–40 seconds of log: the chapter's preemption threshold is
"about one a minute", so less than a minute of evidence cannot tell occasional from persistent. And
no v1 log can prove zero preemptions (vLLM 0.12–0.33 never prints ``Preemptions:``, see
chains/signals.py), so health from a log rests on the waiting queue staying empty.
"""

from __future__ import annotations

import json

import pytest

from tests.e2e.test_rules_cli import invoke

pytest.importorskip("kvdoctor.evidence.load", reason="the evidence reader (kvdoctor.evidence.load) is not built yet")

# log_id -> (verdict, leaning or None, the engineer's reasoning)
RUNTIME = {
    "rt002": ("insufficient-evidence", None,
              "4 stats lines, 10 s apart (40 s): running 9-10, waiting 0-1, KV 62.8 → 79.9 %, no sign of trouble, "
              "but 40 s cannot show the preemption rate; generation of 5-7 tok/s is the hardware, not the chains"),
    "rt003": ("insufficient-evidence", None,
              "one stats line (10 running, 4 waiting, KV 57.9 %): a single snapshot has no shape"),
    "rt005": ("insufficient-evidence", None,
              "two lines, one user with speculative decoding, KV 17-19 %: nothing to judge in 20 s"),
    "rt006": ("insufficient-evidence", None,
              "a single request generating for 40 s with KV ≤ 1 %: the problem in the issue (a request that never "
              "stops) is not a memory or scheduling one, and 40 s is below the window"),
    "rt008": ("insufficient-evidence", None,
              "one v0 warning, total_num_cumulative_preemption=101, no timestamp: at least 101 preemptions happened, "
              "but with no window the rate (and so 'persistent') is unknown"),
    "rt012": ("insufficient-evidence", "healthy",
              "3 lines (two glued together in the source) over 30 s: 8 running, 0 waiting, KV 91-92 %: looks like a "
              "full pool, not a tight one, but 30 s is too short to say"),
    "rt013": ("healthy", None,
              "60 s, 6 lines: 8 running, 0 waiting in every sample, KV 93.9 → 95.8 %: the chapter's full≠tight — "
              "a preempted request would sit in the waiting queue, and it never does"),
    "rt015": ("insufficient-evidence", "capacity-short",
              "one v0 line: 36 running, 78 pending, KV 99.1 %: this snapshot looks like admission blocked by "
              "capacity, but one line cannot show it persists"),
    "rt017": ("healthy", None,
              "5 lines over ~16 minutes (non-GPU plugin; the hit rate is the buggy value the PR fixes): 1 running, "
              "0 waiting, KV 3 %: light load, nothing to fix"),
    "rt018": ("insufficient-evidence", None,
              "two v0 warnings from different Ray workers, each total_num_cumulative_preemption=1 (first of up to "
              "50): preemption happened, the rate is unknown, no stats lines"),
    "rt019": ("insufficient-evidence", None,
              "resume messages from a patched LMCache scheduler, no stats lines: no timeline to diagnose"),
    "rt020": ("insufficient-evidence", None,
              "30 s: 1 running, 14 waiting unchanged, KV 76.5 %: a quarter of the pool is free, so this queue is not "
              "KV capacity; without max-num-seqs and a longer window a cap cannot be told from a hang"),
    "rt021": ("insufficient-evidence", None,
              "an idle engine (0 running, 0 waiting) then one request: nothing for the chains; the 'ignored "
              "requests' of the issue are not a capacity problem"),
    "rt022": ("insufficient-evidence", None,
              "one stats line (16 running, KV 21 %) among connector logs before a hang: no window"),
}

# Every /metrics dump is one scrape: cumulative counters without a second scrape give no rate, and
# gauges give one instant. A careful engineer asks for a window (Prometheus range, or two scrapes).
METRICS = {
    "md001": "partial dump, one histogram of a multi-API-server engine",
    "md002": "idle server, every gauge 0",
    "md003": "vLLM 0.10 GLM-4.5, KV usage ~0, 32 prefix queries: idle",
    "md004": "HELP/TYPE lines only, no samples",
    "md005": "v0 counters of a bloom-560m fork test",
    "md006": "one request's request_params histograms",
    "md007": "v0 cache_config_info (2048 blocks via override) on an idle server",
    "md008": "Llama-3-70B on H100: TTFT count 8060 vs 3918 successes — one scrape, no window",
}


def _rows(path):
    return {json.loads(line).get("log_id") or json.loads(line).get("dump_id"): json.loads(line)
            for line in path.read_text().splitlines() if line.strip()}


def _text(row):
    for k in ("excerpt", "text", "dump", "metrics"):
        if isinstance(row.get(k), str):
            return row[k]
    return max((v for v in row.values() if isinstance(v, str)), key=len)


def _diagnose(tmp_path, name, text, *extra):
    p = tmp_path / name
    p.write_text(text)
    code, err, out = invoke("diagnose", str(p), "--json", *extra)
    return code, err, out


@pytest.mark.parametrize("log_id", sorted(RUNTIME))
def test_runtime_sample_verdict(log_id, shared_data, tmp_path):
    rows = _rows(shared_data / "real" / "runtime_logs.jsonl")
    verdict, leaning, why = RUNTIME[log_id]
    code, err, out = _diagnose(tmp_path, f"{log_id}.log", _text(rows[log_id]))
    assert code == 0, err
    j = json.loads(out)
    got = [i["verdict"] for i in j["instances"]] or [j["verdict"]]
    assert j["verdict"] == verdict, f"{log_id}: {got} — expected {verdict}: {why}"
    if verdict == "insufficient-evidence":
        assert all(i["missing"] or i["contradictions"] for i in j["instances"]), f"{log_id}: says nothing missing"
    if leaning is not None:
        assert any(i["leaning"] == leaning for i in j["instances"]), f"{log_id}: leaning {leaning}: {why}"
    # a full pool with no preemption and no queue is never called a shortage
    assert j["verdict"] != "capacity-short"


def test_full_pool_excerpt_is_healthy_not_short(shared_data, tmp_path):
    rows = _rows(shared_data / "real" / "runtime_logs.jsonl")
    code, err, out = _diagnose(tmp_path, "rt013.log", _text(rows["rt013"]))
    j = json.loads(out)
    assert "memory.full-not-tight" in {f["rule_id"] for f in j["findings"]}


def test_same_run_in_two_excerpts_as_one(shared_data, tmp_path):
    # rt012 (issue #18115) and rt013 (PR #21809) are the same run two minutes apart
    rows = _rows(shared_data / "real" / "runtime_logs.jsonl")
    a, b = tmp_path / "rt012.log", tmp_path / "rt013.log"
    a.write_text(_text(rows["rt012"]))
    b.write_text(_text(rows["rt013"]))
    code, err, out = invoke("diagnose", str(a), str(b), "--as-one", "--json")
    assert code == 0, err
    j = json.loads(out)
    assert j["verdict"] == "healthy" and j["instances"][0]["window"]["seconds"] >= 120


@pytest.mark.parametrize("dump_id", sorted(METRICS))
def test_metrics_dump_single_scrape_is_insufficient(dump_id, shared_data, tmp_path):
    rows = _rows(shared_data / "real" / "metrics_dumps.jsonl")
    code, err, out = _diagnose(tmp_path, f"{dump_id}.metrics", _text(rows[dump_id]))
    if code == 2:  # a dump with no samples at all may be refused as input: one line, never a guess
        assert err and dump_id == "md004", err
        return
    assert code == 0, err
    j = json.loads(out)
    assert j["verdict"] == "insufficient-evidence", f"{dump_id}: {METRICS[dump_id]}"
