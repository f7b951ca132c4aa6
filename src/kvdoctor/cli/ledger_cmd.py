"""``kvdoctor ledger``: how vLLM will split each GPU's memory and what the KV pool holds.

Thin: parse the shared options, resolve the inputs, call ``ledger.build.build_ledger``, render.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from kvdoctor.cli import app
from kvdoctor.cli import common
from kvdoctor.units import gib_text


@app.command("ledger")
@common.config_options
def ledger(
    opts: common.ConfigOptions,
    json_out: common.JsonOpt = False,
    quiet: common.QuietOpt = False,
    # Declared here rather than with report.html.html_option(): importing the report module at
    # start-up would cost the ledger verb ~10 ms of its 0.3 s budget.
    html: Optional[Path] = typer.Option(
        None, "--html", metavar="FILE", dir_okay=False,
        help="Also write a self-contained HTML report (offline, plotly inlined) to FILE.",
    ),
) -> None:
    """The memory ledger (显存对账): total → requested → weights, activation, non-torch, CUDA graphs →
    KV budget → page, block, blocks, tokens, max concurrency, and the concurrency reconciliation.

    Every figure shows its source (measured / given / predicted / default) and its derivation.
    """
    log_info = scan_log(opts.from_log, quiet=quiet or json_out) if opts.from_log else None
    # scan_log already ran the start-up collector over every line: hand its facts on so the log is
    # read once (a multi-GB log would otherwise be parsed twice).
    from kvdoctor.errors import UnknownGpuError, UnknownModelError

    try:
        inputs = common.resolve_inputs(opts, startup=log_info["startup"] if log_info is not None else None)
    except (UnknownModelError, UnknownGpuError) as exc:
        if log_info is None:
            raise
        _log_only(log_info, str(exc), json_out=json_out, quiet=quiet, html=html)
        return
    led = inputs.ledger
    notes = list(inputs.notes)
    if log_info is not None:
        notes.insert(0, log_info["summary"])
    led.notes[:0] = notes
    if log_info is not None and (died := _died_at_start(log_info["startup"], led.startup_error)) is not None:
        led.notes.insert(0, died)
    if (json_out or html is not None) and _payload_out(led.to_json(), log_info, html, f"{led.model} on {led.gpu}",
                                                       json_out=json_out, quiet=quiet):
        return
    if quiet:  # docs/cli.md "--quiet": the reconciliation verdict, one line
        from kvdoctor.report.oneline import ledger_line
        from kvdoctor.report.terminal import one_line

        one_line(ledger_line(led.model, led.gpu, led.reconciliation, led.kv, led.fit_ok, led.startup_error))
        return
    render(led, quiet=quiet)


def _died_at_start(st: Any, predicted: str | None) -> str | None:
    """The log's own start ended in an error that is no KV refusal (a death while the pool's tensors were allocated, an
    OOM, a kernel's failure): the ledger's figures are what it measured before it died, and its "fits" is vLLM's
    arithmetic, not a server that came up (sweep 230 items 02, 09: "fits" beside an engine that failed to start)."""
    from kvdoctor.evidence.model import KV_REFUSALS

    if st is not None and not st.startup_error and not predicted and (kl := (st.engine_config or {}).get("killed_line")):
        return (f"the log ends this start with \"Killed\" (line {kl}): the process was killed (most often the host's "
                "OOM killer: the CPU swap space, the host's RAM, a unified-memory board's shared memory), so the "
                "figures above are what it measured before, and whether the pool fits is vLLM's arithmetic, not a "
                "server that came up; kvdoctor diagnose on the log says more")
    if st is None or not st.startup_error or st.startup_error in KV_REFUSALS or predicted:
        return None
    ln = st.line_refs.get("startup_error")
    said = " ".join((st.error_message or "").split())[:160]
    return (f"the log shows this start failing ({st.startup_error}{f', line {ln}' if ln else ''}"
            f"{f': {said}' if said else ''}): the figures above are what it measured before it stopped, and whether "
            "the pool fits is vLLM's arithmetic, not a server that came up; kvdoctor diagnose on the log says why it "
            "failed")


def _payload_out(payload: dict[str, Any], log_info: dict[str, Any] | None, html: Path | None, what: str, *,
                 json_out: bool, quiet: bool) -> bool:
    """The --html report and the --json document of a ledger payload; True when the JSON was the answer."""
    if log_info is not None:
        payload["log"] = {k: v for k, v in log_info.items() if k not in ("summary", "startup")}
    if html is not None:
        from kvdoctor.report.html import write_html_if_asked

        write_html_if_asked(html, [payload], title=f"kvdoctor ledger: {what}", quiet=quiet)
    if json_out:
        from kvdoctor.cli.output import emit_json

        emit_json(payload)
    return json_out


def _log_only(log_info: dict[str, Any], why: str, *, json_out: bool, quiet: bool, html: Path | None) -> None:
    """The model's shape is out of reach: the log's own figures and vLLM's arithmetic on them
    (``ledger.from_log``), with why and what to pass for predictions."""
    from kvdoctor.ledger.from_log import log_ledger

    led = log_ledger(log_info["startup"], source=log_info["path"], why_no_model=why)
    if led.model is None and (cmd := (log_info["startup"].engine_config or {}).get("command")):
        # the server command pasted with the log names it (sweep 124 item 01's title had said "model not named")
        from kvdoctor.engine.sources import parse_serve_line
        from kvdoctor.errors import InputError

        try:
            led.model = parse_serve_line(str(cmd)).model
        except InputError:
            pass
    led.notes.insert(0, log_info["summary"])
    if (died := _died_at_start(log_info["startup"], None)) is not None:
        led.notes.insert(0, died)
    if _payload_out(led.to_json(), log_info, html, led.model or "the start-up log", json_out=json_out, quiet=quiet):
        return
    out = _Out(None)
    title = f"{led.model or 'model not named'} · vLLM {led.vllm_version or '?'} · the start-up log's own ledger"
    if quiet:  # docs/cli.md "--quiet": the verdict, one line
        f = led.figures
        pool = ", ".join(x for x in (
            f"pool {f['kv_cache.tokens'].value:,} tokens" if "kv_cache.tokens" in f else "",
            f"max concurrency {f['kv_cache.max_concurrency'].value:g}x" if "kv_cache.max_concurrency" in f else "",
            f"KV budget {gib_text(f['memory.kv_cache'].value)}" if "memory.kv_cache" in f else "") if x)
        out.add(f"{led.verdict} (from the log alone): {led.error or pool or 'no KV figure in the log'}")
        out.flush()
        return
    out.add(out.style(title, "bold"))
    out.para(f"no predictions ({why}): showing what vLLM measured", style="yellow")
    rows: list = []
    for k, f in led.figures.items():
        val = (_fmt_bytes(f.value) if k.startswith("memory.") or k.endswith("_bytes")
               else f"{f.value:,} B" if k.endswith("bytes_per_token") else _fmt(k.split(".")[-1], f.value))
        rows.append([led.labels.get(k, k), val, f.source, f.how])
    _table(out, ["figure", "value", "source", "how"], rows, {1}, {2: _SRC_STYLE}, wrap_last=True)
    out.add()
    style = {"fits": "green", "does-not-fit": "red", "memory-held": "red"}.get(led.verdict, "yellow")
    out.add(f"{out.style('Verdict from the log:', 'bold')} {out.style(led.verdict, style)}"
            + (f" — {led.error}" if led.error else ""))
    for c in led.checks:
        out.para(f"check: {c}", first="  ", rest="    ")
    for n in led.notes:
        out.para(f"• {n}", first="", rest="  ")
    out.flush()


def scan_log(path: str, quiet: bool = True) -> dict[str, Any]:
    """Count what a start-up log holds (engine starts, vLLM lines, foreign lines); never fatal on content.

    Also returns the last engine start's facts (``"startup"``), the same ``StartupFacts``
    ``evidence.logs.read_startup_facts`` would give, so the caller need not read the file again.

    Missing, unreadable or binary files raise InputError (one line, exit 2).
    """
    import gzip
    import os

    from kvdoctor.errors import InputError
    from kvdoctor.evidence.logs.envelope import strip_ansi
    from kvdoctor.evidence.logs.startup import StartupCollector, feed_lines

    from kvdoctor.safeio import binary_reason, bounded_lines, check_input_file

    if not os.path.exists(path):
        raise InputError(f"--from-log: no such file: {path}")
    if os.path.isdir(path):
        raise InputError(f"--from-log: {path} is a directory, not a log file")
    check_input_file(path, "--from-log")  # a FIFO or device: refused before it is read
    try:
        with open(path, "rb") as fh:
            head = fh.read(8192)
    except OSError as exc:
        raise InputError(f"--from-log: cannot read {path}: {exc.strerror or exc}") from None
    gz = head[:2] == b"\x1f\x8b"
    if gz:
        try:
            with gzip.open(path, "rb") as fh:
                head = fh.read(8192)
        except (OSError, EOFError):
            raise InputError(f"--from-log: {path} is a damaged gzip file") from None
    if not head.strip():
        raise InputError(f"--from-log: {path} is empty")
    why = binary_reason(head)  # the one binary check (safeio)
    if why:
        raise InputError(f"--from-log: {path} is not a text log (binary content: {why})")

    from kvdoctor.cli.output import progress

    col = StartupCollector()
    total = vllm = facts_lines = 0
    opener = gzip.open if gz else open
    try:
        with opener(path, "rb") as fh, progress("Reading log", total=None if gz else os.path.getsize(path),
                                                quiet=quiet) as advance:
            def physical():
                for n, raw in enumerate(bounded_lines(fh), start=1):  # an endless line is never held whole
                    advance(len(raw))
                    yield n, strip_ansi(raw[: 1 << 16].decode("utf-8", "replace").replace("\x00", "").rstrip("\r\n"))

            for count, seen_vllm, had_fact in feed_lines(col, physical()):
                total += count
                facts_lines += had_fact
                # A pasted excerpt often drops vLLM's "INFO mm-dd hh:mm:ss [file.py:n]" prefix; its lines
                # still carry facts, so only lines with neither a prefix nor a fact count as foreign.
                vllm += seen_vllm or had_fact
    except (OSError, EOFError):
        pass  # a truncated gzip keeps what was read
    starts = col.finish()
    if not starts:
        raise InputError(f"--from-log: {path}: no vLLM start-up found in this log ({total} lines read)")
    foreign = total - vllm
    summary = (f"log {os.path.basename(path)}: {total} lines, {facts_lines} with start-up facts, "
               f"{foreign} neither vLLM-formatted nor holding a fact (not used)")
    if len(starts) > 1:
        summary += f"; {len(starts)} engine starts found — this ledger is of the last one"
    return {"path": path, "lines": total, "startup_fact_lines": facts_lines, "foreign_lines": foreign,
            "engine_starts": len(starts), "summary": summary, "startup": starts[-1]}


# ------------------------------------------------------------------------------------------------
# rendering
#
# Plain text, no rich: importing rich.console + rich.table costs 40-100 ms, a third of the 0.3 s
# start-up budget of this verb (benchmarks/README.md, "CLI start-up"), for a table that needs only
# aligned columns, a wrapped last column and four colours. Colour follows the usual rules: only on a
# terminal, never with NO_COLOR or TERM=dumb (the source is a word, so nothing depends on colour).

def _styles() -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Source and verdict colours from the one style table (report/style.py: pure data, no rich)."""
    from kvdoctor.report.style import OUTCOMES, SGR, SOURCES

    return {k: v[0] for k, v in SOURCES.items()}, OUTCOMES, SGR


