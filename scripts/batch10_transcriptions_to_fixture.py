"""Batch 10 (protocol 10): the session's transcriptions of public results (JSON lines, /work/batch10/{a,b,c} at the
time) -> fixture rows. The inclusion rules are batch 6's (tests/fixtures/bench_public/README.md, "Batch 6") with
protocol 10's reading of rule 1 for a pull request's base arm; what batch 10 decided is written down in "Batch 10"
there. Kept as the record of how the rows were made; each row's notes summarise its transcription. Run before any
predicted figure of batch 10 was computed:

    python scripts/batch10_transcriptions_to_fixture.py >> tests/fixtures/bench_public/results.jsonl

Three helpers searched vLLM's pull requests (Hopper/Blackwell; other GPUs) and vLLM's issues with other projects'
threads and pages. The two pull-request slices kept nothing; the third kept one row. That row was also transcribed in
batch 9 (/work/heldout3/batch9_b, "b9b-gps-lmc-q3-8b-4090-miss-1k") and left out there, before any figure, because the
catalog's RTX 4090 had no dense tensor rate; the two transcriptions' figures are checked equal here.
"""
import json
import sys
from pathlib import Path

SRC = Path("/work/batch10")
BATCH9 = Path("/work/heldout3/batch9_b/rows.jsonl")
GPU = {"RTX 4090": "NVIDIA GeForce RTX 4090"}
# the fixture cites GitHub: the docs page's file in the gpustack repository (same text, the commit batch 9 read)
URL = {"https://docs.gpustack.ai/latest/performance-lab/references/evaluating-lmcache-prefill-acceleration-in-vllm":
       "https://github.com/gpustack/gpustack/blob/4650ef43c7f1e51661cbe0f10258bf6eb7274177/docs/performance-lab/"
       "references/evaluating-lmcache-prefill-acceleration-in-vllm.md"}


def _rows(d: str) -> list[dict]:
    p = SRC / d / "rows.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines() if x.strip()] if p.exists() else []


def main() -> int:
    earlier = {}
    if BATCH9.exists():
        earlier = {r["id"]: r for r in map(json.loads, filter(str.strip, BATCH9.read_text().splitlines()))}
    out = []
    for d in ("a", "b", "c"):
        for r in _rows(d):
            twin = next((x for x in earlier.values() if x["measured"] == r["measured"]), None)
            second = (f" The same run was transcribed in batch 9 as {twin['id']} (same figures) and left out there, "
                      "before any figure, because the catalog's RTX 4090 had no dense tensor rate.") if twin else ""
            notes = (f"Batch 10 (protocol 10; committed before kvdoctor was run on it). Source as transcribed: GPU "
                     f"'{r['gpu']}', model '{r['model']}', vLLM '{r['vllm_version']}', serve `{r.get('serve_command')}`, "
                     f"bench `{r.get('bench_command')}`.{second} Transcriber's notes: {r.get('notes')}")
            if r["source_url"] in URL:
                notes += (" Source URL: the page's file in the gpustack/gpustack repository at 4650ef4 (the transcriber "
                          f"read {r['source_url'].removeprefix('https://')}, the same text).")
            out.append({"id": "b10" + r["id"], "group": "b10-" + r["group"], "source_url": URL.get(r["source_url"], r["source_url"]),
                        "model": r["model"], "gpu": GPU.get(r["gpu"], r["gpu"]), "tp": int(r.get("tp") or 1),
                        "quantization": r.get("quantization"),
                        "vllm_version": str(r["vllm_version"]).lstrip("v") if r.get("vllm_version") else None,
                        "enforce_eager": bool(r.get("enforce_eager")), "dataset": r["dataset"],
                        "input_len": r["input_len"], "output_len": r["output_len"],
                        "ignore_eos": bool(r.get("ignore_eos")), "num_prompts": int(r["num_prompts"]),
                        "request_rate": "inf" if str(r["request_rate"]) == "inf" else float(r["request_rate"]),
                        "max_concurrency": r.get("max_concurrency"), "max_num_seqs": r.get("max_num_seqs"),
                        "max_model_len": r.get("max_model_len"),
                        "gpu_memory_utilization": r.get("gpu_memory_utilization"),
                        "measured": {k: r["measured"].get(k)
                                     for k in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")},
                        "notes": notes, "split": "held_out", "batch": 10,
                        "bench_test_request": r.get("bench_test_request", True) is not False,
                        "prior_runs_same_server": [], "anchor": False})
    ids = [r["id"] for r in out]
    assert len(ids) == len(set(ids))
    sys.stdout.write("".join(json.dumps(r) + "\n" for r in out))
    print(len(out), "rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
