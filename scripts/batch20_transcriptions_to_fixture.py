"""Batch 20 (protocol 20): the rows the rules admit, read as protocol 19 reads them, from a transcribe-only collection of
2026-12-05 (the transcriber's files are in /tmp/batch20, outside the repo) -> fixture rows. Run before any predicted
figure of batch 20 was computed:

    python scripts/batch20_transcriptions_to_fixture.py >> tests/fixtures/bench_public/results.jsonl

The collection held 23 runs from 3 sources. The rules admit 15 (tests/fixtures/bench_public/README.md, "Batch 20"):
- samilazrak/vllm-optimization-lab: Qwen3-14B bf16 and AWQ on one L40S at vLLM 0.29.0, `vllm bench serve` ShareGPT
  x2000 at 10 req/s under a cap of 10 (3 runs; its prefix_repetition runs are left out: the row schema cannot carry
  that dataset, rule 5);
- vedanti02/vllm-optimization-bench: Llama-3.1-8B-Instruct bf16, FP8 (RedHatAI's static checkpoint) and FP8 with an
  fp8 KV cache on one L40S at vLLM 0.24.0, four random workloads at concurrency 16 (12 runs; output throughput only:
  its report gives TTFT and TPOT as medians, rule 6).
Left out: IsseiHasegawa/vLLM-experiment (a source build with added per-step logging, rule 1). The figures are the
transcriber's, from the files at the commits cited.
"""
import json
import sys

SAMI = "https://github.com/samilazrak/vllm-optimization-lab/blob/a7b193a33a718b3cb3f95476791932afdf599c2b/results/raw/"
VED = ("https://github.com/vedanti02/vllm-optimization-bench/blob/1f00da06c1fb8f2c603cd0045ef0d5241df9732d/results/L40S/"
       "RESULTS.md")
AWQ = "tests/fixtures/bench_public/models/Qwen3-14B-AWQ.config.json"
# config -> (model, output tok/s, mean TTFT ms, mean TPOT ms, max_num_seqs, max_num_batched_tokens, gpu util, flags)
SAMI_RUNS = {
    "base": ("Qwen/Qwen3-14B", 230.84, 145.20, 42.52, None, None, None, ""),
    "awq": (AWQ, 640.12, 75.60, 15.29, None, None, None, "--quantization awq"),
    "tuned": (AWQ, 639.79, 73.81, 15.31, 512, 8192, 0.95,
              "--quantization awq --max-num-batched-tokens 8192 --max-num-seqs 512 --gpu-memory-utilization 0.95 "
              "--enable-prefix-caching --enable-chunked-prefill"),
}
# (workload, input, output, prompts) x precision -> output tok/s (the report's one run per cell, rounded to 0.1)
VED_WORKLOADS = {"chat": (256, 256, 200), "long_decode": (128, 2048, 100), "long_prompt": (4096, 128, 100),
                 "short": (128, 128, 256)}
VED_RUNS = {("chat", "bf16"): 632.9, ("chat", "fp8-static"): 958.9, ("chat", "fp8-kv"): 970.5,
            ("long_decode", "bf16"): 569.5, ("long_decode", "fp8-static"): 826.6, ("long_decode", "fp8-kv"): 888.0,
            ("long_prompt", "bf16"): 214.0, ("long_prompt", "fp8-static"): 278.1, ("long_prompt", "fp8-kv"): 302.8,
            ("short", "bf16"): 666.3, ("short", "fp8-static"): 1024.6, ("short", "fp8-kv"): 1022.5}


def _row(**kw) -> dict:
    base = {"tp": 1, "quantization": None, "enforce_eager": False, "ignore_eos": True, "max_num_seqs": None,
            "max_model_len": None, "gpu_memory_utilization": None, "kv_cache_dtype": None,
            "max_num_batched_tokens": None, "split": "held_out", "batch": 20, "bench_test_request": True,
            "prior_runs_same_server": [], "anchor": False, "gpu": "NVIDIA L40S"}
    return {**base, **kw}


