"""Batch 24 (protocol 24): the rows the rules admit from three transcribe-only helpers' collections of public multi-load
series (2026-12-07; their files are in /tmp/b24, outside the repo) -> fixture rows, with the anchor fixed by
``calibrate_public_later.saturated_anchor``. Run before any predicted figure of batch 24 was computed:

    python scripts/batch24_transcriptions_to_fixture.py >> tests/fixtures/bench_public/results.jsonl

The helpers transcribed six series; the rules admit one (tests/fixtures/bench_public/README.md, "Batch 24"):
dlinlabs/vllm-serving-lab's Qwen3-4B-Instruct-2507 on one RTX 3090, vLLM 0.28.0, random 256/128 x100 with
--ignore-eos at --max-concurrency 1, 4, 8, 16, 32, 64. The figures are the README's results table at the commit cited,
read again from the source after the helper's transcription (they agree).
"""
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

SRC = "https://github.com/dlinlabs/vllm-serving-lab/blob/4b9fb86c6810626dfdaae88f10311e7234b6cbdf/README.md"
# (max concurrency, output tok/s, mean TTFT ms, mean TPOT ms), the README's "Results" table in its order
TABLE = ((1, 81.96, 61.24, 11.81), (4, 320.89, 56.25, 12.11), (8, 591.95, 72.90, 12.55),
         (16, 984.53, 123.45, 13.92), (32, 1632.44, 202.30, 14.68), (64, 2665.72, 345.10, 16.71))


def rows() -> list[dict]:
    from calibrate_public_later import saturated_anchor

    notes = ("Batch 24 (protocol 24; committed before kvdoctor was run on it). dlinlabs/vllm-serving-lab README, "
             "'Results': Qwen/Qwen3-4B-Instruct-2507 on one NVIDIA RTX 3090 24 GB, vLLM 0.28.0 (PyTorch 2.13.0+cu132). "
             "Serve: `vllm serve Qwen/Qwen3-4B-Instruct-2507 --host 0.0.0.0 --port 8000 --gpu-memory-utilization 0.90 "
             "--max-model-len 8192`; the README reports the start-up 'approximately': weights 7.64 GiB, KV cache 11.86 "
             "GiB, 86,320 tokens (num_gpu_blocks 5,395 of 16 tokens). Bench: `vllm bench serve --backend openai-chat "
             "--model Qwen/Qwen3-4B-Instruct-2507 --endpoint /v1/chat/completions --dataset-name random --num-prompts 100 "
             "--random-input-len 256 --random-output-len 128 --max-concurrency <C> --ignore-eos --temperature 0`, C = "
             "1, 4, 8, 16, 32, 64; zero failed requests. The table prints output tok/s, mean TTFT, P99 TTFT and mean "
             "TPOT. Assumptions: the checkpoint is the catalog's Qwen/Qwen3-4B shape (the -Instruct-2507 re-release "
             "keeps its layers and heads; --max-model-len 8192 is given); the chat endpoint's template tokens are not "
             "modelled; rate inf (the bench's default); the order of the runs on the server is not stated "
             "(prior_runs_same_server empty, the convention since batch 6).")
    out = []
    for cap, thr, ttft, tpot in TABLE:
        out.append({"id": f"b24-dlinlabs-q3-4b-3090-c{cap}", "group": "b24-dlinlabs-q3-4b-3090", "source_url": SRC,
                    "model": "Qwen/Qwen3-4B", "gpu": "NVIDIA GeForce RTX 3090", "tp": 1, "quantization": None,
                    "vllm_version": "0.28.0", "enforce_eager": False, "dataset": "random", "input_len": 256,
                    "output_len": 128, "ignore_eos": True, "num_prompts": 100, "request_rate": "inf",
                    "max_concurrency": cap, "max_num_seqs": None, "max_model_len": 8192,
                    "gpu_memory_utilization": 0.9, "kv_cache_dtype": None, "max_num_batched_tokens": None,
                    "num_gpu_blocks": 5395,
                    "measured": {"output_throughput": thr, "mean_ttft_ms": ttft, "mean_tpot_ms": tpot},
                    "notes": notes, "split": "held_out", "batch": 24, "bench_test_request": True,
                    "prior_runs_same_server": []})
    anchor = saturated_anchor(out)
    for r in out:
        r["anchor"] = r["id"] == anchor
    return out


def main() -> int:
    out = rows()
    sys.stdout.write("".join(json.dumps(r) + "\n" for r in out))
    print(len(out), "rows; anchor", next(r["id"] for r in out if r["anchor"]), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
