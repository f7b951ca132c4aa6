"""A stats line cut by its end (a stored excerpt, a pasted chunk, a file still being written) is read as far as its
fields are whole, and the chains never speak of the pool from samples that do not report it."""

from __future__ import annotations

import math

import pytest

from kvdoctor.chains.diagnose import diagnose
from kvdoctor.evidence.load import load_evidence
from kvdoctor.evidence.logs.reader import read_log
from kvdoctor.evidence.logs.stats import parse_stats, parse_stats_cut

HEAD = b"Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 68.8 tokens/s, "
LINE = ("(APIServer pid=3646) INFO 05-19 10:{m:02d}:{s:02d} [loggers.py:271] Engine 000: Avg prompt throughput: 0.0 "
        "tokens/s, Avg generation throughput: 412.6 tokens/s, Running: {r} reqs, Waiting: {w} reqs, GPU KV cache usage: "
        "{kv}%, Prefix cache hit rate: 2.1%")


def _cut(line: str, after: str, keep: int) -> str:
    """``line`` cut ``keep`` characters after the start of ``after``."""
    return line[: line.index(after) + keep]


@pytest.mark.parametrize("tail, running, waiting, kv, preempt", [
    # the shape of a public excerpt of 2026 (sixth sweep, item 01): the queue is whole, its unit cut
    (b"Running: 19 reqs, Waiting: 81 re", 19, 81, None, None),
    # the cut falls inside the number: "8" may have been "81", so the queue is not known
    (b"Running: 19 reqs, Waiting: 8", 19, None, None, None),
    # cut inside the KV field's name: v1 prints "Preemptions:" before it, so none was printed
    (b"Running: 4 reqs, Waiting: 1 reqs, GPU KV cache usag", 4, 1, None, 0.0),
    (b"Running: 4 reqs, Waiting: 1 reqs, GPU KV cache usage: 5", 4, 1, None, 0.0),
    (b"Running: 4 reqs, Waiting: 1 reqs, Preemptions: 3, GPU", 4, 1, None, 3.0),
    (b"Running: 4 reqs, Waiting: 1 reqs, Deferred: 2 reqs, GPU KV", 4, 1, None, 0.0),
])
def test_a_cut_v1_record_keeps_its_whole_fields(tail, running, waiting, kv, preempt):
    msg = HEAD + tail
    assert parse_stats(msg) is None
    row = parse_stats_cut(msg)
    assert row is not None
    label, ptps, gtps, r, w, swapped, pre, k, prefix, is_v0, deferred = row
    assert (label, ptps, gtps, r) == ("Engine 000", 0.0, 68.8, running)
    assert (w if waiting is not None else None) == waiting and (waiting is not None or math.isnan(w))
    assert math.isnan(k) and math.isnan(prefix) and not is_v0
    assert (pre == preempt) if preempt is not None else math.isnan(pre)
    if b"Deferred" in tail:
        assert deferred == 2.0


def test_a_cut_v0_record_and_what_is_not_a_cut_record():
    v0 = (b"Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 68.8 tokens/s, Running: 247 reqs, "
          b"Swapped: 0 reqs, Pending: 768 reqs, GPU KV cache usa")
    row = parse_stats_cut(v0)
    assert row[3:6] == (247.0, 768.0, 0.0) and row[9] is True and math.isnan(row[6]) and math.isnan(row[7])
    # cut before "Running" is whole: nothing of the queue is known, so it is no sample
    assert parse_stats_cut(HEAD[:60]) is None
    assert parse_stats_cut(HEAD + b"Running: 4") is None
    # other text after the record is not a cut, nor is a record whose KV figure is whole (parse_stats reads it)
    assert parse_stats_cut(HEAD + b"Running: 4 reqs, Waiting: 1 reqs {\"json\": 1}") is None
    assert parse_stats_cut(HEAD + b"Running: 4 reqs, Waiting: 1 reqs, GPU KV cache usage: 5.0%, Prefix ca") is None


def test_the_reader_reads_a_cut_line_and_says_so(tmp_path):
    lines = [LINE.format(m=10, s=10 * k, r=20, w=40 + k, kv=97.0) for k in range(5)]
    lines.append(_cut(LINE.format(m=10, s=50, r=21, w=81, kv=98.4), "Waiting", 14))  # "... Waiting: 81 re"
    p = tmp_path / "x.log"
    p.write_text("\n".join(lines) + "\n")
    res = read_log(p)
    tl = res.segments[0].timeline
    assert list(tl.waiting) == [40, 41, 42, 43, 44, 81]
    assert math.isnan(tl.kv_usage_pct[-1]) and tl.kv_usage_pct[-2] == 97.0
    assert res.skipped.skipped_lines == 0
    assert any("1 stats line(s) cut before their end were read up to the cut" in n for n in res.notes)


def test_a_terminal_wrap_is_still_joined_not_read_as_a_cut(tmp_path):
    whole = LINE.format(m=10, s=0, r=3, w=2, kv=55.5)
    k = whole.index("Waiting") + 14
    p = tmp_path / "x.log"
    p.write_text(whole[:k] + "\n" + whole[k:] + "\n" + LINE.format(m=10, s=10, r=3, w=0, kv=56.0) + "\n")
    res = read_log(p)
    tl = res.segments[0].timeline
    assert list(tl.kv_usage_pct) == [55.5, 56.0] and not res.notes


def test_records_glued_on_one_line_with_the_last_one_cut(tmp_path):
    a = LINE.format(m=10, s=0, r=3, w=2, kv=55.5)
    b = _cut(LINE.format(m=10, s=0, r=5, w=9, kv=60.0).replace("Engine 000", "Engine 001"), "GPU KV", 6)
    p = tmp_path / "x.log"
    p.write_text(a + " " + b + "\n")
    res = read_log(p)
    by = {sg.engine: sg.timeline for sg in res.segments}
    assert list(by["Engine 001"].waiting) == [9] and math.isnan(by["Engine 001"].kv_usage_pct[0])
    assert res.skipped.skipped_lines == 0


def test_a_queue_none_of_whose_samples_reports_the_pool_is_not_called_room_in_the_pool(tmp_path):
    # every line cut before its KV figure: capacity cannot be told from a cap or a burst, and no "nan%" is printed
    lines = [_cut(LINE.format(m=10 + k // 6, s=(k % 6) * 10, r=20 + k % 3, w=30 + k, kv=95.0), "GPU KV", 5)
             for k in range(30)]
    p = tmp_path / "x.log"
    p.write_text("\n".join(lines) + "\n")
    (inst,) = diagnose(load_evidence([p])).instances
    assert inst.verdict == "insufficient-evidence" and inst.confidence == "low"
    assert "none of those samples reports KV usage" in inst.reason
    text = repr(inst.as_dict(with_timeline=False))
    assert "nan%" not in text and "room in the pool" not in text
    # half of them whole and at a full pool: the whole ones carry the verdict
    for k in range(0, 30, 2):
        lines[k] = LINE.format(m=10 + k // 6, s=(k % 6) * 10, r=20 + k % 3, w=30 + k, kv=95.0)
    p.write_text("\n".join(lines) + "\n")
    (inst,) = diagnose(load_evidence([p])).instances
    assert inst.verdict == "capacity-short"
