"""Memory per GPU: the ledger picture (stacked bar per rank up to the GPU's total), the block pool
and the concurrency reconciliation (worst case vs pool)."""

from __future__ import annotations

from typing import Any

from kvdoctor.report.markup import esc
from kvdoctor.report.numbers import fmt_ratio
from kvdoctor.report.sections.common import (GiB, cell, gib_text, kv_table, log_ticks, num, source_of, table,
                                             with_figure)
from kvdoctor.report.sections.common import base_layout as _base_layout
from kvdoctor.report.style import PLOT as COLORS

_MEM_PARTS = (
    ("weights", "weights_bytes"),
    ("activation", "activation_bytes"),
    ("non_torch", "non_torch_bytes"),
    ("cudagraph", "cudagraph_bytes"),
    ("kv_cache", "kv_cache_bytes"),
)
_MEM_LABEL = {
    "weights": "weights",
    "activation": "activation peak",
    "non_torch": "non-torch",
    "cudagraph": "CUDA graphs",
    "kv_cache": "KV cache pool",
}


def _ranks(payload: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    ranks = payload.get("ranks")
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(ranks, list) and ranks:
        for i, r in enumerate(ranks):
            if not isinstance(r, dict):
                continue
            mem = r.get("memory") if isinstance(r.get("memory"), dict) else r
            if r.get("label"):
                name = r["label"]
            elif "rank" in r:
                name = f"GPU {r['rank']}"
            elif "tp_rank" in r or "pp_rank" in r:  # ledger/1 lists distinct (tp, pp) ranks
                name = f"TP{r.get('tp_rank', 0)} PP{r.get('pp_rank', 0)}"
            else:
                name = f"GPU {i}"
            out.append((str(name), mem))
    if not out and isinstance(payload.get("memory"), dict):
        out.append(("GPU 0" if not payload.get("ranks") else "GPU", payload["memory"]))
    return out


def ledger_section(page, payload: dict[str, Any]) -> str:
    ranks = _ranks(payload)
    if not ranks:
        return ""
    names = [n for n, _ in ranks]
    data: list[dict[str, Any]] = []
    for part, key in _MEM_PARTS:
        ys = [num(m.get(key)) for _, m in ranks]
        if all(y is None for y in ys):
            continue
        data.append(_mem_bar(_MEM_LABEL[part], names, ys, COLORS[part], [m.get(key) for _, m in ranks]))
    # what the parts do not explain inside the request (rounding, fragmentation) and what lies
    # above gpu_memory_utilization: both drawn so the bar reaches the GPU's total
    unacc, head = [], []
    for _, m in ranks:
        req, tot = num(m.get("requested_bytes")), num(m.get("total_bytes"))
        used = sum(num(m.get(k)) or 0.0 for _, k in _MEM_PARTS)
        unacc.append(max(req - used, 0.0) if req is not None else None)
        head.append(max(tot - (req if req is not None else used), 0.0) if tot is not None else None)
    if any(u for u in unacc if u):
        data.append(_mem_bar("unaccounted in request", names, unacc, COLORS["unaccounted"], None))
    if any(h for h in head if h):
        data.append(_mem_bar("above gpu_memory_utilization", names, head, COLORS["headroom"], None))
    layout = _base_layout(None, height=max(300, 120 + 60 * len(names)))
    layout.update({
        "barmode": "stack",
        "xaxis": {"title": {"text": "GiB"}, "zeroline": True},
        "yaxis": {"automargin": True, "autorange": "reversed"},
        "legend": {"orientation": "h", "y": -0.25},
    })
    parts = [page.plot({"data": data, "layout": layout})]

    m0 = dict(ranks[0][1])
    # ledger/1 keeps bare numbers in memory{} and the provenance in figures{"memory.weights": Figure}
    for part in ("total", "requested", *[p for p, _ in _MEM_PARTS]):
        m0[f"{part}_bytes"] = with_figure(payload, f"memory.{part}", m0.get(f"{part}_bytes"))
    mem_rows = [
        ("total", m0.get("total_bytes")), ("requested (utilization × total)", m0.get("requested_bytes")),
        *[(_MEM_LABEL[p], m0.get(k)) for p, k in _MEM_PARTS],
    ]
    rows = [[f"<th>{esc(k)}</th>", cell(v, numeric=True, text=gib_text(v))] for k, v in mem_rows if v is not None]
    if rows:
        parts.append(f"<h3>{esc(ranks[0][0])}</h3>" + table(["figure", "value"], rows))

    kv = dict(payload.get("kv_cache")) if isinstance(payload.get("kv_cache"), dict) else {}
    for k in list(kv):
        kv[k] = with_figure(payload, f"kv_cache.{k}", kv[k])
    if kv:
        parts.append("<h3>KV block pool</h3>" + kv_table([
            ("block size (tokens)", kv.get("block_size"), ""),
            ("bytes per block", kv.get("bytes_per_block"), "B"),
            ("blocks", kv.get("num_blocks"), ""),
            ("tokens", kv.get("tokens"), ""),
            ("max concurrency (vLLM's figure)", kv.get("max_concurrency"), "×"),
        ]))
    rec = payload.get("reconciliation") if isinstance(payload.get("reconciliation"), dict) else {}
    if rec:
        parts.append(_reconciliation(page, rec))
    return "".join(parts)


def _mem_bar(name: str, ys_names: list[str], values: list[float | None], color: str, raw: list[Any] | None):
    x = [None if v is None else round(v / GiB, 3) for v in values]
    hover = []
    for i, v in enumerate(values):
        src, how = source_of(raw[i]) if raw else (None, None)
        extra = f"<br>{esc(src)}: {esc(how or '')}" if src else ""
        hover.append(f"{esc(name)}: {'—' if v is None else f'{v / GiB:.2f} GiB'}{extra}")
    return {
        "type": "bar", "orientation": "h", "name": name, "y": [esc(n) for n in ys_names], "x": x,
        "marker": {"color": color, "line": {"color": "#adb5bd", "width": 0.5}},
        "hovertext": hover, "hoverinfo": "text",
    }


def _reconciliation(page, rec: dict[str, Any]) -> str:
    worst, pool = num(rec.get("worst_case_tokens")), num(rec.get("pool_tokens"))
    verdict = rec.get("verdict")
    ratio = num(rec.get("ratio"))
    bad = (ratio is not None and ratio > 1.0) or (worst is not None and pool is not None and worst > pool)
    cls = "verdict-bad" if bad else "verdict-ok"
    html = "<h3>Concurrency reconciliation</h3>"
    html += kv_table([
        ("worst case (max-num-seqs × max-model-len)", rec.get("worst_case_tokens"), "tokens"),
        ("KV pool", rec.get("pool_tokens"), "tokens"),
    ])
    if ratio is not None:
        html = html.replace("</tbody></table>", "<tr><th>worst case ÷ pool</th>"
                            + cell(rec.get("ratio"), numeric=True, text=fmt_ratio(ratio)) + "</tr></tbody></table>", 1)
    if verdict is not None:
        html += f'<p class="{cls}">{esc(verdict)}</p>'
    if worst is not None and pool is not None:
        fig = {
            "data": [{
                "type": "bar", "orientation": "h", "y": ["worst case", "KV pool"], "x": [worst, pool],
                "marker": {"color": [COLORS["preempt"] if bad else COLORS["running"], COLORS["kv"]]},
                "hovertemplate": "%{y}: %{x:,.0f} tokens<extra></extra>",
            }],
            "layout": {**_base_layout(None, height=200), "xaxis": _token_axis(worst, pool), "showlegend": False},
        }
        html += page.plot(fig, height=200)
    return html




def _token_axis(worst: float, pool: float) -> dict[str, Any]:
    """A worst case 100× the pool would leave the pool bar invisible: log scale (decade ticks) then."""
    lo, hi = min(worst, pool), max(worst, pool)
    if lo > 0 and hi / lo > 20:
        return {"title": {"text": "tokens (log scale)"}, "type": "log", **log_ticks([lo, hi])}
    return {"title": {"text": "tokens"}}
