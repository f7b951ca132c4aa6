"""Batch 6 (protocol 4): the session's transcriptions of public results (JSON lines, /work/batch6 at the time) -> fixture rows; the inclusion rules are in tests/fixtures/bench_public/README.md ("Batch 6"). Kept as the record of how the rows were made; the transcriptions themselves are summarised in each row's notes."""
import json, re, sys
SRC = ["/work/batch6/issues.jsonl", "/work/batch6/round2_issues.jsonl", "/work/batch6/round2_pages.jsonl"]
rows = [json.loads(l) for f in SRC for l in open(f)]
KEEP = ("vllm23151-", "glyd-", "runpod-h100-qwen3-8b-")
CSS_KEEP = re.compile(r"^cssnoeasy-a100pcie-qwen25-7b-tp[12]-(short_short_low|long_short_medium|long_long_high)$")
GPU = [("RTX 5090", "NVIDIA GeForce RTX 5090"), ("A100-SXM4-40GB", "NVIDIA A100 40GB SXM"),
       ("A100 80GB PCIe", "NVIDIA A100 80GB PCIe"), ("GH200", "NVIDIA GH200"), ("A10 24GB", "NVIDIA A10"),
       ("H100", "NVIDIA H100 SXM")]
VERSION = {"peg5090": "0.22.1", "vllm23151": "0.10.1", "glyd": "0.30.0", "runpod": "0.18.0", "cssnoeasy": "0.19.0"}
out = []
for r in rows:
    rid = r["id"]
    if not (rid.startswith(KEEP) or CSS_KEEP.match(rid)):
        continue
    if rid.endswith(("kv-cache-fp8", "batched-tokens-4096")):
        continue  # rule 5: a server setting the row schema cannot carry
    m = r["measured"]
    meas = {k: m.get(k) for k in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")}
    if all(v is None for v in meas.values()):
        continue
    gpu = next(name for key, name in GPU if key in r["gpu"])
    serve = r.get("serve_command") or ""
    q = r.get("quantization")
    q = q if q in ("awq", "gptq", "fp8") else None
    notes = (f"Batch 6 (protocol 4; committed before kvdoctor was run on it). Source as transcribed: GPU '{r['gpu']}', "
             f"vLLM '{r.get('vllm_version')}'. Serve: {serve} Bench: {r.get('bench_command')} Excerpt: {r.get('excerpt')} "
             f"Assumptions: {r.get('notes')}")
    # (pegainfer's RTX 5090 rows were left out by the amendment in the README: no sourced compute rate)
    row = {"id": "b6-" + rid[:90], "group": "b6-" + r["group"], "source_url": r["source_url"], "model": r["model"],
           "gpu": gpu, "tp": int(r["tp"]), "quantization": q, "vllm_version": VERSION[rid.split("-")[0]],
           "enforce_eager": "--enforce-eager" in serve, "dataset": r["dataset"],
           "input_len": r.get("input_len"), "output_len": r.get("output_len"), "ignore_eos": True,
           "num_prompts": int(r["num_prompts"]), "request_rate": "inf" if str(r["request_rate"]) == "inf" else float(r["request_rate"]),
           "max_concurrency": r.get("max_concurrency"), "max_num_seqs": r.get("max_num_seqs"),
           "max_model_len": r.get("max_model_len"), "gpu_memory_utilization": r.get("gpu_memory_utilization"),
           "measured": meas, "notes": notes, "split": "held_out", "batch": 6,
           "bench_test_request": True, "prior_runs_same_server": [], "anchor": False}
    out.append(row)
ids = [r["id"] for r in out]
assert len(ids) == len(set(ids))
sys.stdout.write("".join(json.dumps(r) + "\n" for r in out))
print(len(out), "rows", file=sys.stderr)
