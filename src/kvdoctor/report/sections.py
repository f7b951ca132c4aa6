"""Report sections, one builder per payload kind. Each reads plain JSON dicts (docs/report.md) and
returns escaped HTML plus plotly figure specs (plain dicts, so plotly's Python package is not needed
to build them; only its bundled plotly.min.js is inlined).

Numbers may arrive bare (``123``) or as a provenance Figure dict (``{"value": 123, "source":
"measured", "how": "..."}``); both are accepted everywhere and the source is shown when present.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
import re
from typing import Any

from kvdoctor.chains.findings import normalize_severity, severity_style
from kvdoctor.report.html import RAW_JSON_LIMIT, esc
from kvdoctor.report.terminal import fmt_value
from kvdoctor.units import gib_text as units_gib_text

GiB = float(1 << 30)

# Order of sections in the page, whatever order the payloads came in.
_ORDER = ("ledger", "plan", "timeline", "slow", "findings", "journal", "summaries", "raw")

COLORS = {
    "weights": "#4c6ef5",
    "activation": "#f59f00",
    "non_torch": "#868e96",
    "cudagraph": "#ae3ec9",
    "kv_cache": "#12b886",
    "unaccounted": "#dee2e6",
    "headroom": "#f1f3f5",
    "kv": "#12b886",
    "running": "#4c6ef5",
    "waiting": "#f76707",
    "preempt": "#e03131",
    "tbt": "#1d2330",
    "spike": "#e03131",
    "spike_free": "#f59f00",
    "queue": "#f76707",
    "prefill": "#4c6ef5",
    "decode": "#12b886",
}


# --------------------------------------------------------------------------------------------
# small helpers
# --------------------------------------------------------------------------------------------


def num(x: Any) -> float | None:
    """A number from a bare value or a Figure dict; None for missing / non-numeric / NaN."""
    if isinstance(x, dict) and "value" in x:
        x = x["value"]
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return None if (isinstance(x, float) and not math.isfinite(x)) else float(x)
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def source_of(x: Any) -> tuple[str | None, str | None]:
    if isinstance(x, dict) and "source" in x:
        return (str(x.get("source")), str(x.get("how") or "") or None)
    return (None, None)


def fmt(x: Any, unit: str = "") -> str:
    """Human text for a value (escaped by the caller's cell())."""
    if isinstance(x, dict) and "value" in x:
        x = x["value"]
    if x is None:
        return "—"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        if not math.isfinite(x):
            return "—"
        if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-3):
            s = f"{x:.3g}"
        elif abs(x) >= 100:
            s = f"{x:,.0f}"
        else:
            s = f"{x:.3g}"
    elif isinstance(x, int):
        s = f"{x:,}"
    elif isinstance(x, (list, dict)):
        s = json.dumps(x, default=str)
    else:
        s = str(x)
    return f"{s} {unit}".rstrip() if unit else s


def gib_text(b: Any) -> str:
    return units_gib_text(num(b))


def cell(x: Any, unit: str = "", *, numeric: bool | None = None, text: str | None = None) -> str:
    """A <td> with the value and, for Figure dicts, a source badge whose title is ``how``."""
    shown = text if text is not None else fmt(x, unit)
    src, how = source_of(x)
    badge = ""
    if src:
        badge = f' <span class="src src-{esc(src)}" title="{esc(how or "")}">{esc(src)}</span>'
    is_num = numeric if numeric is not None else num(x) is not None
    cls = ' class="num"' if is_num else ""
    return f"<td{cls}>{esc(shown)}{badge}</td>"


def table(headers: list[str], rows: list[list[str]]) -> str:
    """rows hold ready <td> strings (from cell()); headers are escaped here."""
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def kv_table(pairs: list[tuple[str, Any, str]]) -> str:
    rows = [[f"<th>{esc(k)}</th>", cell(v, unit)] for k, v, unit in pairs if v is not None]
    return "<table><tbody>" + "".join("<tr>" + "".join(r) + "</tr>" for r in rows) + "</tbody></table>" if rows else ""


def with_figure(payload: dict[str, Any], dotted: str, value: Any) -> Any:
    """A bare value joined with its provenance from ``payload["figures"]`` when the verb keeps it
    there (flat ``{"memory.weights": Figure}`` or nested ``{"memory": {"weights": Figure}}``)."""
    if value is None or (isinstance(value, dict) and "source" in value):
        return value
    figs = payload.get("figures")
    if not isinstance(figs, dict):
        return value
    f = figs.get(dotted)
    if f is None:
        head, _, tail = dotted.partition(".")
        f = figs.get(head, {}).get(tail) if isinstance(figs.get(head), dict) else None
    if isinstance(f, dict) and "source" in f:
        return {"value": value, "source": f.get("source"), "how": f.get("how", "")}
    return value


