"""Preemption counts from v1 stats lines: 0 only where the log proves the field can print.

No vLLM v1 release through 0.33 prints ``Preemptions: N``: the field came with vllm#28522 (merged 2025-11-12,
after 0.11.0), and its guard reads the count after ``LoggingStatLogger._update_stats`` reset it (the fix, vllm#38452,
was still open in 2026). So a v1 line without the field is 0 only when a line of its segment has the field (a patched
build), else unknown (NaN), and the summary says unknown (null + a note) instead of 0. docs/evidence.md "Preemptions".
"""

from __future__ import annotations

import math

import numpy as np

from kvdoctor.evidence import summary
from kvdoctor.evidence.load import load_evidence
from kvdoctor.evidence.logs.reader import read_log
from kvdoctor.evidence.summarize import timeline_json
from kvdoctor.evidence.model import Timeline

V1 = ("(APIServer pid=1) INFO {ts} [loggers.py:271] Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation "
      "throughput: 2.0 tokens/s, Running: {r} reqs, Waiting: 0 reqs, {pre}GPU KV cache usage: 50.0%, Prefix cache hit rate: 5.0%")
ENGINE = ("(EngineCore_DP0 pid=7) INFO {ts} [core.py:100] Initializing a V1 LLM engine (v{ver}) with config: "
          "model='m', dtype=torch.bfloat16, max_seq_len=4096, tensor_parallel_size=1")
KV = "(EngineCore_DP0 pid=7) INFO {ts} [gpu_worker.py:772] Available KV cache memory: 20.00 GiB"
V0 = ("INFO {ts} metrics.py:486] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3 "
      "reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 50.0%, CPU KV cache usage: 0.0%.")
WARN = ("WARNING {ts} scheduler.py:1754] Sequence group 7 is preempted by PreemptionMode.RECOMPUTE mode because there is "
        "not enough KV cache space. This can affect the end-to-end performance. total_num_cumulative_preemption={c}")


def _ts(s: int) -> str:
    return f"03-01 10:{s // 60:02d}:{s % 60:02d}"


def _stats(start: int, n: int, pre: dict[int, int] | None = None) -> list[str]:
    pre = pre or {}
    return [V1.format(ts=_ts(start + 10 * i), r=i, pre=f"Preemptions: {pre[i]}, " if i in pre else "")
            for i in range(n)]


def _startup(s: int, ver: str) -> list[str]:
    return [ENGINE.format(ts=_ts(s), ver=ver), KV.format(ts=_ts(s))]


def _read(tmp_path, lines: list[str], name: str = "v.log"):
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p, read_log(p, year=2026)


def _pre(seg) -> list[float]:
    return seg.timeline.preemptions.tolist()


def test_no_field_no_version_is_unknown_not_zero(tmp_path):
    p, r = _read(tmp_path, _stats(0, 6))
    (seg,) = r.segments
    assert all(math.isnan(x) for x in _pre(seg))
    s = summary(load_evidence([str(p)], year=2026))
    assert s["preemptions"] is None and s["preemptions_per_min"] is None
    assert s["preemptions_unknown_segments"] == 1 and s["preemptions_known"] is None
    assert "unknown for 1 of 1 timeline" in s["preemptions_note"] and "0.12-0.33" in s["preemptions_note"]


def test_one_line_with_the_field_makes_the_others_zero(tmp_path):
    p, r = _read(tmp_path, _stats(0, 6, {3: 4}))
    (seg,) = r.segments
    assert _pre(seg) == [0.0, 0.0, 0.0, 4.0, 0.0, 0.0]
    s = summary(load_evidence([str(p)], year=2026))
    assert s["preemptions"] == 4.0 and s["preemptions_unknown_segments"] == 0 and "preemptions_note" not in s
    # 6 lines 10 s apart cover 60 s (the one window measure, evidence.summarize.covered_window)
    assert s["preemptions_per_min"] == 4.0 / 60.0 * 60.0


def test_a_version_up_to_0_11_proves_nothing(tmp_path):
    # v1 <= 0.11.0 had no Preemptions field at all (vllm#28522 came after it): a version is no proof (sweep 152 item
    # 01: a 0.10 log had read "preemptions: 0" where the line cannot say)
    for ver in ("0.11.0", "0.10.1.1"):
        _, r = _read(tmp_path, _startup(0, ver) + _stats(5, 4), f"{ver}.log")
        (seg,) = r.segments
        assert seg.startup.vllm_version == ver and all(math.isnan(x) for x in _pre(seg)), ver


def test_version_0_12_and_later_without_the_field_is_unknown(tmp_path):
    for ver in ("0.12.0", "0.33.0"):
        _, r = _read(tmp_path, _startup(0, ver) + _stats(5, 4), f"{ver}.log")
        (seg,) = r.segments
        assert seg.startup.vllm_version == ver and all(math.isnan(x) for x in _pre(seg)), ver


