"""Log wrappers seen in real threads (issue 10): an operator's Python-logging formatter, Docker/k8s
timestamps (on vLLM's envelope and on bare records), the CPU backend's ``CPU KV cache usage`` wording.

Each is read as a sample with its own time; the fast path either takes the line or falls back to
the per-line path, and the two agree (checked by reading the same file with small chunks — fast
path — and as one chunk — full path)."""

from __future__ import annotations

import math

import numpy as np

from kvdoctor.evidence.logs.reader import read_log
from kvdoctor.evidence.logs.stats import parse_stats

V1 = ("Engine 000: Avg prompt throughput: {p:.1f} tokens/s, Avg generation throughput: {g:.1f} tokens/s, "
      "Running: {r} reqs, Waiting: {w} reqs, {dev} KV cache usage: {kv:.1f}%, Prefix cache hit rate: 0.7%")
V0 = ("Avg prompt throughput: {p:.1f} tokens/s, Avg generation throughput: {g:.1f} tokens/s, Running: {r} reqs, "
      "Swapped: 0 reqs, Pending: {w} reqs, GPU KV cache usage: {kv:.1f}%, CPU KV cache usage: 0.0%.")


def _one(tmp_path, text: str):
    p = tmp_path / "x.log"
    p.write_text(text)
    r = read_log(p)
    assert len(r.segments) == 1, r.segments
    return r, r.segments[0].timeline


def test_python_logging_formatter_prefix(tmp_path):
    lines = [
        "2024-12-20 15:18:19 - vllm.engine.metrics - INFO - " + V0.format(p=0, g=31.2, r=1, w=0, kv=0.9),
        "2024-12-20 15:18:24,512 - vllm.engine.metrics - INFO - " + V0.format(p=0, g=31.2, r=1, w=0, kv=1.0),
        "2024-12-20 15:18:29.001 | vllm.engine.metrics | INFO | " + V0.format(p=0, g=30.0, r=2, w=1, kv=1.5),
    ]
    r, tl = _one(tmp_path, "\n".join(lines) + "\n")
    assert r.skipped.skipped_lines == 0
    assert list(tl.running) == [1, 1, 2]
    assert list(tl.kv_usage_pct) == [0.9, 1.0, 1.5]
    # the formatter's full date is used (no year guessing): 5.512 s then 4.489 s
    assert np.allclose(np.diff(tl.t), [5.512, 4.489])
    assert tl.t[0] == 1734707899.0  # 2024-12-20 15:18:19 UTC


def test_docker_and_kubectl_timestamps(tmp_path):
    lines = [  # docker logs -t / kubectl logs --timestamps in front of vLLM's own envelope
        f"2024-05-12T08:01:{s:02d}.331095044Z (APIServer pid=1) INFO 05-12 08:01:{s:02d} [loggers.py:271] "
        + V1.format(p=10, g=4.8, r=9, w=0, dev="GPU", kv=62.8 + s / 10) for s in (9, 19, 29)
    ]
    r, tl = _one(tmp_path, "\n".join(lines) + "\n")
    assert r.skipped.skipped_lines == 0 and len(tl.t) == 3
    assert tl.t[0] == 1715500869.0  # the year comes from the container's timestamp


def test_padded_fields_of_a_log_pipeline_are_read(tmp_path):
    """A Kubernetes capture seen in public material (2026-09: an RFC3339 +02:00 prefix, vLLM's own UTC time, and
    ``Waiting: 0    reqs`` padded by the pipeline, with trailing spaces) used to be skipped as a malformed stats line."""
    line = ("2026-09-27T17:41:58.946667903+02:00 (APIServer pid=1) INFO 09-27 15:41:58 [loggers.py:310] Engine 000: "
            "Avg prompt throughput: 9.5 tokens/s, Avg generation throughput: 2.0 tokens/s, Running: 3  reqs, Waiting: "
            "7    reqs, GPU KV cache usage: 41.0%, Prefix cache hit rate: 0.0%                 \n")
    r, tl = _one(tmp_path, line)
    assert r.skipped.skipped_lines == 0 and (tl.running[0], tl.waiting[0], tl.kv_usage_pct[0]) == (3, 7, 41.0)


def test_container_timestamp_on_a_bare_record(tmp_path):
    lines = [f"2024-05-12T08:01:{s:02d}.5Z " + V1.format(p=1, g=4.8, r=9, w=0, dev="GPU", kv=60.0) for s in (0, 10)]
    r, tl = _one(tmp_path, "\n".join(lines) + "\n")
    assert r.skipped.skipped_lines == 0
    assert list(np.diff(tl.t)) == [10.0]


def test_cpu_backend_wording():
    line = ("INFO 12-01 10:00:00 [loggers.py:123] " + V1.format(p=1217.1, g=523.6, r=3, w=32, dev="CPU", kv=84.2)).encode()
    row = parse_stats(line)
    assert row is not None
    assert row[3:5] == (3.0, 32.0) and row[7] == 84.2 and row[8] == 0.7
    # v0's "CPU KV cache usage" is the swap space, never the pool
    v0 = ("INFO 12-01 10:00:00 [metrics.py:1] " + V0.format(p=1, g=1, r=1, w=0, kv=12.5)).encode()
    assert parse_stats(v0)[7] == 12.5
    cut = b"INFO 12-01 10:00:00 [metrics.py:1] Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 1.0 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, CPU KV cache usage: 3.0%."
    assert parse_stats(cut) is None  # a v0 line cut before its GPU figure stays unusable


