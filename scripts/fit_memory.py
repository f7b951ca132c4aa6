#!/usr/bin/env python
"""Fit the empirical memory constants of ``kvdoctor.ledger.memory`` on the public vLLM measurements.

Reads ``../shared/data/real/vllm_measured_memory_h100.tsv`` and ``kv_capacity_cases.jsonl`` directly,
fits (robust medians, alternating on which term dominates the activation peak):

* ``ACT_FWD_COEF``      forward peak = c × max_num_batched_tokens × ffn_width/TP × dtype bytes
* ``SAMPLER_K_FULL``    dummy-sampler peak = k × rows × vocab × 4 B (+ kept hidden rows); 0.11, v0, ≥0.21
* ``SAMPLER_K_LIGHT``   the same for the lighter 0.12–0.20 dummy sampler (0.19 measurements)
* ``NON_TORCH_GIB``     non-torch growth by era × {single GPU, TP>1, PP-only}
* ``CUDAGRAPH_BYTES_PER_SIZE_LAYER_HIDDEN``  deducted CUDA-graph estimate per capture size × layer × hidden

then writes ``src/kvdoctor/ledger/fitted.py`` (plain numbers) and the residual tables of
``docs/ledger.md`` (between the ``<!-- fit:begin -->`` / ``<!-- fit:end -->`` markers), and prints both.

Usage: ``python scripts/fit_memory.py [--shared ../shared/data] [--check]`` (``--check``: print only).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from kvdoctor.engine.config import EngineConfig  # noqa: E402
from kvdoctor.engine.defaults import resolve  # noqa: E402
from kvdoctor.ledger import fitted, memory  # noqa: E402
from kvdoctor.ledger.build import build_ledger  # noqa: E402

GiB = 1 << 30

# ------------------------------------------------------------------------------------------------
# Per-case annotations: what the public source shows but the data file leaves as null or free text.
# Every entry says why. Cases not listed and lacking a catalog model / GPU size / version are excluded.

ANNOTATE: dict[str, dict] = {
    "kv001": {"version": "0.6.3", "why": "v0 single-line 'Memory profiling results' format (~0.6.3-0.6.4)",
              "activation_gib": 17.06 - 14.9888, "weights_gib": 14.9888},
    "kv015": {"gpu_total_gib": 79.25, "why": "A100 variant inferred: 36.56 GiB KV cannot fit a 40 GB card"},
    "kv017": {"version": "0.6.6", "hf_id": "Qwen/Qwen2.5-0.5B", "max_model_len": 32768,
              "why": "v0 worker.py three-line format (~0.6.6-0.10); fine-tune of Qwen2.5-0.5B (same architecture); "
                     "length from the concurrency line"},
    "kv050": {"version": "0.2.4", "hf_id": "meta-llama/Llama-2-7b-hf", "gpu_total_gib": 79.15,
              "why": "maintainer summary, Dec 2023 (v0.2.x); A100-80GB"},
    "kv051": {"version": "0.2.4", "hf_id": "meta-llama/Llama-2-70b-hf", "gpu_total_gib": 79.15,
              "why": "maintainer summary, Dec 2023 (v0.2.x); A100-80GB"},
    "kv051": {"exclude": "unexplained 12.7 GiB gap at TP=4 in a v0.2-era maintainer summary: the PR being "
                          "summarised changed how peak memory is profiled and does not say which side of the change "
                          "the 20,865 blocks come from"},
    "kv004": {"version": "0.6.5", "hf_id": "meta-llama/Meta-Llama-3-8B-Instruct",
              "exclude": "measured on PR #10511's own development build (the PR changed non-torch profiling); its "
                         "TP=1 non-torch 1.79 GiB (TP=2: 3.58 GiB) appears in no release log"},
    "kv021": {"exclude": "figures typed in a commenter's summary table (the KV figure is their own 'estimated "
                         "budget'), not log lines; start-up failed"},
    "kv041": {"version": "0.10.1", "hf_id": "openai/gpt-oss-120b", "gpu_total_gib": 79.19,
              "exclude": "the MXFP4 MoE backend fell back to Marlin in this thread (kv042, same thread and GPU, logs "
                         "65.97 GiB weights 'Marlin weight-only FP4 fallback on H100'), an environment fact the "
                         "configuration does not carry; with Marlin weights the budget closes to 0.05 GiB"},
}

# CUDA-graph pool with a known model: (case, what, layers, hidden, capture sizes, GiB). No public log of a
# catalog model shows the deducted *estimate*, so these are actual captures used as its proxy (vLLM
# logs the two within ~0.04 GiB). The only two public points; assumptions in docs/ledger.md.
CG_POINTS = [
    ("kv030", "Llama-3.1-8B (weights 14.9889 GiB identify it), ~0.11 API defaults: 51 capture sizes", 32, 4096,
     51, 0.65),
    ("kv020", "gemma-3-4b-it text stack, offline defaults on a 178 GiB SM100 card; ASSUMPTION capture cap 1024 "
              "(83 sizes)", 34, 2560, 83, 0.65),
]


def _gib_text(v) -> float | None:
    if v in (None, ""):
        return None
    t = str(v).replace(",", "")
    num = "".join(ch for ch in t.split("GiB")[0].split("MiB")[0] if ch.isdigit() or ch == ".")
    if not num:
        return None
    f = float(num)
    return f / 1024 if "MiB" in t else f


def load_cases(shared: Path) -> list[dict]:
    cases: list[dict] = []
    tsv = (shared / "real" / "vllm_measured_memory_h100.tsv").read_text().splitlines()
    head = tsv[0].split("\t")
    for i, line in enumerate(tsv[1:], start=1):
        r = dict(zip(head, line.split("\t")))
        src = r["source"]
        version = "0.11.0" if "v0.11.0" in src else ("0.19.0" if "v0.19.0" in src else None)
        total = 79.18 if "79.18" in src else 79.19
        util = float(r["gpu_memory_utilization"].split()[0].rstrip("?"))
        label = r["model_label"]
        c = {
            "id": f"h100-{i:02d}", "label": label, "hf_id": r["hf_id"], "version": version, "total_gib": total,
            "util": util, "tp": int(r["tp"]), "pp": int(r["pp"]), "max_model_len": int(r["max_model_len"]),
            "dtype": "float32" if "float32" in label else None,
            "quantization": "fp8" if "--quantization fp8" in label else None,
            "block_size": 128 if "block-size=128" in src else None,
            "weights": _f(r["weights_GiB"]), "activation": _f(r["activation_peak_GiB"]),
            "non_torch": _f(r["non_torch_GiB"]), "cudagraph": _f(r["cuda_graph_GiB"]),
            "kv": _f(r["kv_cache_GiB"]), "tokens": _i(r["kv_cache_tokens"]),
            "util_inferred": "inferred" in r["gpu_memory_utilization"],
            "source": "tsv", "notes": r["notes"], "gpu": "H100",
        }
        a = TSV_ANNOTATE.get(c["id"], {})
        if a:
            c["util"], c["annotation"] = a["util"], a["why"]
        cases.append(c)
    for line in (shared / "real" / "kv_capacity_cases.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        a = ANNOTATE.get(r["case_id"], {})
        c = {
            "id": r["case_id"], "label": r["model"] or "?", "hf_id": a.get("hf_id", (r["model"] or "").split(" ")[0]),
            "version": a.get("version", r["vllm_version"]),
            "total_gib": a.get("gpu_total_gib", _gib_text(r["gpu_total_memory"])),
            "util": r["gpu_memory_utilization"], "tp": r["tensor_parallel_size"] or 1,
            "pp": r["pipeline_parallel_size"] or 1, "max_model_len": a.get("max_model_len", r["max_model_len"]),
            "max_num_seqs": r["max_num_seqs"], "max_num_batched_tokens": r["max_num_batched_tokens"],
            "dtype": r["dtype"], "kv_cache_dtype": r["kv_cache_dtype"], "quantization": None,
            "block_size": r["block_size"], "enforce_eager": r["enforce_eager"],
            "weights": a.get("weights_gib", r["weights_gib"]),
            "activation": a.get("activation_gib", r["activation_peak_gib"]),
            "non_torch": r["non_torch_gib"], "cudagraph": r["cudagraph_gib"], "kv": r["kv_cache_gib"],
            "blocks": r["num_gpu_blocks"], "tokens": r["kv_cache_tokens"], "failed": r["startup_failed"],
            "max_concurrency": r["max_concurrency"],
            "source": "jsonl", "notes": r["notes"], "annotation": a.get("why"), "gpu": r["gpu"] or "",
            "exclude": a.get("exclude"),
        }
        cases.append(c)
    return cases


def _f(v: str) -> float | None:
    return float(v) if v not in ("", None) else None


def _i(v: str) -> int | None:
    return int(v) if v not in ("", None) else None


def load_shape(hf_id: str, shared: Path):
    """The catalog's shape when the catalog has the model; else the shared config.json (same parser)."""
    try:
        from kvdoctor.catalog.models import lookup_model

        return lookup_model(hf_id)
    except ImportError:
        pass
    except Exception:
        return None
    from kvdoctor.ledger.shape import shape_from_hf_config

    path = shared / "models" / (hf_id.replace("/", "__") + ".json")
    if not hf_id or "/" not in hf_id or not path.exists():
        return None
    return shape_from_hf_config(json.loads(path.read_text()), hf_id)


