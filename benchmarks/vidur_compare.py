#!/usr/bin/env python3
"""Side by side with Vidur 0.0.26, offline: same trace, model, GPU, batch limits and KV pool; both
tools' CPU and wall times and the same figures computed from both tools' per-request outputs.

    python benchmarks/vidur_compare.py [--trace PATH] [--n N] [--timeout 2400] [--skip-vidur]

Set-up (made once, all under benchmarks/.venv-vidur, git-ignored): a Python 3.11 venv with
``vidur==0.0.26`` (no-deps, plus the few runtime deps it needs, from PyPI), and an offline Hugging
Face cache that holds the shared Vidur profiles (../shared/data/vidur-profiles) under two local
dataset ids, so Vidur runs with ``HF_HUB_OFFLINE=1`` (recipe: ../shared/vidur-kit/README.md).

The one configuration with a real attention profile in the shared data: **Llama-2-70B on A100-80GB
SXM (DGX), TP2**, block 16, Vidur's ``vllm`` scheduler (v0-style: whole-prompt prefills, 1 %
admission watermark) with batch cap 128 and 4,096 tokens per batch, max_model_len 4,096, and the
same 3,328-block pool forced on both (Vidur's own MemoryPlanner figure). kvdoctor runs with the
matching flags (chunked prefill and prefix caching off). Vidur 0.0.26 dies at the first preemption
(``Request.restart`` keeps per-stage counters); the runner below patches that at run time. Its
random-forest predictor trains once on a one-point grid (50 trees) and is cached; training time
is reported separately from the simulation.

Writes benchmarks/out/vidur_compare.json. When Vidur cannot install or run, the exact error is
recorded instead of a number (no substitute figure is made up).
"""

from __future__ import annotations

import argparse
import csv
import json
import lzma
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
VENV = HERE / ".venv-vidur"
CACHE = VENV / "hf-cache"
OUT = HERE / "out" / "vidur"
SHARED = Path(os.environ.get("KVDOCTOR_SHARED_DATA", REPO.parent / "shared" / "data"))
DEFAULT_TRACE = SHARED / "traces" / "splitwise_conv.csv"
PROFILES = SHARED / "vidur-profiles"
BLOCKS = 3328
MAX_TOKENS = 4096
VIDUR_DEPS = ["numpy", "pandas", "scikit-learn", "wandb", "ddsketch", "plotly_express", "matplotlib", "seaborn",
              "fasteners", "click", "huggingface_hub", "pyyaml", "tqdm"]

PATCHED_MAIN = '''\
"""vidur.main with the 0.0.26 preemption fix (Request.restart resets per-stage counters)."""
from vidur.config import SimulationConfig
from vidur.entities import request as _req
from vidur.simulator import Simulator
from vidur.utils.random import set_seeds

_orig = _req.Request.restart


def _restart(self):
    _orig(self)
    self._num_stage_processed_tokens = 0
    self._is_prefill_stage_complete = False


_req.Request.restart = _restart

if __name__ == "__main__":
    config = SimulationConfig.create_from_cli_args()
    set_seeds(config.seed)
    Simulator(config).run()
'''


def _tail(text: str, n: int = 15) -> str:
    return "\n".join((text or "").strip().splitlines()[-n:])


