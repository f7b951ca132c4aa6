"""`kvdoctor calibrate --same-server` on real runs that were back to back on one server with one --seed
(the first CPU-engine series, s8_*: recorded in this order, `--seed 0` each, prefix caching on), and its
bad-input contract."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.e2e.test_rules_cli import invoke

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "realvllm_bench"
TINY = ["-m", str(FIX / "tiny" / "config.json"), "--gpu", "L4", "--max-model-len", "512", "--max-num-seqs", "8",
        "--max-num-batched-tokens", "2048", "--block-size", "32", "--num-gpu-blocks-override", "256",
        "--special-tokens", "0", "--linear"]
IN_ORDER = [str(FIX / f"s8_{n}.json") for n in ("c1", "c4", "c16")]  # their `date`: 15:19:14, 15:22:24, 15:25:26


def test_same_server_calibration_serves_earlier_runs_prompts_from_the_cache(tmp_path):
    code, err, text = invoke("calibrate", *TINY, *IN_ORDER, "--same-server", "--fit-on", "s8_c4.json",
                             "-o", str(tmp_path / "cal.json"), "--json")
    assert code == 0, err
    fit = json.loads(text)["fit"]
    assert fit["warm_prefix"] == {"same_server": True, "bench_test_request": False}
    runs = fit["runs"]
    # s8_c1 ran first (nothing cached); s8_c4's first 16 requests are s8_c1's 16 prompts (128 tokens + 0-2 of
    # re-tokenisation, same lengths: same prompts), and the 256-block pool still holds all 16 x 6 blocks of them
    assert runs["s8_c1.json"]["warm_prompt_tokens"] == 0
    assert runs["s8_c4.json"]["warm_prompt_tokens"] == sum(
        (p // 32) * 32 for p in json.loads((FIX / "s8_c1.json").read_text())["input_lens"])
    assert 0 < runs["s8_c16.json"]["warm_prompt_tokens"] < runs["s8_c16.json"]["prompt_tokens"]
    # the human rendering says what it took as cached
    code, err, text = invoke("calibrate", *TINY, *IN_ORDER, "--same-server", "--fit-on", "s8_c4.json",
                             "-o", str(tmp_path / "cal2.json"))
    assert code == 0, err
    assert "warm prefix cache (--same-server)" in text


def test_same_server_bad_input_is_one_line_exit_2(tmp_path):
    # out of the order the files' dates say they ran
    code, err, _ = invoke("calibrate", *TINY, *IN_ORDER[::-1], "--same-server", "-o", str(tmp_path / "c.json"))
    assert code == 2 and "finished before" in err and "\n" not in err
    # another model's result in the same "server" session
    other = tmp_path / "other.json"
    doc = json.loads((FIX / "s8_c4b.json").read_text())
    other.write_text(json.dumps({**doc, "model_id": "another/model"}))
    code, err, _ = invoke("calibrate", *TINY, *IN_ORDER, str(other), "--same-server", "-o", str(tmp_path / "c.json"))
    assert code == 2 and "different models" in err
    # prefix caching off: nothing stays cached, the claim contradicts the configuration
    code, err, _ = invoke("calibrate", *TINY, *IN_ORDER, "--same-server", "--no-enable-prefix-caching",
                          "-o", str(tmp_path / "c.json"))
    assert code == 2 and "prefix caching off" in err
    # a stats log alone has no runs to warm
    shutil.copy(FIX / "serve_s8.stats.log", tmp_path / "s.log")
    code, err, _ = invoke("calibrate", *TINY, "--stats-log", str(tmp_path / "s.log"), "--bench-test-request",
                          "-o", str(tmp_path / "c.json"))
    assert code == 2 and "bench results" in err


def _as_bench_json(row: dict, date: str) -> dict:
    """A published sweep row as `vllm bench serve --save-result` would have saved it (no --save-detailed)."""
    m, n = row["measured"], int(row["num_prompts"])
    return {"date": date, "model_id": row["model"], "num_prompts": n, "completed": n, "request_rate": "inf",
            "burstiness": 1.0, "max_concurrency": 1, "total_input_tokens": n * int(row["input_len"]),
            "total_output_tokens": n * int(row["output_len"]), "output_throughput": m["output_throughput"],
            "mean_ttft_ms": m["mean_ttft_ms"], "mean_tpot_ms": m["mean_tpot_ms"]}


def test_a_public_sweep_through_the_cli_same_server_and_two_prompt_lengths(tmp_path):
    # Qwen3-14B on an A100 (tenstorrent/tt-inference-server#340): seven runs back to back on one server (six with
    # every figure a saved result has), one
    # seeded prompt stream, the bench's test request (benchmark_serving.py, mid-2025). Calibrated on the 128- and
    # 1024-token runs with the prefill rate free, the other four are predicted (docs/simulation.md: an
    # observation; the series' rule is the first run alone)
    fix = Path(__file__).resolve().parent.parent / "fixtures" / "bench_public" / "results.jsonl"
    rows = [json.loads(x) for x in fix.read_text().splitlines() if '"group": "tt340-qwen3-14b-a100"' in x]
    assert len(rows) == 7
    rows = [r for r in rows if r["measured"]["output_throughput"] is not None]  # the 8192 row's RPS is cut
    files = []
    for k, row in enumerate(rows):
        p = tmp_path / f"{row['input_len']}-{row['output_len']}.json"
        p.write_text(json.dumps(_as_bench_json(row, f"20250718-10{k:02d}00")))
        files.append(str(p))
    common = ["-m", "Qwen/Qwen3-14B", "--gpu", rows[0]["gpu"], "--max-model-len", "16384", "--vllm-version", "0.9.2",
              "--special-tokens", "0", *files, "--fit-on", "128-128.json", "--fit-on", "1024-128.json", "--json"]
    code, err, text = invoke("calibrate", *common, "--same-server", "--bench-test-request", "--fit-prefill",
                             "-o", str(tmp_path / "warm.json"))
    assert code == 0, err
    fit = json.loads(text)["fit"]
    assert fit["prefill_term"] is True and fit["warm_prefix"]["same_server"] is True
    assert fit["runs"]["2048-128.json"]["warm_prompt_tokens"] == 2048 + 3 * 1008  # hand count: unit tests
    assert fit["held_out_median_abs_error"]["mean_ttft_ms"] < 0.10  # measured 3.9 % (with the 8192 run, scripts/calibrate_public_series.py --two-lengths)
    # the same two runs read as cold: the cache hits pass for a slow-growing prefill and the long runs miss
    code, err, text = invoke("calibrate", *common, "--fit-prefill", "-o", str(tmp_path / "cold.json"))
    assert code == 0, err
    cold = json.loads(text)["fit"]
    assert cold["held_out_median_abs_error"]["mean_ttft_ms"] > 0.5
    # the files' dates and model say "one session": calibrate suggests --same-server
    assert any("--same-server" in n for n in cold["notes"])
    # one prompt length cannot tell the prefill from the front end: said in a note
    code, err, text = invoke("calibrate", "-m", "Qwen/Qwen3-14B", "--gpu", rows[0]["gpu"], "--max-model-len", "16384",
                             "--vllm-version", "0.9.2", "--special-tokens", "0", *files[:2], "--fit-prefill", "--json",
                             "-o", str(tmp_path / "one.json"))
    assert code == 0, err
    assert any("cannot be told apart" in n for n in json.loads(text)["fit"]["notes"])