TSV_ANNOTATE = {
    "h100-02": {"util": 0.95, "why": "weights + activation + non-torch + KV = 75.22 GiB = 0.95 × 79.18: the run used "
                                    "0.95, not the 0.9 the table's column says"},
}


def exclusion(c: dict, shape) -> str | None:
    if c.get("exclude"):
        return c["exclude"]
    if "CAVEAT" in (c.get("notes") or ""):
        return "fork or patched vLLM build (CAVEAT in the source)"
    if shape is None:
        return "model not in the catalog (or not named in the excerpt)"
    if c["total_gib"] is None:
        return "GPU total memory not known"
    if c["version"] is None:
        return "vLLM version not known"
    if shape.is_multimodal and any("ConditionalGeneration" in a for a in shape.architectures):
        return "multimodal: encoder profiling not modelled"
    return None


def engine_for(c: dict, shape, gpu):
    cfg = EngineConfig(
        max_model_len=c.get("max_model_len"), gpu_memory_utilization=c["util"] if isinstance(c["util"], float)
        else None, tensor_parallel_size=c["tp"], pipeline_parallel_size=c["pp"], dtype=c.get("dtype"),
        quantization=c.get("quantization"), max_num_seqs=c.get("max_num_seqs"),
        max_num_batched_tokens=c.get("max_num_batched_tokens"), block_size=c.get("block_size"),
        kv_cache_dtype=c.get("kv_cache_dtype"), enforce_eager=c.get("enforce_eager"),
    )
    return resolve(cfg, shape, gpu, version=c["version"], usage="api")


