"""Batch 23 (protocol 23): the rows the rules admit, read as protocol 19 reads them, from sweep 85, a transcribe-only
collection of 2026-12-06 (the transcriber's files are in /tmp/sweep85, outside the repo) -> fixture rows. Run before any
predicted figure of batch 23 was computed:

    python scripts/batch23_transcriptions_to_fixture.py >> tests/fixtures/bench_public/results.jsonl

The collection held 12 `vllm bench serve` blocks from 12 pages. The rules admit one (tests/fixtures/bench_public/README.md,
"Batch 23"): gpustack's DeepSeek-V3.2 baseline on 8x H200 at vLLM 0.13.0. Left out: gpt-oss-20b/120b (rule 4: MXFP4;
three pages); GLM-4.5-Air, GLM-4.6, GLM-4.6-FP8, MiniMax-M2, Nemotron-3-Nano, Seed-OSS-36B (rule 4: not in the
catalog; the GLM-4.6 32K case also prints no command, rule 5); Qwen3-Coder-480B-FP8 (rules 1 and 3: no release stated,
"8xH200 (or H20)"); a Qwen3-VL run across four DGX Spark nodes (rules 1, 3, 4). The figures are the transcriber's,
from the page at the commit cited.
"""
import json
import sys

SRC = ("https://github.com/gpustack/gpustack/blob/1f37f1b8bd79c6b424a0cb55c7abd08a5c2132dc/docs/performance-lab/"
       "deepseek-v3.2/h200.md")


def rows() -> list[dict]:
    notes = ("Batch 23 (protocol 23; committed before kvdoctor was run on it). GPUStack performance lab, DeepSeek-V3.2 "
             "on H200, section 1 'Baseline of the Inference Engine', vLLM (Engine Version v0.13.0): '8 x NVIDIA H200 "
             "SXM GPUs on a single node'. Serve: `vllm serve deepseek-ai/DeepSeek-V3.2 -tp 8 --tokenizer-mode "
             "deepseek_v32 --reasoning-parser deepseek_v3` (default max_model_len 163840; the tokenizer mode and the "
             "reasoning parser change no engine setting). Bench: `vllm bench serve --model deepseek-ai/DeepSeek-V3.2 "
             "--backend openai-chat --endpoint /v1/chat/completions --dataset-name sharegpt --dataset-path "
             "ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 1000` (rate inf; the chat endpoint adds the chat "
             "template's tokens to each prompt: not modelled). Printed: 1000 successful, 72.75 s, 219,111 input and "
             "196,599 generated tokens, output 2702.26 tok/s, mean TTFT 13054.63 ms, mean TPOT 275.03 ms. Assumptions: "
             "the catalog's DeepSeek-V3.2 shape (MLA + MoE, fp8 block weights; its sparse-attention indexer is priced "
             "as MLA); the ShareGPT requests are kvdoctor's embedded bench sample (protocol 13); the order of runs on "
             "the server is not stated (prior_runs_same_server empty).")
    return [{"id": "b23-gpustack-dsv32-8xh200-sharegpt", "group": "b23-gpustack-dsv32-8xh200", "source_url": SRC,
             "model": "deepseek-ai/DeepSeek-V3.2", "gpu": "NVIDIA H200", "tp": 8, "quantization": None,
             "vllm_version": "0.13.0", "vllm_era": "2025-12", "enforce_eager": False, "dataset": "sharegpt",
             "input_len": None, "output_len": None, "ignore_eos": False, "num_prompts": 1000, "request_rate": "inf",
             "max_concurrency": None, "max_num_seqs": None, "max_model_len": 163840, "gpu_memory_utilization": None,
             "kv_cache_dtype": None, "max_num_batched_tokens": None,
             "measured": {"output_throughput": 2702.26, "mean_ttft_ms": 13054.63, "mean_tpot_ms": 275.03},
             "notes": notes, "split": "held_out", "batch": 23, "bench_test_request": True,
             "prior_runs_same_server": [], "anchor": False}]


def main() -> int:
    out = rows()
    sys.stdout.write("".join(json.dumps(r) + "\n" for r in out))
    print(len(out), "rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
