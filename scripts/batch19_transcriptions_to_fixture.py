"""Batch 19 (protocol 19): the rows the six rules admit, read as protocol 19 states (rule 5 now carries
``--kv-cache-dtype`` and ``--max-num-batched-tokens``; rule 3 a catalog GPU with a dense bf16 rate), from a
transcribe-only collection of 2026-12-05 (the transcriber's files are in /tmp/batch19, outside the repo) -> fixture
rows. Run before any predicted figure of batch 19 was computed:

    python scripts/batch19_transcriptions_to_fixture.py >> tests/fixtures/bench_public/results.jsonl

The collection held 45 runs from 6 sources. The rules admit 22 runs of one source, adithyaJRunpod/vllm_bench's RunPod
tuning sweeps (Qwen3-8B on one H100 80GB HBM3, vLLM 0.18.0), from five sweep folders batch 6 did not use: each
folder's baseline and its fp8-KV, fp8-weights-plus-KV and ``--max-num-batched-tokens`` configurations, the ones the
collection was asked for. Left out, and why (tests/fixtures/bench_public/README.md, "Batch 19"): pegainfer's RTX 5090
page (``--no-enable-prefix-caching``, which the schema cannot carry, rule 5; no prompt count); zhjunqin/LLM-Learning
(vLLM 0.4.1, V0, rule 1); GPUStack's gpt-oss-20b pages (MXFP4, rule 4); weiso131/schedcp (a modified vLLM with UVM,
version not stated, ``--cpu-offload-gb``, rules 1 and 5). The figures below are the transcriber's, from the printed
result blocks of the files at the commits cited; the serve flags from each folder's environment.txt.
"""
import json
import sys

REPO_URL = "https://github.com/adithyaJRunpod/vllm_bench/blob"
# (commit, sweep folder, config, serve flags after --max-model-len 8128, input len, output len, request rate,
#  max concurrency, output tok/s, mean TTFT ms, mean ITL ms, duration s); every run 1024 prompts, all completed,
#  total generated tokens = 1024 x output len
RUNS = [
    ("5935b88035af9c2fb1890a02c30443545aa04f01", "2026-03-31_225633", "baseline", "--enforce-eager", 128, 128, 90, 128, 8937.03, 57.14, 12.76, 14.67),
    ("5935b88035af9c2fb1890a02c30443545aa04f01", "2026-03-31_225633", "kv-cache-fp8", "--kv-cache-dtype fp8", 128, 128, 90, 128, 9649.37, 53.24, 11.64, 13.58),
    ("5935b88035af9c2fb1890a02c30443545aa04f01", "2026-03-31_225633", "batched-tokens-4096", "--max-num-batched-tokens 4096", 128, 128, 90, 128, 9775.86, 50.13, 11.49, 13.41),
    ("5935b88035af9c2fb1890a02c30443545aa04f01", "2026-03-31_225633", "batched-tokens-8192", "--max-num-batched-tokens 8192", 128, 128, 90, 128, 9763.54, 52.04, 11.50, 13.42),
    ("5935b88035af9c2fb1890a02c30443545aa04f01", "2026-04-01_000222", "baseline", "--enforce-eager", 128, 128, 90, 128, 8875.74, 64.38, 12.78, 14.77),
    ("5935b88035af9c2fb1890a02c30443545aa04f01", "2026-04-01_000222", "kv-cache-fp8", "--enforce-eager --kv-cache-dtype fp8", 128, 128, 90, 128, 8605.69, 57.54, 13.26, 15.23),
    ("5935b88035af9c2fb1890a02c30443545aa04f01", "2026-04-01_000222", "batched-tokens-4096", "--enforce-eager --max-num-batched-tokens 4096", 128, 128, 90, 128, 8911.19, 56.88, 12.77, 14.71),
    ("5935b88035af9c2fb1890a02c30443545aa04f01", "2026-04-01_000222", "batched-tokens-8192", "--enforce-eager --max-num-batched-tokens 8192", 128, 128, 90, 128, 8879.70, 58.95, 12.81, 14.76),
    ("9f6d09dcaaa764ca75f61fdc591140c8a3afb381", "2026-04-02_053105", "baseline", "", 512, 256, 25, 96, 5473.26, 773.21, 13.41, 47.90),
    ("9f6d09dcaaa764ca75f61fdc591140c8a3afb381", "2026-04-02_053105", "kv-cache-fp8", "--kv-cache-dtype fp8", 512, 256, 25, 96, 6067.50, 53.73, 12.51, 43.20),
    ("9f6d09dcaaa764ca75f61fdc591140c8a3afb381", "2026-04-02_053105", "fp8-full", "--quantization fp8 --kv-cache-dtype fp8", 512, 256, 25, 96, 6166.14, 48.80, 9.69, 42.51),
    ("9f6d09dcaaa764ca75f61fdc591140c8a3afb381", "2026-04-02_053105", "batched-tokens-4096", "--max-num-batched-tokens 4096", 512, 256, 25, 96, 6046.08, 54.57, 13.45, 43.36),
    ("9f6d09dcaaa764ca75f61fdc591140c8a3afb381", "2026-04-02_053105", "batched-tokens-16384", "--max-num-batched-tokens 16384", 512, 256, 25, 96, 6044.88, 54.05, 13.47, 43.37),
    ("9f6d09dcaaa764ca75f61fdc591140c8a3afb381", "2026-04-02_063650", "baseline", "", 512, 256, 50, 256, 8118.35, 147.20, 27.52, 32.29),
    ("9f6d09dcaaa764ca75f61fdc591140c8a3afb381", "2026-04-02_063650", "kv-cache-fp8", "--kv-cache-dtype fp8", 512, 256, 50, 256, 8603.75, 143.60, 25.82, 30.47),
    ("9f6d09dcaaa764ca75f61fdc591140c8a3afb381", "2026-04-02_063650", "fp8-full", "--quantization fp8 --kv-cache-dtype fp8", 512, 256, 50, 256, 9821.18, 125.17, 22.07, 26.69),
    ("9f6d09dcaaa764ca75f61fdc591140c8a3afb381", "2026-04-02_063650", "batched-tokens-4096", "--max-num-batched-tokens 4096", 512, 256, 50, 256, 8106.02, 140.03, 27.59, 32.34),
    ("9f6d09dcaaa764ca75f61fdc591140c8a3afb381", "2026-04-02_063650", "batched-tokens-16384", "--max-num-batched-tokens 16384", 512, 256, 50, 256, 8103.65, 135.94, 27.63, 32.35),
    ("5935b88035af9c2fb1890a02c30443545aa04f01", "2026-04-01_051617", "kv-cache-fp8", "--kv-cache-dtype fp8", 512, 256, 30, 96, 6486.97, 87.00, 13.46, 40.41),
    ("5935b88035af9c2fb1890a02c30443545aa04f01", "2026-04-01_051617", "fp8-full", "--quantization fp8 --kv-cache-dtype fp8", 512, 256, 30, 96, 7292.45, 61.59, 11.43, 35.95),
    ("5935b88035af9c2fb1890a02c30443545aa04f01", "2026-04-01_051617", "batched-tokens-4096", "--max-num-batched-tokens 4096", 512, 256, 30, 96, 6184.73, 84.21, 14.16, 42.39),
    ("5935b88035af9c2fb1890a02c30443545aa04f01", "2026-04-01_051617", "batched-tokens-8192", "--max-num-batched-tokens 8192", 512, 256, 30, 96, 6181.26, 91.76, 14.15, 42.41),
]


