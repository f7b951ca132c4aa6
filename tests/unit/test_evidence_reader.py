"""The streaming log reader on real runtime excerpts and on constructed hard cases."""

from __future__ import annotations

import gzip
import json
import math

import numpy as np
import pytest

from kvdoctor.errors import InputError
from kvdoctor.evidence.logs.reader import read_log

V1 = ("(APIServer pid=1) INFO {ts} [loggers.py:271] Engine {eng}: Avg prompt throughput: {p} tokens/s, Avg generation "
      "throughput: {g} tokens/s, Running: {r} reqs, Waiting: {w} reqs, {pre}GPU KV cache usage: {kv}%, Prefix cache hit rate: 5.0%")
V0 = ("INFO {ts} metrics.py:486] Avg prompt throughput: {p} tokens/s, Avg generation throughput: {g} tokens/s, Running: {r} "
      "reqs, Swapped: 0 reqs, Pending: {w} reqs, GPU KV cache usage: {kv}%, CPU KV cache usage: 0.0%.")
WARN = ("WARNING {ts} scheduler.py:1754] Sequence group {sg} is preempted by PreemptionMode.RECOMPUTE mode because there is not "
        "enough KV cache space. This can affect the end-to-end performance. Increase gpu_memory_utilization or "
        "tensor_parallel_size to provide more KV cache memory. total_num_cumulative_preemption={c}")


def v1(ts, r=1, w=0, kv=10.0, eng="000", pre=0, p=1.0, g=2.0):
    return V1.format(ts=ts, eng=eng, r=r, w=w, kv=kv, p=p, g=g, pre=f"Preemptions: {pre}, " if pre else "")


def _write(tmp_path, name, text, gz=False):
    p = tmp_path / name
    data = text.encode() if isinstance(text, str) else text
    p.write_bytes(gzip.compress(data) if gz else data)
    return p


def _runtime(shared_data):
    out = {}
    for line in (shared_data / "real" / "runtime_logs.jsonl").read_text().splitlines():
        d = json.loads(line)
        out[d["log_id"]] = d
    return out


def _text(d):
    return next(d[k] for k in ("text", "log", "excerpt", "log_excerpt") if k in d)


# expected per real sample: engine -> (running, waiting, kv%) sequences; warnings: cumulative counts
REAL = {
    "rt002": {"Engine 000": ([9, 9, 10, 10], [0, 1, 0, 0], [62.8, 68.8, 74.5, 79.9])},
    "rt003": {"Engine 000": ([10], [4], [57.9])},
    "rt005": {"Engine 000": ([1, 1], [0, 0], [17.5, 18.9])},
    "rt006": {"Engine 000": ([1, 1, 1, 1], [0, 0, 0, 0], [0.3, 0.6, 0.8, 1.0])},
    "rt012": {"Engine 000": ([8, 8, 8], [0, 0, 0], [91.2, 91.6, 91.9])},  # two records glued on one line
    "rt013": {"Engine 000": ([8] * 6, [0] * 6, [93.9, 94.3, 94.7, 95.0, 95.4, 95.8])},
    "rt015": {"main": ([36], [78], [99.1])},  # v0: Pending is the waiting queue
    "rt017": {"Engine 000": ([1] * 5, [0] * 5, [3.0] * 5)},
    "rt020": {"Engine 000": ([1, 1, 1], [14, 14, 14], [76.5, 76.7, 76.8])},
    "rt021": {"Engine 000": ([0, 0], [0, 0], [0.1, 0.1])},
    "rt022": {"Engine 000": ([16], [0], [21.0])},
}
WARNINGS = {"rt008": [101], "rt018": [1, 1]}


@pytest.mark.parametrize("log_id", sorted(set(REAL) | set(WARNINGS) | {"rt019"}))
def test_real_runtime_samples(log_id, shared_data, tmp_path):
    d = _runtime(shared_data)[log_id]
    res = read_log(_write(tmp_path, "x.log", _text(d)), year=2025)
    got = {}
    for sg in res.segments:
        if sg.timeline is not None:
            tl = sg.timeline
            got[sg.engine] = (list(tl.running), list(tl.waiting), list(tl.kv_usage_pct))
    assert got == {k: tuple(map(list, v)) for k, v in REAL.get(log_id, {}).items()}
    cums = [e.data["cumulative"] for sg in res.segments for e in sg.events if e.kind == "preemption-warning"]
    assert sorted(cums) == WARNINGS.get(log_id, [])
    assert res.skipped.skipped_lines == 0
    assert res.skipped.total_lines == len(_text(d).splitlines())