_SRC_STYLE, _VERDICT_STYLE, _SGR = _styles()
_LABELS = {"total": "total", "requested": "requested", "weights": "weights", "activation": "activation peak",
           "non_torch": "non-torch", "cudagraph": "CUDA graphs", "kv_cache": "KV budget"}


def _fmt_bytes(v: Any) -> str:
    return gib_text(v, grouping=True, missing="–")


def _fmt(name: str, v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.2f}x" if name == "max_concurrency" else f"{v:g}"
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    return str(v)


class _Out:
    """stdout with optional ANSI colour and the terminal width (COLUMNS wins, as for rich)."""

    def __init__(self, stream: Any = None):
        import os
        import shutil
        import sys

        self.stream = stream or sys.stdout
        env = os.environ
        tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.colour = tty and not env.get("NO_COLOR") and env.get("TERM") != "dumb"
        self.width = max(60, shutil.get_terminal_size((100, 24)).columns)
        self.lines: list[str] = []

    def style(self, text: str, style: str | None) -> str:
        if not self.colour or not style or style not in _SGR:
            return text
        return f"\x1b[{_SGR[style]}m{text}\x1b[0m"

    def add(self, line: str = "") -> None:
        self.lines.append(line.rstrip())

    def para(self, text: str, first: str = "", rest: str = "  ", style: str | None = None) -> None:
        import textwrap

        for ln in textwrap.wrap(text, self.width - 1, initial_indent=first, subsequent_indent=rest,
                                break_on_hyphens=False) or [first]:
            self.add(self.style(ln, style))

    def flush(self) -> None:
        self.stream.write("\n".join(self.lines) + "\n")
        self.lines = []


