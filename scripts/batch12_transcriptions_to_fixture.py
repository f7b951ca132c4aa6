"""Batch 12 (protocol 12): the rows the six rules admit from a general transcribe-only sweep of public `vllm bench serve`
results (2026-12-05; the transcriber's files are in /work/batch12, outside the repo) -> fixture rows. Run before any
predicted figure of batch 12 was computed:

    python scripts/batch12_transcriptions_to_fixture.py >> tests/fixtures/bench_public/results.jsonl

The sweep held 12 items, 49 runs. The rules (tests/fixtures/bench_public/README.md, "Batch 6", with protocol 10's reading
of rule 1) admit one item, five runs; what was left out and why is in the README's "Batch 12". The figures below are
the transcriber's, checked against the printed blocks of the source file (the same text at the commit cited).
"""
import json
import sys

URL = ("https://github.com/violet-quartz/vllm-serving-experiments/blob/13b4d4ebc6cd6f34f0bdfedeb420a9b51ac38840/"
       "notes.md")
# max concurrency -> (output tok/s, mean TTFT ms, mean TPOT ms, total input tokens, total generated tokens, duration s)
RUNS = {1: (62.61, 27.44, 15.90, 43560, 43491, 694.60),
        4: (237.41, 48.76, 16.22, 43560, 43786, 184.44),
        8: (450.51, 57.75, 16.60, 43560, 44124, 97.94),
        16: (837.13, 54.32, 16.80, 43560, 43964, 52.52),
        32: (1278.33, 144.85, 21.40, 43560, 44009, 34.43)}


def main() -> int:
    out = []
    for c, (thr, ttft, tpot, n_in, n_out, dur) in RUNS.items():
        notes = ("Batch 12 (protocol 12; committed before kvdoctor was run on it). One RTX 4090 (AutoDL; Python 3.12, "
                 "PyTorch 2.12.1, CUDA 13.0), `pip install vllm`, `vllm --version` 0.25.1; `vllm serve "
                 "/root/autodl-tmp/qwen2_5-7b-instruct/ --served_model_name qwen2.5-7b-instruct --port 8000` "
                 "(Qwen/Qwen2.5-7B-Instruct from ModelScope; default flags: bf16, its own max-model-len, prefix "
                 "caching on); `vllm bench serve --dataset-name sharegpt --dataset-path "
                 "ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 200 --max-concurrency N` for N = 1, 4, 8, "
                 "16, 32 in that order (the author: the completions endpoint, not chat). Printed: "
                 f"{n_in} input / {n_out} generated tokens, {dur} s. Assumptions: the five runs ran in that order on "
                 "one server and sent the same 200 prompts (seed 0), so runs after the first may have found their "
                 "prompts in the prefix cache; not modelled (prior_runs_same_server is empty, as on every ShareGPT "
                 "row). Transcribed from the stored copy (id 63140116965); the file at the cited commit holds the same "
                 "section.")
        out.append({"id": f"b12-vsx-q25-7b-4090-sharegpt-c{c}", "group": "b12-vsx-q25-7b-4090", "source_url": URL,
                    "model": "Qwen/Qwen2.5-7B-Instruct", "gpu": "NVIDIA GeForce RTX 4090", "tp": 1,
                    "quantization": None, "vllm_version": "0.25.1", "enforce_eager": False, "dataset": "sharegpt",
                    "input_len": None, "output_len": None, "ignore_eos": False, "num_prompts": 200,
                    "request_rate": "inf", "max_concurrency": c, "max_num_seqs": None, "max_model_len": None,
                    "measured": {"output_throughput": thr, "mean_ttft_ms": ttft, "mean_tpot_ms": tpot},
                    "notes": notes, "split": "held_out", "batch": 12, "bench_test_request": True,
                    "prior_runs_same_server": [], "anchor": c == 1})
    sys.stdout.write("".join(json.dumps(r) + "\n" for r in out))
    print(len(out), "rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
