"""Terminal rendering of an experiment record (stdout); progress went to stderr while it ran."""

from __future__ import annotations

from typing import Any


def _num(v: Any, unit: str) -> str:
    if v is None:
        return "—"
    if unit == "s":
        return f"{v * 1000:.1f} ms" if abs(v) < 1 else f"{v:.2f} s"
    if isinstance(v, float) and not v.is_integer():
        return f"{v:,.1f}"
    return f"{int(v):,}"


def _pct(v: Any) -> str:
    return "—" if v is None else f"{v:+.0%}"


def render(rec: dict[str, Any], c: Any) -> None:
    """`c` is the rich console the CLI hands in (the library never imports the CLI)."""
    from rich.table import Table

    c.print(f"kvdoctor experiment — {rec['status']}" + (f": {rec['reason']}" if rec.get("reason") else ""))
    c.print(f"load: {rec['load_text']}")
    if rec.get("warmup"):
        c.print(f"warm-up: {rec['warmup']['requests']} requests of the same load (seed {rec['warmup']['seed']}) sent "
                "to each server first and discarded")
    v = rec.get("vllm_version") or {}
    if v.get("value"):  # markup off: the "how" may quote a command line with brackets
        c.print(f"predicted for vLLM {v['value']} ({v.get('how') or 'default'})", markup=False)
    for st in rec.get("steps", []):
        ch = st.get("change") or {}
        title = st.get("title") or f"{ch.get('field')}: {ch.get('before')} -> {ch.get('after')}"
        t = Table(title=f"{st['from']} -> {st['to']}: {title}", title_justify="left")
        for h in ("figure", "measured before", "measured after", "change", "", "predicted change", "prediction error"):
            t.add_column(h)
        for r in st["comparison"]:
            err = r.get("error_change_points")
            t.add_row(r["label"], _num(r["measured_before"], r["unit"]), _num(r["measured_after"], r["unit"]),
                      _pct(r["measured_change"]), r.get("call") or "", _pct(r.get("predicted_change")),
                      "—" if err is None else f"{err:+.0f} pts")
        c.print(t)
        if (st.get("host") or {}).get("text"):
            c.print(st["host"]["text"], markup=False)
        c.print(f"verdict: {st['verdict']} — {st['verdict_why']}", markup=False)
    if not rec.get("steps") and rec.get("measured"):
        for label, figs in rec["measured"].items():
            show = {k: v["value"] for k, v in figs.items() if k in ("output_tps", "ttft_p99_s", "preemptions", "waiting_peak")}
            c.print(f"{label}: {show}")
    if rec.get("verdict") and len(rec.get("steps", [])) > 1:
        c.print(f"chain verdict: {rec['verdict']} — {rec['verdict_why']}")
    for j in rec.get("journal_steps", []):
        c.print(f"journal {j['journal']!r}: step #{j['seq']} ({j['run']})")
    for n in rec.get("journal_notes", []):
        c.print(f"journal {n['journal']!r}: note on step #{n['seq']}")
    c.print(f"files: {rec['directory']}")