def _digest(r):
    out = []
    for s in r.segments:
        tl = s.timeline
        out.append((s.engine, s.first_line, s.last_line, tl.t.tolist(), tl.running.tolist(), tl.waiting.tolist(),
                    tl.kv_usage_pct.tolist(), [x if not math.isnan(x) else None for x in tl.preemptions.tolist()],
                    tl.line_no.tolist()))
    return out, dict(r.skipped.reasons), r.skipped.parsed_lines


def test_fast_path_takes_or_falls_back_exactly(tmp_path):
    """A log mixing vLLM's envelope, CPU-backend lines and wrapped lines, big enough for the fast path with
    small chunks: the same result as the per-line path."""
    rows = []
    t0 = 10 * 3600
    for i in range(4000):
        t = t0 + 10 * i
        ts = f"12-01 {t // 3600:02d}:{t % 3600 // 60:02d}:{t % 60:02d}"
        kind = i % 50
        if 10 <= kind < 14:
            dev = "CPU"
        else:
            dev = "GPU"
        body = V1.format(p=i % 7, g=100 + i % 13, r=i % 5, w=i % 3, dev=dev, kv=(i % 90) + 0.5)
        if kind == 20:
            rows.append(f"2026-12-01 {ts[6:]} - vllm.v1.metrics.loggers - INFO - " + body)
        elif kind == 30:
            rows.append(f"2026-12-01T{ts[6:]}.0Z (APIServer pid=1) INFO {ts} [loggers.py:271] " + body)
        else:
            rows.append(f"(APIServer pid=1) INFO {ts} [loggers.py:271] " + body)
        rows.append("(APIServer pid=1) INFO:     127.0.0.1:5000 - \"POST /v1/completions HTTP/1.1\" 200 OK")
    p = tmp_path / "big.log"
    p.write_text("\n".join(rows) + "\n")
    fast = read_log(p, year=2026, chunk_size=1 << 14)
    full = read_log(p, year=2026, chunk_size=1 << 26)
    assert _digest(fast) == _digest(full)
    assert full.skipped.skipped_lines == 0
    assert sum(len(s.timeline.t) for s in full.segments) == 4000


def test_python_logging_lines_of_a_real_thread(tmp_path):
    """vllm-project/vllm#11517 (Qwen2.5-32B, TP 8): the operator's formatter on start-up and stats lines;
    the stats line is cut after the GPU figure in the thread and still gives a sample."""
    text = (
        "2024-12-20 15:18:19 - vllm.executor.distributed_gpu_executor - INFO - # GPU blocks: 50231, # CPU blocks: 8192\n"
        "2024-12-20 15:18:19 - vllm.executor.distributed_gpu_executor - INFO - Maximum concurrency for 32768 tokens per "
        "request: 24.53x\n"
        "2024-12-23 18:28:10 - vllm.engine.metrics - INFO - Avg prompt throughput: 0.0 tokens/s, Avg generation "
        "throughput: 45.7 tokens/s, Running: 1 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: 3.1%, CPU KV\n")
    p = tmp_path / "vllm11517.log"
    p.write_text(text)
    r = read_log(p)
    assert r.skipped.skipped_lines == 0
    (seg,) = r.segments
    assert (seg.startup.num_gpu_blocks, seg.startup.max_concurrency, seg.startup.max_concurrency_len) == (50231, 24.53,
                                                                                                         32768)
    assert list(seg.timeline.running) == [1.0] and list(seg.timeline.waiting) == [3.0]


def test_deferred_requests_are_read_on_every_path(tmp_path):
    """vLLM 0.33's stats line prints "Deferred: N reqs" (of Waiting) only when N > 0 (LoRA budget, KV transfer, a
    blocked status). The fast regex does not take such a line, so its chunk goes to the full path; the column is the
    same whichever path read it, 0 on the lines of the segment that leave it out, and absent where none says it."""
    from kvdoctor.evidence.logs.stats import parse_stats

    body = ("Engine 000: Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 90.0 tokens/s, Running: 6 reqs, "
            "Waiting: {w} reqs, {d}GPU KV cache usage: 20.0%, Prefix cache hit rate: 0.0%")
    row = parse_stats(body.format(w=9, d="Deferred: 7 reqs, ").encode())
    assert (row[4], row[10]) == (9.0, 7.0) and math.isnan(parse_stats(body.format(w=9, d="").encode())[10])
    rows = []
    for i in range(4000):
        t = 10 * 3600 + 10 * i
        ts = f"12-01 {t // 3600:02d}:{t % 3600 // 60:02d}:{t % 60:02d}"
        d = 3 + i % 4 if 1000 <= i < 1200 else 0
        rows.append(f"(APIServer pid=1) INFO {ts} [loggers.py:310] "
                    + body.format(w=d + i % 2, d=f"Deferred: {d} reqs, " if d else ""))
    p = tmp_path / "deferred.log"
    p.write_text("\n".join(rows) + "\n")
    fast = read_log(p, year=2026, chunk_size=1 << 14)
    full = read_log(p, year=2026, chunk_size=1 << 26)
    assert _digest(fast) == _digest(full) and full.skipped.skipped_lines == 0
    for r in (fast, full):
        (seg,) = r.segments
        d = seg.timeline.waiting_deferred
        assert d is not None and d.tolist() == [float(3 + i % 4 if 1000 <= i < 1200 else 0) for i in range(4000)]
    plain = tmp_path / "plain.log"
    plain.write_text("\n".join(x.replace("Deferred: ", "Dx: ") for x in rows[:50]) + "\n")
    assert read_log(plain, year=2026).segments[0].timeline.waiting_deferred is None


