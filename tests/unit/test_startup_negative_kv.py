"""A start-up whose KV budget came out at or below 0 and whose engine then failed is vLLM's "No available memory for the
cache blocks" refusal (kv_cache_planning: ``available - bytes_per_block <= 0``), even where the excerpt is cut before
that line. The lines below are from vllm-project/vllm#23278 (gpt-oss-120b on one H100, vLLM 0.10.1), verbatim."""

from __future__ import annotations

import pytest

from kvdoctor.evidence.logs import read_startup_facts
from kvdoctor.ledger.from_log import log_ledger

LINES = """\
(EngineCore_0 pid=5839) INFO 08-20 18:04:10 [gpu_model_runner.py:2007] Model loading took 65.9651 GiB and 12.799889 seconds
(EngineCore_0 pid=5839) INFO 08-20 18:04:21 [monitor.py:34] torch.compile takes 5.55 s in total
(EngineCore_0 pid=5839) INFO 08-20 18:04:22 [gpu_worker.py:276] Available KV cache memory: -2.14 GiB
(EngineCore_0 pid=5839) ERROR 08-20 18:04:22 [core.py:700] EngineCore failed to start.
(EngineCore_0 pid=5839) ERROR 08-20 18:04:22 [core.py:700] Traceback (most recent call last):
"""


def test_a_budget_below_zero_then_a_failure_is_the_no_memory_refusal():
    (f,) = read_startup_facts(LINES.splitlines())
    assert f.startup_error == "no-memory-for-cache" and "-2.14 GiB" in f.error_message
    led = log_ledger(f, source="log", why_no_model="test")
    assert led.verdict == "does-not-fit"


def test_a_positive_budget_then_a_failure_stays_unexplained():
    # 1.71 GiB and then a failure (vllm#27508: gpt-oss-120b, an excerpt cut before the exception): not guessed
    (f,) = read_startup_facts(LINES.replace("-2.14 GiB", "1.71 GiB").splitlines())
    assert f.startup_error == "engine-failed"
    assert log_ledger(f, source="log", why_no_model="test").verdict == "unknown"


def test_negative_cuda_graph_memory_is_printed_with_a_caution_not_used():
    # vllm#25683's log (a DP rank on a 178 GB device): "Graph capturing finished in 79 secs, took -9.96 GiB"
    line = ("(EngineCore_DP4 pid=1673) INFO 09-24 00:15:29 [v1/worker/gpu_model_runner.py:3380] Graph capturing "
            "finished in 79 secs, took -9.96 GiB\n")
    (f,) = read_startup_facts([line])
    assert f.cudagraph_bytes == pytest.approx(-9.96 * 2**30)
    led = log_ledger(f, source="log", why_no_model="test")
    assert any("negative, so not their size" in c for c in led.checks)


def test_a_cuda_graph_estimate_far_above_what_the_graphs_took_is_named():
    # MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks#25 (vLLM's own line): the estimate was withheld from the KV budget
    line = ("(EngineCore pid=1) INFO 05-01 10:00:00 [gpu_model_runner.py:5001] CUDA graph pool memory: 0.41 GiB (actual), "
            "2.43 GiB (estimated), difference: 2.02 GiB (83.1%).\n")
    (f,) = read_startup_facts([line])
    led = log_ledger(f, source="log", why_no_model="test")
    assert any("withheld 2.43 GiB" in c and "2.02 GiB of the budget went unused" in c for c in led.checks)
    # within a quarter GiB (the real logs: 0.02-0.11 GiB): nothing to say
    (f,) = read_startup_facts([line.replace("0.41 GiB (actual)", "2.32 GiB (actual)")])
    assert not any("withheld" in c for c in log_ledger(f, source="log", why_no_model="test").checks)


def test_cuda_graphs_far_above_the_estimate_withheld_are_named_with_the_fraction_that_keeps_the_share():
    # vLLM's own comparison line (gpu_worker.py), graphs at twice the estimate, as a real WSL start-up printed
    line = ("(EngineCore pid=187) INFO 05-01 20:47:49 [gpu_worker.py:599] CUDA graph pool memory: 0.73 GiB (actual), "
            "0.36 GiB (estimated), difference: 0.36 GiB (50.1%).\n")
    (f,) = read_startup_facts([line])
    led = log_ledger(f, source="log", why_no_model="test")
    (c,) = [c for c in led.checks if "more than the" in c]
    assert "took 0.73 GiB, 0.37 GiB more than the 0.36 GiB vLLM withheld" in c and "can run out" in c
    # with the GPU's size and the fraction printed: (0.9 × 24 − 0.37) / 24 = 0.885
    f.total_memory_bytes, f.gpu_memory_utilization = 24 * 2**30, 0.9
    (c,) = [c for c in log_ledger(f, source="log", why_no_model="test").checks if "more than the" in c]
    assert "(1.5% of the GPU's 24.00 GiB)" in c and "--gpu-memory-utilization 0.885" in c
    # a quarter GiB or less beyond it (the real logs: 0.02-0.11 GiB either way): nothing to say
    (f,) = read_startup_facts([line.replace("0.73 GiB (actual)", "0.55 GiB (actual)")])
    assert not any("more than the" in c for c in log_ledger(f, source="log", why_no_model="test").checks)


