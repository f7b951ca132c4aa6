#!/usr/bin/env python3
"""Generate the embedded catalogs in src/kvdoctor/catalog/data/ from the shared data set.

    python scripts/build_catalog.py [--data ../shared/data] [--check]

models.json: one ModelShape per Hugging Face id (the facts vLLM derives, via the same
``shape_from_hf_config`` the CLI uses on a user's config.json), not the raw configs.
sharegpt_lengths.json: the requests `--dataset-name sharegpt` sends, from the bench's own saved sample
(scripts/data/sharegpt_bench_sample.json: a public `--save-result` file's per-request lengths, in the bench's order).
gpus.json: one GpuSpec per accelerator, memory in bytes as torch reports it. Where no public
torch figure exists, the memory is derived from nvidia-smi MiB or the marketing size with the
ratio fitted here on the GPUs that have both; the fit and its error are printed and written to
docs/catalog.md by hand. ``--check`` regenerates in memory and fails if the files differ.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "src"))

from kvdoctor.ledger.shape import shape_from_hf_config, shape_to_dict  # noqa: E402

OUT = REPO / "src" / "kvdoctor" / "catalog" / "data"
GiB = 1 << 30
MiB = 1 << 20

# Aliases of the shared table that name another part: the H20 row lists "NVIDIA H20-3e (141GB variant)" beside the
# 96 GB H20, and a log of an H20-3e then read a 96 GB card (sweep 247 item 02: a KV budget of 41.9 GiB for ~83);
# scripts/gpus_extra.tsv tabulates the H20-3e on its own.
DROP_ALIASES: dict[str, list[str]] = {"NVIDIA H20": ["NVIDIA H20-3e"]}

# Short names people type or logs print that the TSV alias column does not spell out.
# Ambiguous ones (plain "A100": 40 or 80 GB, PCIe or SXM) are left out on purpose so the lookup
# answers with suggestions instead of guessing.
EXTRA_ALIASES: dict[str, list[str]] = {
    "NVIDIA H100 SXM": ["H100", "H100 SXM", "H100 SXM5", "H100-80G", "H100 80GB", "H100-SXM5-80GB"],
    "NVIDIA H100 PCIe": ["H100 PCIe"],
    "NVIDIA H100 NVL": ["H100 NVL"],
    "NVIDIA H200": ["H200", "H200 SXM", "H200 141GB", "NVIDIA H200 141GB HBM3e"],
    "NVIDIA A100 80GB SXM": ["A100 80GB", "A100-80G", "A100 SXM 80GB", "A100-SXM-80GB"],
    "NVIDIA A100 80GB PCIe": ["A100 80GB PCIe", "A100-PCIE-80GB"],
    "NVIDIA A100 40GB SXM": ["A100 40GB", "A100-40G", "A100 SXM 40GB"],
    "NVIDIA A100 40GB PCIe": ["A100 40GB PCIe", "NVIDIA A100-PCIE-40GB"],
    "NVIDIA GeForce RTX 3090": ["RTX 3090", "3090"],
    "NVIDIA GeForce RTX 4090": ["RTX 4090", "4090"],
    "NVIDIA GeForce RTX 5090": ["RTX 5090", "5090"],
    "NVIDIA T4": ["T4"],
    "NVIDIA A10": ["A10"],
    "NVIDIA A10G": ["A10G"],
    "NVIDIA L4": ["L4"],
    "NVIDIA L40": ["L40"],
    "NVIDIA L40S": ["L40S"],
    "NVIDIA A40": ["A40"],
    "NVIDIA A30": ["A30", "NVIDIA A30"],
    "NVIDIA H20": ["H20"],
    "NVIDIA B200": ["B200"],
    "NVIDIA B300": ["B300", "NVIDIA B300 SXM6 AC"],
    "NVIDIA RTX 6000 Ada Generation": ["RTX 6000 Ada"],
    # how operators and nvidia-smi name the card (sweep 110: "RTX PRO 6000", "RTX 6000 Pro"); the 300 W Max-Q edition
    # has the same 96 GB (its compute is lower than the row's, which the memory ledger does not use)
    "NVIDIA RTX PRO 6000 Blackwell": ["RTX PRO 6000", "RTX 6000 Pro", "RTX PRO 6000 Blackwell",
                                      "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition"],
    # nvidia-smi names the 96 GB HBM3 part by the module's total memory; the 144 GB HBM3e part is another card
    "NVIDIA GH200": ["GH200", "NVIDIA GH200 480GB"],
    "AMD Instinct MI300X": ["MI300X"],
    "AMD Instinct MI250X (one GCD)": ["AMD Instinct MI250X", "AMD Instinct MI250X/MI250", "MI250X"],
    "AMD Instinct MI325X": ["MI325X"],
}

# Display names: the TSV's descriptive names carry parentheticals; keep a clean key.
RENAME = {
    "NVIDIA GH200 (Hopper GPU of Grace Hopper)": "NVIDIA GH200",
    "NVIDIA GB200 (per Blackwell GPU)": "NVIDIA GB200",
    "NVIDIA GB300 (per Blackwell Ultra GPU)": "NVIDIA GB300",
    "NVIDIA RTX PRO 6000 Blackwell (Server / Workstation Edition)": "NVIDIA RTX PRO 6000 Blackwell",
    "AMD Instinct MI250 / MI250X": "AMD Instinct MI250X (one GCD)",
}

# Checkpoints whose config.json carries no dtype: vLLM then reads the safetensors headers, which the
# shared data set does not hold. The published checkpoints are bf16 (non-quantized tensors).
DTYPE_FROM_CHECKPOINT = {
    "openai/gpt-oss-20b": "bfloat16",
    "openai/gpt-oss-120b": "bfloat16",
    "tiiuae/falcon-7b": "bfloat16",
}

# Dense tensor rates the shared table leaves empty, with their source (bf16, fp8 TFLOPS). GeForce Ada runs bf16/fp16
# with fp32 accumulate (what PyTorch's GEMMs use) at half its fp16-accumulate rate: 165.15 dense, 330.30 with sparsity
# (https://waredb.com/processor/nvidia-geforce-rtx-4090, matching NVIDIA's Ada whitepaper's 165.2 / 330.4).
TENSOR_RATES: dict[str, tuple[float, float | None, str]] = {
    "NVIDIA GeForce RTX 4090": (165.15, 330.30, "kvdoctor adds the dense tensor rates: bf16 165.15 / fp8 330.30 TFLOPS "
                                                "(fp32 accumulate, no sparsity; waredb.com, NVIDIA's Ada whitepaper)."),
    # GeForce Blackwell halves fp32-accumulate as Ada does: 838.4 sparse fp16 (fp16 accumulate; spheron.network's
    # datasheet table) -> 419.2 dense -> 209.5 with fp32 accumulate, the figure public MFU tables use for the card
    # ("209.5 TFLOPS here is the 5090's sparse 419 halved"); fp8 likewise 1,676.8 sparse -> 419.2 dense, fp32 accumulate
    "NVIDIA GeForce RTX 5090": (209.5, 419.2, "kvdoctor adds the dense tensor rates: bf16 209.5 / fp8 419.2 TFLOPS "
                                              "(fp32 accumulate, no sparsity; NVIDIA's RTX Blackwell whitepaper as "
                                              "public MFU tables carry it: the sparse fp16 838.4 halved twice)."),
    # GeForce Ampere: 71 dense bf16 with fp32 accumulate (NVIDIA's GA102 whitepaper, RTX 3090: 71 / 142 sparse; public
    # MFU tables carry 71.0-71.2); no fp8 on Ampere
    "NVIDIA GeForce RTX 3090": (71.0, None, "kvdoctor adds the dense bf16 tensor rate: 71.0 TFLOPS (fp32 accumulate, "
                                           "no sparsity; NVIDIA's GA102 whitepaper, 71 / 142)."),
}

# Accelerators the shared table lacks, added by this project (same columns as gpus.tsv, every figure with its source in
# the row's ``source`` cell): the export variants the chapter's readers run (A800, H800), the L20, and older parts that
# public logs show (V100, RTX A6000). The torch/nvidia-smi/marketing ratios are fitted on the shared rows only, so these
# rows cannot move any shared GPU's derived memory.
EXTRA_TSV = REPO / "scripts" / "gpus_extra.tsv"

# Memory measured by torch on hardware this project ran on (device runs), bytes.
MEASURED_TORCH: dict[str, tuple[int, str]] = {}

_NUM = re.compile(r"^\s*~?\s*([0-9]+(?:\.[0-9]+)?)")


def _first_number(text: str | None) -> float | None:
    if not text:
        return None
    m = _NUM.match(text.strip().strip('"'))
    return float(m.group(1)) if m else None


def _last_number(text: str | None) -> float | None:
    """'362 (MI250) / 383 (MI250X), both for 2 GCDs' -> 383 (the row is the MI250X)."""
    nums = re.findall(r"(?<![A-Za-z])([0-9]+(?:\.[0-9]+)?)(?![0-9]*X)", text or "")
    vals = [float(n) for n in nums if float(n) > 10]
    return vals[-1] if vals else _first_number(text)


def _scaled(x: float | None, f: float) -> float | None:
    return None if x is None else round(x * f, 3)


def _aliases(name: str, col: str) -> list[str]:
    """The TSV's alias column: ';'-separated spellings, with (comments) that may name more."""
    col = (col or "").strip().strip('"')
    out = [name] + [p.strip() for p in re.findall(r"commonly printed ([^;)]+)", col)]
    col = re.sub(r"\([^)]*\)", "", col)  # drop comments first: they contain ';' too
    out += [p.strip() for p in col.split(";") if p.strip()]
    return out