def test_word_wrapped_stats_records_are_joined(tmp_path):
    """A public paste of 2026-09 (`docker logs | grep`, rendered at ~80 columns): each stats record broken at spaces
    over three lines, "Avg prompt" / "throughput: …" / "2 reqs, …". A terminal's hard wrap loses nothing and is joined
    as is; a word wrap dropped a space and is joined with one. Both give the record; nothing is skipped."""
    soft = ("(APIServer pid=1) INFO 09-13 08:56:54 [loggers.py:311] Engine 000: Avg prompt\n"
            "throughput: 0.0 tokens/s, Avg generation throughput: 53.6 tokens/s, Running:\n"
            "2 reqs, Waiting: 0 reqs, GPU KV cache usage: 59.3%, Prefix cache hit rate: 96.9%\n"
            "(APIServer pid=1) INFO 09-13 08:57:14 [loggers.py:311] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
            "Avg generation throughput: 48.3 tokens/s, Running:\n"
            "1 reqs, Waiting: 3 reqs, GPU KV cache usage: 33.3%, Prefix cache hit rate: 96.9%\n")
    r, tl = _one(tmp_path, soft)
    assert r.skipped.skipped_lines == 0
    assert (tl.running.tolist(), tl.waiting.tolist(), tl.kv_usage_pct.tolist()) == ([2, 1], [0, 3], [59.3, 33.3])


def test_a_structured_log_with_its_time_in_a_key_keeps_its_timeline(tmp_path):
    # a JSON formatter (VLLM_LOGGING_CONFIG_PATH) or a shipper's export: the message is the bare record
    import json

    from kvdoctor.evidence.logs.reader import read_log

    rows = [json.dumps({"time": f"2026-12-01T10:00:{10 * i:02d}.123Z", "levelname": "INFO",
                        "message": f"Engine 000: Avg prompt throughput: 100.0 tokens/s, Avg generation throughput: "
                                   f"50.0 tokens/s, Running: {i + 1} reqs, Waiting: {i} reqs, GPU KV cache usage: "
                                   f"{10 * i}.0%, Prefix cache hit rate: 0.0%"}) for i in range(6)]
    p = tmp_path / "struct.log"
    p.write_text("\n".join(rows) + "\n")
    (seg,) = read_log(p).segments
    tl = seg.timeline
    assert len(tl) == 6 and tl.t[-1] - tl.t[0] == 50.0 and list(tl.running) == [1, 2, 3, 4, 5, 6]


def test_vllm_0_1s_stats_line_is_a_sample_with_its_throughput_split_unknown(tmp_path):
    """vLLM 0.1.0-0.1.3 (scheduler.py ``_log_system_stats``) printed one throughput of every token processed, prompt
    and generation together; vllm-project/vllm#633 (a T4, August 2023) quotes these lines."""
    line = ("INFO 08-01 03:08:45 scheduler.py:271] Throughput: 181.6 tokens/s, Running: 1 reqs, Swapped: 0 reqs, "
            "Pending: 1 reqs, GPU KV cache usage: 100.0%, CPU KV cache usage: 0.0%")
    row = parse_stats(line.encode())
    assert row is not None and row[3:6] == (1.0, 1.0, 0.0) and row[7] == 100.0 and row[9] is True
    assert math.isnan(row[1]) and math.isnan(row[2]) and math.isnan(row[6])  # split and preemptions unknown
    rows = [line.replace("03:08:45", f"03:{8 + i // 6:02d}:{i % 6 * 10:02d}").replace("Pending: 1", f"Pending: {i % 3}")
            for i in range(40)]
    p = tmp_path / "v01.log"
    p.write_text("\n".join(rows) + "\n")
    fast = read_log(p, year=2023, chunk_size=1 << 12)
    full = read_log(p, year=2023, chunk_size=1 << 26)
    assert _digest(fast) == _digest(full)
    tl = full.segments[0].timeline
    assert len(tl.t) == 40 and float(np.nanmax(tl.waiting)) == 2.0 and np.isnan(tl.gen_tps).all()
    # "Avg generation throughput: ..." keeps its own reading: the early pattern never takes a later record
    assert parse_stats(V0.format(p=1, g=2, r=3, w=4, kv=5.0).encode())[1:3] == (1.0, 2.0)
