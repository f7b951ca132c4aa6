"""`kvdoctor calibrate` validated live on the real CPU engine: ONE server session runs a discarded warm-up, the
calibration run and four other loads interleaved (``kvdoctor.testbed.series.LIVE_SERIES``, version 9: version 7 with
every bench run sent from one `vllm bench serve` process and EngineCore on a core of its own; version 3's server — the model run inside EngineCore, ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` — and version 2's loads: a Poisson run,
bursty gamma arrivals, a closed loop 8 with other lengths, and version 2-4's calibration load, a closed loop 6) and a
repeat of the calibration run (its own prompts and send times). The calibration run is one `vllm bench serve --ramp-up-strategy linear` run (rate
1 -> 16 requests/s, spread lengths), after a discarded warm-up with the same load: calibrated on it alone
(``calibrate_series_v10``: version 6's procedure — a prompt token's cost measured on its steps rebuilt from its
per-token times; then its bench figures and per-request quartiles, a decode's context cost, the front end with its
per-finish work — with ``PARSE_SHARE`` of the front end's per-request work done as each request arrives, so a burst
reaches the engine together (procedure 8), and each response ending, its closed-loop slot freeing, when the front
end's finish work for it ends (procedure 10, adopted by its stated rule on the seventeen frozen sessions)), the other
loads are predicted and compared with what the engine measured (wall clock, as the bench reports them).

The series, the calibration procedure and the tolerance (``TOLERANCE``: the issue's 10 % on output throughput, mean
TTFT and mean TPOT) were fixed in kvdoctor/testbed/series.py before any run of version 7 was recorded. The repeat of
the calibration load measures the host's drift within the session. When the repeat itself moved by more than the
tolerance, the host — not the model — moved, and the bar cannot be judged on this session: the test is skipped and
says by how much. Otherwise the calibration run must reproduce itself within the tolerance (asserted), and the bar is
checked on the other loads: met, the test passes; missed, it is reported as an expected failure (xfail) with the
errors — the bar is issue 11's open gap on this engine, documented in docs/simulation.md, and the issue stays open
until it passes here.
"""

from __future__ import annotations

import json

import pytest

from kvdoctor.sim import calibration as C
from kvdoctor.testbed import series as S

pytestmark = pytest.mark.realvllm

CAL = next(r.name for r in S.LIVE_SERIES if r.role == "calibration")
DRIFT = next(r.name for r in S.LIVE_SERIES if r.role == "drift")


@pytest.fixture(scope="module")
def series(testbed, engine_lock, tmp_path_factory):
    d = tmp_path_factory.mktemp("calibration-series")
    S.record_series(testbed, d)
    cal, runs = S.calibrate_series_v10(d, fit_on=CAL)
    return cal, runs, json.loads((d / "series.json").read_text()), d


def test_the_series_ran_every_load(series):
    cal, runs, meta, d = series
    timed = [r for r in S.LIVE_SERIES if r.role != "warmup"]
    assert [r.name for r in runs] == [f"{r.name}.json" for r in timed]
    for r, spec in zip(runs, timed):
        assert len(r.prompt) == spec.load.requests and r.send is not None
    assert all(m["host"]["cpu_s"] > 0 for m in meta["runs"])
    # the server logged every engine step (kept for diagnosis; version 4 does not fit on their times)
    assert len(S.load_iterations(d, CAL)) > 100 and cal.fit["iterations"] == 0


def test_other_loads_are_predicted_within_the_tolerance(series):
    cal, runs, meta, _ = series
    per = cal.fit["runs"]
    table = {k: {m: round(v["error"].get(m, float("nan")), 3) for m in C.HEADLINE} for k, v in per.items()}
    drift = S.session_drift(runs, CAL, DRIFT)  # the repeat re-sends the calibration run: every figure compares
    stretch = {m["name"]: m["host"]["stretch"] for m in meta["runs"]}
    if any(abs(v) > S.TOLERANCE for v in drift.values()):
        pytest.skip(f"the host moved: the calibration load repeated in the same session moved by {drift} "
                    f"(> {S.TOLERANCE:.0%}); errors {table}; host stretch {stretch}")
    # the calibration run itself is reproduced (a broken fit or workload replay fails here, drift or not)
    own = per[f"{CAL}.json"]["error"]
    assert all(abs(own[m]) <= S.TOLERANCE for m in C.HEADLINE), f"the calibration run itself: {table}"
    missed = [f"{spec.name} {m}: {per[f'{spec.name}.json']['error'][m]:+.1%}" for spec in S.LIVE_SERIES
              if spec.role == "validation" for m in C.HEADLINE
              if abs(per[f"{spec.name}.json"]["error"][m]) > S.TOLERANCE]
    if missed:
        # Issue 11's calibrated bar is not met on this engine (docs/simulation.md, "Validation on the real CPU
        # engine": version 6's first session missed it on the closed loops, TTFT -24 % with 256-token prompts, +15 %
        # throughput at concurrency 6). On a host that held still this is the model's miss, reported as the known
        # open gap (issue 11 stays open), not a pass.
        pytest.xfail(f"issue 11's calibrated bar missed on a still host (drift {drift}): {missed}; errors {table}; "
                     f"stretch {stretch}")
