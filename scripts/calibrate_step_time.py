#!/usr/bin/env python3
"""Fit the simulator's step-time coefficients on Vidur's real GPU kernel measurements.

Reads ../shared/data/vidur-profiles (or --profiles DIR):
  compute/{a100,a40,h100}/<org>/<model>/mlp.csv   per-operator times by token count and TP size
  network/*/{all_reduce,send_recv}.csv             collectives by size and GPU count
  older/a100_attention.csv                         decode/prefill attention kernels (one config)
  older/{a100,a40}_cpu_overheads.csv               per-step sampler / CPU costs by batch size

and writes src/kvdoctor/sim/coefficients.py (numbers only, imported by sim/steptime.py) plus a
markdown error report (--report FILE, pasted into docs/simulation.md).

The model (per GPU rank, times in ms):
  GEMM (qkv, o, up, down, lm_head):  c + softmax_q(bytes / (BW*eta_m), flops / (PEAK*eta_c))
  element-wise op (norms, rope, act, add, embedding): c_op + bytes_op / (BW*eta_op)
  attention: decode c + kv_bytes / (BW*eta_d) + per_seq * batch;
             prefill c + flops / (PEAK*eta_p)
  all-reduce / send-recv: c + bytes / bw   (per GPU family and GPU count)
  sampler (+ CPU when async scheduling is off): a + b * batch
Efficiencies are fitted against each GPU's datasheet bandwidth and dense BF16 peak, so GPUs
without profiles reuse the mean efficiencies ("generic").

Hold-out: one model per GPU is left out of the fit and the error is reported on it (per operator
and per step = all operators of one forward pass). Attention has a single profiled configuration,
so a seeded 25 % of its rows is held out instead.
"""

from __future__ import annotations

import argparse
import csv
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import least_squares

REPO = Path(__file__).resolve().parent.parent
DEFAULT_PROFILES = REPO.parent / "shared" / "data" / "vidur-profiles"
OUT = REPO / "src" / "kvdoctor" / "sim" / "coefficients.py"

# Datasheet figures (GB/s, dense BF16 TFLOPS) of the profiled parts; the catalog has the same
# numbers (catalog/data/gpus.json). Vidur profiled A100 80GB SXM, A40 and H100 SXM.
GPUS = {
    "a100": {"catalog": "NVIDIA A100 80GB SXM", "bw": 2039.0, "peak": 312.0},
    "a40": {"catalog": "NVIDIA A40", "bw": 696.0, "peak": 149.7},
    "h100": {"catalog": "NVIDIA H100 SXM", "bw": 3350.0, "peak": 989.0},
}
# num_hidden_layers of the profiled models (their HF config.json)
LAYERS = {
    "meta-llama/Llama-2-7b-hf": 32, "meta-llama/Llama-2-70b-hf": 80, "meta-llama/Meta-Llama-3-8B": 32,
    "meta-llama/Meta-Llama-3-70B": 80, "Qwen/Qwen-72B": 80, "internlm/internlm-20b": 60,
    "codellama/CodeLlama-34b-Instruct-hf": 48, "microsoft/phi-2": 32,
}
HOLD_OUT = {"h100": "meta-llama/Llama-2-7b-hf", "a100": "meta-llama/Meta-Llama-3-8B", "a40": "internlm/internlm-20b"}
GEMMS = ("attn_pre_proj", "attn_post_proj", "mlp_up_proj", "mlp_down_proj")
ELEMWISE = ("input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add", "emb")
PER_LAYER = GEMMS + ELEMWISE[:-1]
DT = 2.0  # bf16 bytes


def gemm_params(op, h, nh, nkv, inter, gated, tp):
    hd = h / nh
    return {
        "attn_pre_proj": h * (nh + 2 * nkv) * hd / tp,
        "attn_post_proj": h * h / tp,
        "mlp_up_proj": h * inter * (2 if gated else 1) / tp,
        "mlp_down_proj": inter * h / tp,
    }[op]


def elemwise_bytes(op, T, h, nh, nkv, inter, gated, tp):
    hd = h / nh
    return {
        "input_layernorm": 2 * T * h * DT,  # read x, write y
        "post_attention_layernorm": 2 * T * h * DT,
        "attn_rope": 2 * T * (nh + nkv) * hd / tp * DT,  # q and k rotated in place
        "mlp_act": (3 if gated else 2) * T * inter / tp * DT,  # silu(gate)*up: read 2, write 1
        "add": 3 * T * h * DT,
        "emb": 2 * T * h * DT,
    }[op]


