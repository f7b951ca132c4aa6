"""What each verb prints under ``--quiet``: only what the verb exists to give, on one line (or a
list of names, one per line, for the listing verbs), or nothing on success for verbs whose product
is a file or a stored step. The contract is documented in docs/cli.md ("--quiet") and tested for
every verb (tests/e2e/test_quiet_contract.py).

Pure functions of the ``--json`` payload (or the verb's result object), so the line is the same
whatever printed it; numbers are rounded the way the rest of the terminal rounds them.
"""

from __future__ import annotations

from typing import Any

from kvdoctor.report.numbers import fmt_ratio, fmt_value, value_of


def _first(text: Any, limit: int = 160) -> str:
    """One sentence of a longer text, whitespace collapsed."""
    s = " ".join(str(text or "").split())
    return s if len(s) <= limit else s[: limit - 1].rstrip() + "…"


def ledger_line(model: str, gpu: str, rec: dict[str, Any], kv: dict[str, Any] | None = None,
                fit_ok: bool = True, startup_error: str | None = None) -> str:
    """``starved: worst case ÷ KV pool 146× — Qwen/Qwen2.5-14B on NVIDIA L40S (pool 57,280 tokens, max concurrency 1.75)``"""
    if not fit_ok:
        return f"does-not-fit: {model} on {gpu}: {_first(startup_error)}"
    kv = kv or {}
    extra = []
    if rec.get("pool_tokens") is not None:
        extra.append(f"pool {fmt_value(rec.get('pool_tokens'))} tokens")
    if value_of(kv.get("max_concurrency")) is not None:
        extra.append(f"max concurrency {fmt_value(value_of(kv.get('max_concurrency')))}")
    tail = f" ({', '.join(extra)})" if extra else ""
    return f"{rec.get('verdict')}: worst case ÷ KV pool {fmt_ratio(rec.get('ratio'))} — {model} on {gpu}{tail}"


def plan_line(payload: dict[str, Any]) -> str:
    """The resulting ``vllm serve`` line: what chain one exists to give."""
    return str((payload.get("result") or {}).get("serve") or "")


def check_line(payload: dict[str, Any]) -> str:
    """Nothing when the gate passes (exit 0 says it); the reasons on one line when it fails."""
    if payload.get("ok"):
        return ""
    rec = payload.get("reconciliation") or {}
    reasons = []
    for r in payload.get("reasons") or []:
        if str(r).startswith(("starved:", "worst case / pool")) and rec.get("ratio") is not None:
            # the chain's sentence carries the raw ratio (146.4492): say it rounded, as everywhere else
            limit = payload.get("max_ratio")
            r = f"worst case ÷ pool {fmt_ratio(rec['ratio'])}" + (
                f" > --max-ratio {limit:g}" if isinstance(limit, (int, float)) else "")
        reasons.append(_first(r, 200))
    return "fail: " + "; ".join(reasons) if reasons else "fail"


def swap_line(payload: dict[str, Any]) -> str:
    probs = [f for f in payload.get("findings") or [] if f.get("severity") == "problem"]
    change = payload.get("capacity_change")
    pool = f"KV pool {change * 100:+.0f} %" if isinstance(change, (int, float)) else ""
    if not probs:
        return f"ok: {payload.get('from')} → {payload.get('to')} on {payload.get('gpu')}" + (f" ({pool})" if pool else "")
    f = probs[0]
    action = f" — next: {f['action']}" if f.get("action") else ""
    return f"problem: {_first(f.get('title') or f.get('summary'))} ({pool}){action}"


def diagnose_line(payload: dict[str, Any]) -> str:
    insts = payload.get("instances") or []
    conf = f" (confidence {payload['confidence']})" if payload.get("confidence") else ""  # diagnose/2
    if len(insts) > 1:
        counts = (payload.get("fleet") or {}).get("counts") or {}
        return (f"{payload.get('verdict')}{conf}: {len(insts)} instances ("
                + ", ".join(f"{n} {v}" for v, n in counts.items()) + ")")
    return f"{payload.get('verdict')}{conf}: {_first(payload.get('reason'), 240)}"


