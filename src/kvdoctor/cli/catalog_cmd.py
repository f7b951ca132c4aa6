"""``kvdoctor catalog``: the embedded model and GPU tables, and one entry in full.

    kvdoctor catalog models [--filter qwen3] [--json]
    kvdoctor catalog gpus [--json]
    kvdoctor catalog show meta-llama/Llama-3.1-8B-Instruct [--tp 2 --pp 1 --quantization fp8 --gpu H100]
    kvdoctor catalog show ./my-model/            (a config.json, model dir or HF cache dir works too)
    kvdoctor catalog show "NVIDIA H100 80GB HBM3"
"""

from __future__ import annotations

from typing import Annotated, Any, Optional

import typer

from kvdoctor.cli import app, common
from kvdoctor.units import gib_text

SCHEMA_VERSION = "kvdoctor.catalog/1"

catalog_app = typer.Typer(help="The embedded model and GPU catalogs. Example: kvdoctor catalog show Qwen/Qwen3-8B",
                          no_args_is_help=True)
app.add_typer(catalog_app, name="catalog")

_GiB = 1 << 30


def _gib(b: float) -> str:
    return gib_text(b, unit="")


def _kinds(kinds: tuple[str, ...]) -> str:
    counts: dict[str, int] = {}
    for k in kinds:
        counts[k] = counts.get(k, 0) + 1
    return " ".join(f"{n}×{k}" for k, n in counts.items())


def _model_row(name: str) -> dict[str, Any]:
    from kvdoctor.catalog.models import lookup_model

    s = lookup_model(name)
    return {
        "id": name, "model_type": s.model_type, "layers": s.num_layers, "hidden_size": s.hidden_size,
        "attention_heads": s.num_attention_heads, "kv_heads": s.num_kv_heads, "head_size": s.head_size,
        "mla": s.is_mla, "params": s.params.total if s.params else None, "max_model_len": s.max_model_len,
        "dtype": s.dtype, "layer_kinds": _kinds(s.layer_kinds), "sliding_window": s.sliding_window,
        "moe": None if s.moe is None else f"{s.moe.num_experts}e top{s.moe.experts_per_token}",
        "quantization": s.quant.method if s.quant else None, "multimodal": s.is_multimodal,
    }


@catalog_app.command("models", help="List the catalog's models. Example: kvdoctor catalog models --filter llama")
def models(
    filter_: Annotated[Optional[str], typer.Option("--filter", help="Only ids containing this text.")] = None,
    json_out: common.JsonOpt = False,
    quiet: common.QuietOpt = False,
) -> None:
    from kvdoctor.catalog.models import list_models

    names = [n for n in list_models() if not filter_ or filter_.lower() in n.lower()]
    rows = [_model_row(n) for n in names]
    if json_out:
        from kvdoctor.cli.output import emit_json

        emit_json({"schema_version": SCHEMA_VERSION, "kind": "models", "count": len(rows), "models": rows})
        return
    if quiet:
        for r in rows:
            typer.echo(r["id"])
        return
    from kvdoctor.cli.output import console
    from kvdoctor.report.terminal import print_table

    print_table(console(), ("id", "type", "layers", "heads/kv", "head", "params", "max len", "layers by kind", "MoE", "quant"),
                [(r["id"], r["model_type"], r["layers"], f"{r['attention_heads']}/{r['kv_heads']}",
                  f"{r['head_size']}{' MLA' if r['mla'] else ''}", f"{r['params'] / 1e9:.2f}B",
                  f"{r['max_model_len']:,}", r["layer_kinds"], r["moe"] or "", r["quantization"] or "") for r in rows],
                title=f"{len(rows)} models (shape as vLLM 0.33 derives it from config.json)", right=(2, 4, 5, 6))


