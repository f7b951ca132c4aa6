"""A printed bench result takes its send options from the command pasted above it (or the bench's Namespace line) when
the bench's own 'Traffic request rate:' line is not there: real pastes in tests/fixtures/bench_outputs_cmdline."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kvdoctor.errors import InputError
from kvdoctor.evidence.bench import bench_command_options, parse_text

BASE = Path(__file__).resolve().parents[1] / "fixtures" / "bench_outputs_cmdline"
BLOCK = """============ Serving Benchmark Result ============
Successful requests:                     100
Benchmark duration (s):                  20.0
Total input tokens:                      102400
Total generated tokens:                  12800
Request throughput (req/s):              5.00
Output token throughput (tok/s):         640.00
---------------Time to First Token----------------
Mean TTFT (ms):                          80.00
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          20.00
==================================================
"""


def _one(name: str):
    (r,) = parse_text((BASE / name).read_text(), name)
    return r


def test_real_pastes_take_the_rate_from_their_command():
    # ~0.9 block: no 'Failed requests' line, so before this the block said nothing of its rate
    r = _one("llama31_8b_pr18566_cmd_sharegpt.txt")
    assert math.isinf(r.fields["request_rate"]) and "default, inf" in r.raw["request_rate"]
    assert r.fields["completed"] == 1000 and r.fields["output_throughput"] == pytest.approx(6582.87)
    # continuation lines (one with a space after its backslash), '--request-rate 10'
    r = _one("deepseek_v32_issue30832_docs_copy_rate10.txt")
    assert r.fields["request_rate"] == 10 and r.raw["request_rate"] == "from the command line before it"
    # shell prompts and a multi-line command; the block's own concurrency line is kept
    r = _one("qwen25_omni_ascend_issue11750_prompt_continuations.txt")
    assert r.fields["max_concurrency"] == 20 and math.isinf(r.fields["request_rate"])
    assert r.fields["output_throughput"] == pytest.approx(529.16)
    r = _one("gemma3_27b_pr33743_cmd_no_rate.txt")
    assert math.isinf(r.fields["request_rate"]) and r.fields["completed"] == 16


def test_what_the_bench_printed_wins_over_the_command():
    text = "vllm bench serve --model m --request-rate 8\nTraffic request rate: 4.0\n" + BLOCK
    (r,) = parse_text(text)
    assert r.fields["request_rate"] == 4.0 and "request_rate" not in r.raw


def test_the_command_applies_to_the_block_after_it_only():
    text = ("$ vllm bench serve --model m --request-rate 2 --max-concurrency 4\n" + BLOCK
            + "$ vllm bench serve --model m \\\n    --request_rate=6 \\\n    --burstiness 0.5\n" + BLOCK + BLOCK)
    a, b, c = parse_text(text)
    assert (a.fields["request_rate"], a.fields["max_concurrency"]) == (2, 4)
    assert (b.fields["request_rate"], b.fields["burstiness"]) == (6, 0.5) and "max_concurrency" not in b.fields
    assert "request_rate" not in c.fields  # a third block with no command of its own: nothing assumed


def test_prose_naming_the_command_and_shell_variables_say_nothing():
    assert bench_command_options("we ran vllm bench serve (0.11) at 4 req/s") is None
    assert bench_command_options("# note: vllm bench serve --request-rate 4 gave") is None
    (r,) = parse_text("We compared with vllm bench serve --request-rate 4 last week.\n" + BLOCK)
    assert "request_rate" not in r.fields
    # a variable: the rate is unknown, so vLLM's default is not assumed either
    opts, ramp, _ = bench_command_options("for r in 1 2; do vllm bench serve --request-rate $r --max-concurrency 8")
    assert opts == {"max_concurrency": 8, "num_prompts": 1000} and not ramp  # (the bench's default count)
    opts, _, _ = bench_command_options("kubectl exec -it pod-0 -- vllm bench serve --model m --max-concurrency 4")
    assert opts == {"max_concurrency": 4, "request_rate": math.inf, "num_prompts": 1000}
    opts, ramp, _ = bench_command_options("CUDA_VISIBLE_DEVICES=0 python3 benchmarks/benchmark_serving.py --backend vllm")
    assert math.isinf(opts["request_rate"]) and not ramp
    # vLLM's parser takes a unique prefix; an ambiguous one could have been the rate: nothing assumed
    assert bench_command_options("vllm bench serve --request-r 3 --max-con 2 --ignore-eos --model m")[0] == \
        {"request_rate": 3, "max_concurrency": 2, "num_prompts": 1000}
    assert bench_command_options("vllm bench serve --r 3 --model m")[0] == {"num_prompts": 1000}
    # an explicit inf is the command's word, not the default
    fields, _, prov = bench_command_options("vllm bench serve --model m --request-rate inf")
    assert math.isinf(fields["request_rate"]) and prov["request_rate"] == "from the command line before it"
    # a ramp-up run has no single rate
    opts, ramp, _ = bench_command_options("vllm bench serve --ramp-up-strategy linear --ramp-up-start-rps 1")
    assert opts == {"num_prompts": 1000} and ramp


def test_the_benchs_namespace_line():
    ns = ("Namespace(subparser='bench', bench_type='serve', backend='vllm', request_rate=inf, burstiness=1.0, "
          "max_concurrency=None, ramp_up_strategy=None)")
    (r,) = parse_text(ns + "\n" + BLOCK)
    assert math.isinf(r.fields["request_rate"]) and r.fields["burstiness"] == 1.0 and "max_concurrency" not in r.fields
    assert r.raw["request_rate"] == "from the bench's Namespace(...) line"
    opts, _, _ = bench_command_options("Namespace(backend='vllm', request_rate=3.5, max_concurrency=16)")
    assert opts == {"request_rate": 3.5, "max_concurrency": 16}


def test_calibrate_reads_a_pasted_run_that_only_its_command_dates(tmp_path):
    from kvdoctor.sim.calibration import load_bench_runs

    (run,) = load_bench_runs([str(BASE / "llama31_8b_pr18566_cmd_sharegpt.txt")])
    assert math.isinf(run.request_rate) and run.max_concurrency is None and len(run.prompt) == 1000
    bare = tmp_path / "bare.txt"
    bare.write_text(BLOCK)
    with pytest.raises(InputError, match="does not say its request rate"):
        load_bench_runs([str(bare)])


def test_a_speculative_decoding_section_is_read_and_calibrate_says_it_is_not_modelled(tmp_path):
    import json

    from kvdoctor.sim.calibration import load_bench_runs, speculative_decoding_note

    r = _one("nemotron_gb10_specdec_section.txt")
    assert r.fields["spec_decode_acceptance_rate"] == 53.39 and r.fields["spec_decode_acceptance_length"] == 2.60
    assert (r.fields["spec_decode_num_drafts"], r.fields["spec_decode_draft_tokens"],
            r.fields["spec_decode_accepted_tokens"]) == (57790, 173370, 92569)
    # the section's per-position lines and the E2EL percentiles do not disturb the rest; the block's own rate and
    # concurrency lines win, and the command above it (run through `docker exec`) adds the burstiness it alone gives
    assert r.fields["request_rate"] == 1.5 and r.fields["max_concurrency"] == 25 and r.fields["p95_e2el_ms"] == 250589.88
    assert r.fields["burstiness"] == 1.0 and r.raw["burstiness"] == "from the command line before it"
    assert "request_rate" not in r.raw
    (run,) = load_bench_runs([str(BASE / "nemotron_gb10_specdec_section.txt")])
    assert run.spec_acceptance_length == 2.60
    # the JSON's own key (vllm bench serve --save-result against a drafting server)
    doc = {"completed": 10, "num_prompts": 10, "request_rate": "inf", "total_input_tokens": 1000,
           "total_output_tokens": 500, "output_throughput": 50.0, "mean_ttft_ms": 20.0, "mean_tpot_ms": 8.0,
           "spec_decode_acceptance_length": 3.16}
    f = tmp_path / "spec.json"
    f.write_text(json.dumps(doc))
    assert load_bench_runs([str(f)])[0].spec_acceptance_length == 3.16
    note = speculative_decoding_note([], 0, [2.60, 3.16])
    assert note.startswith("speculative decoding: 2 bench result(s) report an acceptance length of 2.60-3.16.")
    assert "does not model it" in note
    assert speculative_decoding_note([], 0, []) is None


def test_evidence_lists_each_bench_result_with_its_load_and_where_the_rate_came_from():
    import json

    from typer.testing import CliRunner

    from kvdoctor.cli import app

    files = [str(BASE / "llama31_8b_pr18566_cmd_sharegpt.txt"), str(BASE / "nemotron_gb10_specdec_section.txt")]
    r = CliRunner().invoke(app, ["evidence", *files], env={"COLUMNS": "300"})
    assert r.exit_code == 0, r.output
    assert ("• bench llama31_8b_pr18566_cmd_sharegpt.txt: 1,000 request(s), rate inf (from the command line): "
            "output 6,582.9 tok/s, mean TTFT 9,626.13 ms, mean TPOT 77.86 ms") in r.output
    assert ("• bench nemotron_gb10_specdec_section.txt: 300 request(s), rate 1.5/s, concurrency 25: output 80.4 tok/s, "
            "mean TTFT 34,710.68 ms, mean TPOT 237.06 ms, speculative decoding, acceptance length 2.60") in r.output
    j = json.loads(CliRunner().invoke(app, ["evidence", "--json", *files]).output)
    assert j["bench"][0]["provenance"]["request_rate"].startswith("from the command line before it")
    assert j["bench"][0]["fields"]["request_rate"] == "inf" and j["bench"][1]["fields"]["request_rate"] == 1.5
    # (--num-prompts is read since stop 57, to say when a run lost requests)
    assert j["bench"][1]["provenance"] == {"burstiness": "from the command line before it",
                                           "num_prompts": "from the command line before it"}
