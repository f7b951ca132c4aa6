"""--bench-cmd: a pasted `vllm bench serve` / benchmark_serving.py command line read as the workload options it sets."""

from __future__ import annotations

import pytest

from kvdoctor.cli.workload_opts import WorkloadOptions
from kvdoctor.errors import InputError
from kvdoctor.sim.benchline import parse_bench_cmd

# the command of vllm PR 15322's DeepSeek-R1 benchmark (benchmark_serving.py era), as its author pasted it
PR15322 = """python3 benchmark_serving.py \\
        --backend vllm \\
        --model /workspace/DeepSeek-R1 \\
        --port 8862 \\
        --endpoint /v1/completions \\
        --dataset-name random \\
        --dataset-path ${SHAREGPT_DATASET_PATH} \\
        --random-input-len 4096 \\
        --random-output-len 1024 \\
        --random-prefix-len 0 \\
        --ignore-eos \\
        --max-concurrency 16 \\
        --num-prompts 16"""


def test_a_benchmark_serving_command_with_continuations():
    got, ignored, notes = parse_bench_cmd(PR15322)
    assert got == {"dataset_name": "random", "random_input_len": 4096, "random_output_len": 1024,
                   "random_prefix_len": 0, "ignore_eos": True, "max_concurrency": 16, "num_prompts": 16}
    assert ignored == ["--backend", "--model", "--port", "--endpoint", "--dataset-path"]


def test_vllm_bench_serve_with_equals_underscores_a_prompt_and_a_pipe():
    got, ignored, notes = parse_bench_cmd("$ VLLM_USE_V1=1 vllm bench serve --model m --request_rate=12.5 --burstiness 0.5 "
                                   "--ramp-up-strategy linear --ramp-up-start-rps 1 --ramp-up-end-rps 8 --seed 7 "
                                   "--save-result --percentile-metrics ttft,tpot 2>&1 | tee bench.log")
    assert got == {"request_rate": "12.5", "burstiness": 0.5, "ramp_up_strategy": "linear", "ramp_up_start_rps": 1,
                   "ramp_up_end_rps": 8, "seed": 7}
    assert ignored == ["--model", "--save-result", "--percentile-metrics"]


@pytest.mark.parametrize("line, msg", [
    ("vllm serve Qwen/Qwen3-8B --max-num-seqs 8", "not a `vllm bench serve`"),
    ("vllm bench serve --dataset-name sonnet --num-prompts 10", "sonnet: kvdoctor models the random and sharegpt"),
    ("vllm bench serve --num-prompts ten", "--num-prompts 'ten' is not an integer"),
    ("vllm bench serve --num-prompts", "--num-prompts needs a value"),
    ("vllm bench serve --model 'unclosed", "cannot split"),
])
def test_lines_that_cannot_be_read_are_one_line_errors(line, msg):
    with pytest.raises(InputError, match=msg):
        parse_bench_cmd(line)


def test_an_option_given_on_kvdoctors_command_line_wins_and_the_rest_comes_from_the_line():
    wl = WorkloadOptions(bench_cmd="vllm bench serve --dataset-name random --random-input-len 2048 "
                                   "--random-output-len 256 --num-prompts 200 --request-rate 8 --seed 5 --backend openai",
                         random_input_len=512)
    spec = wl.spec()
    assert (spec.random_input_len, spec.random_output_len, spec.num_prompts, spec.request_rate, spec.seed) == \
        (512, 256, 200, 8.0, 5)
    assert spec.notes == ("--bench-cmd: not read (no effect on the load kvdoctor models): --backend",)
    # the bench's defaults where the line says nothing: random 1024/128, 1000 prompts, rate inf
    bare = WorkloadOptions(bench_cmd="vllm bench serve --model m").spec()
    assert (bare.dataset_name, bare.random_input_len, bare.random_output_len, bare.num_prompts) == \
        ("random", 1024, 128, 1000)
    assert bare.request_rate == float("inf")