def _gpu_dict(g: Any) -> dict[str, Any]:
    import dataclasses

    d = dataclasses.asdict(g)
    d["memory_gib"] = round(g.memory_bytes / _GiB, 2)
    d["memory"] = {"value": g.memory_bytes, "source": "given" if g.is_anonymous else (
        "measured" if g.memory_source.startswith("torch") else "predicted"), "how": g.memory_source}
    return d


@catalog_app.command("gpus", help="List the catalog's GPUs. Example: kvdoctor catalog gpus --json")
def gpus(json_out: common.JsonOpt = False, quiet: common.QuietOpt = False) -> None:
    from kvdoctor.catalog.gpus import list_gpus

    gs = list_gpus()
    if json_out:
        from kvdoctor.cli.output import emit_json

        emit_json({"schema_version": SCHEMA_VERSION, "kind": "gpus", "count": len(gs),
                   "gpus": [_gpu_dict(g) for g in gs]})
        return
    if quiet:
        for g in gs:
            typer.echo(g.name)
        return
    from kvdoctor.cli.output import console
    from kvdoctor.report.terminal import print_table

    def num(x: float | None) -> str:
        return "" if x is None else f"{x:g}"

    rows = []
    for g in gs:
        mark = "" if g.memory_source.startswith("torch") else "*"
        cc = f"{g.compute_capability[0]}.{g.compute_capability[1]}" if g.compute_capability else ""
        rows.append((g.name, f"{g.memory_bytes / _GiB:.2f}{mark}", num(g.hbm_bandwidth_gbps), num(g.bf16_tflops),
                     num(g.fp8_tflops), num(g.int8_tops), num(g.fp4_tflops), cc, num(g.nvlink_gbps)))
    print_table(console(), ("name", "memory GiB", "GB/s", "bf16 TF", "fp8 TF", "int8 TOPS", "fp4 TF", "cc", "NVLink GB/s"),
                rows, title=f"{len(gs)} GPUs (memory as torch reports it; * = derived, see `catalog show`)",
                right=tuple(range(1, 9)))


def _model_payload(shape: Any, *, tp: int, pp: int, dtype: str | None, quantization: str | None,
                   gpu: Any) -> dict[str, Any]:
    import dataclasses

    from kvdoctor.ledger.shape import shape_to_dict
    from kvdoctor.ledger.weights import weight_breakdown
    from kvdoctor.provenance import Figure

    notes = list(shape.notes)
    if dtype is None:
        # vLLM --dtype auto: a float32 (or missing) config dtype loads as bf16 on SM80+ (fp16 below).
        dtype = shape.dtype
        if dtype == "float32":
            cap = gpu.capability if gpu is not None else None
            dtype = "float16" if cap is not None and cap < 80 else "bfloat16"
            notes.append(f"--dtype auto: config dtype float32 loads as {dtype}")
    db = {"float32": 4, "float16": 2, "bfloat16": 2}.get(dtype)
    if db is None:
        from kvdoctor.errors import InputError

        raise InputError(f"--dtype must be bfloat16, float16 or float32 (got {dtype!r})")
    wb = weight_breakdown(shape, dtype_bytes=db, quant=quantization or shape.quant, tp=tp, pp=pp,
                          capability=gpu.capability if gpu is not None else None)
    d = shape_to_dict(shape)
    d["params_by_role"] = dataclasses.asdict(shape.params) if shape.params else None
    d["notes"] = notes
    figures = {
        "params_total": Figure(shape.params.total if shape.params else None, "predicted",
                               "sum of every checkpoint tensor derived from config.json (unpadded, tied once)"),
        "max_model_len": Figure(shape.max_model_len, "default",
                                "vLLM _get_and_verify_max_len: " + shape.extra.get("max_model_len_how", "")),
        "weights_per_gpu_bytes": Figure(wb.per_rank, "predicted", wb.how,
                                        extra={"tp": tp, "pp": pp, "dtype": dtype}),
    }
    if gpu is not None and not gpu.is_anonymous and shape.quant and shape.quant.min_capability and gpu.capability:
        if gpu.capability < shape.quant.min_capability:
            notes.append(f"{shape.quant.method} needs compute capability {shape.quant.min_capability}; "
                         f"{gpu.name} has {gpu.capability}: vLLM refuses to start")
    return {"model": d, "figures": {k: v.as_dict() for k, v in figures.items()}, "weights_by_role_bytes": wb.by_role}


