"""The front end's work at each finish (``FrontEnd.per_finish_s``) and the calibration from vLLM's per-step
log (``IterObs``): hand-counted cases, the equivalence of the as-you-go open loop with the up-front pass, and
a noise-free fit that the step log lets one run identify."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kvdoctor.sim import calibration as C
from kvdoctor.sim.frontend import Admission, FrontEnd
from kvdoctor.sim.run import simulate
from kvdoctor.sim.scheduler import SchedConfig
from kvdoctor.sim.steptime import LinearStepTime
from kvdoctor.sim.workload import Workload


@dataclass
class _Req:
    idx: int
    arrival: float
    prompt: int = 100
    max_out: int = 10


def test_closed_loop_finish_work_delays_the_next_wave_hand_counted():
    # closed loop of 2; admission 0.05 s per request, 0.1 s of work per finish, no latency.
    # t=0: requests 0 and 1 are sent; the front end admits 0 at [0, 0.05] and 1 at [0.05, 0.10]
    fe = FrontEnd(per_request_s=0.05, per_finish_s=0.1)
    reqs = [_Req(i, 0.0) for i in range(4)]
    a = Admission(reqs, max_concurrency=2, frontend=fe)
    assert not a.open_loop
    assert [r.idx for r in a.ready(0.2)] == [0, 1]
    assert (reqs[0].arrival, reqs[1].arrival) == pytest.approx((0.05, 0.10))
    # both finish in the same engine step at t=1.0. First finish: nothing waits to be sent (the gate is
    # closed), its work takes the front end [1.0, 1.1], its slot frees -> request 2 is sent at 1.0 (by the
    # second finish's _send) and admitted after that work: [1.1, 1.15]; the second finish's work follows
    # [1.15, 1.25]; request 3 (sent at 1.0, when the second slot freed) is admitted [1.25, 1.30]
    a.finished(1.0)
    a.finished(1.0)
    assert [r.idx for r in a.ready(1.31)] == [2, 3]
    assert (reqs[2].arrival, reqs[3].arrival) == pytest.approx((1.15, 1.30))
    assert (a.sent[2], a.sent[3]) == pytest.approx((1.0, 1.0))  # TTFT counts from the send
    # without the finish work the same wave reaches the engine at 1.05 and 1.10
    reqs = [_Req(i, 0.0) for i in range(4)]
    b = Admission(reqs, max_concurrency=2, frontend=FrontEnd(per_request_s=0.05))
    list(b.ready(0.2))
    b.finished(1.0)
    b.finished(1.0)
    list(b.ready(1.31))
    assert (reqs[2].arrival, reqs[3].arrival) == pytest.approx((1.05, 1.10))


def test_open_loop_finish_work_is_counted_as_the_run_goes():
    # open loop: sends at 0.0 and 0.5; admission 0.1 s, finish work 0.2 s. Request 0 reaches the engine
    # at 0.1 and finishes at 0.4; its finish work holds the front end [0.4, 0.6], so request 1 (sent at
    # 0.5) is admitted [0.6, 0.7], not [0.5, 0.6]
    reqs = [_Req(0, 0.0), _Req(1, 0.5)]
    a = Admission(reqs, frontend=FrontEnd(per_request_s=0.1, per_finish_s=0.2))
    assert not a.open_loop  # engine arrivals depend on finishes: no up-front pass
    assert list(a.ready(0.0)) == [] and a.next_time() == pytest.approx(0.1)
    assert [r.idx for r in a.ready(0.1)] == [0]
    a.finished(0.4)
    assert a.next_time() == pytest.approx(0.7)  # the send at 0.5 waits for the front end until 0.6, +0.1
    assert [r.idx for r in a.ready(0.71)] == [1]
    assert reqs[1].arrival == pytest.approx(0.7) and a.sent[1] == pytest.approx(0.5)
    # a send BEFORE the finish goes ahead of its work (FIFO by time): finish at 0.55 instead
    reqs = [_Req(0, 0.0), _Req(1, 0.5)]
    b = Admission(reqs, frontend=FrontEnd(per_request_s=0.1, per_finish_s=0.2))
    list(b.ready(0.1))
    b.finished(0.55)
    assert [r.idx for r in b.ready(0.61)] == [1] and reqs[1].arrival == pytest.approx(0.6)


def _cfg():
    return SchedConfig(num_blocks=512, block_size=32, max_model_len=512, max_num_seqs=8, max_num_batched_tokens=2048)


def _wl(mc=None):
    n = 30
    return Workload(arrival=[0.07 * i for i in range(n)], prompt=[100 + 7 * (i % 5) for i in range(n)],
                    output=[20 + 3 * (i % 4) for i in range(n)], max_concurrency=mc, name="t", source="t")


@pytest.mark.parametrize("mc", [None, 4])
def test_a_negligible_finish_cost_reproduces_the_up_front_pass(mc):
    # the as-you-go path (per_finish_s > 0) must give what the one-pass open loop (or the closed loop)
    # gives without finish work, up to the negligible work itself
    step = LinearStepTime(base_s=0.01, per_token_s=5e-5, per_request_s=0.001)
    a = simulate(_wl(mc), _cfg(), step, detail=False, frontend=FrontEnd(per_request_s=0.004, latency_s=0.002))
    b = simulate(_wl(mc), _cfg(), step, detail=False,
                 frontend=FrontEnd(per_request_s=0.004, latency_s=0.002, per_finish_s=1e-12))
    assert list(b.ttft_s) == pytest.approx(list(a.ttft_s), abs=1e-9)
    assert list(b.e2e_s) == pytest.approx(list(a.e2e_s), abs=1e-9)
    # and a real finish cost only delays
    c = simulate(_wl(mc), _cfg(), step, detail=False,
                 frontend=FrontEnd(per_request_s=0.004, latency_s=0.002, per_finish_s=0.01))
    assert sum(c.ttft_s) > sum(a.ttft_s)


REAL = ("(APIServer pid=7981) INFO 12-01 21:23:22 [loggers.py:199] Engine 000: Iteration(201): 2 context requests, "
        "256 context tokens, 4 generation requests, 4 generation tokens, iteration elapsed time: 14.09 ms, "
        "CPU KV cache usage: 9.4%")


def test_the_per_step_log_line_is_read():
    # a line the test bed's vLLM 0.32 CPU server wrote with --enable-logging-iteration-details
    assert C.parse_iteration_line(REAL) == C.IterObs(2, 256, 4, 4, 0.01409)
    assert C.parse_iteration_line(REAL.replace("14.09 ms,", "0.00 ms (dummy),")) is None
    assert C.parse_iteration_line("Avg prompt throughput: 1.0 tokens/s") is None
    assert C.parse_iteration_line(REAL[:120]) is None  # cut mid-line


def test_iteration_time_hand_counted():
    lin = {"base_s": 0.005, "per_token_s": 1e-4, "per_request_s": 1e-3, "per_pair_s": 1e-8}
    # 2 prefills of 256 tokens in all (pairs of two equal fresh chunks of 128: 2 x 128*129/2 = 16,512)
    # and 4 decodes: 260 tokens, 6 requests
    o = C.IterObs(2, 256, 4, 4, 0.02)
    assert C.iteration_time(lin, o) == pytest.approx(0.005 + 260e-4 + 6e-3 + 16512e-8)


def test_load_iteration_observations_reads_one_runs_byte_span(tmp_path):
    p = tmp_path / "serve.log"
    head = "INFO start-up\n"
    p.write_text(head + REAL + "\n" + REAL.replace("14.09", "9.00") + "\n")
    assert [o.elapsed_s for o in C.load_iteration_observations([str(p)])] == pytest.approx([0.01409, 0.009])
    lo = len(head) + len(REAL) + 1
    assert [o.elapsed_s for o in C.load_iteration_observations([str(p)], spans=[(lo, p.stat().st_size)])] == \
        pytest.approx([0.009])


def test_the_step_log_lets_one_closed_loop_separate_per_step_from_per_request_cost():
    # a known deployment (noise-free). One closed loop at concurrency 4 sees only base + 4 x per_request;
    # its server's step log (steps of 1-8 decodes and some prefills, each the model runner's time, i.e.
    # the step less a fixed 2 ms of scheduling the log does not see) pins the split, and a closed loop
    # at 8 is then predicted
    true = C.Calibration(kind="linear", scale=0.0,
                         linear={"base_s": 0.006, "per_token_s": 2e-4, "per_kv_token_s": 0.0, "per_pair_s": 0.0,
                                 "per_request_s": 0.002},
                         frontend=FrontEnd(per_request_s=0.004, per_finish_s=0.003))
    setup = C.Setup(cfg=_cfg())

    def run(name, n, mc):
        r = C.BenchRun(name=name, figures={}, prompt=[129] * n, output=[48] * n, send=None,
                       request_rate=float("inf"), burstiness=1.0, max_concurrency=mc)
        r.figures = C.sim_figures(C.simulate_run(r, setup, true))
        return r

    runs = [run("c4.json", 24, 4), run("c8.json", 32, 8)]
    its = [C.IterObs(c, t, g, g, C.iteration_time(true.linear, C.IterObs(c, t, g, g, 1.0)) - 0.002)
           for c, t, g in [(0, 0, n) for n in range(1, 9)] + [(1, 129, 3), (2, 258, 2), (1, 129, 7)]]
    with_log = C.calibrate(runs, setup, kind="linear", fit_on=["c4.json"], finish_cost=True, iterations=its)
    assert with_log.fit["iterations"] == len(its)
    assert with_log.linear["per_request_s"] == pytest.approx(0.002, rel=0.15)
    assert with_log.fit["engine_overhead_s"] == pytest.approx(0.002, rel=0.3)
    e = with_log.fit["runs"]["c8.json"]["error"]
    assert abs(e["output_throughput"]) < 0.05 and abs(e["mean_tpot_ms"]) < 0.05, e
    # the roofline model has no place for the log's totals: refused with a clear message
    with pytest.raises(Exception, match="linear"):
        C.fit(runs[:1], C.Setup(cfg=_cfg()), kind="roofline+linear", iterations=its)


def test_client_after_finish_frees_the_slot_when_the_finish_work_ends_hand_counted():
    # the case above with FrontEnd.client_after_finish: the bench's semaphore frees when the response has ended, i.e.
    # after the finish work (the last chunk and [DONE] are that work). Both finish at t=1.0: the first one's work
    # runs [1.0, 1.1] (its client has the response at 1.1 and sends request 2), the second one's [1.1, 1.2] (request
    # 3 is sent at 1.2). The FIFO front end admits request 2 after the second finish's work, queued before it:
    # [1.2, 1.25]; request 3 [1.25, 1.30]
    fe = FrontEnd(per_request_s=0.05, per_finish_s=0.1, client_after_finish=True)
    reqs = [_Req(i, 0.0) for i in range(4)]
    a = Admission(reqs, max_concurrency=2, frontend=fe)
    list(a.ready(0.2))
    assert a.finished(1.0) == pytest.approx(1.1)  # the client's end of the first response
    assert a.finished(1.0) == pytest.approx(1.2)
    assert a.next_time() == pytest.approx(1.25)
    assert [r.idx for r in a.ready(1.31)] == [2, 3]
    assert (a.sent[2], a.sent[3]) == pytest.approx((1.1, 1.2))  # TTFT counts from these sends
    assert (reqs[2].arrival, reqs[3].arrival) == pytest.approx((1.25, 1.30))


def test_client_after_finish_with_parse_work_staggers_a_wave_hand_counted():
    # priority mode (parse and finish work ahead of the FIFO admission): parse 0.02 s, admission 0.03 s, finish work
    # 0.1 s; closed loop of 2. Both finish at 1.0: their works run [1.0, 1.1] and [1.1, 1.2], so request 2 is sent at
    # 1.1 and request 3 at 1.2. Request 2's parse waits behind the second finish's work: [1.2, 1.22]; then request 3's
    # parse (parse work goes first) [1.22, 1.24]; the admissions follow: request 2 [1.24, 1.27], request 3 [1.27, 1.30]
    fe = FrontEnd(parse_s=0.02, per_request_s=0.03, per_finish_s=0.1, client_after_finish=True)
    reqs = [_Req(i, 0.0) for i in range(4)]
    a = Admission(reqs, max_concurrency=2, frontend=fe)
    list(a.ready(0.5))
    assert (a.finished(1.0), a.finished(1.0)) == pytest.approx((1.1, 1.2))
    assert a.next_time() == pytest.approx(1.27)
    got = list(a.ready(1.5))
    assert [r.idx for r in got] == [2, 3]
    assert (a.sent[2], a.sent[3]) == pytest.approx((1.1, 1.2))
    assert (reqs[2].arrival, reqs[3].arrival) == pytest.approx((1.27, 1.30))


def test_client_after_finish_ends_e2e_after_the_finish_work():
    # one request at a time (closed loop of 1): each response ends per_finish_s after the engine's finish, and the next
    # request is sent then. Before, the next one was sent at the engine's finish and waited out that work inside its
    # own TTFT; now the work is in the E2E of the request it belongs to
    cfg = SchedConfig(num_blocks=64, block_size=16, max_num_seqs=4, max_num_batched_tokens=512, max_model_len=256)
    st = LinearStepTime(base_s=0.01, per_token_s=1e-5, per_request_s=1e-3)
    w = Workload(arrival=[0.0] * 3, prompt=[64] * 3, output=[8] * 3, max_concurrency=1)
    base = FrontEnd(per_request_s=0.004, per_finish_s=0.02)
    r0 = simulate(w, cfg, st, frontend=base)
    r1 = simulate(w, cfg, st, frontend=FrontEnd(per_request_s=0.004, per_finish_s=0.02, client_after_finish=True))
    assert r1.ttft_s[0] == pytest.approx(r0.ttft_s[0]) and r1.e2e_s[0] == pytest.approx(r0.e2e_s[0] + 0.02)
    assert r1.ttft_s[1:] == pytest.approx(r0.ttft_s[1:] - 0.02)  # before: the successor's TTFT held the finish work
    assert r1.e2e_s[1:] == pytest.approx(r0.e2e_s[1:])  # ...and its E2E; now its own finish work is in it
    assert r1.arrival_s[1:] == pytest.approx(r0.arrival_s[1:] + 0.02)  # the sends
    assert r1.summary.duration_s == pytest.approx(r0.summary.duration_s + 0.02)  # the last response ends later


def test_finish_work_that_does_not_occupy_the_front_end_hand_counted():
    # FrontEnd.finish_occupies=False: each response ends per_finish_s after the engine's finish, and the closed loop's
    # slot frees then, but the work holds no one else. Closed loop of 2, admission 0.05 s, finish 0.1 s: both finish
    # at 1.0, both responses end at 1.1, requests 2 and 3 are sent at 1.1 and admitted [1.1, 1.15] and [1.15, 1.20]
    fe = FrontEnd(per_request_s=0.05, per_finish_s=0.1, client_after_finish=True, finish_occupies=False)
    reqs = [_Req(i, 0.0) for i in range(4)]
    a = Admission(reqs, max_concurrency=2, frontend=fe)
    list(a.ready(0.2))
    assert (a.finished(1.0), a.finished(1.0)) == pytest.approx((1.1, 1.1))
    assert a.next_time() == pytest.approx(1.15)
    assert [r.idx for r in a.ready(1.3)] == [2, 3]
    assert (a.sent[2], a.sent[3]) == pytest.approx((1.1, 1.1))
    assert (reqs[2].arrival, reqs[3].arrival) == pytest.approx((1.15, 1.20))


def test_a_calibration_file_keeps_the_front_ends_switches_and_refuses_a_bad_one(tmp_path):
    import json

    from kvdoctor.errors import InputError

    fe = FrontEnd(per_request_s=0.001, per_finish_s=0.004, client_after_finish=True, finish_occupies=False)
    doc = {"schema_version": C.SCHEMA, "kind": "linear", "linear": {}, "frontend": fe.as_dict()}
    p = tmp_path / "cal.json"
    p.write_text(json.dumps(doc))
    assert C.load_calibration(p).frontend == fe
    doc["frontend"]["client_after_finish"] = "yes"  # hand-edited: not a JSON boolean
    p.write_text(json.dumps(doc))
    with pytest.raises(InputError, match="malformed calibration file"):
        C.load_calibration(p)


def test_output_work_per_step_occupies_the_front_end_when_the_tokens_come_out_hand_counted():
    # open loop: sends at 0.0 and 0.30; admission 0.1 s, 0.02 s per output token, 10 output tokens each.
    # Charged at admission (the default), request 0's output work holds the front end [0.1, 0.3] at once, so
    # request 1 (sent at 0.30) is admitted [0.30, 0.40]. Per step (FrontEnd.output_per_step), a step ending at 0.25
    # with 4 tokens holds it [0.25, 0.33]: request 1 is admitted [0.33, 0.43]; with no step output, at once
    lump = [_Req(0, 0.0), _Req(1, 0.30)]
    a = Admission(lump, frontend=FrontEnd(per_request_s=0.1, per_output_token_s=0.02))
    assert a.open_loop and lump[1].arrival == pytest.approx(0.40)  # the up-front pass: the run loop scans arrivals
    fe = FrontEnd(per_request_s=0.1, per_output_token_s=0.02, output_per_step=True)
    assert fe.flags() == {"output_per_step": True}
    reqs = [_Req(0, 0.0), _Req(1, 0.30)]
    b = Admission(reqs, frontend=fe)
    assert not b.open_loop and [r.idx for r in b.ready(0.2)] == [0] and reqs[0].arrival == pytest.approx(0.1)
    b.outputs(0.25, 4)
    assert [r.idx for r in b.ready(1.0)] == [1] and reqs[1].arrival == pytest.approx(0.43)
    reqs = [_Req(0, 0.0), _Req(1, 0.30)]
    c = Admission(reqs, frontend=fe)
    list(c.ready(0.2))
    assert [r.idx for r in c.ready(1.0)] == [1] and reqs[1].arrival == pytest.approx(0.40)


def test_output_work_per_step_counts_every_token_of_a_decode_stretch():
    # the run loop jumps over stretches of identical decode steps: the front end must see each step's tokens. With
    # output work so large that it alone sets when the second request is admitted, the stretch (bulk) and the
    # step-by-step run give the same admission, hence the same TTFT
    w = Workload(arrival=[0.0, 0.05], prompt=[16, 16], output=[40, 4], name="t")
    cfg = SchedConfig(num_blocks=64, block_size=16, max_model_len=128, max_num_seqs=4, max_num_batched_tokens=64)
    st = LinearStepTime(base_s=0.01, per_token_s=1e-4)
    fe = FrontEnd(per_request_s=0.001, per_output_token_s=0.02, output_per_step=True)  # more work than a step
    r1 = simulate(w, cfg, st, frontend=fe, bulk=True)
    r2 = simulate(w, cfg, st, frontend=fe, bulk=False)
    assert list(r1.ttft_s) == pytest.approx(list(r2.ttft_s)) and list(r1.e2e_s) == pytest.approx(list(r2.e2e_s))
    # and without the per-step work request 1 reaches the engine 1 ms after its send
    r0 = simulate(w, cfg, st, frontend=FrontEnd(per_request_s=0.001), bulk=True)
    assert r1.ttft_s[1] > r0.ttft_s[1] + 0.002


def test_speculative_decoding_note_scans_mapped_logs(tmp_path):
    """sim.calibration.speculative_decoding_note reads each log once through a memory map: lines anywhere (the last one
    without its newline), an empty file and a missing one are fine."""
    log = tmp_path / "serve.log"
    log.write_bytes(b"INFO a line\n" * 1000
                    + b"INFO [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 2.63, Accepted: 10\n"
                    + b"INFO other\n" * 10
                    + b"INFO [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 2.66, Accepted: 12")
    (tmp_path / "empty.log").write_bytes(b"")
    note = C.speculative_decoding_note([str(log), str(tmp_path / "empty.log"), str(tmp_path / "missing.log")])
    assert "2 speculative-decoding metrics line(s), mean acceptance length 2.63-2.66" in note
    assert C.speculative_decoding_note([str(tmp_path / "empty.log")]) is None


def test_a_garbled_acceptance_length_drops_that_value_not_the_rest_of_the_log(tmp_path):
    log = tmp_path / "serve.log"
    log.write_bytes(b"INFO [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 2.6.3, Accepted: 1\n"
                    + b"INFO [metrics.py:96] SpecDecoding metrics: Mean acceptance length: 2.71, Accepted: 9\n"
                    + b"INFO [metrics.py:96] SpecDecoding metrics: Mean acceptance length: ., Accepted: 9\n")
    note = C.speculative_decoding_note([str(log)])
    assert "3 speculative-decoding metrics line(s), mean acceptance length 2.71-2.71" in note


def test_mean_queue_time_hand_counted():
    # one running slot, three requests at t=0 of 100 prompt + 3 output tokens, 10 ms a step: each request runs
    # three steps, so they are first scheduled at 0, 0.03 and 0.06 s (what vLLM's request_queue_time measures)
    cfg = SchedConfig(num_blocks=64, block_size=32, max_model_len=512, max_num_seqs=1, max_num_batched_tokens=2048)
    wl = Workload(arrival=[0.0] * 3, prompt=[100] * 3, output=[3] * 3, name="t", source="t")
    r = simulate(wl, cfg, LinearStepTime(base_s=0.01, per_token_s=0.0, per_request_s=0.0))
    assert list(r.queue_s) == pytest.approx([0.0, 0.03, 0.06])
    assert r.summary.queue_mean_s == pytest.approx(0.03)