def test_the_experiments_bench_runs_the_pasted_load():
    # `kvdoctor experiment --bench-cmd ...` drives vllm bench serve with the workload part of the pasted line
    from pathlib import Path

    from kvdoctor.experiment.load import LoadSpec

    line = ("vllm bench serve --model m --base-url http://gpu-7:8000 --dataset-name random --random-input-len 256 "
            "--random-output-len 32 --num-prompts 40 --request-rate 5 --burstiness 0.5 --ignore-eos --seed 2")
    args = LoadSpec.from_workload_spec(WorkloadOptions(bench_cmd=line).spec(default_prompts=100)).bench_args(Path("/x"))
    pairs = dict(zip(args[::2], args[1::2]))
    assert pairs["--random-input-len"] == "256" and pairs["--random-output-len"] == "32"
    assert pairs["--num-prompts"] == "40" and pairs["--seed"] == "2" and float(pairs["--request-rate"]) == 5.0
    assert pairs["--burstiness"] == "0.5"  # as pasted (it round-trips through the gamma's CV)
    assert "--ignore-eos" in args and "--base-url" not in args


def test_command_lines_as_people_paste_them():
    """A sweep of 44 real bench command lines (2026-12-02) found these read wrong; each case is the smallest text."""
    # vLLM >= 0.12's general lengths; --input-len wins over --random-input-len, as vLLM maps it after parsing
    got, _, _ = parse_bench_cmd("vllm bench serve --random-input-len 9 --input-len 256 --output-len 64")
    assert (got["random_input_len"], got["random_output_len"]) == (256, 64)
    # argparse's unique prefixes, which vLLM's parser accepts; an ambiguous one is refused as vLLM would
    got, _, notes = parse_bench_cmd("vllm bench serve --random-input 200 --random-output 512 --num-prompt 50")
    assert (got["random_input_len"], got["random_output_len"], got["num_prompts"]) == (200, 512, 50)
    assert any("--num-prompt read as --num-prompts" in n for n in notes)
    with pytest.raises(InputError, match="ambiguous"):
        parse_bench_cmd("vllm bench serve --random 5")
    # a pasted block: a commented-out variant, a trailing backslash, flag lines that lost their backslashes
    block = ("vllm bench serve --dataset-name random --random-input-len 112 --num-prompts 50 \\\n"
             "  --max-concurrency 4\n# vllm bench serve --dataset-name sharegpt --num-prompts 7\n")
    got, _, _ = parse_bench_cmd(block)
    assert got == {"dataset_name": "random", "random_input_len": 112, "num_prompts": 50, "max_concurrency": 4}
    got, _, _ = parse_bench_cmd("vllm bench serve --num-prompts 50 \\")
    assert got == {"num_prompts": 50}
    got, _, _ = parse_bench_cmd("vllm bench serve --num-prompts 50\n--request-rate 4\nvllm serve m --port 9")
    assert got == {"num_prompts": 50, "request_rate": "4"}
    with pytest.raises(InputError, match="2 bench commands"):
        parse_bench_cmd("vllm bench serve --num-prompts 5\nvllm bench serve --num-prompts 6 --request-rate 4\n")
    # the old script: sharegpt by default, and [r*L, L] lengths (1.0 = fixed)
    got, _, notes = parse_bench_cmd("python benchmarks/benchmark_serving.py --backend vllm --model m --num-prompts 50")
    assert got["dataset_name"] == "sharegpt" and any("default, sharegpt" in n for n in notes)
    got, _, notes = parse_bench_cmd("python benchmark_serving.py --dataset-name random --random-range-ratio 1.0")
    assert got["random_range_ratio"] == 0.0 and any("fixed lengths" in n for n in notes)
    # flags not read are told apart: no effect, a change of the load not modelled, not a flag of vLLM 0.33's bench
    got, ignored, notes = parse_bench_cmd("vllm bench serve --model m --num-warmups 10 --frobnicate 3 --seed $(date +%s)")
    assert ignored == ["--model"] and "seed" not in got
    assert any("change the load" in n and "--num-warmups" in n for n in notes)
    assert any("not flags of vLLM 0.33" in n and "--frobnicate" in n for n in notes)
    assert any("--seed $(date" in n for n in notes)
    with pytest.raises(InputError, match="unexpanded shell variable"):
        parse_bench_cmd("vllm bench serve --num-prompts ${N}")
