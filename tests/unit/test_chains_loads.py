"""A log that holds several loads one after another (bench runs against one server, idle between them) is judged one
load at a time (chains.signals.loads, chains.diagnose._split_loads); a lull inside one load is not a split."""

from __future__ import annotations

from datetime import datetime, timedelta

from kvdoctor.chains.diagnose import diagnose
from kvdoctor.chains.findings import Thresholds
from kvdoctor.chains.signals import loads
from kvdoctor.evidence.load import load_evidence

T0 = datetime(2026, 12, 5, 10, 0, 0)


def line(t: datetime, running: int, waiting: int, kv: float, prompt: float = 900.0, gen: float = 400.0) -> str:
    return (f"(APIServer pid=7) INFO {t:%m-%d %H:%M:%S} [loggers.py:259] Engine 000: Avg prompt throughput: {prompt} "
            f"tokens/s, Avg generation throughput: {gen} tokens/s, Running: {running} reqs, Waiting: {waiting} reqs, "
            f"GPU KV cache usage: {kv}%, Prefix cache hit rate: 0.0%\n")


def idle(t: datetime) -> str:
    return line(t, 0, 0, 0.0, prompt=0.0, gen=0.0)


def write(tmp_path, lines: list[str]):
    p = tmp_path / "serve.log"
    p.write_text("".join(lines))
    return str(p)


def two_loads(gap_s: float = 300.0) -> list[str]:
    """A light load (6 samples, nothing waiting), one idle line, silence, then a saturated load on a full pool with a
    held queue and a v0-style preemption warning inside it."""
    out = [line(T0 + timedelta(seconds=10 * i), 3, 0, 20.0) for i in range(6)]
    out.append(idle(T0 + timedelta(seconds=60)))
    t1 = T0 + timedelta(seconds=60 + gap_s)
    out += [line(t1 + timedelta(seconds=10 * i), 48, 30, 99.0) for i in range(6)]
    return out


def test_an_idle_stretch_between_two_loads_splits_the_log_and_each_load_is_judged_apart(tmp_path):
    d = diagnose(load_evidence([write(tmp_path, two_loads())]))
    assert [i.engine for i in d.instances] == ["Engine 000 · load 1 of 2", "Engine 000 · load 2 of 2"]
    first, second = d.instances
    assert first.verdict == "healthy"
    assert second.verdict == "capacity-short"  # a full pool and a held queue, judged on its own six samples
    assert d.verdict == "capacity-short"  # the log's answer is its most urgent load
    assert first.window["samples"] == 7 and second.window["samples"] == 6  # the idle line stays with the load it ends
    assert any("load 2 of 2 in this log" in n and "lines 8-13" in n for n in second.notes)


def test_the_same_log_judged_as_one_window_mixes_the_loads(tmp_path):
    whole = diagnose(load_evidence([write(tmp_path, two_loads())]), as_one=True)
    assert len(whole.instances) == 1 and whole.instances[0].window["samples"] == 13


def test_a_lull_shorter_than_the_gap_stays_one_load(tmp_path):
    d = diagnose(load_evidence([write(tmp_path, two_loads(gap_s=30.0))]))
    assert len(d.instances) == 1 and d.instances[0].engine == "Engine 000"
    # the threshold is the operator's: a longer one keeps the five-minute gap inside one window too
    d = diagnose(load_evidence([write(tmp_path, two_loads())]), thresholds=Thresholds(load_gap_s=600.0))
    assert len(d.instances) == 1


def test_a_stray_request_is_not_a_load_of_its_own(tmp_path):
    lines = two_loads()[:7]
    lines.append(line(T0 + timedelta(seconds=400), 1, 0, 1.0))  # one busy sample after the gap
    d = diagnose(load_evidence([write(tmp_path, lines)]))
    assert len(d.instances) == 1


def test_events_go_to_the_load_whose_lines_hold_them(tmp_path):
    lines = two_loads()
    warn = (f"(EngineCore_DP0 pid=8) WARNING {T0 + timedelta(seconds=390):%m-%d %H:%M:%S} [scheduler.py:1816] "
            "Recovered from KV load failure: 3 request(s) rescheduled (4096 tokens affected).\n")
    lines.insert(9, warn)  # inside the second load
    d = diagnose(load_evidence([write(tmp_path, lines)]))
    first, second = d.instances
    assert not any("KV connector failed" in n for n in first.notes)
    assert any("KV connector failed to load cached blocks 1 time(s) (line 10)" in n for n in second.notes)


