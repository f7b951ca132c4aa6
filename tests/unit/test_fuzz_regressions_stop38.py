"""Inputs a mutation fuzz of real samples found to raise instead of being read or refused in one line (2026-12-05:
180,000 mutations of the shared samples and the sixth sweep's excerpts through evidence, diagnose and the start-up
reader). Each is reduced here to the line that did it."""

from __future__ import annotations

import warnings

from kvdoctor.chains.diagnose import diagnose
from kvdoctor.evidence.load import load_evidence
from kvdoctor.evidence.logs import read_startup_facts


def _diagnosed(tmp_path, text: str):
    p = tmp_path / "x.log"
    p.write_text(text)
    return diagnose(load_evidence([str(p)]))


def test_garbled_numbers_are_not_read_as_numbers(tmp_path):
    e = "(EngineCore_DP0 pid=1) ERROR 07-07 21:11:20 [dump_input.py:81] "
    _diagnosed(tmp_path, e + "Dumping scheduler stats: SchedulerStats(num_running_reqs=1, num_waiting_reqs=0, "
                             "kv_cache_usage=0.1538461538461538., prefix_cache_stats=None)\n"
                             + e.replace("dump_input.py:81", "core.py:1") + "EngineCore encountered a fatal error.\n")
    # benchmark_serving.py's 2023 summary with a mangled figure; a /metrics sample with a mangled timestamp
    _diagnosed(tmp_path, "Total time: 12.3 s\nThroughput: .5.99 requests/s\nAverage latency: 1.0 s\n")
    _diagnosed(tmp_path, '# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 3 1..\n')


def test_a_metrics_dump_with_non_finite_or_split_samples(tmp_path):
    # a value of 1e309 (inf) and model names that a garbled line split into three instances, each with half a sample
    _diagnosed(tmp_path, "# TYPE vllm:num_requests_running gauge\n"
                         'vllm:num_requests_running{model_name="a"} 0.0\n'
                         'vllm:num_requests_running{model_name="b"} 1e309\n'
                         "# TYPE vllm:num_requests_waiting gauge\n"
                         'vllm:num_requests_waiting{model_name="c"} 99999999999999999999\n'
                         "# TYPE vllm:kv_cache_usage_perc gauge\n"
                         'vllm:kv_cache_usage_perc{model_name="a"} 0.0\n')


def test_a_garbled_python_literal_in_a_log_warns_nothing():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")  # a SyntaxWarning would reach the user's terminal
        # "1if": Python warns "invalid decimal literal" while it refuses the text
        (f,) = read_startup_facts("INFO 01-01 00:00:00 [utils.py:1] non-default args: {'model': 'm', "
                                  "'max_model_len': 1if, 'block_size': 16}\n"
                                  "INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: 10.0 GiB\n")
    assert f.model == "m" and not [w for w in seen if issubclass(w.category, SyntaxWarning)]


def test_a_saved_result_with_numbers_no_bench_writes_is_one_line():
    import pytest

    from kvdoctor.errors import InputError
    from kvdoctor.sim.calibration import bench_run_from_json

    ok = {"completed": 10, "num_prompts": 10, "request_rate": "inf", "output_throughput": 100.0,
          "total_input_tokens": 1280, "total_output_tokens": 1280, "mean_ttft_ms": 20.0}
    assert len(bench_run_from_json(dict(ok), "r.json").prompt) == 10
    for bad in ({"completed": 1e309}, {"num_prompts": 1e309, "completed": 0}, {"max_concurrency": -4},
                {"request_rate": 0}, {"burstiness": -1}, {"input_lens": [1e309] * 10, "output_lens": [1] * 10},
                {"output_lens": [3, -7], "input_lens": [1, 2]}, {"total_input_tokens": 1e309}):
        with pytest.raises(InputError) as exc:
            bench_run_from_json({**ok, **bad}, "r.json")
        assert "\n" not in str(exc.value) and str(exc.value).startswith("r.json: ")


def test_a_chart_value_with_a_numeric_key_is_noted_not_raised(tmp_path):
    import yaml

    from kvdoctor.engine.manifests import find_servers

    doc = yaml.safe_load('servingEngineSpec:\n  modelSpec:\n  - name: "qwen"\n    modelURL: "Qwen/Qwen2.5-7B-Instruct"\n'
                         '    requestGPU: 1\n    vllmConfig:\n      0: "1"\n      maxModelLen: 8192\n')
    (spec,) = find_servers([doc])
    assert spec.notes == ["vllmConfig keys the chart does not render as flags (use extraArgs): 0"]