def _timed(cmd: list[str], **kw) -> tuple[subprocess.CompletedProcess, float, float]:
    """Run a child; (result, wall s, CPU s of the child and its children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return r, wall, cpu


def ensure_vidur() -> tuple[Path | None, str]:
    py311 = shutil.which("python3.11") or sys.executable
    py = VENV / "bin" / "python"
    if not py.exists():
        r = subprocess.run([py311, "-m", "venv", str(VENV)], capture_output=True, text=True)
        if r.returncode:
            return None, "venv creation failed:\n" + _tail(r.stderr)
    chk = [str(py), "-c", "import vidur, importlib.metadata as m; print(m.version('vidur'))"]
    r = subprocess.run(chk, capture_output=True, text=True)
    if r.returncode:
        for args in (["--no-deps", "vidur==0.0.26"], VIDUR_DEPS):
            i = subprocess.run([str(py), "-m", "pip", "install", "-q", *args], capture_output=True, text=True)
            if i.returncode:
                return None, f"pip install {' '.join(args)} failed:\n" + _tail(i.stderr)
        r = subprocess.run(chk, capture_output=True, text=True)
        if r.returncode:
            return None, "vidur installed but does not import:\n" + _tail(r.stderr)
    (VENV / "vidur_main_patched.py").write_text(PATCHED_MAIN)
    return py, r.stdout.strip()


def make_hf_cache() -> None:
    """The shared profiles as an offline HF dataset cache (snapshot_download returns them)."""
    commit = "0" * 40

    def put(kind: str, repo: str, files: dict[str, Path], config: dict) -> None:
        org, name = repo.split("/")
        root = CACHE / "profiling_data" / kind / f"datasets--{org}--{name}"
        snap = root / "snapshots" / commit
        snap.mkdir(parents=True, exist_ok=True)
        (root / "refs").mkdir(exist_ok=True)
        (root / "refs" / "main").write_text(commit)
        for dest, src in files.items():
            out = snap / dest
            if not out.exists():
                with open(src, "rb") as f, lzma.open(str(out) + ".tmp", "wb", preset=1) as g:
                    g.write(f.read())
                os.replace(str(out) + ".tmp", out)
        (snap / "config.json").write_text(json.dumps(config))

    put("compute", "local/a100-llama-2-70b",
        {"mlp.csv.xz": PROFILES / "compute/a100/meta-llama/Llama-2-70b-hf/mlp.csv",
         "attention.csv.xz": PROFILES / "older/a100_attention.csv"},
        {"model": "meta-llama/Llama-2-70b-hf", "device_sku": "a100"})
    put("network", "local/a100-dgx",
        {"all_reduce.csv.xz": PROFILES / "network/a100_dgx/all_reduce.csv",
         "send_recv.csv.xz": PROFILES / "network/a100_dgx/send_recv.csv"},
        {"sku": "a100_dgx"})


def make_workload(trace: Path, n: int) -> tuple[Path, Path, list]:
    """The trace's requests, clipped as Vidur's trace_replay clips them (prompt + output <= 4096),
    in both tools' formats."""
    rows = []
    with trace.open() as f:
        for i, r in enumerate(csv.DictReader(f)):
            if n and i >= n:
                break
            p = max(1, int(float(r["num_prefill_tokens"])))
            o = max(1, int(float(r["num_decode_tokens"])))
            p -= max(0, p + o - MAX_TOKENS)
            rows.append([float(r["arrived_at"]), p, o])
    t0 = rows[0][0]
    for r in rows:
        r[0] -= t0
    OUT.mkdir(parents=True, exist_ok=True)
    kvd, vid = OUT / "workload.kvd.csv", OUT / "workload.vidur.csv"
    with kvd.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["arrived_at", "num_prefill_tokens", "num_decode_tokens"])
        w.writerows([[f"{t:.6f}", p, o] for t, p, o in rows])
    with vid.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["Date", "Time", "PromptTokenCount", "CompletionTokenCount"])
        w.writerows([["2023-08-21", f"{t:.6f}", p, o] for t, p, o in rows])
    return kvd, vid, rows


def vidur_cmd(py: Path, trace: Path, outdir: Path) -> list[str]:
    p = "--random_forrest_execution_time_predictor_config"
    return [
        str(py), str(VENV / "vidur_main_patched.py"),
        "--replica_config_model_name", "meta-llama/Llama-2-70b-hf",
        "--replica_config_device", "a100", "--replica_config_network_device", "a100_dgx",
        "--replica_config_tensor_parallel_size", "2", "--replica_config_num_pipeline_stages", "1",
        "--cluster_config_num_replicas", "1", "--replica_scheduler_config_type", "vllm",
        "--vllm_scheduler_config_batch_size_cap", "128", "--vllm_scheduler_config_max_tokens_in_batch", "4096",
        "--cache_config_block_size", "16", "--cache_config_num_blocks", str(BLOCKS),
        "--request_generator_config_type", "trace_replay",
        "--trace_request_generator_config_trace_file", str(trace),
        "--trace_request_generator_config_prefill_scale_factor", "1",
        "--trace_request_generator_config_decode_scale_factor", "1",
        "--trace_request_generator_config_time_scale_factor", "1",
        "--trace_request_generator_config_max_tokens", str(MAX_TOKENS),
        "--execution_time_predictor_config_type", "random_forrest",
        p + "_model_profiling_dataset", "local/a100-llama-2-70b",
        p + "_network_profiling_dataset", "local/a100-dgx",
        p + "_cache_dir", str(CACHE),
        p + "_prediction_max_tokens_per_request", str(MAX_TOKENS),
        p + "_num_estimators", "50", p + "_max_depth", "32", p + "_min_samples_split", "2",
        p + "_k_fold_cv_splits", "2", p + "_num_training_job_threads", "2",
        "--no-metrics_config_store_plots", "--no-metrics_config_enable_chrome_trace",
        "--metrics_config_store_token_completion_metrics",
        "--metrics_config_output_dir", str(outdir),
    ]


def kvd_cmd(trace: Path, req_out: Path) -> list[str]:
    return [sys.executable, "-m", "kvdoctor", "simulate", "--model", "meta-llama/Llama-2-70b-hf",
            "--gpu", "NVIDIA A100 80GB SXM", "--tensor-parallel-size", "2", "--max-num-seqs", "128",
            "--max-num-batched-tokens", "4096", "--no-enable-chunked-prefill", "--no-enable-prefix-caching",
            "--num-gpu-blocks-override", str(BLOCKS), "--max-model-len", str(MAX_TOKENS),
            "--trace", str(trace), "--requests-out", str(req_out), "--json", "--quiet"]