def _table(out: _Out, header: list[str], rows: list, right: set[int], styles: dict[int, dict],
           wrap_last: bool) -> None:
    """Aligned columns; the last column wraps to the terminal width when ``wrap_last``; a ``None``
    row is a section break (a blank line)."""
    import textwrap

    n = len(header)
    fixed = n - 1 if wrap_last else n
    widths = [max(len(r[c]) for r in [header, *rows] if r is not None) for c in range(fixed)]
    last_w = max(30, out.width - 1 - sum(widths) - 2 * fixed) if wrap_last else 0

    def cells(row: list[str], style_of) -> list[str]:
        parts = []
        for c in range(fixed):
            txt = row[c].rjust(widths[c]) if c in right else row[c].ljust(widths[c])
            parts.append(out.style(txt, style_of(c, row[c])))
        return parts

    out.add(out.style("  ".join(cells(header, lambda c, v: None) + ([header[-1]] if wrap_last else [])), "bold"))
    for row in rows:
        if row is None:
            out.add()
            continue
        style_of = lambda c, v: styles.get(c, {}).get(v.strip())  # noqa: E731
        left = "  ".join(cells(row, style_of))
        if not wrap_last:
            out.add(left)
            continue
        pad = " " * (sum(widths) + 2 * fixed)
        wrapped = textwrap.wrap(row[-1], last_w, break_on_hyphens=False) or [""]
        out.add(left + "  " + wrapped[0])
        for more in wrapped[1:]:
            out.add(pad + more)


