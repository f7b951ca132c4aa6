"""`kvdoctor calibrate` on two printed blocks of batch 24's RTX 3090 sweep (dlinlabs/vllm-serving-lab: c1 and c4, random
256/128 x100): the heavier run's mean TTFT is below the lighter one's, the sign that its prompts were cached by the
earlier run on one server (docs/simulation.md, "Protocol 24"), and the calibration says so and names --same-server;
with --same-server the held-out run is predicted within a few per cent. The held-out run is flagged outside the range by
its step size too, which the table once could not name (an internal error, KeyError 'step_tokens')."""

from __future__ import annotations

import json

from tests.conftest import run_kvdoctor

BLOCK = """Traffic request rate: inf
Maximum request concurrency: {c}
============ Serving Benchmark Result ============
Successful requests:                     100
Maximum request concurrency:             {c}
Benchmark duration (s):                  {d:.2f}
Total input tokens:                      25600
Total generated tokens:                  12800
Output token throughput (tok/s):         {thr}
---------------Time to First Token----------------
Mean TTFT (ms):                          {ttft}
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          {tpot}
==================================================
"""
# the README's table at 4b9fb86 (tests/fixtures/bench_public/results.jsonl, batch 24)
RUNS = ((1, 81.96, 61.24, 11.81), (4, 320.89, 56.25, 12.11))
DEPLOYMENT = ("--serve", "vllm serve Qwen/Qwen3-4B --gpu-memory-utilization 0.90 --max-model-len 8192",
              "--gpu", "RTX 3090", "--vllm-version", "0.28.0", "--special-tokens", "0")


def _files(tmp_path):
    out = []
    for c, thr, ttft, tpot in RUNS:
        f = tmp_path / f"c{c}.txt"
        f.write_text(BLOCK.format(c=c, d=12800 / thr, thr=thr, ttft=ttft, tpot=tpot))
        out.append(str(f))
    return out


def test_a_lower_ttft_at_a_heavier_load_is_said_to_be_cached_prompts(tmp_path):
    files = _files(tmp_path)
    r = run_kvdoctor("calibrate", *files, *DEPLOYMENT, "-o", str(tmp_path / "cal.json"))
    assert r.rc == 0, r.err
    assert "internal error" not in r.err
    text = " ".join(r.out.split())
    assert "c4.txt held 4 requests in flight against c1.txt's 1, yet its mean TTFT is lower (56 against 61 ms)" in text
    assert "give --same-server with the files in the order they ran" in text
    assert "step size above" in text  # the held-out run's largest step, named in the table
    notes = json.loads((tmp_path / "cal.json").read_text())["fit"]["notes"]
    assert any("probably cached by an earlier run" in n for n in notes)


def test_with_same_server_the_hint_is_gone_and_the_held_out_run_lands(tmp_path):
    files = _files(tmp_path)
    r = run_kvdoctor("calibrate", *files, *DEPLOYMENT, "--same-server", "--bench-test-request", "--json",
                     "-o", str(tmp_path / "cal.json"))
    assert r.rc == 0, r.err
    doc = json.loads(r.out)
    fit = doc["calibration"]["fit"] if "calibration" in doc else doc["fit"]
    assert not any("probably cached" in n for n in fit["notes"])
    err = fit["runs"]["c4.txt"]["error"]
    # measured: throughput -4 %, TTFT +1.6 %, TPOT +4 % (against -10 / +133 / +7 % without --same-server)
    assert abs(err["output_throughput"]) < 0.08 and abs(err["mean_ttft_ms"]) < 0.08 and abs(err["mean_tpot_ms"]) < 0.08