def gpu_ns(name: str, total_gib: float):
    # The measured total (torch's figure in the log) beats the catalog's; the name picks vLLM's batch tier.
    cc = None
    try:
        from kvdoctor.catalog.gpus import lookup_gpu

        cc = lookup_gpu(name).compute_capability if name else None
    except Exception:  # not in the catalog (or catalog absent): fall back to the name's generation
        for key, val in (("H100", (9, 0)), ("H200", (9, 0)), ("A100", (8, 0)), ("3090", (8, 6)), ("L40S", (8, 9)),
                         ("B200", (10, 0))):
            if key in name:
                cc = val
    from kvdoctor.facts import GpuSpec

    # A typed spec with only what the case shows (no NVLink figure: the defaults read it as PCIe,
    # as the duck-typed namespace this replaced did).
    return GpuSpec(name=name or f"{total_gib:.2f} GiB GPU", aliases=(), memory_bytes=int(total_gib * GiB),
                   memory_source="measured: the case's torch total", compute_capability=cc)


# ------------------------------------------------------------------------------------------------
# Fit-split start-up logs (tests/fixtures/startup_logs/cases.json, split fixed before tuning): their
# measured non-torch (by interconnect) and v0 whole-prompt forward peaks. Held-out logs never enter here.


def startup_fit_points() -> tuple[list[tuple[str, str, float]], list[tuple[str, float, float]]]:
    """([(era, non-torch key, GiB)], [(case id, measured activation bytes, forward unit bytes)])."""
    from kvdoctor.cli.common import resolve_inputs
    from kvdoctor.engine.version import non_torch_era_of

    sys.path.insert(0, str(REPO / "scripts"))
    import startup_logs_eval as sle

    nts, fwd = [], []
    for c in sle.load_cases():
        if c["split"] != "fit" or c.get("config_alone"):
            continue
        inputs = resolve_inputs(sle._opts(c, with_log=True))
        f, res, shape = inputs.startup, inputs.resolved, inputs.shape
        tr = res.traits
        era = non_torch_era_of(tr.version.triple, tr.engine)
        if f.non_torch_bytes is not None:
            nts.append((era, memory.non_torch_key(res.tensor_parallel_size, res.pipeline_parallel_size,
                                                  res.interconnect), f.non_torch_bytes / GiB))
        act = f.activation_bytes
        if act is None and f.torch_peak_bytes and f.weights_bytes:
            act = f.torch_peak_bytes - f.weights_bytes  # v0 single-line format: peak includes the weights
        if act and tr.engine == "v0":
            db = memory.dtype_bytes(res.dtype)
            unit = res.max_num_batched_tokens * (memory.ffn_width(shape) // res.tensor_parallel_size) * db
            samp = (fitted.SAMPLER_K_FULL * min(res.max_num_seqs, res.max_num_batched_tokens) * shape.vocab_size * 4
                    + res.max_num_batched_tokens * shape.hidden_size * db)
            if unit * fitted.ACT_FWD_COEF_V0 > samp:  # only runs whose whole-prompt forward is the peak
                fwd.append((c["id"], act, unit))
    return nts, fwd


def _pcie_gpu(name: str) -> bool:
    """TP over PCIe: a catalog GPU without NVLink (custom all-reduce off), by the case's GPU name."""
    try:
        from kvdoctor.catalog.gpus import lookup_gpu

        return bool(name) and not lookup_gpu(name).nvlink_gbps
    except Exception:  # not in the catalog: the data's H100/A100 runs are NVLink machines
        return False


def fit(cases: list[dict], shared: Path) -> tuple[dict, list[dict]]:
    rows = []
    for c in cases:
        shape = load_shape(c["hf_id"], shared) if c["hf_id"] else None
        why = exclusion(c, shape)
        c["excluded"] = why
        if why:
            continue
        gpu = gpu_ns(c.get("gpu", ""), c["total_gib"])
        try:
            res = engine_for(c, shape, gpu)
        except Exception as exc:  # an engine vLLM itself would reject: report, don't fit
            c["excluded"] = f"configuration rejected: {exc}"
            continue
        c["_shape"], c["_gpu"], c["_res"] = shape, gpu, res
        rows.append(c)

    # --- activation: alternate between "which term dominates" and robust medians
    consts = {"fwd": fitted.ACT_FWD_COEF, "full": fitted.SAMPLER_K_FULL, "light": fitted.SAMPLER_K_LIGHT}
    nt_extra, fwd_v0_pts = startup_fit_points()
    pts = []
    for c in rows:
        if c.get("activation") is None:
            continue
        res, shape = c["_res"], c["_shape"]
        db = memory.dtype_bytes(res.dtype)
        fwd_unit = res.max_num_batched_tokens * (memory.ffn_width(shape) // res.tensor_parallel_size) * db
        rows_ = min(res.max_num_seqs, res.max_num_batched_tokens)
        samp_unit = rows_ * shape.vocab_size * 4
        kept = res.max_num_batched_tokens * shape.hidden_size * db
        regime = memory.sampler_regime(res.traits.version, res.traits.engine)
        if res.traits.engine == "v0" and fwd_unit * fitted.ACT_FWD_COEF_V0 > consts[regime] * samp_unit + kept:
            # v0 without chunked prefill profiles one whole max_model_len prompt: its own coefficient.
            fwd_v0_pts.append((c["id"], c["activation"] * GiB, fwd_unit))
            continue
        pts.append((c, c["activation"] * GiB, fwd_unit, samp_unit, kept, regime, res.pipeline_parallel_size == 1))
    for _ in range(8):
        fwd_r, samp_r = [], {"full": [], "light": []}
        for c, meas, fu, su, kept, regime, last in pts:
            f = consts["fwd"] * fu
            s = consts[regime] * su + kept if last else -1
            if not last or f > s:
                fwd_r.append(meas / fu)
            else:
                samp_r[regime].append((meas - kept) / su)
        consts["fwd"] = statistics.median(fwd_r) if fwd_r else consts["fwd"]
        for k in ("full", "light"):
            if samp_r[k]:
                consts[k] = statistics.median(samp_r[k])

    # --- non-torch by era × parallel kind. It does not depend on the model, so runs whose model is not in
    # the catalog still count (version and layout known, upstream vLLM only).
    from kvdoctor.engine.version import traits as _traits

    nt: dict[str, dict[str, list[float]]] = {}
    for c in cases:
        if c.get("non_torch") is None or not c.get("version") or "CAVEAT" in (c.get("notes") or ""):
            continue
        if c.get("exclude"):
            continue
        tr = _traits(c["version"])
        era = memory.non_torch_era(tr.version, tr.engine)
        tp, pp = int(c["tp"] or 1), int(c["pp"] or 1)
        key = memory.non_torch_key(tp, pp, "pcie" if _pcie_gpu(c.get("gpu", "")) else "nvlink")
        nt.setdefault(era, {}).setdefault(key, []).append(c["non_torch"])
    for era, key, gib in nt_extra:
        nt.setdefault(era, {}).setdefault(key, []).append(gib)
    nt_fit: dict[str, dict[str, float]] = {}
    for era, d in nt.items():
        for key, vals in d.items():
            nt_fit.setdefault(era, {})[key] = round(statistics.median(vals), 3)
    # An era without a measurement for a layout borrows the nearest later era's (listed in docs/ledger.md).
    borrowed = []
    order = ["v1-late", "v1-early", "v1-0.8", "v0", "v0-early"]
    # Eras that measured non-torch with the same formula (mem_get_info used − torch allocated: the CUDA
    # context and other processes included) lend to each other before any other era does.
    same_formula = {"v1-0.8": "v0-early", "v0-early": "v1-0.8"}
    for i, era in enumerate(order):
        nt_fit.setdefault(era, {})
        for key in ("tp1", "tp_multi", "pp_only", "tp_pcie", "multi_node"):
            if key == "multi_node" and key not in nt_fit[era]:
                # No public multi-node measurement: the NVLink row, stated as such in memory.non_torch.
                nt_fit[era][key] = nt_fit[era].get("tp_multi") or 0.545
                borrowed.append(f"{era}/multi_node from {era}/tp_multi (no measurement)")
                continue
            if key not in nt_fit[era]:
                twin = same_formula.get(era)
                twin = [twin] if twin and key in nt.get(twin, {}) else []
                donor = next((e for e in twin + order[:i][::-1] + order[i + 1:] if key in nt_fit.get(e, {})), None)
                nt_fit[era][key] = nt_fit[donor][key] if donor else 0.1
                borrowed.append(f"{era}/{key} from {donor}")
    nt_fit = {e: nt_fit[e] for e in ("v0-early", "v0", "v1-0.8", "v1-early", "v1-late")}

    cg = statistics.median(g * GiB / (n * layers * hidden) for _, _, layers, hidden, n, g in CG_POINTS)
    fwd_v0 = statistics.median(a / u for _, a, u in fwd_v0_pts) if fwd_v0_pts else fitted.ACT_FWD_COEF_V0
    fit.fwd_v0_detail = [(i, round(a / u, 3)) for i, a, u in fwd_v0_pts]  # type: ignore[attr-defined]
    out = {"ACT_FWD_COEF": round(consts["fwd"], 3), "ACT_FWD_COEF_V0": round(fwd_v0, 3),
           "SAMPLER_K_FULL": round(consts["full"], 3),
           "SAMPLER_K_LIGHT": round(consts["light"], 3), "NON_TORCH_GIB": nt_fit,
           "CUDAGRAPH_BYTES_PER_SIZE_LAYER_HIDDEN": round(cg, 5)}
    out_meta = {"borrowed": borrowed, "act_points": len(pts), "fwd_v0_points": [i for i, _, _ in fwd_v0_pts]}
    fit.meta = out_meta  # type: ignore[attr-defined]
    return out, rows


def apply(consts: dict) -> None:
    for k, v in consts.items():
        setattr(fitted, k, v)


def residuals(rows: list[dict]) -> list[dict]:
    out = []
    for c in rows:
        led = build_ledger(c["_shape"], c["_gpu"], c["_res"])
        m = {k: f.value / GiB for k, f in led.memory.items()}
        r = {"id": c["id"], "label": c["label"], "version": c["version"], "tp": c["tp"], "pp": c["pp"],
             "pred": m, "meas": {k: c.get(k) for k in ("weights", "activation", "non_torch", "cudagraph", "kv")},
             "deducted": bool(c["_res"].traits.cudagraph_in_kv_budget) and not c["_res"].enforce_eager,
             "util_inferred": c.get("util_inferred", False), "blocks": c.get("blocks"),
             "pred_blocks": led.num_blocks, "annotation": c.get("annotation")}
        kv_meas = c.get("kv")
        if kv_meas is None and c.get("blocks"):
            # Blocks × bytes per block recovers the budget to within one block.
            kv_meas = c["blocks"] * led.kv["bytes_per_block"].value / GiB
            r["kv_from_blocks"] = True
        r["meas"]["kv"] = kv_meas
        out.append(r)
    return out


def _cell(p, m):
    if m is None:
        return f"{p:.2f} / –"
    return f"{p:.2f} / {m:.2f}"


def render(consts: dict, res: list[dict], excluded: list[dict], today: str) -> str:
    lines = [f"Fitted by `scripts/fit_memory.py` on {today}. Cells: predicted / measured GiB (– = not measured).", ""]
    lines += ["| constant | value |", "|---|---|"]
    for k, v in consts.items():
        lines.append(f"| `{k}` | `{v}` |")
    lines += ["", "| case | model | vLLM | TP/PP | weights | activation | non-torch | CUDA graph | KV | KV error |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    errs = []
    for r in res:
        p, m = r["pred"], r["meas"]
        kv_err = ""
        if m["kv"] is not None:
            e = p["kv_cache"] - m["kv"]
            errs.append((abs(e), abs(e) / m["kv"] if m["kv"] else 0.0, r["id"]))
            kv_err = f"{e:+.2f} GiB ({100 * e / m['kv']:+.1f} %)" + (" from blocks" if r.get("kv_from_blocks") else "")
        cgp = p["cudagraph"] if r["deducted"] else 0.0
        lines.append(
            f"| {r['id']} | {r['label']} | {r['version']} | {r['tp']}/{r['pp']} | {_cell(p['weights'], m['weights'])} | "
            f"{_cell(p['activation'], m['activation'])} | {_cell(p['non_torch'], m['non_torch'])} | "
            f"{_cell(cgp, m['cudagraph'])}{'' if r['deducted'] else ' (not deducted)'} | "
            f"{_cell(p['kv_cache'], m['kv'])} | {kv_err} |")
    if errs:
        med = statistics.median(e[1] for e in errs)
        worst = max(errs)
        lines += ["", f"KV from configuration alone over {len(errs)} cases: median error {100 * med:.1f} %, "
                      f"largest {worst[0]:.2f} GiB ({worst[2]})."]
    meta = getattr(fit, "meta", {})
    if meta.get("borrowed"):
        lines += ["", "Non-torch layouts without a measurement in their era (borrowed): "
                  + "; ".join(meta["borrowed"]) + "."]
    lines += ["", "Annotations (facts the data file leaves null, taken from the cited source):", ""]
    for r in res:
        if r.get("annotation"):
            lines.append(f"- `{r['id']}`: {r['annotation']}")
    lines += ["", "Excluded cases (and why):", ""]
    for c in excluded:
        lines.append(f"- `{c['id']}` ({c['label']}): {c['excluded']}")
    return "\n".join(lines)


def leave_one_out(shared: Path) -> str:
    """Refit without each KV case (all its points) and predict it: the out-of-sample error."""
    base = {k: getattr(fitted, k) for k in ("ACT_FWD_COEF", "ACT_FWD_COEF_V0", "SAMPLER_K_FULL", "SAMPLER_K_LIGHT",
                                            "NON_TORCH_GIB",
                                            "CUDAGRAPH_BYTES_PER_SIZE_LAYER_HIDDEN")}
    _, rows = fit(load_cases(shared), shared)
    targets = [r for r in residuals(rows) if r["meas"]["kv"] is not None]
    errs = []
    for t in targets:
        apply(base)
        others = [c for c in load_cases(shared) if c["id"] != t["id"]]
        consts, _ = fit(others, shared)
        apply(consts)
        _, rows_i = fit([c for c in load_cases(shared) if c["id"] == t["id"]], shared)
        if not rows_i:
            continue
        r = residuals(rows_i)[0]
        kv_meas = t["meas"]["kv"]
        errs.append((r["pred"]["kv_cache"] - kv_meas, kv_meas, t["id"]))
    apply(base)
    med = statistics.median(abs(e) / m for e, m, _ in errs)
    worst = max(errs, key=lambda x: abs(x[0]))
    return (f"Leave-one-out (refit without the case, then predict it) over {len(errs)} cases: median KV error "
            f"{100 * med:.1f} %, largest {abs(worst[0]):.2f} GiB ({worst[2]}).")


def write_fitted(consts: dict, today: str) -> None:
    body = [
        '"""Fitted constants for the memory terms vLLM only measures.',
        "",
        f"Written by scripts/fit_memory.py on {today} from ../shared/data/real/ (vllm_measured_memory_h100.tsv,",
        "kv_capacity_cases.jsonl). Do not edit by hand: rerun the script. Residuals: docs/ledger.md.",
        '"""',
        "",
        "# forward peak = ACT_FWD_COEF × max_num_batched_tokens × ffn_width/TP × dtype bytes",
        f"ACT_FWD_COEF = {consts['ACT_FWD_COEF']}",
        "# the same for the v0 engine's profile run (one whole max_model_len prompt without chunked prefill)",
        f"ACT_FWD_COEF_V0 = {consts['ACT_FWD_COEF_V0']}",
        "# dummy-sampler peak = K × min(max_num_seqs, max_num_batched_tokens) × vocab × 4 B (+ kept hidden rows)",
        f"SAMPLER_K_FULL = {consts['SAMPLER_K_FULL']}",
        f"SAMPLER_K_LIGHT = {consts['SAMPLER_K_LIGHT']}",
        "# non-torch growth after the baseline snapshot, GiB, by era and parallel layout",
        "NON_TORCH_GIB = {",
    ]
    for era, d in consts["NON_TORCH_GIB"].items():
        body.append(f'    "{era}": {{' + ", ".join(f'"{k}": {v}' for k, v in d.items()) + "},")
    body += ["}", "# CUDA-graph pool estimate = C × capture sizes × layers on the rank × hidden size (bytes)",
             f"CUDAGRAPH_BYTES_PER_SIZE_LAYER_HIDDEN = {consts['CUDAGRAPH_BYTES_PER_SIZE_LAYER_HIDDEN']}", ""]
    (REPO / "src" / "kvdoctor" / "ledger" / "fitted.py").write_text("\n".join(body))


def write_doc(table: str, marker: str = "fit") -> None:
    doc = REPO / "docs" / "ledger.md"
    text = doc.read_text() if doc.exists() else "# The memory ledger\n\n<!-- fit:begin -->\n<!-- fit:end -->\n"
    a, b = f"<!-- {marker}:begin -->", f"<!-- {marker}:end -->"
    if a not in text:
        text += f"\n{a}\n{b}\n"
    pre, rest = text.split(a, 1)
    _, post = rest.split(b, 1)
    doc.write_text(f"{pre}{a}\n{table}\n{b}{post}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default=str(REPO.parent / "shared" / "data"))
    ap.add_argument("--check", action="store_true", help="print only; write nothing")
    ap.add_argument("--loo", action="store_true", help="with --check: also report leave-one-out KV errors")
    args = ap.parse_args(argv)
    shared = Path(args.shared)
    cases = load_cases(shared)
    loo = leave_one_out(shared) if (args.loo or not args.check) else ""
    consts, rows = fit(cases, shared)
    apply(consts)
    res = residuals(rows)
    today = _dt.date.today().isoformat()
    excluded = [c for c in cases if c.get("excluded")]
    table = render(consts, res, excluded, today)
    if loo:
        table = table.replace("\n\nAnnotations", f"\n\n{loo} The constants are fitted on these same runs, so "
                              "the leave-one-out figure is the honest one.\n\nAnnotations", 1)
    print(table)
    if not args.check:
        write_fitted(consts, today)
        write_doc(table)
        # The real start-up logs (fit and held-out splits) with the constants just written.
        import importlib

        sys.path.insert(0, str(REPO / "scripts"))
        import kvdoctor.ledger.fitted as _f
        importlib.reload(_f)
        import startup_logs_eval as sle

        write_doc(sle.markdown(), "startup-logs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