def row(commit, folder, cfg, flags, n_in, n_out, rate, conc, thr, ttft, itl, dur) -> dict:
    f = flags.split()
    kv = f[f.index("--kv-cache-dtype") + 1] if "--kv-cache-dtype" in f else None
    mnbt = int(f[f.index("--max-num-batched-tokens") + 1]) if "--max-num-batched-tokens" in f else None
    quant = f[f.index("--quantization") + 1] if "--quantization" in f else None
    serve = ("vllm serve Qwen/Qwen3-8B --host 0.0.0.0 --port 8000 --dtype auto --gpu-memory-utilization 0.95 "
             f"--max-model-len 8128 {flags}").strip()
    bench = ("vllm bench serve --backend openai-chat --base-url http://127.0.0.1:8000 --endpoint /v1/chat/completions "
             f"--model Qwen/Qwen3-8B --dataset-name random --random-input-len {n_in} --random-output-len {n_out} "
             f"--num-prompts 1024 --max-concurrency {conc} --request-rate {rate} --percentile-metrics ttft,itl,e2el "
             "--metric-percentiles 50,90,99")
    notes = ("Batch 19 (protocol 19; committed before kvdoctor was run on it). RunPod tuning sweep "
             f"(adithyaJRunpod/vllm_bench, logs/tuning_sweep/{folder}, config [{cfg}]): GPU 'NVIDIA H100 80GB HBM3' x1 "
             "(environment.txt: gpu_memory 81559 MiB), vLLM 0.18.0 (environment.txt, from `import vllm`). "
             f"Serve: {serve}. Bench: {bench} (the exact line is not in the logs; rebuilt from the repository's script, "
             "it matches the settings the log prints: seed 0, range ratio 0.0, ignore_eos False). Printed: 1024 "
             f"successful, 0 failed, duration {dur} s, output {thr} tok/s, mean TTFT {ttft} ms, mean ITL {itl} ms; no "
             "TPOT line (--percentile-metrics ttft,itl,e2el). Assumptions, as batch 6 made them for the same "
             "repository: 'NVIDIA H100 80GB HBM3' is the SXM part; every request produced its full output length "
             "(total generated = 1024 x output length), so ignore_eos is read as true; the script starts a fresh "
             "server for each config and, in its later version, sends a 16-prompt warm-up first, not modelled "
             "(prior_runs_same_server is empty, as on batch 6's rows of this repository).")
    return {"id": f"b19-runpod-h100-qwen3-8b-{folder}-{cfg}", "group": f"b19-runpod-h100-qwen3-8b-{folder}",
            "source_url": f"{REPO_URL}/{commit}/logs/tuning_sweep/{folder}/{cfg}_bench.log",
            "model": "Qwen/Qwen3-8B", "gpu": "NVIDIA H100 SXM", "tp": 1, "quantization": quant,
            "vllm_version": "0.18.0", "enforce_eager": "--enforce-eager" in f, "dataset": "random",
            "input_len": n_in, "output_len": n_out, "ignore_eos": True, "num_prompts": 1024,
            "request_rate": float(rate), "max_concurrency": conc, "max_num_seqs": None, "max_model_len": 8128,
            "gpu_memory_utilization": 0.95, "kv_cache_dtype": kv, "max_num_batched_tokens": mnbt,
            "measured": {"output_throughput": thr, "mean_ttft_ms": ttft, "mean_tpot_ms": None},
            "notes": notes, "split": "held_out", "batch": 19, "bench_test_request": True,
            "prior_runs_same_server": [], "anchor": False}


def main() -> int:
    out = [row(*r) for r in RUNS]
    sys.stdout.write("".join(json.dumps(r) + "\n" for r in out))
    print(len(out), "rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