def _label(payload: dict[str, Any]) -> str:
    """model @ gpu, whatever shape the verb used (strings or {"name": ...} objects)."""
    def name(v: Any) -> str | None:
        if isinstance(v, dict):
            v = v.get("name") or v.get("id") or v.get("value")
        return None if v is None else str(v)

    parts = [p for p in (name(payload.get("model")), name(payload.get("gpu"))) if p]
    label = " on ".join(parts)
    if isinstance(payload.get("engine"), str) and payload["engine"]:  # evidence: which engine lifetime
        label = f"{label} ({payload['engine']})" if label else str(payload["engine"])
    return label


def _base_layout(title: str | None = None, height: int = 360) -> dict[str, Any]:
    layout: dict[str, Any] = {
        "height": height,
        "margin": {"l": 70, "r": 20, "t": 40 if title else 20, "b": 50},
        "font": {"family": "-apple-system, Segoe UI, Roboto, Helvetica, Arial, sans-serif", "size": 12},
        "plot_bgcolor": "#ffffff",
        "paper_bgcolor": "#ffffff",
        "legend": {"orientation": "h", "y": -0.2},
        "hovermode": "closest",
    }
    if title:
        # plotly draws titles as SVG text and understands a few tags: escape so names show literally
        layout["title"] = {"text": esc(title), "x": 0.01, "font": {"size": 14}}
    return layout


# --------------------------------------------------------------------------------------------
# dispatcher
# --------------------------------------------------------------------------------------------


MAX_INSTANCE_TIMELINES = 6


def build_sections(page, payloads: list[dict[str, Any]], kinds: list[str]) -> None:
    buckets: dict[str, list[tuple[str, str, str]]] = {k: [] for k in _ORDER}

    def put(bucket: str, anchor: str, title: str, body: str) -> None:
        buckets[bucket].append((anchor, title, body))

    for payload, kind in zip(payloads, kinds):
        label = _label(payload)
        suffix = f" — {label}" if label else ""
        if kind == "ledger" or (isinstance(payload.get("memory"), dict) and kind not in ("journal",)):
            body = ledger_section(page, payload)
            if body:
                put("ledger", "memory", f"Memory per GPU{suffix}", body)
        if isinstance(payload.get("levels"), list) and payload["levels"]:
            put("plan", "plan", f"Plan: pool capacity per level{suffix}", plan_section(page, payload))
        if isinstance(payload.get("timeline"), dict):
            body = timeline_section(page, payload["timeline"], payload)
            if body:
                put("timeline", "timeline", f"Timeline ({kind}){suffix}", body)
        # diagnose/1 over several engines: one timeline per instance (the first few)
        # payloads may be hand-edited or truncated: a wrong type is skipped, never a crash (exit 3)
        raw_instances = payload.get("instances") if isinstance(payload.get("instances"), list) else []
        instances = [i for i in raw_instances if isinstance(i, dict) and isinstance(i.get("timeline"), dict)]
        for inst in instances[:MAX_INSTANCE_TIMELINES]:
            body = timeline_section(page, inst["timeline"], inst)
            if body:
                who = f"{inst.get('source') or ''} {inst.get('engine') or ''}".strip()
                put("timeline", "timeline", f"Timeline ({kind}): {who} — {inst.get('verdict') or ''}".rstrip(" —"), body)
        if len(instances) > MAX_INSTANCE_TIMELINES:
            put("timeline", "timeline-more", "More instances",
                f'<p class="note">{len(instances) - MAX_INSTANCE_TIMELINES} more instance timelines are in the raw payload.</p>')
        if isinstance(payload.get("slow_requests"), list) and payload["slow_requests"]:
            put("slow", "slow-requests", f"Slow requests{suffix}", slow_section(page, payload["slow_requests"]))
        if isinstance(payload.get("findings"), list) and payload["findings"]:
            put("findings", "findings", f"Findings ({kind}){suffix}", findings_section(payload["findings"]))
        if kind == "journal":
            put("journal", "journal", "Journal: " + str(_journal_name(payload)), journal_section(page, payload))
        summary = summary_section(payload, kind)
        if summary:
            put("summaries", f"summary-{kind}", f"{kind.capitalize()} summary{suffix}", summary)
        put("raw", f"raw-{kind}", f"Raw payload: {kind}", raw_section(payload))

    for bucket in _ORDER:
        for anchor, title, body in buckets[bucket]:
            page.add(anchor, title, body)


def raw_section(payload: dict[str, Any]) -> str:
    text = json.dumps(payload, indent=1, default=str, allow_nan=True)
    note = ""
    if len(text) > RAW_JSON_LIMIT:
        text = text[:RAW_JSON_LIMIT]
        note = f"<p class=\"note\">Truncated to the first {RAW_JSON_LIMIT:,} characters.</p>"
    return f"<details><summary>{esc(payload.get('schema_version'))}</summary>{note}<pre>{esc(text)}</pre></details>"