def soft_roofline(m, f, q):
    # smooth max of the memory and compute times; q -> inf is the hard roofline
    mx = np.maximum(m, f)
    return mx * (1.0 + (np.minimum(m, f) / mx) ** q) ** (1.0 / q)


def gemm_time(p, params, T, bw, peak):
    c, eta_m, eta_c, q = p
    m = params * DT / (bw * 1e9 * eta_m) * 1e3
    f = 2 * params * T / (peak * 1e12 * eta_c) * 1e3
    return c + soft_roofline(m, f, q)


def ew_time(p, nbytes, bw):
    c, eta = p
    return c + nbytes / (bw * 1e9 * eta) * 1e3


def load_compute(root: Path):
    rows = []
    for gpu in GPUS:
        for f in sorted((root / "compute" / gpu).glob("*/*/mlp.csv")):
            model = f"{f.parent.parent.name}/{f.parent.name}"
            with f.open() as fh:
                for r in csv.DictReader(fh):
                    rows.append({
                        "gpu": gpu, "model": model,
                        "h": int(r["n_embd"]), "nh": int(r["n_head"]), "nkv": int(r["n_kv_head"]),
                        "inter": int(r["n_expanded_embd"]), "gated": r["use_gated_mlp"] == "True",
                        "T": int(r["num_tokens"]), "tp": int(r["num_tensor_parallel_workers"]),
                        # phi-2 (parallel attention) has no post_attention_layernorm column
                        **{op: float(r[f"time_stats.{op}.median"]) if f"time_stats.{op}.median" in r else None
                           for op in GEMMS + ELEMWISE},
                    })
    return rows


def rel_err(pred, meas):
    return np.abs(pred - meas) / meas


def fit_gemm(rows, gpu):
    bw, peak = GPUS[gpu]["bw"], GPUS[gpu]["peak"]
    P, T, Y = [], [], []
    for r in rows:
        for op in GEMMS:
            P.append(gemm_params(op, r["h"], r["nh"], r["nkv"], r["inter"], r["gated"], r["tp"]))
            T.append(r["T"])
            Y.append(r[op])
    P, T, Y = map(np.array, (P, T, Y))

    def resid(x):
        return np.log(gemm_time((x[0], x[1], x[2], x[3]), P, T, bw, peak) / Y)

    sol = least_squares(resid, x0=[0.005, 0.7, 0.6, 4.0], bounds=([0.0, 0.05, 0.05, 1.0], [0.1, 1.2, 1.2, 50.0]))
    return [float(v) for v in sol.x]


def fit_elemwise(rows, gpu, op):
    bw = GPUS[gpu]["bw"]
    rows = [r for r in rows if r[op] is not None]
    B = np.array([elemwise_bytes(op, r["T"], r["h"], r["nh"], r["nkv"], r["inter"], r["gated"], r["tp"]) for r in rows])
    Y = np.array([r[op] for r in rows])

    def resid(x):
        return np.log(ew_time(x, B, bw) / Y)

    sol = least_squares(resid, x0=[0.005, 0.5], bounds=([0.0, 0.01], [0.5, 2.0]))
    return [float(v) for v in sol.x]


def predict_op(coef, gpu, op, r):
    bw, peak = GPUS[gpu]["bw"], GPUS[gpu]["peak"]
    if op in GEMMS:
        return gemm_time(coef["gemm"], gemm_params(op, r["h"], r["nh"], r["nkv"], r["inter"], r["gated"], r["tp"]),
                         r["T"], bw, peak)
    return ew_time(coef["ew"][op], elemwise_bytes(op, r["T"], r["h"], r["nh"], r["nkv"], r["inter"], r["gated"], r["tp"]), bw)


def step_measured(r, L):
    return L * sum(r[op] for op in PER_LAYER if r[op] is not None) + r["emb"]


def step_predicted(c, gpu, r, L):
    return L * sum(predict_op(c, gpu, op, r) for op in PER_LAYER if r[op] is not None) + predict_op(c, gpu, "emb", r)