def test_loads_partition_the_rows_in_order(tmp_path):
    ev = load_evidence([write(tmp_path, two_loads() + [idle(T0 + timedelta(seconds=600))]
                              + [line(T0 + timedelta(seconds=900 + 10 * i), 8, 0, 40.0) for i in range(4)])])
    tl = ev.segments[0].timeline
    ls = loads(tl, Thresholds())
    assert [(x.first, x.stop) for x in ls] == [(0, 7), (7, 14), (14, 18)]
    assert ls[-1].line_stop is None and ls[0].line_stop == 8


def test_untimed_samples_never_split():
    import numpy as np

    from tests.unit.test_chains_rules import tl

    t = tl(n=6, running=4, waiting=0, kv_usage_pct=10.0)
    t.t = np.full(6, np.nan)
    assert len(loads(t, Thresholds())) == 1


def test_request_records_on_the_log_clock_go_to_the_load_they_arrived_in(tmp_path):
    from kvdoctor.chains.diagnose import _split_loads
    from kvdoctor.evidence.model import RequestRecord

    ev = load_evidence([write(tmp_path, two_loads())])
    seg = ev.segments[0]
    t = seg.timeline.t
    reqs = [RequestRecord("a", float(t[2])), RequestRecord("b", float(t[9])), RequestRecord("c", float(t[10]))]
    parts = _split_loads(seg, reqs, Thresholds())
    assert [[r.request_id for r in p[1]] for p in parts] == [["a"], ["b", "c"]]
    # records on another clock (seconds from a trace's start) cannot be placed: every load sees them all
    rel = [RequestRecord("x", 1.0), RequestRecord("y", 500.0)]
    assert [len(p[1]) for p in _split_loads(seg, rel, Thresholds())] == [2, 2]


def test_a_request_that_came_and_went_between_two_lines_bridges_the_gap(tmp_path):
    # nothing running or waiting at 10:03:00, but that interval processed tokens: no 60 s stretch of idle engine
    lines = two_loads(gap_s=90.0)[:7]
    lines.insert(7, line(T0 + timedelta(seconds=105), 0, 0, 0.0, prompt=812.0, gen=40.0))
    lines += [line(T0 + timedelta(seconds=150 + 10 * i), 48, 30, 99.0) for i in range(6)]
    d = diagnose(load_evidence([write(tmp_path, lines)]))
    assert len(d.instances) == 1
    # the same interval with no tokens processed is idle: two loads
    lines[7] = idle(T0 + timedelta(seconds=105))
    assert len(diagnose(load_evidence([write(tmp_path, lines)])).instances) == 2


def test_a_kv_load_failure_re_wrapped_by_an_issue_body_is_read(tmp_path):
    # ai-dynamo/nixl#1614 (vLLM 0.19, NIXL on GB200): the scheduler's line, its tail on the next line in the issue
    text = ("ERROR [nixl_connector.py:2691] NIXL transfer failure: transfer_setup_failed.\n"
            "ERROR [scheduler.py:2293] Failing 1 request(s) due to KV load failure\n"
            "  (failure_policy=fail, 996 tokens affected)\n"
            "WARN: Failed deserializing JSON to response\n")
    p = tmp_path / "nixl.log"
    p.write_text(text)
    d = diagnose(load_evidence([p]))
    notes = [n for i in d.instances for n in i.notes]
    assert any("1 request(s) failed with an error (996 tokens)" in n for n in notes), notes


def test_kv_blocks_the_decode_side_never_read_get_a_note(tmp_path):
    # vllm#25562 (a NIXL prefill instance, 2025) and vLLM 0.33's wording of the same warning
    w = "(EngineCore_DP0 pid=3747544) WARNING 09-24 16:35:21 [nixl_connector.py:1048] "
    text = "".join(f"{w}Releasing expired KV blocks for request cmpl-{i}-0 which were retrieved by 0 decode worker(s) "
                   "within 120 seconds.\n" for i in range(3))
    text += (f"{w}Releasing expired KV blocks for request cmpl-9-0 which were retrieved by 1 remote worker(s) before "
             "lease expired.\n")
    p = tmp_path / "nixl.log"
    p.write_text(text)
    ev = load_evidence([p])
    assert sum(1 for s in ev.segments for e in s.events if e.kind == "kv-expired") == 4
    notes = [n for i in diagnose(ev).instances for n in i.notes]
    assert any("blocks of 4 request(s) that the decode side did not read in time (3 read by no decode worker" in n
               for n in notes), notes
