"""Batch 9 (protocol 9): the session's transcriptions of public results (JSON lines, /work/heldout3/batch9_{a,b} at
the time) -> fixture rows. The inclusion rules are batch 6's (tests/fixtures/bench_public/README.md, "Batch 6"); what
batch 9 decided is written down in "Batch 9" there. Kept as the record of how the rows were made; each row's notes
summarise its transcription. Run before any predicted figure of batch 9 was computed:

    python scripts/batch9_transcriptions_to_fixture.py >> tests/fixtures/bench_public/results.jsonl

Two helpers transcribed the same GPUStack pages independently; the rows come from batch9_b and every figure they share
with batch9_a is checked equal here (they are).
"""
import json
import sys
from pathlib import Path

SRC = Path("/work/heldout3")
# The GPU as the source's earlier rows in this fixture name it (GPUStack's A100 and H100 pages: SXM), the catalog's
# name for the RTX 4090.
GPU = [("A100", "NVIDIA A100 80GB SXM"), ("H100", "NVIDIA H100 SXM"), ("4090", "NVIDIA GeForce RTX 4090")]
# Decided from the rules alone, before any figure (README "Batch 9"):
LEFT_OUT = {
    "b9b-gps-q3-8b-bf16-h100": "a source already used counts only for a GPU and model it did not have: GPUStack's "
                               "Qwen3-8B on H100 is in batch 5",
    "b9b-gps-lmc-q3-8b-4090-miss-8k": "rule 5: the input length is not stated (the transcriber derived 8,192 from "
                                      "the ratio of total to output throughput)",
    "b9b-gps-lmc-q3-8b-4090-miss-20k": "rule 5: the input length is not stated (derived 20,480 the same way)",
    # amendment (the first evaluation stopped on this row before printing any figure): vLLM, and the simulator with
    # it, refuses --quantization awq on the bf16 config ("Cannot find the config file for awq"); the AWQ checkpoint's
    # own config.json (its quantization_config) is not available offline
    "b9b-gps-q32-a100-awq-sharegpt": "the simulator refuses it: the AWQ checkpoint's config.json is not here",
    # amendment 2 (the second evaluation stopped on the first of these before printing any figure): the catalog's RTX
    # 4090 has no sourced dense tensor rate, so the simulator refuses it; batch 6 read rule 3 the same way for the 5090
    "b9b-gps-q3-8b-bf16-4090": "the simulator refuses the RTX 4090 (no sourced dense TFLOPS in the catalog)",
    "b9b-gps-lmc-q3-8b-4090-miss-1k": "the simulator refuses the RTX 4090 (no sourced dense TFLOPS in the catalog)",
}
# Glyd's Qwen3-30B-A3B on one H100 (batch9_a): Glyd's Qwen3-30B-A3B H100 SXM baselines are in batch 6.
GLYD_LEFT_OUT = "a source already used counts only for a GPU and model it did not have: Glyd's Qwen3-30B-A3B on H100 is in batch 6"
MODEL = {"Qwen/Qwen3-32B-FP8": ("Qwen/Qwen3-32B-FP8", None)}


def _rows(d: str) -> list[dict]:
    return [json.loads(x) for x in (SRC / d / "rows.jsonl").read_text().splitlines() if x.strip()]


def main() -> int:
    a, b = _rows("batch9_a"), _rows("batch9_b")
    out, left = [], [(r["id"], GLYD_LEFT_OUT) for r in a if "glyd" in r["id"]]
    for r in b:
        twin = next((x for x in a if x["measured"] == r["measured"]), None)
        assert twin is not None or r["id"] in LEFT_OUT, r["id"]  # every kept row was transcribed twice, identically
        if r["id"] in LEFT_OUT:
            left.append((r["id"], LEFT_OUT[r["id"]]))
            continue
        model, quant = MODEL.get(r["model"], (r["model"], r.get("quantization")))
        gpu = next(name for k, name in GPU if k in r["gpu"])
        notes = (f"Batch 9 (protocol 9; committed before kvdoctor was run on it). Source as transcribed: GPU "
                 f"'{r['gpu']}', model '{r['model']}', vLLM '{r['vllm_version']}'. Second transcription: {twin['id']} "
                 f"(same figures). Transcriber's notes: {r.get('notes')}")
        out.append({"id": r["id"], "group": "b9-" + r["group"], "source_url": r["source_url"], "model": model,
                    "gpu": gpu, "tp": int(r.get("tp") or 1), "quantization": quant, "vllm_version": r["vllm_version"],
                    "enforce_eager": bool(r.get("enforce_eager")), "dataset": r["dataset"],
                    "input_len": r["input_len"], "output_len": r["output_len"],
                    "ignore_eos": bool(r.get("ignore_eos")), "num_prompts": int(r["num_prompts"]),
                    "request_rate": "inf" if str(r["request_rate"]) == "inf" else float(r["request_rate"]),
                    "max_concurrency": r.get("max_concurrency"), "max_num_seqs": r.get("max_num_seqs"),
                    "max_model_len": r.get("max_model_len"), "gpu_memory_utilization": r.get("gpu_memory_utilization"),
                    "measured": {k: r["measured"].get(k) for k in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")},
                    "notes": notes, "split": "held_out", "batch": 9,
                    # the bench's default in 0.9-0.11 (its initial test request), as this source's batch-5 rows
                    "bench_test_request": True, "prior_runs_same_server": [], "anchor": False})
    ids = [r["id"] for r in out]
    assert len(ids) == len(set(ids))
    sys.stdout.write("".join(json.dumps(r) + "\n" for r in out))
    print(len(out), "rows;", len(left), "left out:", file=sys.stderr)
    for rid, why in left:
        print(f"  {rid}: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