# --------------------------------------------------------------------------------------------
# memory (ledger)
# --------------------------------------------------------------------------------------------

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
        ("worst case (max_num_seqs × max_model_len)", rec.get("worst_case_tokens"), "tokens"),
        ("pool", rec.get("pool_tokens"), "tokens"),
        ("ratio (worst case / pool)", rec.get("ratio"), ""),
    ])
    if verdict is not None:
        html += f'<p class="{cls}">{esc(verdict)}</p>'
    if worst is not None and pool is not None:
        fig = {
            "data": [{
                "type": "bar", "orientation": "h", "y": ["worst case", "KV pool"], "x": [worst, pool],
                "marker": {"color": [COLORS["preempt"] if bad else COLORS["running"], COLORS["kv"]]},
                "hovertemplate": "%{y}: %{x:,.0f} tokens<extra></extra>",
            }],
            "layout": {**_base_layout(None, height=200), "xaxis": {"title": {"text": "tokens"}},
                       "showlegend": False},
        }
        html += page.plot(fig, height=200)
    return html


# --------------------------------------------------------------------------------------------
# plan (chain one staircase)
# --------------------------------------------------------------------------------------------


def flag_text(fc: Any) -> str:
    """plan/1 writes flag changes as {"kv_cache_dtype": "fp8"}; older drafts as a string."""
    if isinstance(fc, dict):
        return " ".join(f"--{str(k).replace('_', '-')} {v}" for k, v in fc.items())
    return "" if fc is None else str(fc)