def simulate_line(summary: dict[str, Any]) -> str:
    s = summary
    return (f"completed {s.get('completed')}/{s.get('requests')}, rejected {s.get('rejected')}, "
            f"preemptions {s.get('preemptions')}, output {fmt_value(s.get('output_tokens_per_s'), 'tok/s')}, "
            f"TTFT p99 {fmt_value(s.get('ttft_p99_s'), 's')}, TBT p99 {fmt_value(s.get('tbt_p99_s'), 's')}")


def evidence_line(doc: dict[str, Any]) -> str:
    s = doc.get("summary") or {}
    parts = [f"{fmt_value(s.get('samples'))} samples", f"{s.get('segments')} segment(s)"]
    if s.get("max_kv_usage_pct") is not None:
        parts.append(f"KV peak {fmt_value(s['max_kv_usage_pct'], '%')}")
    if s.get("preemptions") is not None:
        parts.append(f"{fmt_value(s['preemptions'])} preemptions")
    if s.get("requests"):
        parts.append(f"{fmt_value(s['requests'])} requests")
    if s.get("bench_results"):
        parts.append(f"{s['bench_results']} bench result(s)")
    return ", ".join(parts)


def demo_line(payload: dict[str, Any]) -> str:
    case = payload.get("case") or {}
    serve = plan_line(payload.get("plan") or {})
    change = (payload.get("swap") or {}).get("capacity_change")
    pool = f"KV pool {change * 100:+.0f} %" if isinstance(change, (int, float)) else ""
    return f"{case.get('from')} → {case.get('to')} on {case.get('gpu')}: {pool}; next: {serve}"


def experiment_line(rec: dict[str, Any]) -> str:
    """The experiment's verdict (the chain's when several steps ran), or its status and reason."""
    steps = rec.get("steps") or []
    if rec.get("verdict") and len(steps) > 1:
        return f"{rec['verdict']}: {_first(rec.get('verdict_why'), 240)}"
    if steps and steps[-1].get("verdict"):
        return f"{steps[-1]['verdict']}: {_first(steps[-1].get('verdict_why'), 240)}"
    return f"{rec.get('status')}" + (f": {_first(rec.get('reason'), 240)}" if rec.get("reason") else "")


def calibrate_line(p: dict[str, Any]) -> str:
    """``wrote cal.json; held-out median |error|: output throughput 4%, mean ttft ms 12%`` (and, when a load ran twice,
    ``; one load run twice moved up to ...``: the host's own noise)."""
    fit = p.get("fit") or {}
    label, err = ("held-out", fit.get("held_out_median_abs_error")) if fit.get("held_out_median_abs_error") else (
        "fit (no held-out run)", fit.get("fit_median_abs_error"))
    parts = [f"{str(k).replace('_', ' ')} {v:.0%}" for k, v in (err or {}).items() if isinstance(v, (int, float))]
    rep = (fit.get("repeatability") or {}).get("max_abs_moved") or {}
    moved = [f"{str(k).replace('_', ' ')} {v:.0%}" for k, v in rep.items() if isinstance(v, (int, float))]
    return (f"wrote {p.get('calibration_file')}" + (f"; {label} median |error|: " + ", ".join(parts) if parts else "")
            + (f"; one load run twice moved up to " + ", ".join(moved) if moved else ""))


def journal_step_line(step: dict[str, Any]) -> str:
    """``#2 kv_cache_dtype: unset → fp8 · output throughput 930 tok/s · TBT p99 61 ms``"""
    from kvdoctor.journal.figures import FIGURES
    from kvdoctor.report.terminal import change_text

    figs = step.get("figures") or {}
    shown = [f"{FIGURES[k][0]} {fmt_value(figs[k], FIGURES[k][1])}" for k in
             ("output_tps", "tbt_p99_s", "ttft_p99_s", "preemptions_per_min") if k in figs]
    return " · ".join([f"#{step.get('seq')} {change_text(step.get('changes'), step.get('kind', 'step'))}", *shown])


def journal_compare_line(payload: dict[str, Any]) -> str:
    c = payload.get("compare") or {}
    bits = []
    for r in c.get("figures") or []:
        d = r.get("delta") or {}
        if d.get("rel") is not None:
            bits.append(f"{r.get('label')} {d['rel'] * 100:+.1f} % {d.get('verdict')}")
    return f"#{c.get('a')} → #{c.get('b')}: " + ("; ".join(bits) if bits else "no figure measured on both steps")