def test_real_rt002_docker_prefix_gives_year_and_throughput(shared_data, tmp_path):
    res = read_log(_write(tmp_path, "x.log", _text(_runtime(shared_data)["rt002"])))
    tl = res.segments[0].timeline
    assert tl.t[0] == pytest.approx(1778572899.0)  # 2026-05-12 08:01:39 UTC from the container prefix
    assert list(np.diff(tl.t)) == [10.0, 10.0, 10.0]
    assert list(tl.prompt_tps) == [6335.3, 0.0, 3411.1, 0.0] and list(tl.gen_tps) == [4.8, 7.2, 5.7, 7.2]
    assert list(tl.prefix_hit_pct) == [0.0] * 4


def test_rt018_ray_workers_kept_apart(shared_data, tmp_path):
    res = read_log(_write(tmp_path, "x.log", _text(_runtime(shared_data)["rt018"])))
    engines = sorted(sg.engine for sg in res.segments if sg.events)
    assert engines == ["WorkerDict pid=25017", "WorkerDict pid=25295"]


def test_dp_engines_and_restart_segments(tmp_path):
    lines = []
    for i in range(5):
        lines.append(v1(f"01-02 03:00:{10 * i:02d}", r=i, eng="000"))
        lines.append(v1(f"01-02 03:00:{10 * i:02d}", r=10 + i, eng="001"))
    lines.append("(EngineCore_DP0 pid=9) INFO 01-02 03:05:00 [core.py:1] Initializing a V1 LLM engine (v0.33.0) with config: model='m', max_seq_len=4096")
    lines.append("(EngineCore_DP0 pid=9) INFO 01-02 03:05:10 [gpu_worker.py:1] Available KV cache memory: 20.0 GiB")
    lines.append("(EngineCore_DP0 pid=9) INFO 01-02 03:05:10 [kv_cache_utils.py:1] GPU KV cache size: 100,000 tokens, Maximum concurrency for 4,096 tokens per request: 24.41x")
    lines.append(v1("01-02 03:06:00", r=7, eng="000", pre=3))
    res = read_log(_write(tmp_path, "x.log", "\n".join(lines) + "\n"), year=2026)
    segs = [(sg.engine, len(sg.timeline) if sg.timeline is not None else 0, sg.startup is not None) for sg in res.segments]
    assert segs == [("Engine 000", 5, False), ("Engine 001", 5, False), ("Engine 000", 1, True)]
    assert list(res.segments[1].timeline.running) == [10, 11, 12, 13, 14]
    last = res.segments[2]
    assert last.startup.kv_cache_tokens == 100000 and list(last.timeline.preemptions) == [3.0]
    assert any(e.kind == "startup" for e in last.events)


def test_year_rollover_and_out_of_order(tmp_path):
    text = "\n".join([v1("12-31 23:59:50", r=1), v1("12-31 23:59:40", r=0), v1("01-01 00:00:00", r=2)]) + "\n"
    res = read_log(_write(tmp_path, "x.log", text), year=2024)
    tl = res.segments[0].timeline
    assert list(tl.running) == [0, 1, 2]  # sorted by time
    assert tl.t[2] - tl.t[1] == 10.0 and res.rollovers == 1 and res.out_of_order > 0
    assert list(tl.line_no) == [2, 1, 3]


def test_terminal_wrapped_stats_line(tmp_path):
    full = v1("01-02 03:00:00", r=4, w=2, kv=55.5)
    wrapped = "\n".join(full[i:i + 80] for i in range(0, len(full), 80))
    res = read_log(_write(tmp_path, "x.log", wrapped + "\n" + v1("01-02 03:00:10", r=5) + "\n"))
    tl = res.segments[0].timeline
    assert list(tl.running) == [4, 5] and tl.kv_usage_pct[0] == 55.5
    assert res.skipped.skipped_lines == 0


def test_v0_preemptions_reconstructed_from_warnings(tmp_path):
    lines = []
    for i in range(6):
        ts = f"08-06 01:40:{10 * i:02d}"
        lines.append(V0.format(ts=ts, p=1.0, g=2.0, r=10, w=5, kv=99.0))
        if i == 2:
            lines.append(WARN.format(ts="08-06 01:40:15", sg=1, c=1))
        if i == 4:
            lines.append(WARN.format(ts="08-06 01:40:35", sg=2, c=51))
    res = read_log(_write(tmp_path, "x.log", "\n".join(lines) + "\n"), year=2024)
    (sg,) = res.segments
    tl = sg.timeline
    assert tl.swapped is not None and list(tl.waiting) == [5] * 6
    assert tl.preemptions.sum() == pytest.approx(51.0)  # cumulative count at the last warning
    assert tl.preemptions[:2].sum() == 0.0  # nothing before the first warning
    assert [e.data["cumulative"] for e in sg.events] == [1, 51]