def _ecc_gddr(r: dict) -> bool:
    """Datacenter GDDR card (ECC on by default): T4, A10(G), L4, L40(S), A40."""
    return "GDDR" in (r.get("notes") or "") and "GeForce" not in r["name"] and "RTX" not in r["name"] or (
        r["name"] in ("NVIDIA A10G", "NVIDIA T4"))


def _capability(text: str) -> tuple[int, int] | None:
    m = re.match(r"^\s*(\d+)\.(\d+)\s*$", text or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def _read_tsv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def build_gpus(data: Path, extra: Path | None = EXTRA_TSV) -> tuple[list[dict], list[str]]:
    rows = _read_tsv(data / "gpus.tsv")
    added = _read_tsv(extra) if extra is not None and extra.exists() else []
    clash = {r["name"] for r in added} & {r["name"] for r in rows}
    if clash:
        raise SystemExit(f"{extra}: already in the shared gpus.tsv: {sorted(clash)}")
    report: list[str] = []
    # ---- fit torch/nvidia-smi and torch/marketing ratios on the rows that have both ----
    smi_pairs, mkt_pairs, ecc_pairs = [], [], []
    for r in rows:
        torch_gib = _first_number(r["total_memory_as_reported_by_torch_GiB"])
        smi = _first_number(r["nvidia_smi_total_MiB"])
        mkt = _first_number(r["memory_bytes_marketing"])
        if torch_gib and r["name"].startswith("NVIDIA"):
            if smi:
                smi_pairs.append((r["name"], torch_gib * GiB / (smi * MiB)))
            if mkt:
                # Marketing "80 GB" of HBM/GDDR is a binary size (80 GiB physical). Datacenter GDDR
                # cards run with ECC on, which takes 1/16 of the memory: fitted separately.
                (ecc_pairs if _ecc_gddr(r) else mkt_pairs).append(
                    (r["name"], torch_gib * GiB / (mkt / 1e9 * GiB)))
    smi_ratio = statistics.median(v for _, v in smi_pairs)
    mkt_ratio = statistics.median(v for _, v in mkt_pairs)
    ecc_ratio = statistics.median(v for _, v in ecc_pairs)
    report.append(f"torch/nvidia-smi ratio: median {smi_ratio:.4f} over {len(smi_pairs)} GPUs; errors: "
                  + ", ".join(f"{n} {smi_ratio / v - 1:+.2%}" for n, v in smi_pairs))
    report.append(f"torch/marketing ratio: median {mkt_ratio:.4f} over {len(mkt_pairs)} GPUs; errors: "
                  + ", ".join(f"{n} {mkt_ratio / v - 1:+.2%}" for n, v in mkt_pairs))
    report.append(f"torch/marketing ratio, datacenter GDDR with ECC: median {ecc_ratio:.4f} over {len(ecc_pairs)} "
                  "GPUs; errors: " + ", ".join(f"{n} {ecc_ratio / v - 1:+.2%}" for n, v in ecc_pairs))

    if added:
        report.append(f"{len(added)} GPUs added from {extra.relative_to(REPO) if extra.is_relative_to(REPO) else extra}: "
                      + ", ".join(r["name"] for r in added))
    gpus = []
    for r in rows + added:
        name = RENAME.get(r["name"], r["name"])
        torch_gib = _first_number(r["total_memory_as_reported_by_torch_GiB"])
        smi = _first_number(r["nvidia_smi_total_MiB"])
        mkt = _first_number(r["memory_bytes_marketing"])
        # Source addresses stay in the shared data set, not in the shipped table.
        notes = re.sub(r"\s*\(?(?:https?://|github\.com/)[^\s)]+\)?", "", (r.get("notes") or "").strip().strip('"'))
        per_device = 1.0
        if name.startswith("AMD Instinct MI250X"):
            # PyTorch sees each of the package's 2 GCDs as one device with 64 GB: tabulate what one
            # device has (torchtitan uses 191.5 TFLOPS bf16 per GCD, half of the package's 383).
            per_device = 0.5
            mkt = mkt / 2 if mkt else mkt
            notes = ("One GCD (PyTorch device) of an MI250X package: memory, bandwidth and compute are half "
                     "the package's 128 GB / 3.28 TB/s / 383 TFLOPS. " + notes)
        if name in MEASURED_TORCH:
            mem, src = MEASURED_TORCH[name]
        elif torch_gib:
            mem = int(round(torch_gib * GiB))
            src = f"torch total_memory {torch_gib:.2f} GiB seen in public logs"
        elif smi:
            mem = int(smi * MiB * smi_ratio)
            src = f"derived: nvidia-smi {int(smi)} MiB x {smi_ratio:.4f} (median torch/nvidia-smi ratio)"
        elif mkt and _ecc_gddr(r):
            mem = int(mkt / 1e9 * GiB * ecc_ratio)
            src = (f"derived: marketing {mkt / 1e9:g} GB as GiB x {ecc_ratio:.4f} (median torch/marketing ratio "
                   "of datacenter GDDR cards, ECC on)")
        elif mkt:
            mem = int(mkt / 1e9 * GiB * mkt_ratio)
            src = f"derived: marketing {mkt / 1e9:g} GB as GiB x {mkt_ratio:.4f} (median torch/marketing ratio)"
        else:
            raise SystemExit(f"no memory figure for {name}")
        cc = _capability(r["compute_capability"])
        if cc is None and r["compute_capability"]:
            notes = (notes + f" Architecture {r['compute_capability'].strip(chr(34))} (no CUDA compute "
                     "capability).").strip()
        aliases = []
        for a in _aliases(r["name"], r["aliases"]) + EXTRA_ALIASES.get(name, []) + [name]:
            if a not in aliases and a not in DROP_ALIASES.get(name, []):
                aliases.append(a)
        gpus.append({
            "name": name,
            "aliases": aliases,
            "memory_bytes": mem,
            "memory_source": src,
            "hbm_bandwidth_gbps": _scaled(_first_number(r["hbm_bandwidth_GBps"]), per_device),
            "bf16_tflops": _scaled(_last_number(r["bf16_dense_tflops"]) if per_device != 1 else
                                   _first_number(r["bf16_dense_tflops"]), per_device),
            "fp8_tflops": _scaled(_first_number(r["fp8_dense_tflops"]), per_device),
            "int8_tops": _scaled(_last_number(r["int8"]) if per_device != 1 else _first_number(r["int8"]),
                                 per_device),
            "fp4_tflops": _scaled(_first_number(r["fp4_dense_tflops"]), per_device),
            "compute_capability": list(cc) if cc else None,
            "nvlink_gbps": _first_number(r["nvlink_GBps"]),
            "notes": notes,
        })
        if name in TENSOR_RATES and gpus[-1]["bf16_tflops"] is None:
            bf16, fp8, how = TENSOR_RATES[name]
            gpus[-1].update(bf16_tflops=bf16, fp8_tflops=gpus[-1]["fp8_tflops"] or fp8,
                            notes=(gpus[-1]["notes"] + " " + how).strip())
    return gpus, report


# The project's own configs beside the shared ones (same INDEX.tsv columns): public config.json files of models the
# shared set lacks (Qwen3-Next, Qwen3.5/3.6, Qwen3-VL, the 2507 releases, Llama-4 Maverick), each with its source.
MODELS_EXTRA = REPO / "scripts" / "models_extra"


def _model_rows(data: Path, extra: Path | None) -> list[tuple[Path, dict]]:
    rows = [(data / "models", r) for r in csv.DictReader(open(data / "models" / "INDEX.tsv", encoding="utf-8"),
                                                          delimiter="\t")]
    if extra is not None and (extra / "INDEX.tsv").exists():
        added = [(extra, r) for r in csv.DictReader(open(extra / "INDEX.tsv", encoding="utf-8"), delimiter="\t")]
        clash = {r["hf_id"] for _, r in rows} & {r["hf_id"] for _, r in added}
        if clash:
            raise SystemExit(f"{extra}: already in the shared models: {sorted(clash)}")
        rows += added
    return rows


def build_models(data: Path, extra: Path | None = MODELS_EXTRA) -> tuple[dict, list[str]]:
    out: dict[str, dict] = {}
    report = []
    for d, r in _model_rows(data, extra):
        hf = r["hf_id"]
        cfg = json.load(open(d / r["file"], encoding="utf-8"))
        qfile = d / r["file"].replace(".json", ".hf_quant_config.json")
        hq = json.load(open(qfile, encoding="utf-8")) if qfile.exists() else None
        shape = shape_from_hf_config(cfg, hf, hf_quant_config=hq)
        sd = shape_to_dict(shape)
        sd["source"] = f"catalog:{hf}"
        note = []
        if hf in DTYPE_FROM_CHECKPOINT:
            sd["dtype"] = DTYPE_FROM_CHECKPOINT[hf]
            sd["notes"] = [n for n in sd["notes"] if "has no dtype" not in n]
            note.append(f"config has no dtype; {sd['dtype']} as vLLM reads it from the checkpoint's safetensors headers")
        if "PARTIAL" in r["file"]:
            note.append("partial config (few keys); family defaults applied")
        if "TRANSCRIBED" in r["notes"]:
            note.append("config transcribed from a preset, not the HF file itself")
        if "MODIFIED" in r["notes"]:
            note.append("config modified by its source (see docs/catalog.md)")
        if note:
            sd["notes"] = list(sd["notes"]) + note
        sd.pop("extra", None)
        sd["extra"] = {"max_model_len_how": shape.extra.get("max_model_len_how", "")}
        # the linear-attention state's and mixer's dimensions (ledger.kv sizes the state, ledger.tensors the mixer) and
        # Gemma 4's global layers' own KV heads
        sd["extra"].update({k: shape.extra[k] for k in ("gdn", "attn_output_gate", "full_attn", "mamba2", "no_mlp_layers", "moe_gated", "dsa_indexer") if k in shape.extra})
        out[hf] = sd
        report.append(f"{hf}: {shape.params.total if shape.params else 0:,} params")
    return out, report


SHAREGPT_SAMPLE = REPO / "scripts" / "data" / "sharegpt_bench_sample.json"


def build_sharegpt() -> dict:
    """The ShareGPT requests the bench sends (protocol 13, scripts/fit_serving.py): the 200 (prompt, generated) token
    lengths of a public saved result of `--dataset-name sharegpt --seed 0`, in the bench's draw order, so
    `--dataset-name sharegpt` sends offline what the bench sends. Before protocol 13 this was Vidur's
    sharegpt_8k_filtered table (Llama-2 tokenizer, whole conversations: 1.7x the prompt, 1.9x the output)."""
    src = json.loads(SHAREGPT_SAMPLE.read_text(encoding="utf-8"))
    prompt, output = src["input_lens"], src["output_lens"]
    # the file's own totals: a copy that lost or changed a number is refused here, not shipped
    assert len(prompt) == len(output) == src["num_prompts"], "sharegpt sample: lengths"
    assert (sum(prompt), sum(output)) == (src["total_input_tokens"], src["total_output_tokens"]), "sharegpt sample: sums"
    return {"schema": "kvdoctor.catalog.sharegpt_lengths/2",
            "source": src["source"], "what": src["what"], "tokenizer": src["tokenizer"], "seed": src["seed"],
            "order": "bench", "prompt": prompt, "output": output}


def _dump(obj) -> str:
    return json.dumps(obj, indent=None, separators=(",", ":"), sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--check", action="store_true", help="fail if the generated files are stale")
    args = ap.parse_args(argv)
    if not (args.data / "gpus.tsv").exists():
        print(f"build_catalog: no gpus.tsv under {args.data}", file=sys.stderr)
        return 2
    gpus, grep = build_gpus(args.data)
    models, mrep = build_models(args.data)
    files = {
        OUT / "gpus.json": _dump({"schema": "kvdoctor.catalog.gpus/1", "gpus": gpus}),
        OUT / "models.json": _dump({"schema": "kvdoctor.catalog.models/1", "models": models}),
        # one line per key
        OUT / "sharegpt_lengths.json": json.dumps(build_sharegpt(), separators=(",", ":")).replace(
            ',"', ',\n"') + "\n",
    }
    if args.check:
        stale = [p.name for p, text in files.items() if not p.exists() or p.read_text() != text]
        if stale:
            print("build_catalog: stale: " + ", ".join(stale), file=sys.stderr)
            return 1
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    for p, text in files.items():
        p.write_text(text)
    for line in grep:
        print(line)
    print(f"{len(gpus)} GPUs, {len(models)} models -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