def sami() -> list[dict]:
    out = []
    for cfg, (model, thr, ttft, tpot, seqs, mnbt, util, flags) in SAMI_RUNS.items():
        serve = f"vllm serve {'Qwen/Qwen3-14B' if cfg == 'base' else 'Qwen/Qwen3-14B-AWQ'} --port 8000 {flags}".strip()
        notes = ("Batch 20 (protocol 20; committed before kvdoctor was run on it). samilazrak/vllm-optimization-lab "
                 f"config [{cfg}]: one NVIDIA L40S (results/raw/gpu-specs.csv), vLLM 0.29.0 (results/raw/versions.txt, "
                 f"the server's banner). Serve: {serve} (scripts/01-serve.sh at f68ab67; the start-up log's non-default "
                 "args agree). Bench: vllm bench serve --backend vllm --dataset-name sharegpt --dataset-path "
                 "ShareGPT_V3_unfiltered_cleaned_split.json --num-prompts 2000 --request-rate 10 --max-concurrency 10 "
                 "--burstiness 1.0 (scripts/02-bench.sh; the bench's Namespace line agrees). Printed: 2000 successful, "
                 f"446,619 input tokens, output {thr} tok/s, mean TTFT {ttft} ms, mean TPOT {tpot} ms. A fresh server per "
                 "config; ShareGPT ran first on it (its prefix_repetition run after is left out: the schema cannot "
                 "carry that dataset). The start-up log: max model len 40,960 (the model's own), and for [base] 72,496 "
                 "KV tokens. Assumption: the ShareGPT requests are kvdoctor's embedded bench sample (protocol 13).")
        out.append(_row(id=f"b20-sami-q3-14b-l40s-{cfg}-sharegpt", group="b20-sami-q3-14b-l40s",
                        source_url=f"{SAMI}{cfg}__sharegpt.console.log", model=model, vllm_version="0.29.0",
                        dataset="sharegpt", input_len=None, output_len=None, ignore_eos=False, num_prompts=2000,
                        request_rate=10.0, max_concurrency=10, max_num_seqs=seqs, max_model_len=40960,
                        gpu_memory_utilization=util, max_num_batched_tokens=mnbt,
                        measured={"output_throughput": thr, "mean_ttft_ms": ttft, "mean_tpot_ms": tpot},
                        notes=notes))
    return out


def ved() -> list[dict]:
    out = []
    for (wl, prec), thr in VED_RUNS.items():
        n_in, n_out, n = VED_WORKLOADS[wl]
        model_text = "unsloth/Llama-3.1-8B-Instruct" if prec == "bf16" else "RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8"
        notes = ("Batch 20 (protocol 20; committed before kvdoctor was run on it). vedanti02/vllm-optimization-bench "
                 f"results/L40S/RESULTS.md, workload '{wl}', precision '{prec}': one NVIDIA L40S, vLLM 0.24.0 (README, a "
                 f"row file). Serve (src/vob/server.py): vllm serve {model_text} --max-model-len 8192 --max-num-seqs 256"
                 + (" --kv-cache-dtype fp8" if prec == "fp8-kv" else "") + "; bench (src/vob/runner.py): vllm bench "
                 f"serve --backend vllm --dataset-name random --random-input-len {n_in} --random-output-len {n_out} "
                 f"--num-prompts {n} --max-concurrency 16 --seed 1234 --ignore-eos (the prompt count by the runner's "
                 "rule). The report gives one run's output throughput rounded to 0.1 and TTFT/TPOT as medians (not "
                 "used). Assumptions: unsloth's copy is meta-llama/Llama-3.1-8B-Instruct; RedHatAI's checkpoint is its "
                 "FP8 weights (static, compressed-tensors), priced as fp8. A fresh server per cell, warmed by two tiny "
                 "requests (not modelled).")
        out.append(_row(id=f"b20-ved-l31-8b-l40s-{wl}-{prec}", group=f"b20-ved-l31-8b-l40s-{wl}",
                        source_url=VED, model="meta-llama/Llama-3.1-8B-Instruct",
                        quantization=None if prec == "bf16" else "fp8", vllm_version="0.24.0", dataset="random",
                        input_len=n_in, output_len=n_out, num_prompts=n, request_rate="inf", max_concurrency=16,
                        max_num_seqs=256, max_model_len=8192, kv_cache_dtype="fp8" if prec == "fp8-kv" else None,
                        measured={"output_throughput": thr, "mean_ttft_ms": None, "mean_tpot_ms": None}, notes=notes))
    return out


def main() -> int:
    rows = sami() + ved()
    sys.stdout.write("".join(json.dumps(r) + "\n" for r in rows))
    print(len(rows), "rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