def test_a_budget_of_a_few_dozen_mib_in_a_log_cut_before_the_tokens_is_not_called_fits():
    # Qwen2.5-VL-72B over TP4 of 40 GB (a public issue, v0.8.3): every worker prints a budget of 0.04-0.13 GiB and the
    # excerpt ends before the pool's tokens
    lines = [
        "INFO 04-15 00:05:58 [worker.py:267] the current vLLM instance can use total_gpu_memory (39.38GiB) x "
        "gpu_memory_utilization (0.95) = 37.41GiB\n",
        "INFO 04-15 00:05:58 [worker.py:267] model weights take 34.43GiB; non_torch_memory takes 0.43GiB; PyTorch "
        "activation peak memory takes 2.51GiB; the rest of the memory reserved for KV Cache is 0.04GiB.\n",
    ]
    (f,) = read_startup_facts(lines)
    led = log_ledger(f, source="log", why_no_model="test")
    assert led.verdict == "unknown"
    assert any("0.04 GiB, 0.1% of the 37.41 GiB requested" in c for c in led.checks)
    # the same start with a roomy budget is a pool vLLM built: fits, and no such check
    (f,) = read_startup_facts([lines[0], lines[1].replace("34.43GiB", "4.43GiB").replace("0.04GiB", "30.04GiB")])
    led = log_ledger(f, source="log", why_no_model="test")
    assert led.verdict == "fits" and not any("log stops before" in c for c in led.checks)


QUOTED_REFUSAL = """▎
▎ Available KV cache memory: 22.5 GiB
▎ ValueError: To serve at least one request with the model's max seq len (196608),
▎ 23.25 GiB KV cache is needed, which is larger than the available KV cache memory (22.5 GiB).
▎ Based on the available memory, the estimated maximum model length is 190272.
▎
"""


def _refusal_action(text: str) -> str:
    from kvdoctor.chains.diagnose import diagnose
    from kvdoctor.evidence.model import Evidence, Segment

    (f,) = read_startup_facts(text.splitlines(keepends=True))
    return diagnose(Evidence(segments=[Segment(source="x.log", engine="e", startup=f, timeline=None)])).instances[0].action


def test_a_refusal_quoted_with_a_bar_on_every_line_is_joined_and_keeping_the_length_is_priced():
    # a DGX Spark recipe issue quoted vLLM's refusal with "▎" before each line: the continuation and vLLM's estimate
    # were lost to the bar; the thread's fix was a higher fraction (0.80 → 0.85), the other way out
    (f,) = read_startup_facts(QUOTED_REFUSAL.splitlines(keepends=True))
    assert f.startup_error == "kv-too-small" and f.error_est_max_model_len == 190272
    assert f.error_needed_bytes == pytest.approx(23.25 * 2**30) and f.error_available_bytes == pytest.approx(22.5 * 2**30)
    action = _refusal_action(QUOTED_REFUSAL)
    assert action.startswith("--max-model-len 190272, or keep 196,608 with 0.75 GiB more KV per GPU")
    # with the GPU's memory and the fraction printed: 0.80 + 0.75 / 119.7 = 0.8063 → 0.81
    head = ("INFO 04-15 00:05:58 [worker.py:267] the current vLLM instance can use total_gpu_memory (119.70GiB) x "
            "gpu_memory_utilization (0.80) = 95.76GiB\n")
    assert "--gpu-memory-utilization 0.81 (was 0.8; 0.75 GiB more per GPU" in _refusal_action(head + QUOTED_REFUSAL)
    # a shortfall near the whole budget is not a fraction's nudge: only the length
    big = QUOTED_REFUSAL.replace("23.25 GiB KV cache is needed", "42.25 GiB KV cache is needed")
    assert _refusal_action(big) == "--max-model-len 190272"


def test_a_graph_ceiling_below_max_num_seqs_is_named_in_the_ledger():
    from kvdoctor.catalog.gpus import lookup_gpu
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.engine.defaults import resolve as _resolve
    from kvdoctor.engine.sources import parse_serve_line
    from kvdoctor.ledger.build import graph_ceiling_warning

    def resolve(cfg):
        return _resolve(cfg, lookup_model("Qwen/Qwen3-8B"), lookup_gpu("H100"))

    r = resolve(parse_serve_line("vllm serve Qwen/Qwen3-8B --max-num-seqs 64 --max-cudagraph-capture-size 4"))
    w = graph_ceiling_warning(r)
    assert w is not None and w.startswith("CUDA graphs are captured up to batch 4 (given) while --max-num-seqs is 64")
    # vLLM's own default ceiling (at least max-num-seqs up to 512), or eager mode: nothing to say
    assert graph_ceiling_warning(resolve(parse_serve_line("vllm serve Qwen/Qwen3-8B --max-num-seqs 64"))) is None
    assert graph_ceiling_warning(resolve(parse_serve_line(
        "vllm serve Qwen/Qwen3-8B --max-num-seqs 64 --max-cudagraph-capture-size 4 --enforce-eager"))) is None