def render(led: Any, quiet: bool = False, stream: Any = None) -> None:
    out = _Out(stream)
    eng = led.engine.get("engine")
    mode = f" · {str(eng.value).upper()} engine" if eng is not None and eng.value else ""
    out.add(out.style(f"{led.model} on {led.gpu} · vLLM {led.vllm_version}{mode}", "bold"))
    rows: list = []
    for k, f in led.memory.items():
        how = f.how + (f" (predicted {_fmt_bytes(f.predicted)})" if f.predicted is not None else "")
        rows.append([_LABELS.get(k, k), _fmt_bytes(f.value), f.source, how])
    rows.append(None)  # memory terms above, the KV pool below
    for k, f in led.kv.items():
        val = f"{f.value:,} B" if k in ("page_bytes_per_layer", "bytes_per_block", "bytes_per_token") else _fmt(k, f.value)
        how = f.how + (f" (predicted {_fmt(k, f.predicted)})" if f.predicted is not None else "")
        rows.append([k.replace("_", " "), val, f.source, how])
    header = ["figure", "value", "source", "how"]
    if quiet:
        header, rows = header[:3], [r and r[:3] for r in rows]
    _table(out, header, rows, {1}, {2: _SRC_STYLE}, wrap_last=not quiet)
    out.add()

    r = led.reconciliation
    from kvdoctor.report.numbers import fmt_ratio

    ratio = "∞" if r["ratio"] is None else fmt_ratio(r["ratio"])
    out.add(f"{out.style('Concurrency reconciliation:', 'bold')} "
            f"{out.style(r['verdict'], _VERDICT_STYLE[r['verdict']])} (worst case / pool = {ratio})")
    if not quiet:
        out.para(r["how"], first="  ", rest="    ")
    if not led.fit_ok:
        out.para(f"vLLM would refuse to start: {led.startup_error}", style="red")
    if len(led.ranks) > 1:
        out.add()
        out.add(out.style("Per GPU, GiB (ranks differ; num blocks = the minimum)", "bold"))
        rank_rows = []
        for x in led.ranks:
            m = x.memory
            tps = x.tp_ranks or (x.tp_rank,)
            tp = str(tps[0]) if len(tps) == 1 else f"{tps[0]}–{tps[-1]}"
            g = lambda k: f"{m[k].value / 2**30:.2f}"  # noqa: E731
            rank_rows.append([str(x.pp_rank), tp, f"{x.layers[0]}–{x.layers[1] - 1}", g("weights"), g("activation"),
                              g("non_torch"), g("cudagraph"), g("kv_cache"), f"{x.bytes_per_block:,}",
                              f"{x.num_blocks_own:,}"])
        cols = ["PP", "TP", "layers", "weights", "act.", "non-torch", "graphs", "KV", "B/block", "blocks"]
        _table(out, cols, rank_rows, set(range(len(cols))), {}, wrap_last=False)
    if led.warnings or (led.notes and not quiet):
        out.add()
    for w in led.warnings:
        who = "kvdoctor" if w.startswith("the start-up log does not match") else "vLLM warning"
        out.para(f"{who}: {w}", rest="  ", style="yellow")
    if not quiet:
        for n in dict.fromkeys(led.notes):  # each note once (inputs and the ledger can both carry it)
            out.para(n, first="• ", rest="  ", style="dim")
    out.flush()
