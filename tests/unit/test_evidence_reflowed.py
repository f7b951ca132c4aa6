"""A log a page reflowed (a blog's markdown, a PDF): each record broken into short pieces with blank lines between
them. The stats record and V0's preemption warning are joined back (lines._pieces_after)."""

from __future__ import annotations

from kvdoctor.evidence.load import load_evidence

REFLOWED = """INFO 01-21 05:05:04 metrics.py:467] Avg prompt throughput: 0.0
tokens/s, Avg generation throughput: 1547.6 tokens/s,

Running: 157 reqs, Swapped: 0 reqs, Pending: 99 reqs, GPU KV cache
usage: 99.4%, CPU KV cache usage: 0.0%.

WARNING 01-21 05:05:14 engine.py:205] Sequence group
cmpl-d5a0bb826fd54a568fa9c8ae9382a1cb-0 is preempted by
PreemptionMode.RECOMPUTE mode because there is not enough KV cache
space.

This can affect the end-to-end performance. Increase
gpu_memory_utilization or tensor_parallel_size to provide more KV
cache memory. total_num_cumulative_preemption=101

INFO 01-21 05:05:14 metrics.py:467] Avg prompt throughput: 0.0
tokens/s, Avg generation throughput: 1529.6 tokens/s,

Running: 155 reqs, Swapped: 0 reqs, Pending: 101 reqs, GPU KV cache
usage: 99.5%, CPU KV cache usage: 0.0%.
"""


def test_a_reflowed_v0_log_reads_its_samples_and_its_preemption_warning(tmp_path):
    p = tmp_path / "blog.log"
    p.write_text(REFLOWED)
    ev = load_evidence([str(p)])
    (seg,) = ev.segments
    tl = seg.timeline
    assert list(tl.running) == [157, 155] and list(tl.waiting) == [99, 101] and list(tl.kv_usage_pct) == [99.4, 99.5]
    (w,) = [e for e in seg.events if e.kind == "preemption-warning"]
    assert w.data["cumulative"] == 101 and w.data["mode"] == "RECOMPUTE" and w.line_no == 7
    assert ev.skipped.skipped_lines == 0


def test_blank_lines_never_join_a_record_to_the_next_one(tmp_path):
    # a stats head cut for good, then a blank line and the next record: the next record is not taken as its tail
    p = tmp_path / "cut.log"
    p.write_text("INFO 01-21 05:05:04 metrics.py:467] Avg prompt throughput: 0.0 tokens/s, Avg generation\n\n"
                 + REFLOWED.split("\n\n", 1)[1].split("WARNING", 1)[0] + "\n"
                 + "\n".join(REFLOWED.splitlines()[-5:]) + "\n")
    ev = load_evidence([str(p)])
    rows = [int(x) for s in ev.segments if s.timeline is not None for x in s.timeline.running]
    assert rows == [155]

