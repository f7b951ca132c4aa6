"""Batch 8 (protocol 7): the session's transcriptions of public results (JSON lines, /work/batch8 at the time) ->
fixture rows. The inclusion rules are batch 6's (tests/fixtures/bench_public/README.md, "Batch 6"); what batch 8 decided
is written down in "Batch 8" there. Kept as the record of how the rows were made; each row's notes summarise its
transcription. Run before any predicted figure of batch 8 was computed:

    python scripts/batch8_transcriptions_to_fixture.py >> tests/fixtures/bench_public/results.jsonl
"""
import json
import sys
from pathlib import Path

SRC = [Path("/work/batch8") / f for f in ("repos8.jsonl", "others8.jsonl", "pages8.jsonl", "vllmissues.jsonl")]
GPU = [("L40S", "NVIDIA L40S"), ("A100-SXM4-40GB", "NVIDIA A100 40GB SXM")]
# rule 1 (a stated vLLM release >= 0.8.0, or a main-branch PR whose date fixes it): the rows that state one
VERSION = {"massedcompute-l40s-": "0.8.5", "turboquant-": "0.20.0"}
# the bench's untimed test request: 0.8.5 printed "Initial test run completed"; the turboquant harness's v0.20.0 bench
# printed "Skipping endpoint ready check" (num_warmups 0) in the runs whose log is committed, the others ran the same
# harness and version
TEST_REQUEST = {"massedcompute-l40s-": True, "turboquant-": False}


def main() -> int:
    rows = [json.loads(line) for f in SRC if f.exists() for line in f.read_text().splitlines() if line.strip()]
    out, left = [], []
    for r in rows:
        rid = r["id"]
        key = next((k for k in VERSION if rid.startswith(k)), None)
        if key is None:
            left.append((rid, "rule 1: no vLLM release stated (a nightly image or an unpinned dependency; the date "
                              "does not fix a release the simulator can be set to)"))
            continue
        m = r["measured"]
        meas = {k: m.get(k) for k in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")}
        gpu = next(name for k, name in GPU if k in r["gpu"])
        notes = (f"Batch 8 (protocol 7; committed before kvdoctor was run on it). Source as transcribed: GPU "
                 f"'{r['gpu']}', vLLM '{r.get('vllm_version')}'. Serve: {r.get('serve_command')} Bench: "
                 f"{r.get('bench_command')} Excerpt: {r.get('excerpt')} Before the run: "
                 f"{r.get('ready_check_or_warmups')} Assumptions: {r.get('notes')}")
        row = {"id": "b8-" + rid[:90], "group": "b8-" + r["group"], "source_url": r["source_url"],
               "model": r["model"], "gpu": gpu, "tp": int(r["tp"]), "quantization": None,
               "vllm_version": VERSION[key], "enforce_eager": bool(r.get("enforce_eager")),
               "dataset": r["dataset"], "input_len": int(r["input_len"]), "output_len": int(r["output_len"]),
               "ignore_eos": bool(r.get("ignore_eos")), "num_prompts": int(r["num_prompts"]),
               "request_rate": "inf" if str(r["request_rate"]) == "inf" else float(r["request_rate"]),
               "max_concurrency": r.get("max_concurrency"), "max_num_seqs": r.get("max_num_seqs"),
               "max_model_len": r.get("max_model_len"), "gpu_memory_utilization": r.get("gpu_memory_utilization"),
               "measured": meas, "notes": notes, "split": "held_out", "batch": 8,
               "bench_test_request": TEST_REQUEST[key],
               "prior_runs_same_server": [list(p)[:2] for p in (r.get("prior_runs_same_server") or [])],
               "anchor": False}
        out.append(row)
    ids = [r["id"] for r in out]
    assert len(ids) == len(set(ids))
    sys.stdout.write("".join(json.dumps(r) + "\n" for r in out))
    print(len(out), "rows;", len(left), "left out:", file=sys.stderr)
    for rid, why in left:
        print(f"  {rid}: {why}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