@catalog_app.command("show", help="One model or GPU in full; for a model also the weight bytes per GPU. "
                                  "Example: kvdoctor catalog show openai/gpt-oss-120b --tp 2 --gpu H100")
def show(
    name: Annotated[str, typer.Argument(help="Model id, config.json / model dir / HF cache dir, or GPU name.")],
    tp: Annotated[int, typer.Option("--tensor-parallel-size", "-tp", "--tp", min=1, help="TP size.")] = 1,
    pp: Annotated[int, typer.Option("--pipeline-parallel-size", "-pp", "--pp", min=1, help="PP size.")] = 1,
    dtype: Annotated[Optional[str], typer.Option("--dtype", help="bfloat16, float16, float32 (default auto).")] = None,
    quantization: Annotated[Optional[str], typer.Option("--quantization",
                                                        help="e.g. fp8 (online) on an unquantized model.")] = None,
    gpu_name: Annotated[Optional[str], typer.Option("--gpu", help="GPU (picks the MXFP4 MoE backend).")] = None,
    json_out: common.JsonOpt = False,
    quiet: common.QuietOpt = False,
) -> None:
    from kvdoctor.catalog.gpus import lookup_gpu
    from kvdoctor.catalog.models import lookup_model
    from kvdoctor.errors import NotFoundError

    try:
        shape = lookup_model(name)
    except NotFoundError as model_err:
        try:
            g = lookup_gpu(name)
        except NotFoundError as gpu_err:
            raise NotFoundError(f"{name!r} is neither a catalog model nor a GPU",
                                (model_err.suggestions + gpu_err.suggestions)[:6]) from None
        _show_gpu(g, json_out, quiet)
        return
    gpu = lookup_gpu(gpu_name) if gpu_name else None
    if dtype is not None:
        dtype = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16"}.get(dtype, dtype)
    payload = _model_payload(shape, tp=tp, pp=pp, dtype=dtype, quantization=quantization, gpu=gpu)
    if json_out:
        from kvdoctor.cli.output import emit_json

        emit_json({"schema_version": SCHEMA_VERSION, "kind": "model", **payload})
        return
    _render_model(shape, payload, quiet)


def _show_gpu(g: Any, json_out: bool, quiet: bool = False) -> None:
    if json_out:
        from kvdoctor.cli.output import emit_json

        emit_json({"schema_version": SCHEMA_VERSION, "kind": "gpu", "gpu": _gpu_dict(g)})
        return
    if quiet:  # docs/cli.md "--quiet": one line
        cc = f", cc {g.compute_capability[0]}.{g.compute_capability[1]}" if g.compute_capability else ""
        bw = f", {g.hbm_bandwidth_gbps:g} GB/s" if g.hbm_bandwidth_gbps else ""
        typer.echo(f"{g.name}: {g.memory_bytes / _GiB:.2f} GiB{bw}{cc}")
        return
    from rich.table import Table

    from kvdoctor.cli.output import console

    t = Table(title=g.name, show_header=False)
    t.add_column("field")
    t.add_column("value", overflow="fold")
    def n(x: float | None) -> str:
        return "-" if x is None else f"{x:g}"

    cc = f"{g.compute_capability[0]}.{g.compute_capability[1]}" if g.compute_capability else "unknown"
    rows = [("memory", f"{g.memory_bytes:,} B = {g.memory_bytes / _GiB:.2f} GiB"), ("memory source", g.memory_source),
            ("aliases", "; ".join(g.aliases) or "-"), ("memory bandwidth", f"{n(g.hbm_bandwidth_gbps)} GB/s"),
            ("dense bf16 / fp8 / fp4", f"{n(g.bf16_tflops)} / {n(g.fp8_tflops)} / {n(g.fp4_tflops)} TFLOPS"),
            ("dense int8", f"{n(g.int8_tops)} TOPS"), ("compute capability", cc),
            ("NVLink", f"{n(g.nvlink_gbps)} GB/s"), ("notes", g.notes or "-")]
    from rich.markup import escape

    for k, v in rows:
        t.add_row(k, escape(str(v)))  # notes and derivations contain [brackets]
    console().print(t)