def fit_attention(root: Path, seed=0):
    """Decode: KV bytes read; prefill: causal attention FLOPs. A100 only (one config, TP 2)."""
    bw, peak = GPUS["a100"]["bw"], GPUS["a100"]["peak"]
    dec, pre = [], []
    with (root / "older" / "a100_attention.csv").open() as fh:
        for r in csv.DictReader(fh):
            h, nh, nkv, tp = int(r["n_embd"]), int(r["n_q_head"]), int(r["n_kv_head"]), int(r["num_tensor_parallel_workers"])
            hd = h / nh
            extra = float(r["time_stats.attn_input_reshape.median"] or 0) + float(r["time_stats.attn_output_reshape.median"] or 0)
            b, kv, chunk = int(r["batch_size"]), int(r["kv_cache_size"]), int(r["prefill_chunk_size"])
            if r["is_prefill"] == "True":
                t = float(r["time_stats.attn_prefill.median"]) + extra
                flops = 4 * (nh / tp) * hd * b * chunk * (kv + (chunk + 1) / 2)
                pre.append((flops, 0.0, t))
            else:
                t = float(r["time_stats.attn_decode.median"]) + extra
                kv_bytes = b * kv * 2 * (nkv / tp) * hd * DT
                dec.append((kv_bytes, b, t))
    rng = np.random.default_rng(seed)
    dec, pre = np.array(dec), np.array(pre)
    dmask = rng.random(len(dec)) < 0.25
    pmask = rng.random(len(pre)) < 0.25

    def dmodel(x, d):
        return x[0] + d[:, 0] / (bw * 1e9 * x[1]) * 1e3 + x[2] * d[:, 1]

    def pmodel(x, p):
        return x[0] + p[:, 0] / (peak * 1e12 * x[1]) * 1e3

    ds = least_squares(lambda x: np.log(dmodel(x, dec[~dmask]) / dec[~dmask, 2]), [0.01, 0.5, 0.0001],
                       bounds=([0, 0.01, 0], [1, 2, 0.1]))
    ps = least_squares(lambda x: np.log(pmodel(x, pre[~pmask]) / pre[~pmask, 2]), [0.01, 0.3],
                       bounds=([0, 0.01], [1, 2]))
    derr = rel_err(dmodel(ds.x, dec[dmask]), dec[dmask, 2])
    perr = rel_err(pmodel(ps.x, pre[pmask]), pre[pmask, 2])
    return ({"decode": [float(v) for v in ds.x], "prefill": [float(v) for v in ps.x]},
            {"attention decode": derr, "attention prefill": perr})


def fit_network(root: Path):
    """c + bytes/bw per GPU family, collective and GPU count, intra-node rows only."""
    out, errs = {}, {}
    for d in sorted((root / "network").iterdir()):
        fam = d.name.split("_")[0]
        for f in sorted(d.glob("*.csv")):
            groups = defaultdict(list)
            with f.open() as fh:
                for r in csv.DictReader(fh):
                    coll = r["collective"]
                    nw, dpn = int(r["num_workers"]), int(r["devices_per_node"])
                    if coll == "all_reduce" and dpn != nw:
                        continue  # cross-node all-reduce: not TP inside one server
                    if coll == "send_recv" and dpn != 2:
                        continue  # pipeline stages inside one server
                    groups[(coll, nw)].append((float(r["size"]), float(r[f"time_stats.{coll}.median"])))
            for (coll, nw), pts in groups.items():
                a = np.array(pts)
                a = a[a[:, 1] > 0]
                sol = least_squares(lambda x: np.log((x[0] + a[:, 0] / (x[1] * 1e9) * 1e3) / a[:, 1]), [0.01, 100.0],
                                    bounds=([0, 0.1], [1, 5000]))
                key = f"{fam}:{coll}:{nw}:{d.name}"
                out[key] = [float(v) for v in sol.x]
                errs[key] = rel_err(sol.x[0] + a[:, 0] / (sol.x[1] * 1e9) * 1e3, a[:, 1])
    # prefer the DGX (NVSwitch) topology when a family has both
    best = {}
    for key, v in sorted(out.items(), key=lambda kv: "dgx" not in kv[0]):
        fam, coll, nw, _ = key.split(":")
        best.setdefault(f"{fam}:{coll}:{nw}", v)
    return best, errs