def _plan_levels(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """The levels, led by the configuration before any change (plan/1 ``before{}``) as level 0."""
    levels = [lv for lv in payload["levels"] if isinstance(lv, dict)]
    before = payload.get("before")
    if isinstance(before, dict) and before.get("pool_tokens") is not None and not any(
            lv.get("level") in (0, "0") for lv in levels):
        levels = [{"level": 0, "title": "as configured", "enough": None, **before}] + levels
    return levels


def plan_section(page, payload: dict[str, Any]) -> str:
    levels = _plan_levels(payload)
    labels, pool, worst, colors, hover = [], [], [], [], []
    last_pool: float | None = None
    for i, lv in enumerate(levels):
        lvl = lv.get("level", i)
        title = str(lv.get("title") or lv.get("action") or ("baseline" if lvl in (0, "0") else ""))
        title = re.sub(r"^Level \d+:\s*", "", title)
        labels.append(esc(f"{lvl}: {title}" if title else str(lvl)))
        p = num(lv.get("pool_tokens"))
        applicable = lv.get("applicable", True) is not False and p is not None
        # a level that does not apply leaves the pool where the previous level left it
        pool.append(p if applicable else last_pool)
        last_pool = pool[-1]
        worst.append(num(lv.get("worst_case_tokens")))
        enough = lv.get("enough")
        colors.append("#ced4da" if not applicable else
                      COLORS["kv"] if enough is True else (COLORS["preempt"] if enough is False else "#868e96"))
        why = lv.get("why") or lv.get("enough_why") or ""
        hover.append(
            f"{esc(flag_text(lv.get('flag_change')) or title)}<br>pool: {fmt(lv.get('pool_tokens'))} tokens"
            f"<br>enough: {esc(fmt(enough))}" + ("" if applicable else "<br>not applicable")
            + (f"<br>{esc(str(why)[:160])}" if why else "")
        )
    for i in range(1, len(worst)):  # likewise for the worst case
        if worst[i] is None:
            worst[i] = worst[i - 1]
    data: list[dict[str, Any]] = [{
        "type": "scatter", "mode": "lines+markers", "name": "KV pool (tokens)", "x": labels, "y": pool,
        "line": {"shape": "hv", "color": COLORS["kv"], "width": 3},
        "marker": {"size": 12, "color": colors, "line": {"color": "#1d2330", "width": 1}},
        "hovertext": hover, "hoverinfo": "text",
    }]
    if any(w is not None for w in worst):
        data.append({
            "type": "scatter", "mode": "lines", "name": "worst case (max_num_seqs × max_model_len)",
            "x": labels, "y": worst, "line": {"shape": "hv", "dash": "dash", "color": COLORS["preempt"]},
        })
    else:
        rec = payload.get("reconciliation") if isinstance(payload.get("reconciliation"), dict) else {}
        w = num(rec.get("worst_case_tokens"))
        if w is not None:
            data.append({
                "type": "scatter", "mode": "lines", "name": "baseline worst case", "x": labels,
                "y": [w] * len(labels), "line": {"dash": "dot", "color": COLORS["preempt"]},
            })
    layout = _base_layout(None, height=380)
    ys = [v for tr in data for v in tr["y"] if v]
    # a worst case 50x the pool would flatten the staircase into the axis: use a log scale then
    log = bool(ys) and max(ys) / min(ys) > 20
    yaxis = {"title": {"text": "tokens" + (" (log scale)" if log else "")}}
    yaxis.update({"type": "log"} if log else {"rangemode": "tozero"})
    layout.update({"xaxis": {"type": "category", "automargin": True}, "yaxis": yaxis})
    html = page.plot({"data": data, "layout": layout})
    html += ('<p class="note">Marker colour: green = that level is enough, red = not enough, dark grey = not '
             "judged, light grey = the level does not apply (the pool stays where the previous level left it)."
             " The dashed line is the worst case the pool must hold.</p>")

    pred_keys: list[str] = []
    for lv in levels:
        for k in (lv.get("predicted") or {}) if isinstance(lv.get("predicted"), dict) else {}:
            if k not in pred_keys:
                pred_keys.append(k)
    rows = []
    for lv in levels:
        pred = lv.get("predicted") if isinstance(lv.get("predicted"), dict) else {}
        figs = lv.get("figures") if isinstance(lv.get("figures"), dict) else {}
        f = lambda k: figs.get(k) if isinstance(figs.get(k), dict) and lv.get(k) is not None else lv.get(k)  # noqa: E731
        rows.append([
            cell(lv.get("level")), cell(lv.get("title") or lv.get("action"), numeric=False),
            f"<td><code>{esc(flag_text(lv.get('flag_change')))}</code></td>",
            cell(f("pool_tokens")), cell(f("max_concurrency")), cell(f("ratio")),
            cell(lv.get("enough")), cell(lv.get("why") if lv.get("applicable") is False else lv.get("enough_why"), numeric=False),
            *[cell(pred.get(k)) for k in pred_keys],
        ])
    html += table(["level", "action", "flag change", "pool tokens", "max concurrency", "worst case / pool", "enough",
                   "why", *[f"predicted {k}" for k in pred_keys]], rows)
    return html


# --------------------------------------------------------------------------------------------
# timeline
# --------------------------------------------------------------------------------------------

MAX_EVENTS = 300
MAX_POINTS = 4000  # per series; peaks are kept when downsampling (a spike must not vanish)


def _series(tl: dict[str, Any], key: str) -> list[float | None] | None:
    v = tl.get(key)
    if not isinstance(v, list):
        return None
    return [num(x) for x in v]


def spike_indices(itl: list[float | None]) -> tuple[list[int], float | None]:
    """Samples whose TBT p99 exceeds twice the timeline's median TBT p99 (the report's definition,
    used only when the payload does not carry its own ``spikes``)."""
    vals = sorted(v for v in itl if v is not None)
    if len(vals) < 3:
        return [], None
    med = vals[len(vals) // 2]
    if med <= 0:
        return [], None
    thr = 2.0 * med
    return [i for i, v in enumerate(itl) if v is not None and v > thr], thr


def _downsample(n: int) -> list[list[int]]:
    """Index buckets so that at most MAX_POINTS remain."""
    if n <= MAX_POINTS:
        return [[i] for i in range(n)]
    step = math.ceil(n / MAX_POINTS)
    return [list(range(i, min(i + step, n))) for i in range(0, n, step)]


def _pool(values: list[float | None], buckets: list[list[int]], how: str) -> list[float | None]:
    out = []
    for b in buckets:
        vs = [values[i] for i in b if values[i] is not None]
        if not vs:
            out.append(None)
        elif how == "sum":
            out.append(sum(vs))
        else:
            out.append(max(vs))
    return out


def _times(t: list[float | None]) -> tuple[list[Any], bool]:
    """Epoch seconds become ISO strings (a date axis); relative seconds stay numbers."""
    nums = [x for x in t if x is not None]
    if nums and min(nums) > 1e9:
        return [
            None if x is None else _dt.datetime.fromtimestamp(x, _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
            for x in t
        ], True
    return list(t), False


def timeline_section(page, tl: dict[str, Any], payload: dict[str, Any]) -> str:
    t = _series(tl, "t")
    if not t:
        return ""
    n = len(t)

    def get(key: str, *alts: str) -> list[float | None] | None:
        for k in (key, *alts):
            s = _series(tl, k)
            if s is not None and len(s) == n and any(v is not None for v in s):
                return s
        return None

    kv = get("kv_usage_pct")
    running, waiting = get("running"), get("waiting")
    pre = get("preemptions")
    itl = get("itl_p99", "tbt_p99")
    ttft = get("ttft_p99")
    buckets = _downsample(n)
    tb = [t[b[0]] for b in buckets]
    x, is_date = _times(tb)

    # which rows exist decides the subplot grid
    gen, prompt = get("gen_tps"), get("prompt_tps")
    rows: list[str] = [r for r, s in (("kv", kv), ("queue", running or waiting), ("pre", pre), ("tbt", itl or ttft),
                                      ("tps", gen or prompt)) if s]
    if not rows:
        return ""
    nrows = len(rows)
    gap = 0.04
    h = (1.0 - gap * (nrows - 1)) / nrows
    layout = _base_layout(None, height=170 * nrows + 90)
    layout["hovermode"] = "x unified"
    layout["legend"] = {"orientation": "h", "y": 1.02, "yanchor": "bottom", "x": 0}
    layout["margin"]["t"] = 50
    data: list[dict[str, Any]] = []
    titles = {"kv": "KV usage %", "queue": "requests", "pre": "preemptions", "tbt": "latency (ms)", "tps": "tokens/s"}
    for r, row in enumerate(rows):
        ax = "" if r == 0 else str(r + 1)
        top = 1.0 - r * (h + gap)
        layout[f"yaxis{ax}"] = {"domain": [max(top - h, 0.0), top], "title": {"text": titles[row]}, "rangemode": "tozero"}
        layout[f"xaxis{ax}"] = {
            "anchor": f"y{ax}", "showticklabels": r == nrows - 1,
            **({"type": "date"} if is_date else {"title": {"text": "seconds"} if r == nrows - 1 else None}),
        }
        if r > 0:
            layout[f"xaxis{ax}"]["matches"] = "x"
        xa, ya = f"x{ax}", f"y{ax}"
        if row == "kv":
            data.append({"type": "scatter", "mode": "lines", "name": "KV usage %", "x": x, "y": _pool(kv, buckets, "max"),
                         "xaxis": xa, "yaxis": ya, "line": {"color": COLORS["kv"]}, "fill": "tozeroy"})
            layout[f"yaxis{ax}"]["range"] = [0, 105]
        elif row == "queue":
            if running:
                data.append({"type": "scatter", "mode": "lines", "name": "running", "x": x, "y": _pool(running, buckets, "max"),
                             "xaxis": xa, "yaxis": ya, "line": {"color": COLORS["running"]}})
            if waiting:
                data.append({"type": "scatter", "mode": "lines", "name": "waiting", "x": x, "y": _pool(waiting, buckets, "max"),
                             "xaxis": xa, "yaxis": ya, "line": {"color": COLORS["waiting"]}})
        elif row == "pre":
            data.append({"type": "bar", "name": "preemptions / interval", "x": x, "y": _pool(pre, buckets, "sum"),
                         "xaxis": xa, "yaxis": ya, "marker": {"color": COLORS["preempt"]}})
        elif row == "tbt":
            if itl:
                data.append({"type": "scatter", "mode": "lines", "name": "TBT p99 (ms)", "x": x,
                             "y": [None if v is None else v * 1000 for v in _pool(itl, buckets, "max")],
                             "xaxis": xa, "yaxis": ya, "line": {"color": COLORS["tbt"]}})
            if ttft:
                data.append({"type": "scatter", "mode": "lines", "name": "TTFT p99 (ms)", "x": x,
                             "y": [None if v is None else v * 1000 for v in _pool(ttft, buckets, "max")],
                             "xaxis": xa, "yaxis": ya, "line": {"color": "#74c0fc", "dash": "dot"}, "visible": "legendonly" if itl else True})

        elif row == "tps":
            if gen:
                data.append({"type": "scatter", "mode": "lines", "name": "generation tok/s", "x": x,
                             "y": _pool(gen, buckets, "max"), "xaxis": xa, "yaxis": ya, "line": {"color": "#2b8a3e"}})
            if prompt:
                data.append({"type": "scatter", "mode": "lines", "name": "prompt tok/s", "x": x,
                             "y": _pool(prompt, buckets, "max"), "xaxis": xa, "yaxis": ya,
                             "line": {"color": "#adb5bd", "dash": "dot"}})

    # aligned markers: every interval with a preemption is shaded across all rows, and every TBT
    # spike is marked on the latency row, coloured by whether a preemption sits within one sample
    pre_idx = [i for i in range(n) if pre and pre[i] and pre[i] > 0]
    note = ""
    shapes = []
    for start, end in _runs(pre_idx):
        x0 = _x_at(t, max(start - 1, 0), is_date) if start > 0 else _x_at(t, start, is_date)
        x1 = _x_at(t, end, is_date)
        shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": x0, "x1": x1, "y0": 0, "y1": 1,
                       "fillcolor": COLORS["preempt"], "opacity": 0.10, "line": {"width": 0}, "layer": "below"})
    if len(shapes) > 400:
        note += f" {len(shapes):,} preemption runs; the first 400 are shaded."
        shapes = shapes[:400]
    layout["shapes"] = shapes

    spikes_given = payload.get("spikes") if isinstance(payload.get("spikes"), list) else tl.get("spikes")
    if itl and "tbt" in rows:
        if isinstance(spikes_given, list):
            sp = [i for i in (_nearest(t, num(s)) for s in spikes_given) if i is not None]
            thr_txt = "spikes as reported by the payload"
        else:
            sp, thr = spike_indices(itl)
            thr_txt = f"spike: TBT p99 > 2 × median ({thr * 1000:.1f} ms)" if thr else ""
        pre_set = set(pre_idx)
        aligned = [i for i in sp if pre_set & {i - 1, i, i + 1}]
        loose = [i for i in sp if i not in set(aligned)]
        ax = "" if rows.index("tbt") == 0 else str(rows.index("tbt") + 1)
        for name, idx, color in (("spike with preemption", aligned, COLORS["spike"]),
                                 ("spike without preemption", loose, COLORS["spike_free"])):
            if idx:
                data.append({"type": "scatter", "mode": "markers", "name": name,
                             "x": [_x_at(t, i, is_date) for i in idx], "y": [itl[i] * 1000 for i in idx],
                             "xaxis": f"x{ax}", "yaxis": f"y{ax}",
                             "marker": {"color": color, "size": 9, "symbol": "x"}})
        if sp:
            note += (f" {len(sp)} TBT spike sample(s), {len(aligned)} aligned with a preemption "
                     f"(within one sample), {len(loose)} not. {thr_txt}.")
    if n > MAX_POINTS:
        note += f" {n:,} samples drawn as {len(buckets):,} buckets (max per bucket; preemptions summed)."
    # log events (v0 preemption warnings, OOMs, engine deaths...) as markers on the top row: in old
    # logs the warnings are the only preemption evidence there is
    events = [e for e in payload.get("events") or [] if isinstance(e, dict) and num(e.get("t")) is not None]
    if events:
        lo, hi = min(v for v in t if v is not None), max(v for v in t if v is not None)
        events = [e for e in events if lo - 60 <= num(e["t"]) <= hi + 60][:MAX_EVENTS]
    if events:
        y = 102 if rows[0] == "kv" else 0  # just above the KV-usage curve's 100 %
        data.append({
            "type": "scatter", "mode": "markers", "name": "log events",
            "x": [_x_at([num(e["t"])], 0, is_date) for e in events], "y": [y] * len(events),
            "xaxis": "x", "yaxis": "y", "marker": {"symbol": "triangle-down", "size": 10, "color": "#862e9c"},
            "hovertext": [esc(f"{e.get('kind')}: {str(e.get('message', ''))[:200]}") for e in events],
            "hoverinfo": "text",
        })
        note += f" {len(events)} log event(s) marked (▼)."
    html = page.plot({"data": data, "layout": layout}, height=170 * nrows + 90)
    html += ('<p class="note">Red bands: intervals with preemptions, across all rows.' + esc(note) + "</p>")
    return html


def _runs(idx: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for i in idx:
        if out and i == out[-1][1] + 1:
            out[-1] = (out[-1][0], i)
        else:
            out.append((i, i))
    return out


def _x_at(t: list[float | None], i: int, is_date: bool) -> Any:
    v = t[i]
    if v is None:
        return None
    return _times([v])[0][0] if is_date else v


def _nearest(t: list[float | None], ts: float | None) -> int | None:
    if ts is None:
        return None
    best, bd = None, math.inf
    for i, v in enumerate(t):
        if v is not None and abs(v - ts) < bd:
            best, bd = i, abs(v - ts)
    return best


# --------------------------------------------------------------------------------------------
# slow requests
# --------------------------------------------------------------------------------------------

MAX_SLOW = 50


def slow_section(page, reqs: list[Any]) -> str:
    reqs = [r for r in reqs if isinstance(r, dict)][:MAX_SLOW]
    ids = [esc(r.get("request_id", f"#{i}")) for i, r in enumerate(reqs)]
    data = []
    for key, name, color in (("queue_s", "queueing", COLORS["queue"]), ("preempted_s", "preemption", COLORS["preempt"]),
                             ("prefill_s", "prefill", COLORS["prefill"]), ("decode_s", "decode", COLORS["decode"])):
        ys = [num(r.get(key)) for r in reqs]
        if all(v is None for v in ys):
            continue
        data.append({"type": "bar", "orientation": "h", "name": name, "y": ids, "x": ys,
                     "marker": {"color": color}, "hovertemplate": f"{name}: %{{x:.3f}} s<extra></extra>"})
    layout = _base_layout(None, height=max(260, 90 + 26 * len(reqs)))
    layout.update({"barmode": "stack", "xaxis": {"title": {"text": "seconds"}},
                   "yaxis": {"type": "category", "automargin": True, "autorange": "reversed"}})
    html = page.plot({"data": data, "layout": layout}) if data else ""
    rows = [[cell(r.get("request_id"), numeric=False), cell(r.get("queue_s")), cell(r.get("preempted_s")),
             cell(r.get("prefill_s")), cell(r.get("decode_s")), cell(r.get("prompt_tokens")), cell(r.get("cause"), numeric=False)]
            for r in reqs]
    html += table(["request", "queue s", "preempted s", "prefill s", "decode s", "prompt tokens", "cause"], rows)
    return html


# --------------------------------------------------------------------------------------------
# findings
# --------------------------------------------------------------------------------------------


def findings_section(findings: list[Any]) -> str:
    """diagnose/1 findings: {id|rule_id|rule, title, summary, severity, evidence[cites], action, instance}."""
    with_instance = any(isinstance(f, dict) and f.get("instance") for f in findings)
    rows = []
    for f in findings:
        if not isinstance(f, dict):
            rows.append([cell(None), cell(None), cell(str(f), numeric=False), cell(None)] + ([cell(None)] if with_instance else []))
            continue
        sev = str(f.get("severity") or f.get("level") or "")
        # one vocabulary (chains.findings): the class names our word, the cell shows our word
        style = severity_style(sev)
        sev_cls, sev = (style[0], normalize_severity(sev)) if style else ("", sev)
        title = f.get("title") or f.get("symptom") or ""
        text = f.get("summary") or f.get("message") or f.get("detail") or ""
        cites = f.get("evidence") or f.get("root_cause") or ""
        if isinstance(cites, list):
            cites = "; ".join(_cite_text(c) for c in cites[:5])
        elif isinstance(cites, dict):
            cites = _cite_text(cites)
        body = f"<b>{esc(title)}</b><br>" if title and title != text else ""
        body += esc(text)
        if cites:
            body += f'<br><span class="note">{esc(str(cites)[:600])}</span>'
        row = [
            f"<td><code>{esc(f.get('rule') or f.get('id') or f.get('rule_id') or '')}</code></td>",
            (f'<td class="sev-{sev_cls}">{esc(sev)}</td>' if sev_cls else f"<td>{esc(sev)}</td>"),
            f"<td>{body}</td>",
            f"<td>{esc(flag_text(f.get('action')) if f.get('action') else '')}</td>",
        ]
        if with_instance:
            row.append(cell(f.get("instance"), numeric=False))
        rows.append(row)
    return table(["rule", "severity", "finding", "action"] + (["instance"] if with_instance else []), rows)


def _cite_text(c: Any) -> str:
    if isinstance(c, dict):
        where = c.get("line") or c.get("line_no") or c.get("t") or ""
        what = c.get("text") or c.get("message") or c.get("what") or c.get("value") or ""
        src = c.get("source") or ""
        return " ".join(str(x) for x in (src, f"line {where}" if where else "", what) if x)
    return str(c)


# --------------------------------------------------------------------------------------------
# journal
# --------------------------------------------------------------------------------------------

# figures drawn per step (key in step["figures"], label, scale to display unit)
JOURNAL_PLOTTED = (
    ("output_tps", "output tokens/s", 1.0),
    ("tbt_p99_s", "TBT p99 (ms)", 1000.0),
    ("ttft_p99_s", "TTFT p99 (ms)", 1000.0),
    ("preemptions_per_min", "preemptions / min", 1.0),
)


def _journal_name(payload: dict[str, Any]) -> str:
    j = payload.get("journal")
    if isinstance(j, dict):
        return str(j.get("name", ""))
    return str(j or "")


def journal_section(page, payload: dict[str, Any]) -> str:
    raw = payload.get("steps") if isinstance(payload.get("steps"), list) else []
    steps = [s for s in raw if isinstance(s, dict)]
    if not steps:
        return '<p class="note">No steps recorded.</p>'
    labels = [esc(f"#{s.get('seq')} {_change_text(s)}") for s in steps]
    # one small chart per figure: their units differ by orders of magnitude
    html = ""
    for key, name, scale in JOURNAL_PLOTTED:
        ys = [num(_as_dict(s.get("figures")).get(key)) for s in steps]
        preds = [num(_as_dict(s.get("predicted")).get(key)) for s in steps]
        if all(v is None for v in ys) and all(p is None for p in preds):
            continue
        data = [{"type": "scatter", "mode": "lines+markers", "name": "measured", "x": labels,
                 "y": [None if v is None else v * scale for v in ys], "line": {"color": COLORS["running"]}}]
        if any(p is not None for p in preds):
            data.append({"type": "scatter", "mode": "markers", "name": "predicted", "x": labels,
                         "y": [None if v is None else v * scale for v in preds],
                         "marker": {"symbol": "diamond-open", "size": 11, "color": COLORS["waiting"]}})
        layout = _base_layout(name, height=260)
        layout.update({"xaxis": {"type": "category", "automargin": True}, "yaxis": {"rangemode": "tozero"}})
        html += page.plot({"data": data, "layout": layout}, height=260)
    if html:
        html += '<p class="note">Measured after each step; open diamonds: kvdoctor\'s prediction for that step.</p>'
    keys = [k for k, _, _ in JOURNAL_PLOTTED]
    extra = []
    for s in steps:
        for k in _as_dict(s.get("figures")):
            if k not in keys and k not in extra:
                extra.append(k)
    cols = [k for k in keys + extra if any(k in _as_dict(s.get("figures")) for s in steps)]
    meta = payload.get("figures") if isinstance(payload.get("figures"), dict) else {}

    def head(k: str) -> str:
        m = meta.get(k) if isinstance(meta.get(k), dict) else {}
        unit = m.get("unit", "")
        return f"{m.get('label', k)}" + (f" ({'ms' if unit == 's' else unit})" if unit else "")

    def fig_cell(k: str, f: Any) -> str:
        m = meta.get(k) if isinstance(meta.get(k), dict) else {}
        return cell(f, numeric=True, text=fmt_value(f, m.get("unit", "")).replace(" ms", "") if m.get("unit") == "s"
                    else fmt_value(f))
    rows = []
    for s in steps:
        figs = _as_dict(s.get("figures"))
        flags = []
        if s.get("multi"):
            flags.append("several variables (forced)")
        # the terminal and the Markdown handbook show the caution; the HTML report must not drop it
        mismatch = (s.get("evidence") or {}).get("mismatch") if isinstance(s.get("evidence"), dict) else None
        if mismatch:
            flags.append(f"caution: {mismatch}")
        rows.append([
            cell(s.get("seq")), cell(s.get("created_at"), numeric=False),
            f"<td>{esc(_change_text(s))}{'<br><b>' + esc(', '.join(flags)) + '</b>' if flags else ''}</td>",
            cell(s.get("note"), numeric=False),
            *[fig_cell(k, figs.get(k)) for k in cols],
        ])
    html += table(["step", "when", "change", "note", *[head(k) for k in cols]], rows)
    if isinstance(payload.get("handbook"), dict):
        html += handbook_html(payload["handbook"])
    return html


def _as_dict(x: Any) -> dict[str, Any]:
    """A hand-edited payload may hold a list or a string where a dict belongs: read it as empty."""
    return x if isinstance(x, dict) else {}


def handbook_html(hb: dict[str, Any]) -> str:
    """What each variable did to which figure (journal handbook --html)."""
    parts = ["<h3>Handbook: what each variable did on this traffic</h3>",
             '<p class="note">Changes under 5 % are called flat: one before/after pair has no error bars.</p>']
    variables = [v for v in hb.get("variables") or [] if isinstance(v, dict)]
    if not variables:
        parts.append('<p class="note">No variable has been changed yet.</p>')
    for var in variables:
        parts.append(f"<h3><code>{esc(var.get('field'))}</code></h3><p><b>On this traffic:</b> {esc(var.get('lesson'))}</p>")
        rows = []
        for e in var.get("steps") or []:
            b, a = e.get("before"), e.get("after")
            change = f"#{e.get('seq')}: {'unset' if b is None else fmt(b)} → {'unset' if a is None else fmt(a)}"
            if e.get("multi"):
                change += f" (together with {', '.join(map(str, e.get('also_changed') or []))})"
            effects = e.get("effects") or [{}]
            for x in effects:
                rel = x.get("rel")
                verdict = x.get("verdict") or ""
                cls = {"better": "verdict-ok", "worse": "verdict-bad"}.get(verdict, "")
                unit = x.get("unit", "")
                rows.append([
                    f"<td>{esc(change)}</td>", cell(x.get("label"), numeric=False),
                    cell(x.get("before"), numeric=True, text=fmt_value(x.get("before"), unit)),
                    cell(x.get("after"), numeric=True, text=fmt_value(x.get("after"), unit)),
                    cell(rel, numeric=True, text="—" if rel is None else f"{rel * 100:+.1f} %"),
                    f'<td class="{cls}">{esc(verdict)}</td>',
                    cell(x.get("predicted"), numeric=True, text=fmt_value(x.get("predicted"), unit)),
                ])
        parts.append(table(["step", "figure", "before", "after", "change", "verdict", "predicted"], rows))
    return "".join(parts)


def _change_text(step: dict[str, Any]) -> str:
    ch = step.get("changes")
    if step.get("kind") == "baseline":
        return "baseline"
    if not ch:
        return "re-measure (no change)"
    parts = []
    for c in ch:
        if isinstance(c, dict):
            b, a = c.get("before"), c.get("after")
            parts.append(f"{c.get('field')}: {'unset' if b is None else fmt(b)} → {'unset' if a is None else fmt(a)}")
    return "; ".join(parts)


# --------------------------------------------------------------------------------------------
# generic summaries (simulate, swap, check, evidence...)
# --------------------------------------------------------------------------------------------

# shown in their own sections, or provenance of values shown elsewhere (figures{}, sources{})
_SKIP_TOP = {"schema_version", "timeline", "levels", "slow_requests", "findings", "memory", "kv_cache",
             "reconciliation", "ranks", "steps", "spikes", "figures", "sources", "handbook", "events"}


def summary_section(payload: dict[str, Any], kind: str) -> str:
    """Scalars at the top level and in ``summary`` (one level of nesting flattened)."""
    pairs: list[tuple[str, Any, str]] = []
    # the verb's own summary{} first: it is what the reader came for
    keys = sorted(payload, key=lambda k: 0 if k == "summary" else 1)
    for key in keys:
        val = payload[key]
        if key in _SKIP_TOP:
            continue
        if isinstance(val, dict) and not ("value" in val and "source" in val):
            for k2, v2 in val.items():
                if _scalar(v2):
                    v2 = with_figure(payload, f"{key}.{k2}", v2)
                    if key == "summary":
                        v2 = with_figure(payload, k2, v2)
                    pairs.append((f"{key}.{k2}", v2, ""))
        elif _scalar(val):
            pairs.append((key, val, ""))
    if kind == "journal":
        return ""
    html = kv_table(pairs[:80])
    # {scenario: {figure: scalar}} (demo's simulated runs, swap's before/after): one comparison table
    for key, val in payload.items():
        if key in _SKIP_TOP or not isinstance(val, dict) or len(val) < 2:
            continue
        rows = {k: v for k, v in val.items() if isinstance(v, dict) and v and all(_scalar(x) for x in v.values())}
        if len(rows) < 2 or len(rows) != len(val):
            continue
        cols: list[str] = []
        for v in rows.values():
            cols += [c for c in v if c not in cols]
        html += f"<h3>{esc(key)}</h3>" + table([key, *cols], [
            [f"<th>{esc(name)}</th>", *[cell(v.get(c)) for c in cols]] for name, v in rows.items()])
    return html


def _scalar(v: Any) -> bool:
    return isinstance(v, (str, int, float, bool)) or (isinstance(v, dict) and "value" in v and "source" in v and _scalar(v["value"]))