def _pct(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    k = (len(xs) - 1) * q
    i = int(k)
    j = min(i + 1, len(xs) - 1)
    return xs[i] + (xs[j] - xs[i]) * (k - i)


def summarize(rows_wl: list, per_req: list[tuple]) -> dict:
    """Same definitions for both tools, from per-request (idx, ttft, e2e, preemptions)."""
    done = [r for r in per_req if r[2] is not None]
    ttft = [r[1] for r in done]
    e2e = [r[2] for r in done]
    tpot = [(r[2] - r[1]) / (rows_wl[r[0]][2] - 1) for r in done if rows_wl[r[0]][2] > 1]
    last = max(rows_wl[r[0]][0] + r[2] for r in done)
    out_tok = sum(rows_wl[r[0]][2] for r in done)
    return {"requests": len(rows_wl), "completed": len(done), "preemptions": sum(r[3] for r in per_req),
            "ttft_p50_s": _pct(ttft, .5), "ttft_p99_s": _pct(ttft, .99), "tpot_p50_s": _pct(tpot, .5),
            "tpot_p99_s": _pct(tpot, .99), "e2e_p50_s": _pct(e2e, .5), "e2e_p99_s": _pct(e2e, .99),
            "output_tok_s": out_tok / max(last - rows_wl[0][0], 1e-9)}


def run_vidur(py: Path, trace: Path, rows: list, timeout: int) -> dict:
    # training: a 50-request run builds and caches the predictor (Vidur's cache key ignores the grid)
    train = None
    if not list(CACHE.glob("predictions/*/attn_decode.csv.xz")):
        tdir = OUT / "vidur_train"
        small = OUT / "train.vidur.csv"
        small.write_text("".join(trace.read_text().splitlines(True)[:51]))
        r, wall, cpu = _timed(vidur_cmd(py, small, tdir), timeout=timeout, cwd=str(OUT),
                              env=dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="disabled"))
        if r.returncode:
            return {"ok": False, "stage": "predictor training", "error": _tail(r.stderr or r.stdout, 12)}
        train = {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2)}
    outdir = OUT / "vidur_run"
    shutil.rmtree(outdir, ignore_errors=True)
    try:
        r, wall, cpu = _timed(vidur_cmd(py, trace, outdir), timeout=timeout, cwd=str(OUT),
                              env=dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="disabled"))
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout} s"}
    if r.returncode:
        return {"ok": False, "error": _tail(r.stderr or r.stdout, 12)}
    run_dir = sorted(p for p in outdir.iterdir() if p.is_dir())[-1]
    per_req = []
    with (run_dir / "request_metrics.csv").open() as f:
        for x in csv.DictReader(f):
            per_req.append((int(x["Request Id"]), float(x["prefill_e2e_time"]), float(x["request_e2e_time"]),
                            int(float(x["request_num_restarts"]))))
    return {"ok": True, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "training": train,
            "summary": summarize(rows, per_req)}


def run_kvd(trace: Path, rows: list) -> dict:
    req = OUT / "kvd_requests.csv"
    env = dict(os.environ, PYTHONPATH=str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    r, wall, cpu = _timed(kvd_cmd(trace, req), env=env)
    if r.returncode:
        return {"ok": False, "error": _tail(r.stderr or r.stdout, 12)}
    j = json.loads(r.stdout)["summary"]
    per_req = []
    with req.open() as f:
        for x in csv.DictReader(f):
            fin = x["status"] == "finished"
            per_req.append((int(x["request_id"]), float(x["ttft_s"]) if fin else None,
                            float(x["e2e_s"]) if fin else None, int(x["preemptions"] or 0)))
    return {"ok": True, "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "simulator_wall_s": round(j["wall_s"], 3),
            "summary": summarize(rows, per_req)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--n", type=int, default=0, help="first N requests of the trace (0: all, the 1-hour trace)")
    ap.add_argument("--timeout", type=int, default=2400)
    ap.add_argument("--skip-vidur", action="store_true")
    a = ap.parse_args(argv)
    if not a.trace.exists() or not PROFILES.exists():
        print(f"needs {a.trace} and {PROFILES} (KVDOCTOR_SHARED_DATA)", file=sys.stderr)
        return 2
    kvd_trace, vid_trace, rows = make_workload(a.trace, a.n)
    report = {"trace": str(a.trace), "requests": len(rows),
              "configuration": {"model": "meta-llama/Llama-2-70b-hf", "gpu": "A100-80GB SXM (DGX)", "tp": 2,
                                "max_num_seqs": 128, "max_num_batched_tokens": 4096, "num_gpu_blocks": BLOCKS,
                                "block_size": 16, "max_model_len": MAX_TOKENS, "chunked_prefill": False,
                                "prefix_caching": False},
              "kvdoctor": run_kvd(kvd_trace, rows)}
    if not a.skip_vidur:
        py, version = ensure_vidur()
        if py is None:
            report["vidur"] = {"ok": False, "error": version}
        else:
            make_hf_cache()
            report["vidur"] = {"version": version, **run_vidur(py, vid_trace, rows, a.timeout)}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT.parent / "vidur_compare.json").write_text(json.dumps(report, indent=2))
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
