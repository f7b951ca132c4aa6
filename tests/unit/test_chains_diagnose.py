"""Chain two's verdicts: order, thin and contradictory evidence, fleets, and full ≠ tight."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kvdoctor.chains.diagnose import counter_trusted, diagnose
from kvdoctor.evidence.model import Evidence, Segment
from tests.unit.test_chains_rules import persistent_timeline, starved_startup, tl


def ev(*segs):
    return Evidence(segments=list(segs))


def seg(timeline, source="http://prom:9090", engine="instance-a", startup=None):
    return Segment(source=source, engine=engine, startup=startup, timeline=timeline)


def test_the_worst_case_alone_is_a_bound_not_the_verdict():
    # persistent preemption on a full pool with max-num-seqs 256 × 32K: the runtime evidence decides
    # (capacity-short); step 1 is reported as the chapter's conservative bound, not as the action
    d = diagnose(ev(seg(persistent_timeline(), startup=starved_startup(256))))
    inst = d.instances[0]
    assert d.verdict == "capacity-short" and inst.confidence == "high"
    f = next(f for f in inst.findings if f.rule_id == "sched.concurrency-starved")
    assert "conservative bound" in f.summary and f.verdict is None
    assert "--max-num-seqs 1 " not in (inst.action or "") + " "


def test_a_cap_holding_the_queue_with_room_in_the_pool_is_config_starved():
    from kvdoctor.evidence.model import StartupFacts

    st = StartupFacts(non_default_args={"max_num_seqs": 2})
    d = diagnose(ev(seg(tl(n=8, running=2, waiting=6, kv_usage_pct=12.0), source="vllm.log", startup=st)))
    inst = d.instances[0]
    assert inst.verdict == "config-starved" and inst.confidence == "high"
    # the advice is running + waiting within what the pool holds at the running size — not the worst case
    assert "--max-num-seqs 8" in inst.action


def test_capacity_short_from_persistent_preemption():
    d = diagnose(ev(seg(persistent_timeline())))
    assert d.verdict == "capacity-short"
    j = d.to_json()
    assert j["schema_version"] == "kvdoctor.diagnose/2"
    assert j["confidence"] == "high" and j["carried_by"] and j["would_overturn"]
    f = j["findings"][0]
    assert {"rule_id", "step", "evidence"} <= set(f) and f["evidence"][0]["line_no"] == 100


def test_one_snapshot_commits_with_low_confidence_and_says_what_would_raise_it():
    one = tl(n=1, running=36, waiting=78, kv_usage_pct=99.1)  # like the v0 line of vllm#3561
    d = diagnose(ev(seg(one, source="vllm.log")))
    inst = d.instances[0]
    assert inst.verdict == "capacity-short" and inst.confidence == "low"
    assert any("longer window" in m for m in inst.missing)
    assert any("60 s" in x for x in inst.would_raise)


def test_contradictory_evidence_is_insufficient():
    # preemptions every interval while KV usage never passes 30 %: vLLM preempts only on a full pool
    i = np.arange(30)
    weird = tl(preemptions=np.where(i % 2 == 0, 3, 0), kv_usage_pct=25.0)
    d = diagnose(ev(seg(weird)))
    assert d.verdict == "insufficient-evidence"
    assert d.instances[0].contradictions


def test_fleet_summary_one_verdict_per_instance():
    d = diagnose(ev(seg(persistent_timeline(), engine="a"), seg(tl(kv_usage_pct=95.0), engine="b"),
                    seg(tl(n=2), engine="c")))
    assert [i.verdict for i in d.instances] == ["capacity-short", "healthy", "healthy"]
    assert [i.confidence for i in d.instances] == ["high", "high", "medium"]  # 20 s of counter: medium
    fl = d.to_json()["fleet"]
    assert fl["verdict"] == "capacity-short" and fl["counts"] == {"capacity-short": 1, "healthy": 2}


def test_log_without_preemption_field_is_not_a_counter():
    s = seg(tl(), source="vllm.log", engine="Engine 000")
    assert not counter_trusted(s)
    s2 = seg(tl(preemptions=np.where(np.arange(30) == 3, 2, 0)), source="vllm.log")
    assert counter_trusted(s2)  # a build that prints "Preemptions:" counts them, zeros included
    assert counter_trusted(seg(tl(), source="http://prom:9090"))


def test_log_only_queue_episode_commits_low_and_asks_for_the_counter():
    # v1 log lines, one queue episode, KV mid: preemption count unknowable, queue not ~empty
    w = np.zeros(30)
    w[10:20] = 4
    d = diagnose(ev(seg(tl(waiting=w, kv_usage_pct=70.0), source="vllm.log")))
    inst = d.instances[0]
    assert d.verdict == "arrival-bursts" and inst.confidence == "low"
    assert any("vllm:num_preemptions_total" in m for m in inst.missing)


def test_as_one_merges_consecutive_excerpts():
    a = tl(n=3, kv_usage_pct=91.5)
    b = tl(n=6, kv_usage_pct=94.0)
    b.t = b.t + 60
    d = diagnose(ev(seg(a, source="x.log"), seg(b, source="y.log")), as_one=True)
    assert len(d.instances) == 1 and d.instances[0].window["samples"] == 9
    assert d.verdict == "healthy"


@settings(max_examples=60, deadline=None)
@given(kv=st.lists(st.floats(0, 100), min_size=6, max_size=40),
       log=st.booleans())
def test_full_pool_without_preemption_or_queue_is_never_a_shortage(kv, log):
    n = len(kv)
    t = tl(n=n, kv_usage_pct=np.array(kv), waiting=0.0, preemptions=0.0)
    d = diagnose(ev(seg(t, source="vllm.log" if log else "http://prom")))
    assert d.verdict in ("healthy", "insufficient-evidence")
    assert d.verdict != "capacity-short"


def test_startup_facts_alone_give_step_one_as_a_bound():
    d = diagnose(Evidence(segments=[Segment(source="start.log", engine="", startup=starved_startup(256),
                                            timeline=None)]))
    # no runtime samples: nothing points anywhere; step 1 is reported, labelled the conservative bound
    assert d.verdict == "insufficient-evidence"
    assert "sched.concurrency-starved" in {f.rule_id for f in d.instances[0].findings}
    d2 = diagnose(Evidence(segments=[Segment(source="start.log", engine="", startup=starved_startup(1),
                                             timeline=None)]))
    assert d2.verdict == "insufficient-evidence" and not d2.instances[0].findings


def test_timeline_json_has_no_nan():
    import json

    t = tl(ttft_p99=np.full(30, np.nan))
    payload = diagnose(ev(seg(t))).to_json()
    json.dumps(payload, allow_nan=False)
    assert "timeline" in payload and payload["timeline"]["t"][0] == t.t[0]



def test_queue_held_with_free_pool_cap_versus_stall():
    from kvdoctor.evidence.model import StartupFacts

    def run(running, cap):
        st = StartupFacts(non_default_args={"max_num_seqs": cap})
        t = tl(running=running, waiting=14, kv_usage_pct=70.0)
        return diagnose(ev(seg(t, source="vllm.log", startup=st))).instances[0]

    at_cap = run(16, 16)
    assert at_cap.verdict == "config-starved" and "max-num-seqs" in at_cap.reason
    # like intel/llm-scaler#391: 1 running holds 76 % of the pool, 14 waiting: the next one does not fit
    short = run(1, 16)
    assert short.verdict == "capacity-short" and "room for 0.4" in short.reason
    from kvdoctor.evidence.model import StartupFacts
    t = tl(running=3, waiting=14, kv_usage_pct=20.0, gen_tps=0.0, prompt_tps=0.0)
    stall = diagnose(ev(seg(t, source="vllm.log", startup=StartupFacts(non_default_args={"max_num_seqs": 16}))))
    assert stall.verdict == "stalled"


def test_one_queue_episode_is_not_called_healthy():
    w = np.zeros(30)
    w[10:25] = 3
    inst = diagnose(ev(seg(tl(waiting=w, kv_usage_pct=70.0)))).instances[0]
    assert inst.verdict != "healthy"


def test_a_queue_vllm_deferred_is_not_capacity():
    """Waiting = capacity + deferred (vLLM 0.33's scheduler stats). A queue that is all deferred (LoRA budget, KV
    transfer, a blocked status) gets its own verdict and an action outside the memory chains, never "healthy" or more
    KV; a deferred part beside a capacity queue is a note, and the capacity queue is what the other steps judge."""
    d = diagnose(ev(seg(tl(n=12, running=6, waiting=8, waiting_deferred=8, kv_usage_pct=20.0), source="vllm.log")))
    inst = d.instances[0]
    assert inst.verdict == "deferred" and "--max-loras" in inst.action and "up to 8" in inst.reason
    assert not any("deferred by vLLM" in n for n in inst.notes)  # the finding says it; no second note
    # one request deferred in every sample is held, as one waiting in every sample is (signals.held_samples)
    one = diagnose(ev(seg(tl(n=12, running=6, waiting=1, waiting_deferred=1, kv_usage_pct=20.0), source="vllm.log")))
    assert one.verdict == "deferred" and "in 12 of 12 samples" in one.instances[0].reason
    # the same queue without the deferred figure is a held queue with room: not this verdict
    assert diagnose(ev(seg(tl(n=12, running=6, waiting=8, kv_usage_pct=20.0), source="vllm.log"))).verdict != "deferred"
    # a full pool with a capacity queue beside a few deferred: capacity speaks, the deferred part is a note
    full = tl(n=12, running=6, waiting=9, waiting_deferred=2, kv_usage_pct=97.0)
    inst = diagnose(ev(seg(full, source="vllm.log"))).instances[0]
    assert inst.verdict == "capacity-short" and any("up to 2 waiting request(s) were deferred" in n for n in inst.notes)


def test_one_request_held_through_a_stretch_of_a_quiet_window_is_a_note():
    """Found in a public Claude Code thread (vllm#40630, 2026-12-04 sweep): Running 4, Waiting 1 for five stats lines
    with no prompt token processed, then the queue empty for the rest of the window. The window reads healthy; the
    stretch is said, with the room the pool had."""
    w, pt = np.zeros(12), np.full(12, 500.0)
    w[2:7], pt[2:7] = 1, 0.0
    inst = diagnose(ev(seg(tl(n=12, running=4, waiting=w, prompt_tps=pt, kv_usage_pct=71.0), source="x.log"))).instances[0]
    note = [n for n in inst.notes if "waited through" in n]
    assert inst.verdict == "healthy" and len(note) == 1
    assert "5 consecutive samples (40 s" in note[0] and "(line 102)" in note[0] and "free 29%" in note[0]
    # a waiting request while prompts are being processed is being admitted: no note; nor for a short stretch
    for ww, pp in ((w, np.full(12, 500.0)), (np.where(np.arange(12) < 4, w, 0), pt)):
        inst = diagnose(ev(seg(tl(n=12, running=4, waiting=ww, prompt_tps=pp, kv_usage_pct=71.0)))).instances[0]
        assert not any("waited through" in n for n in inst.notes)


def test_a_window_that_ends_on_a_stopped_engine_is_not_confidently_healthy():
    # LMCache PR 1196's decode instance (vLLM v1): 7 tok/s for 1 running, then "Avg prompt throughput: 0.0 tokens/s,
    # Avg generation throughput: 0.0 tokens/s, Running: 1 reqs" and no stats line for six minutes until a Ctrl-C
    stuck = tl(n=6, running=[1, 1, 1, 1, 1, 1], waiting=0, kv_usage_pct=0.5, prompt_tps=[3.6, 0, 0, 0, 0, 0],
               gen_tps=[7.0, 7.0, 7.1, 6.9, 7.0, 0.0])
    inst = diagnose(ev(seg(stuck, source="vllm.log"))).instances[0]
    assert inst.verdict == "healthy" and inst.confidence == "low"
    assert any("no token processed in its interval" in c for c in inst.carried_by)
    assert any("it hung" in x for x in inst.would_raise)
    # the same window with tokens in its last interval, or with nothing running at the end, stays as it was
    for end in (dict(gen_tps=[7.0, 7.0, 7.1, 6.9, 7.0, 6.8]), dict(running=[1, 1, 1, 1, 1, 0])):
        base = dict(running=[1, 1, 1, 1, 1, 1], gen_tps=[7.0, 7.0, 7.1, 6.9, 7.0, 0.0])
        base.update(end)
        fine = tl(n=6, waiting=0, kv_usage_pct=0.5, prompt_tps=[3.6, 0, 0, 0, 0, 0], **base)
        inst = diagnose(ev(seg(fine, source="vllm.log"))).instances[0]
        assert not any("no token processed" in c for c in inst.carried_by)


def test_unevenly_loaded_data_parallel_engines_get_a_note():
    from kvdoctor.chains.diagnose import dp_balance_notes

    # vllm#48808 (DP 4 on H20, /metrics pasted twice): 8/8/8/8 running at first, then 27/5/0/0
    def snap(run, wait=0.0):
        return tl(n=1, running=run, waiting=wait, kv_usage_pct=np.nan)

    skewed = [seg(snap(r), source="metrics.txt", engine=f"qwen3_4b engine {k}") for k, r in enumerate((27, 5, 0, 0))]
    skewed[0].timeline.t[:] = np.nan
    for s_ in skewed:
        s_.timeline.t[:] = np.nan
    notes = dp_balance_notes(skewed)
    assert len(notes) == 1 and "engine 0: 27 running" in notes[0] and "X-data-parallel-rank" in notes[0]
    d = diagnose(ev(*skewed))
    assert any("unevenly loaded" in n for n in d.notes)
    # even engines, or two servers' engines (different sources), say nothing
    even = [seg(snap(r), source="metrics.txt", engine=f"qwen3_4b engine {k}") for k, r in enumerate((8, 8, 8, 8))]
    apart = [seg(snap(r), source=f"host{k}.txt", engine="Engine 000") for k, r in enumerate((27, 0))]
    assert dp_balance_notes(even) == [] and dp_balance_notes(apart) == []
    # vllm#36748 (DP 8 on B200): 51 + 117 against 31 + 108 is a shared queue, not a skew
    close = [seg(tl(n=1, running=r, waiting=w), source="v.log", engine=f"Engine 00{k}")
             for k, (r, w) in enumerate(((51, 117), (31, 108)))]
    assert dp_balance_notes(close) == []


def test_a_workers_error_line_after_the_last_sample_is_the_excerpts_last_word(tmp_path):
    # vllm-ascend#3548: the pool full with 7 running, then a worker's device error and no death line in the excerpt
    from kvdoctor.evidence.load import load_evidence

    stats = ("(APIServer pid=597826) INFO 10-21 01:16:{s:02d} [loggers.py:127] Engine 000: Avg prompt throughput: 0.0 "
             "tokens/s, Avg generation throughput: 72.8 tokens/s, Running: 7 reqs, Waiting: 1 reqs, GPU KV cache usage: "
             "100.0%, Prefix cache hit rate: 0.0%\n")
    err = ("(Worker_TP2 pid=598143) ERROR 10-21 01:17:01 [multiproc_executor.py:671] EE1001: [PID: 598143] The argument "
           "is invalid.Reason: coreDim=66976 can't be greater than UINT16_MAX.\n")
    f = tmp_path / "npu.log"
    f.write_text("".join(stats.format(s=s) for s in (33, 43, 53)) + err)
    inst = diagnose(load_evidence([f])).instances[0]
    assert any("last words in this excerpt" in n and "coreDim=66976" in n for n in inst.notes)
    # a traceback's frame cut mid-line is no error to quote
    f.write_text("".join(stats.format(s=s) for s in (33, 43, 53))
                 + "(EngineCore_DP0 pid=3) ERROR 01-22 09:42:00 [patch_core.py:58]     raise ValueErro\n")
    assert not any("last words" in n for n in diagnose(load_evidence([f])).instances[0].notes)


def test_a_stats_line_of_running_requests_and_no_token_then_minutes_of_silence_is_a_stall(tmp_path):
    # vllm-ascend#2245: 56 running, 0 tokens at 08:48:54, then no stats line for 48 minutes (vLLM v1 prints the next
    # one only once tokens flow), an error, and a later load that ran normally: read healthy before, a hang inside
    from kvdoctor.evidence.load import load_evidence

    line = ("INFO 08-06 {t} [loggers.py:118] Engine 000: Avg prompt throughput: {p} tokens/s, Avg generation "
            "throughput: {g} tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: 21.9%, Prefix cache "
            "hit rate: 89.7%\n")
    rows = [("08:48:44", 7834.8, 92.9, 56), ("08:48:54", 0.0, 0.0, 56), ("09:37:16", 6992.7, 186.3, 50),
            ("09:37:26", 0.0, 450.0, 50), ("09:37:36", 0.0, 429.8, 50), ("09:37:46", 0.0, 415.0, 50)]
    f = tmp_path / "npu.log"
    f.write_text("".join(line.format(t=t, p=p, g=g, r=r) for t, p, g, r in rows))
    inst = diagnose(load_evidence([f])).instances[0]
    assert inst.verdict == "stalled" and inst.confidence == "medium"
    assert "56 request(s) were running" in inst.reason and "48m22s" in inst.reason
    # the same lines with tokens in that interval: an idle gap after a finished load is no stall
    f.write_text("".join(line.format(t=t, p=p, g=(g if t != "08:48:54" else 12.0), r=r) for t, p, g, r in rows))
    assert diagnose(load_evidence([f])).instances[0].verdict != "stalled"