def test_decided_per_segment_and_the_summary_keeps_the_known_part(tmp_path):
    # first start (0.33) prints the field once (a patched build); the restart does not: unknown there
    lines = _startup(0, "0.33.0") + _stats(5, 5, {1: 2}) + _startup(200, "0.33.0") + _stats(205, 5)
    p, r = _read(tmp_path, lines)
    a, b = [sg for sg in r.segments if sg.timeline is not None]
    assert _pre(a) == [0.0, 2.0, 0.0, 0.0, 0.0]
    assert all(math.isnan(x) for x in _pre(b))
    s = summary(load_evidence([str(p)], year=2026))
    assert s["preemptions"] is None and s["preemptions_known"] == 2.0 and s["preemptions_unknown_segments"] == 1
    assert s["preemptions_note"].endswith("the other timelines total 2")


def test_v0_is_reconstructed_from_warnings_as_before(tmp_path):
    lines = [V0.format(ts=_ts(10 * i)) for i in range(4)]
    lines.insert(2, WARN.format(ts=_ts(15), c=1))
    p, r = _read(tmp_path, lines)
    (seg,) = r.segments
    # the warning at :15 falls in the interval (:10, :20] that the third stats line closes
    assert seg.timeline.swapped is not None and _pre(seg) == [0.0, 0.0, 1.0, 0.0]
    assert summary(load_evidence([str(p)], year=2026))["preemptions"] == 1.0


def test_v0_without_a_warning_is_zero_only_from_the_engines_start(tmp_path):
    # V0 warns at the 1st, 51st, 101st ... preemption: an excerpt without the start may sit between two warnings
    p, r = _read(tmp_path, [V0.format(ts=_ts(10 * i)) for i in range(4)])
    (seg,) = r.segments
    assert all(math.isnan(x) for x in _pre(seg))
    assert any("0 to 49 happened in its view" in n for n in r.notes)
    assert summary(load_evidence([str(p)], year=2026))["preemptions"] is None
    start = ["INFO 03-01 09:59:00 worker.py:267] Memory profiling takes 7.63 seconds",
             "INFO 03-01 09:59:00 executor_base.py:111] # cuda blocks: 18418, # CPU blocks: 3437"]
    p, r = _read(tmp_path, start + [V0.format(ts=_ts(10 * i)) for i in range(4)], "start.log")
    assert _pre(r.segments[-1]) == [0.0] * 4


def test_fast_path_big_file_same_rule(tmp_path):
    # > 4 MiB: read on the fast path (chunk scans); one segment without the field, then one with it
    filler = "(APIServer pid=1) INFO:     10.0.0.1:5000 - \"POST /v1/completions HTTP/1.1\" 200 OK"
    lines: list[str] = []
    for i in range(3000):
        lines.append(V1.format(ts=f"03-01 {10 + i // 360:02d}:{(i // 6) % 60:02d}:{(i % 6) * 10:02d}", r=i % 50,
                               pre="Preemptions: 5, " if i == 2500 else ""))
        lines.extend([filler] * 20)
    _, r = _read(tmp_path, lines)
    (seg,) = r.segments
    pre = seg.timeline.preemptions
    assert len(pre) == 3000 and pre[2500] == 5.0 and np.nansum(pre) == 5.0 and not np.isnan(pre).any()
    _, r = _read(tmp_path, [ln for ln in lines if "Preemptions" not in ln], "none.log")
    assert np.isnan(r.segments[0].timeline.preemptions).all()


def _tl(n: int) -> Timeline:
    t = np.arange(n, dtype=np.float64) * 10.0
    kv = np.full(n, 40.0)
    kv[1234] = 99.5
    pre = np.zeros(n)
    pre[[5, 6, n - 1]] = [1.0, 2.0, 3.0]
    return Timeline(t=t, running=np.arange(n, dtype=np.float64) % 7, waiting=np.zeros(n), kv_usage_pct=kv,
                    preemptions=pre, prompt_tps=np.full(n, 100.0), gen_tps=np.full(n, np.nan),
                    itl_p99=np.where(np.arange(n) == 9000, 0.5, 0.02), line_no=np.arange(1, n + 1))


def test_timeline_json_keeps_peaks_and_totals_when_downsampled():
    n = 10_000
    d = timeline_json(_tl(n))
    m = len(d["t"])
    assert m == 4000 and d["downsampled_from"] == n
    assert all(len(v) == m for k, v in d.items() if isinstance(v, list))
    assert max(d["kv_usage_pct"]) == 99.5 and max(d["itl_p99"]) == 0.5 and max(d["running"]) == 6.0
    assert sum(d["preemptions"]) == 6.0  # pooled by sum: the total survives
    assert d["t"][-1] == (n - 1) * 10.0 and d["line_no"][-1] == n  # a run's last row (intervals end at t)
    assert d["prompt_tps"][0] == 100.0 and d["gen_tps"] == [None] * m  # all-NaN core column: nulls, kept
    assert "ttft_p99" not in d  # optional columns only when reported
    small = timeline_json(_tl(3000))
    assert len(small["t"]) == 3000 and "downsampled_from" not in small and small["preemptions"][:8] == [
        0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 2.0, 0.0] and small["kv_usage_pct"][1234] == 99.5