def _render_model(shape: Any, payload: dict[str, Any], quiet: bool) -> None:
    from rich.table import Table

    from kvdoctor.cli.output import console

    fig = payload["figures"]
    w = fig["weights_per_gpu_bytes"]
    per = w["value"]
    if quiet:
        typer.echo(f"{shape.name}: {fig['params_total']['value'] / 1e9:.2f}B params; weights "
                   + ", ".join(_gib(row[0]) for row in per) + " GiB per GPU")
        return
    t = Table(title=f"{shape.name}  ({shape.source})", show_header=False)
    t.add_column("field")
    t.add_column("value", overflow="fold")
    q = shape.quant
    rows = [
        ("architecture", f"{shape.model_type} {' '.join(shape.architectures)}"
                         + (" (multimodal: text_config)" if shape.is_multimodal else "")),
        ("layers / hidden / intermediate", f"{shape.num_layers} / {shape.hidden_size} / {shape.intermediate_size}"),
        ("attention heads / KV heads", f"{shape.num_attention_heads} / {shape.num_kv_heads}"
                                       + (" (MLA: one latent per token)" if shape.is_mla else "")),
        ("head size (K / V)", f"{shape.head_size} / {shape.head_size_v}"),
        ("layers by kind", _kinds(shape.layer_kinds)
         + (f", window {shape.sliding_window}" if shape.sliding_window else "")
         + (f", chunk {shape.attention_chunk_size}" if shape.attention_chunk_size else "")),
        ("vocab / tied embeddings", f"{shape.vocab_size} / {shape.tie_word_embeddings}"),
        ("max_model_len (default)", f"{shape.max_model_len:,}  [{fig['max_model_len']['how']}]"),
        ("config dtype", shape.dtype),
    ]
    if shape.moe:
        m = shape.moe
        rows.append(("MoE", f"{m.num_experts} experts, top-{m.experts_per_token}, expert width "
                            f"{m.moe_intermediate_size}, shared {m.num_shared_experts}"
                            + (f", dense layers {len(m.dense_layers)}" if m.dense_layers else "")))
    if q:
        rows.append(("quantization", f"{q.method}: {q.bytes_per_weight:.4g} B/weight, min capability "
                                     f"{q.min_capability}" + (f", KV {q.kv_cache_dtype}" if q.kv_cache_dtype else "")
                                     + (f" — {q.note}" if q.note else "")))
    pr = payload["model"]["params_by_role"] or {}
    rows.append(("parameters", f"{fig['params_total']['value']:,}  ("
                 + ", ".join(f"{k} {v / 1e9:.3g}B" for k, v in pr.items() if v) + ")"))
    ex = w["extra"]
    rows.append((f"weights per GPU (TP={ex['tp']}, PP={ex['pp']}, {ex['dtype']})",
                 ", ".join(f"stage {i}: {_gib(row[0])} GiB" for i, row in enumerate(per)) + "  [predicted]"))
    rows.append(("how", w["how"]))
    for n in payload["model"]["notes"]:
        rows.append(("note", n))
    from rich.markup import escape

    for k, v in rows:
        t.add_row(k, escape(str(v)))  # notes and derivations contain [brackets]
    console().print(t)