def fit_overheads(root: Path):
    """Per-step costs by batch size: the sampler always; scheduling/input prep/output processing
    only when not overlapped (async scheduling off)."""
    out = {}
    for gpu in ("a100", "a40"):
        pts = []
        with (root / "older" / f"{gpu}_cpu_overheads.csv").open() as fh:
            for r in csv.DictReader(fh):
                b = int(r["batch_size"])
                samp = float(r["sampler_e2e_median"])
                cpu = float(r["schedule_median"]) + float(r["prepare_inputs_e2e_median"]) + float(r["process_model_outputs_median"])
                pts.append((b, samp, cpu))
        a = np.array(pts)
        A = np.vstack([np.ones(len(a)), a[:, 0]]).T
        samp = np.linalg.lstsq(A, a[:, 1], rcond=None)[0]
        cpu = np.linalg.lstsq(A, a[:, 2], rcond=None)[0]
        out[gpu] = {"sampler": [max(0.0, float(samp[0])), max(0.0, float(samp[1]))],
                    "cpu": [max(0.0, float(cpu[0])), max(0.0, float(cpu[1]))]}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profiles", type=Path, default=DEFAULT_PROFILES)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--report", type=Path, default=None, help="write the markdown error report here")
    args = ap.parse_args(argv)
    if not (args.profiles / "compute").is_dir():
        print(f"profiles not found: {args.profiles}", file=sys.stderr)
        return 2
    rows = load_compute(args.profiles)
    coef = {}
    report = ["| GPU | held-out model | operator | rows | median error | p90 error |", "|---|---|---|---|---|---|"]
    step_lines = ["| GPU | held-out model | steps (TP x token counts) | median error | p90 error | max error |",
                  "|---|---|---|---|---|---|"]
    all_held_op, all_held_step = [], []
    for gpu in GPUS:
        train = [r for r in rows if r["gpu"] == gpu and r["model"] != HOLD_OUT[gpu]]
        test = [r for r in rows if r["gpu"] == gpu and r["model"] == HOLD_OUT[gpu]]
        c = {"gemm": fit_gemm(train, gpu), "ew": {op: fit_elemwise(train, gpu, op) for op in ELEMWISE}}
        coef[gpu] = c
        for op in GEMMS + ELEMWISE:
            t_op = [r for r in test if r[op] is not None]
            e = rel_err(np.array([predict_op(c, gpu, op, r) for r in t_op]), np.array([r[op] for r in t_op]))
            all_held_op.append(e)
            report.append(f"| {gpu} | {HOLD_OUT[gpu]} | {op} | {len(e)} | {100 * np.median(e):.1f} % | {100 * np.quantile(e, 0.9):.1f} % |")
        L = LAYERS[HOLD_OUT[gpu]]
        meas = np.array([step_measured(r, L) for r in test])
        pred = np.array([step_predicted(c, gpu, r, L) for r in test])
        e = rel_err(pred, meas)
        all_held_step.append(e)
        step_lines.append(f"| {gpu} | {HOLD_OUT[gpu]} | {len(e)} | {100 * np.median(e):.1f} % | {100 * np.quantile(e, 0.9):.1f} % | {100 * e.max():.1f} % |")
    # generic efficiencies for GPUs without profiles: the mean over the three fits
    coef["generic"] = {
        "gemm": [float(np.mean([coef[g]["gemm"][i] for g in GPUS])) for i in range(4)],
        "ew": {op: [float(np.mean([coef[g]["ew"][op][i] for g in GPUS])) for i in range(2)] for op in ELEMWISE},
    }
    # the generic set, scored on every GPU's held-out model (what an unprofiled GPU can expect)
    gen_err = []
    for gpu in GPUS:
        test = [r for r in rows if r["gpu"] == gpu and r["model"] == HOLD_OUT[gpu]]
        L = LAYERS[HOLD_OUT[gpu]]
        meas = np.array([step_measured(r, L) for r in test])
        pred = np.array([step_predicted(coef["generic"], gpu, r, L) for r in test])
        gen_err.append(rel_err(pred, meas))
    # leave one GPU out: the mean of the other two GPUs' coefficients, scored on the left-out GPU's
    # held-out model -- what a GPU without profiles (L40S, B200 ...) can expect from "generic"
    logo_lines = []
    logo_all = []
    for gpu in GPUS:
        others = [g for g in GPUS if g != gpu]
        c = {"gemm": [float(np.mean([coef[g]["gemm"][i] for g in others])) for i in range(4)],
             "ew": {op: [float(np.mean([coef[g]["ew"][op][i] for g in others])) for i in range(2)] for op in ELEMWISE}}
        test = [r for r in rows if r["gpu"] == gpu and r["model"] == HOLD_OUT[gpu]]
        L = LAYERS[HOLD_OUT[gpu]]
        e = rel_err(np.array([step_predicted(c, gpu, r, L) for r in test]), np.array([step_measured(r, L) for r in test]))
        logo_all.append(e)
        logo_lines.append(f"| {gpu} (coefficients of {' + '.join(others)}) | {HOLD_OUT[gpu]} | {len(e)} | "
                          f"{100 * np.median(e):.1f} % | {100 * np.quantile(e, 0.9):.1f} % | {100 * e.max():.1f} % |")
    attn, attn_err = fit_attention(args.profiles)
    net, net_err = fit_network(args.profiles)
    ovh = fit_overheads(args.profiles)
    op_all = np.concatenate(all_held_op)
    step_all = np.concatenate(all_held_step)
    gen_all = np.concatenate(gen_err)
    summary = {
        "held_out_operator_median_err": float(np.median(op_all)),
        "held_out_step_median_err": float(np.median(step_all)),
        "generic_step_median_err": float(np.median(gen_all)),
        "leave_one_gpu_out_step_median_err": float(np.median(np.concatenate(logo_all))),
        "attention_decode_median_err": float(np.median(attn_err["attention decode"])),
        "attention_prefill_median_err": float(np.median(attn_err["attention prefill"])),
        "hold_out": HOLD_OUT,
    }
    text = [
        '"""Fitted step-time coefficients. GENERATED by scripts/calibrate_step_time.py — do not edit.',
        "",
        "Source: Vidur GPU kernel profiles (../shared/data/vidur-profiles). Times in ms, bandwidths in GB/s.",
        "gemm = [c_ms, eta_mem, eta_compute, softmax_q]; ew[op] = [c_ms, eta_mem];",
        "attention decode = [c_ms, eta_mem, per_seq_ms], prefill = [c_ms, eta_compute] (A100);",
        "network[family:collective:gpus] = [c_ms, GB/s]; overheads[gpu] = sampler/cpu [a_ms, b_ms_per_request].",
        '"""',
        "",
        f"GPUS = {GPUS!r}",
        f"COEFFS = {coef!r}",
        f"ATTENTION = {attn!r}",
        f"NETWORK = {net!r}",
        f"OVERHEADS = {ovh!r}",
        f"FIT_SUMMARY = {summary!r}",
        "",
    ]
    # the serving-level block (scripts/fit_serving.py, fitted on top of these kernel terms) is kept
    old = args.out.read_text() if args.out.exists() else ""
    tail = old[old.index("# Serving-level corrections"):] if "# Serving-level corrections" in old else ""
    args.out.write_text("\n".join(text) + ("\n" + tail if tail else ""))
    md = ["### Held-out error per operator", "", *report, "",
          "### Held-out error per step (all operators of one forward pass: layers x per-layer ops + embedding)", "",
          *step_lines,
          f"| all | | {len(step_all)} | {100 * np.median(step_all):.1f} % | {100 * np.quantile(step_all, 0.9):.1f} % | {100 * step_all.max():.1f} % |",
          f"| generic coefficients (unprofiled GPUs) | | {len(gen_all)} | {100 * np.median(gen_all):.1f} % | {100 * np.quantile(gen_all, 0.9):.1f} % | {100 * gen_all.max():.1f} % |",
          "", "### Leave one GPU out (generic coefficients for a GPU without profiles), per step", "",
          "| GPU left out | held-out model | steps | median error | p90 error | max error |", "|---|---|---|---|---|---|",
          *logo_lines,
          "", "### Attention (A100, 25 % of rows held out) and collectives (fit error)", "",
          "| term | rows | median error | p90 error |", "|---|---|---|---|"]
    for k, e in attn_err.items():
        md.append(f"| {k} | {len(e)} | {100 * np.median(e):.1f} % | {100 * np.quantile(e, 0.9):.1f} % |")
    for k, e in sorted(net_err.items()):
        md.append(f"| {k} | {len(e)} | {100 * np.median(e):.1f} % | {100 * np.quantile(e, 0.9):.1f} % |")
    md.append("")
    md.append(f"Held-out operator median error over all GPUs: {100 * np.median(op_all):.1f} %; "
              f"held-out step median error: {100 * np.median(step_all):.1f} %.")
    if args.report:
        args.report.write_text("\n".join(md) + "\n")
    print("\n".join(md))
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
