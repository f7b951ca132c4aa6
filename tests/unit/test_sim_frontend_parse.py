"""The front end's work done as a request arrives, ahead of earlier requests' remaining work (``FrontEnd.parse_s``):
hand-counted bursts, the look-ahead the idle engine waits on, and that an isolated request is unchanged."""

from __future__ import annotations

import pytest

from kvdoctor.sim.frontend import Admission, FrontEnd
from kvdoctor.sim.run import simulate
from kvdoctor.sim.scheduler import SchedConfig
from kvdoctor.sim.steptime import LinearStepTime
from kvdoctor.sim.workload import Workload
from tests.unit.test_sim_frontend_finish import _Req


def test_a_burst_is_parsed_before_any_of_it_is_released_hand_counted():
    # three requests sent together at t=0; parse 0.01 s each, then 0.02 s each in FIFO order, latency 0.005 s.
    # The server parses all three first [0, 0.03] (each new connection's handler runs before earlier ones resume),
    # then the FIFO parts [0.03, 0.05], [0.05, 0.07], [0.07, 0.09]: engine arrivals 0.055, 0.075, 0.095.
    # One FIFO of 0.03 s each would have released them at 0.035, 0.065, 0.095.
    reqs = [_Req(i, 0.0) for i in range(3)]
    a = Admission(reqs, frontend=FrontEnd(parse_s=0.01, per_request_s=0.02, latency_s=0.005))
    assert not a.open_loop
    assert a.next_time() == pytest.approx(0.055)
    assert [r.idx for r in a.ready(0.1)] == [0, 1, 2]
    assert [r.arrival for r in reqs] == pytest.approx([0.055, 0.075, 0.095])
    assert a.done()


def test_a_request_sent_mid_burst_is_parsed_ahead_of_the_waiting_fifo_work():
    # sends at 0 and 0 and 0.025: parse [0, 0.01], [0.01, 0.02]; FIFO of request 0 [0.02, 0.04] (request 2, sent at
    # 0.025, waits: the server does not stop a started job); then request 2's parse [0.04, 0.05] goes before request
    # 1's FIFO part [0.05, 0.07], then request 2's [0.07, 0.09]
    reqs = [_Req(0, 0.0), _Req(1, 0.0), _Req(2, 0.025)]
    a = Admission(reqs, frontend=FrontEnd(parse_s=0.01, per_request_s=0.02))
    assert a.next_time() == pytest.approx(0.04)
    assert [r.idx for r in a.ready(0.045)] == [0]
    assert a.next_time() == pytest.approx(0.07)  # the look-ahead counts request 2's parse, already queued
    assert [r.idx for r in a.ready(0.2)] == [1, 2]
    assert [r.arrival for r in reqs] == pytest.approx([0.04, 0.07, 0.09])


def test_the_look_ahead_counts_sends_still_to_come():
    # nothing sent yet at t=0; request 0 at 0.1 and request 1 at 0.105: request 1's parse [0.11, 0.12] goes before
    # request 0's FIFO part, which therefore ends at 0.14, not 0.13
    reqs = [_Req(0, 0.1), _Req(1, 0.105)]
    a = Admission(reqs, frontend=FrontEnd(parse_s=0.01, per_request_s=0.02))
    assert list(a.ready(0.0)) == []
    assert a.next_time() == pytest.approx(0.14)
    assert [r.idx for r in a.ready(0.2)] == [0, 1]
    assert [r.arrival for r in reqs] == pytest.approx([0.14, 0.16])


def test_closed_loop_finish_work_goes_ahead_too():
    # closed loop of 1: request 0 parse [0, 0.01] + FIFO [0.01, 0.03]; it finishes at 1.0: its finish work
    # (0.005 s) and request 1's parse both wait at 1.0, the finish first (queued first): [1.0, 1.005], parse
    # [1.005, 1.015], FIFO [1.015, 1.035]
    reqs = [_Req(0, 0.0), _Req(1, 0.0)]
    a = Admission(reqs, max_concurrency=1, frontend=FrontEnd(parse_s=0.01, per_request_s=0.02, per_finish_s=0.005))
    assert [r.idx for r in a.ready(0.5)] == [0]
    assert a.next_time() is None  # the gate is closed: nothing comes without a finish
    a.finished(1.0)
    assert a.next_time() == pytest.approx(1.035)
    assert [r.idx for r in a.ready(1.1)] == [1]
    assert reqs[1].arrival == pytest.approx(1.035) and a.sent[1] == pytest.approx(1.0)


def test_an_isolated_request_sees_the_same_front_end_as_one_fifo():
    # requests far apart: parse + FIFO = one FIFO of their sum; the simulated TTFTs agree to the nanosecond
    w = Workload(arrival=[0.0, 1.0, 2.0], prompt=[64, 64, 64], output=[4, 4, 4])
    cfg = SchedConfig(num_blocks=64, block_size=16, max_model_len=256, max_num_seqs=4, max_num_batched_tokens=256)
    model = LinearStepTime(base_s=0.01, per_token_s=1e-4, per_request_s=1e-3)
    one = simulate(w, cfg, model, frontend=FrontEnd(per_request_s=0.03, latency_s=0.002))
    two = simulate(w, cfg, model, frontend=FrontEnd(parse_s=0.012, per_request_s=0.018, latency_s=0.002))
    assert list(two.ttft_s) == pytest.approx(list(one.ttft_s), abs=1e-9)
    # a burst of the same three is not: the first request waits for the others' parsing
    w = Workload(arrival=[0.0, 0.0, 0.0], prompt=[64, 64, 64], output=[4, 4, 4])
    one = simulate(w, cfg, model, frontend=FrontEnd(per_request_s=0.03, latency_s=0.002))
    two = simulate(w, cfg, model, frontend=FrontEnd(parse_s=0.012, per_request_s=0.018, latency_s=0.002))
    assert two.ttft_s[0] > one.ttft_s[0] + 0.02
