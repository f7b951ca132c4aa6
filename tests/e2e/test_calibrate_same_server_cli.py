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
