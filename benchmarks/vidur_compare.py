#!/usr/bin/env python3
"""Side by side with Vidur: same trace, model, GPU and batch limits; both wall times and both sets
of predicted latencies.

    python benchmarks/vidur_compare.py [--trace PATH] [--timeout 1200]

Creates benchmarks/.venv-vidur (git-ignored) and ``pip install vidur`` into it on first use, runs
Vidur's vLLM scheduler on the Azure conversation trace (time/prefill/decode scale factors 1, so the
requests are the trace's own), then kvdoctor's simulator on the same trace, and writes
benchmarks/out/vidur_compare.json. When Vidur cannot install or run here, the exact error is
recorded instead of a number (no substitute figure is made up).

Mapping of the configuration (kvdoctor -> Vidur):
  Llama-3.1-8B-Instruct            -> meta-llama/Llama-3-8B (Vidur's config; same layer shapes)
  H100 SXM, TP 1                   -> --replica_config_device h100, network h100_dgx
  max_num_seqs / max_num_batched_tokens -> vllm scheduler batch_size_cap / max_tokens_in_batch
  num_gpu_blocks (ledger), block 16 -> --cache_config_num_blocks, --cache_config_block_size
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VENV = HERE / ".venv-vidur"
OUT = HERE / "out"
DEFAULT_TRACE = REPO.parent / "shared" / "data" / "traces" / "splitwise_conv.csv"


def _tail(text: str, n: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def ensure_vidur() -> tuple[Path | None, str]:
    py = VENV / "bin" / "python"
    if not py.exists():
        r = subprocess.run([sys.executable, "-m", "venv", str(VENV)], capture_output=True, text=True)
        if r.returncode:
            return None, "venv creation failed:\n" + _tail(r.stderr)
    chk = subprocess.run([str(py), "-c", "import vidur, importlib.metadata as m; print(m.version('vidur'))"],
                         capture_output=True, text=True)
    if chk.returncode:
        r = subprocess.run([str(py), "-m", "pip", "install", "-q", "vidur"], capture_output=True, text=True)
        if r.returncode:
            return None, "pip install vidur failed:\n" + _tail(r.stderr)
        chk = subprocess.run([str(py), "-c", "import vidur, importlib.metadata as m; print(m.version('vidur'))"],
                             capture_output=True, text=True)
        if chk.returncode:
            return None, "vidur installed but does not import:\n" + _tail(chk.stderr)
    return py, chk.stdout.strip()


def run_kvdoctor(trace: Path) -> dict:
    from kvdoctor.catalog.gpus import lookup_gpu
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.engine.config import EngineConfig
    from kvdoctor.engine.defaults import resolve
    from kvdoctor.ledger.build import build_ledger
    from kvdoctor.sim.whatif import run
    from kvdoctor.sim.workload import load_trace

    shape, gpu = lookup_model("meta-llama/Llama-3.1-8B-Instruct"), lookup_gpu("H100")
    resolved = resolve(EngineConfig(), shape, gpu)
    blocks = build_ledger(shape, gpu, resolved).num_blocks
    t = time.perf_counter()
    res = run(shape, gpu, resolved, blocks, load_trace(trace))
    wall = time.perf_counter() - t
    s = res.summary
    return {"wall_s": wall, "num_gpu_blocks": blocks, "max_num_seqs": resolved.max_num_seqs,
            "max_num_batched_tokens": resolved.max_num_batched_tokens, "max_model_len": resolved.max_model_len,
            "ttft_p50_s": s.ttft_p50_s, "ttft_p99_s": s.ttft_p99_s, "tbt_p50_s": s.tbt_p50_s, "tbt_p99_s": s.tbt_p99_s,
            "e2e_p50_s": s.e2e_p50_s, "e2e_p99_s": s.e2e_p99_s, "preemptions": s.preemptions}


def vidur_trace(trace: Path, dest: Path) -> Path:
    """Vidur 0.0.26's trace_replay reads Date, Time, PromptTokenCount, CompletionTokenCount columns."""
    import csv

    from kvdoctor.sim.workload import load_trace

    w = load_trace(trace)
    with dest.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["Date", "Time", "PromptTokenCount", "CompletionTokenCount"])
        for a, p, o in zip(w.arrival, w.prompt, w.output):
            out.writerow(["2023-08-21", f"{a:.6f}", p, o])
    return dest


def run_vidur(py: Path, trace: Path, ours: dict, timeout: int) -> dict:
    outdir = OUT / "vidur"
    outdir.mkdir(parents=True, exist_ok=True)
    trace = vidur_trace(trace, outdir / "trace_vidur_format.csv")
    cmd = [
        str(py), "-m", "vidur.main",
        "--replica_config_model_name", "meta-llama/Llama-3-8B",
        "--replica_config_device", "h100", "--replica_config_network_device", "h100_dgx",
        "--replica_config_tensor_parallel_size", "1", "--replica_config_num_pipeline_stages", "1",
        "--replica_scheduler_config_type", "vllm",
        "--vllm_scheduler_config_batch_size_cap", str(ours["max_num_seqs"]),
        "--vllm_scheduler_config_max_tokens_in_batch", str(ours["max_num_batched_tokens"]),
        "--cache_config_block_size", "16", "--cache_config_num_blocks", str(ours["num_gpu_blocks"]),
        "--request_generator_config_type", "trace_replay",
        "--trace_request_generator_config_trace_file", str(trace),
        "--trace_request_generator_config_prefill_scale_factor", "1",
        "--trace_request_generator_config_decode_scale_factor", "1",
        "--trace_request_generator_config_time_scale_factor", "1",
        "--trace_request_generator_config_max_tokens", str(ours["max_model_len"]),
        "--metrics_config_output_dir", str(outdir),
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="disabled")
    t = time.perf_counter()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=str(outdir), env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout} s", "command": " ".join(cmd)}
    wall = time.perf_counter() - t
    if r.returncode:
        err = _tail(r.stderr or r.stdout, 12)
        return {"ok": False, "wall_s": wall, "error": err, "command": " ".join(cmd)}
    return {"ok": True, "wall_s": wall, "stdout_tail": _tail(r.stdout, 20), "output_dir": str(outdir),
            "command": " ".join(cmd)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--timeout", type=int, default=1200)
    args = ap.parse_args(argv)
    if not args.trace.exists():
        print(f"trace not found: {args.trace}", file=sys.stderr)
        return 2
    ours = run_kvdoctor(args.trace)
    py, version = ensure_vidur()
    vidur = {"ok": False, "error": version} if py is None else {"version": version, **run_vidur(py, args.trace, ours, args.timeout)}
    OUT.mkdir(exist_ok=True)
    report = {"trace": str(args.trace), "kvdoctor": ours, "vidur": vidur}
    (OUT / "vidur_compare.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