def test_a_v0_excerpt_does_not_charge_the_engines_earlier_preemptions_to_its_first_interval(tmp_path):
    # vllm#5578's excerpt: one warning counting 151 since the engine started, 10 s of log. The 150 before it happened
    # before the excerpt (their warnings at 1, 51, 101 are not in it): not a burst of 151 in the first interval
    lines = [V0.format(ts="06-16 21:24:15", p=2706.1, g=13395.4, r=34, w=9832, kv=99.2),
             WARN.format(ts="06-16 21:24:15", sg=165, c=151),
             V0.format(ts="06-16 21:24:20", p=3737.0, g=8906.6, r=37, w=9779, kv=76.6),
             V0.format(ts="06-16 21:24:25", p=3737.0, g=8906.6, r=37, w=9779, kv=76.6),
             WARN.format(ts="06-16 21:24:27", sg=170, c=201),
             V0.format(ts="06-16 21:24:30", p=3737.0, g=8906.6, r=37, w=9779, kv=76.6)]
    res = read_log(_write(tmp_path, "x.log", "\n".join(lines) + "\n"), year=2024)
    (sg,) = res.segments
    assert sg.timeline.preemptions.sum() == pytest.approx(51.0)  # the warning's own one, then 151 -> 201
    assert [e.data["cumulative"] for e in sg.events] == [151, 201]
    assert any("counts 151 since the engine started" in n and "150 before it" in n for n in res.notes)
    # a log from the engine's first preemption on is read as before: no note
    res = read_log(_write(tmp_path, "y.log", "\n".join(lines[:1] + [WARN.format(ts="06-16 21:24:15", sg=1, c=1)]
                                                       + lines[2:4]) + "\n"), year=2024)
    assert res.segments[0].timeline.preemptions.sum() == 1.0 and not res.notes


def test_stats_records_whose_newlines_became_spaces_are_all_read(tmp_path):
    # vllm#36748 as a wiki page flattened it: three records of a data-parallel server on one line, joined by a space,
    # the last one cut. Every complete record is read; the cut one is reported as skipped
    recs = [v1("03-11 06:16:52", r=51, w=117, kv=100.0, eng="000"), v1("03-11 06:16:52", r=31, w=108, kv=98.6, eng="001"),
            v1("03-11 06:16:52", r=3, eng="002")[:150]]
    res = read_log(_write(tmp_path, "x.log", " ".join(recs) + "\n"))
    assert sorted(sg.engine for sg in res.segments) == ["Engine 000", "Engine 001"]
    assert res.skipped.reasons.get("malformed-stats") == 1
    # v0 records end in "%.": the same
    v0 = [V0.format(ts=f"06-16 21:24:{s}", p=1.0, g=2.0, r=r, w=0, kv=50.0) for s, r in (("15", 3), ("20", 4))]
    res = read_log(_write(tmp_path, "y.log", " ".join(v0) + "\n"), year=2024)
    assert list(res.segments[0].timeline.running) == [3, 4]
    # one record with a foreign prefix is left whole (the split needs two records on the line)
    one = "2026-03-11T06:16:52.1Z " + recs[0]
    res = read_log(_write(tmp_path, "z.log", one + "\n"))
    assert len(res.segments) == 1 and res.skipped.skipped_lines == 0


def test_hostile_input_never_raises(tmp_path):
    good = v1("01-02 03:00:00", r=3)
    junk = (b"\x00" * 5000 + b"\n" + bytes(range(256)) * 4 + b"\n" + b"\xff\xfe INFO garbage \xc3\x28\n"
            + b"A" * 300_000 + b"\n" + good.encode() + b"\n" + b"Avg prompt throughput: 1.0 tokens/s, Avg gen\n"
            + b"(APIServer pid=1) \x1b[32mINFO\x1b[0m 01-02 03:00:10 [loggers.py:1] " + good.split("] ", 1)[1].encode() + b"\n"
            + b"INFO 13-45 99:99:99 [x.py:1] " + good.split("] ", 1)[1].encode() + b"\n" + b"tail without newline")
    res = read_log(_write(tmp_path, "x.log", junk))
    tl = res.segments[0].timeline
    assert list(tl.running) == [3, 3]
    r = res.skipped.reasons
    assert r["too-long"] == 1 and r["binary"] >= 1 and r["bad-timestamp"] == 1 and r["malformed-stats"] == 1
    assert r["invalid-utf8"] >= 1
    assert res.skipped.total_lines == junk.count(b"\n") + 1


def test_gzip_truncated_and_binary_file(tmp_path):
    text = "\n".join(v1(f"01-02 03:{m:02d}:00", r=m) for m in range(50)) + "\n"
    data = gzip.compress(text.encode())
    res = read_log(_write(tmp_path, "x.log.gz", data[: len(data) // 2]))  # cut mid-stream
    assert res.skipped.reasons["truncated-input"] == 1
    assert 0 < len(res.segments[0].timeline) < 50
    res = read_log(_write(tmp_path, "bin", bytes(range(256)) * 1000))
    assert res.segments == [] and res.skipped.total_lines >= 1


def test_missing_file(tmp_path):
    with pytest.raises(InputError):
        read_log(tmp_path / "nope.log")


def test_small_chunks_give_same_result(tmp_path):
    # 300 stats lines every 10 s; the engine dies at 03:25:00 and its stats resume 3 minutes later
    lines = [v1(f"01-02 {3 + (m * 10 + (180 if m >= 150 else 0)) // 3600:02d}:"
                f"{((m * 10 + (180 if m >= 150 else 0)) % 3600) // 60:02d}:{(m * 10) % 60:02d}",
                r=m % 7, kv=float(m % 90)) for m in range(300)]
    lines.insert(150, "(EngineCore pid=2) ERROR 01-02 03:25:00 [core.py:1] EngineCore encountered a fatal error.")
    lines.insert(151, "(EngineCore pid=2) ERROR 01-02 03:25:00 [core.py:2] Traceback (most recent call last):")
    p = _write(tmp_path, "x.log", "\n".join(lines) + "\n")
    a, b = read_log(p), read_log(p, chunk_size=4096)
    ta, tb = a.segments[0].timeline, b.segments[0].timeline
    assert np.array_equal(ta.kv_usage_pct, tb.kv_usage_pct) and np.array_equal(ta.line_no, tb.line_no)
    for res in (a, b):  # the fast path reads the lines around the gap in full
        dead = [e for sg in res.segments for e in sg.events if e.kind == "engine-dead"]
        assert len(dead) == 1 and dead[0].line_no == 151 and dead[0].data.get("lines") == 2
    assert a.skipped.parsed_lines == b.skipped.parsed_lines == 302
    assert not math.isnan(ta.t[0])


def test_interleaved_tracebacks_are_one_event_per_process(tmp_path):
    # TP workers write their tracebacks at once, line by line interleaved: one burst per process, and the burst is
    # named by its most specific line (the OOM at its end), not by whichever process wrote last
    lines = []
    for i in range(10):
        for rank, pid in ((0, 10), (1, 11)):
            lines.append(f'(VllmWorker rank={rank} pid={pid}) ERROR 12-03 02:34:43 [multiproc_executor.py:527]   '
                         f'File "x.py", line {i}, in execute_model')
    lines.append("(VllmWorker rank=1 pid=11) ERROR 12-03 02:34:43 [multiproc_executor.py:527] torch.OutOfMemoryError: "
                 "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.19 GiB of which "
                 "1.50 GiB is free.")
    p = tmp_path / "tp.log"
    p.write_text("\n".join(lines) + "\n")
    evs = [e for s in read_log(p).segments for e in s.events if e.kind != "startup"]
    assert [(e.kind, e.data["proc"], e.data["lines"]) for e in evs] == [
        ("engine-error", "VllmWorker rank=0 pid=10", 10), ("oom", "VllmWorker rank=1 pid=11", 11)]
    assert evs[1].data["cause_line"] == 21 and "Tried to allocate 2.00 GiB" in evs[1].data["cause"]


def test_a_stop_is_a_stop_signal_not_any_signal(tmp_path):
    p = tmp_path / "sig.log"
    p.write_text("(EngineCore pid=7) INFO 12-03 02:35:23 [core.py:1454] [shutdown] EngineCore: trigger received "
                 "signal=SIGINT\n"
                 "(EngineCore pid=8) INFO 12-03 02:35:24 [core.py:1454] [shutdown] EngineCore: trigger received "
                 "signal=SIGSEGV\n")
    kinds = [e.kind for s in read_log(p).segments for e in s.events if e.kind != "startup"]
    assert kinds == ["shutdown-requested"]
