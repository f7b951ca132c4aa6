"""The self-contained HTML report: one offline file, plotly.js inlined, built from ``--json`` payloads.

The report reads only the plain JSON payloads every verb emits (``schema_version`` =
``kvdoctor.<kind>/<n>``), never the other packages' Python types, so any verb's output (or a saved
file) can be rendered. Which keys are read per kind is documented in docs/report.md.

Safety: every user-provided string (model names, log lines, request ids, notes...) reaches the page
either HTML-escaped in markup, or as JSON inside ``<script type="application/json">`` with ``<``,
``>``, ``&`` and the JS line separators written as ``\\uXXXX`` escapes, so no ``</script>`` can close
the block. A nonce-based Content-Security-Policy is defence in depth: even injected markup could not
run an inline handler or fetch anything.

Nothing heavy is imported at module level: verbs import ``html_option`` from here at start-up.
"""

from __future__ import annotations

import datetime as _dt
import gzip
import secrets
from pathlib import Path
from typing import Any, Iterable

from kvdoctor.errors import InputError
from kvdoctor.report.markup import esc, script_json  # noqa: F401  (re-exported: the page's escaping API)
from kvdoctor.report.style import source_css, tone_css

ASSETS = Path(__file__).resolve().parent / "assets"
# plotly.js "basic" partial bundle (scatter, bar, pie; 1.2 MB instead of 4.8 MB), vendored by
# scripts/vendor_plotly.py from npm's plotly.js-basic-dist-min, MIT licence beside it
BASIC_BUNDLE = ASSETS / "plotly-basic.min.js.gz"
BASIC_TRACES = frozenset({"scatter", "bar", "pie"})


# --------------------------------------------------------------------------------------------
# payload handling
# --------------------------------------------------------------------------------------------


def payload_kind(payload: dict[str, Any]) -> str:
    """``"kvdoctor.ledger/1"`` -> ``"ledger"``. Raises InputError for anything that is not a payload."""
    if not isinstance(payload, dict):
        raise InputError("a report payload must be a JSON object produced by a kvdoctor verb's --json")
    sv = payload.get("schema_version")
    if not isinstance(sv, str) or not sv.startswith("kvdoctor.") or "/" not in sv:
        raise InputError(
            f"not a kvdoctor payload (schema_version is {sv!r}; expected 'kvdoctor.<kind>/<n>')"
        )
    return sv[len("kvdoctor."):].split("/", 1)[0]


def expand_nested(payloads: list[dict[str, Any]], max_depth: int = 3) -> list[dict[str, Any]]:
    """Payloads that embed others (swap carries two ledgers and a plan; demo carries a swap and a
    plan) get their embedded payloads rendered too, right after them, each once."""
    out: list[dict[str, Any]] = []
    seen: set[int] = set()

    def visit(obj: Any, depth: int) -> None:
        if depth > max_depth:
            return
        if isinstance(obj, dict):
            sv = obj.get("schema_version")
            if isinstance(sv, str) and sv.startswith("kvdoctor.") and "/" in sv:
                if id(obj) in seen:
                    return
                seen.add(id(obj))
                out.append(obj)
            for v in obj.values():
                if isinstance(v, (dict, list)):
                    visit(v, depth + 1)
        elif isinstance(obj, list):
            for v in obj:
                if isinstance(v, (dict, list)):
                    visit(v, depth + 1)

    for p in payloads:
        visit(p, 0)
    return out


# --------------------------------------------------------------------------------------------
# the page
# --------------------------------------------------------------------------------------------

_CSS_TEMPLATE = """
:root { --fg:#1d2330; --muted:#5b6475; --line:#d9dee7; --bg:#ffffff; --card:#f7f8fb; --bad:#b42318; --ok:#067647; --warn:#b54708; }
* { box-sizing: border-box; }
body { font: 14px/1.45 -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; color: var(--fg); background: var(--bg); margin: 0; }
header { padding: 18px 28px; border-bottom: 1px solid var(--line); background: var(--card); }
header h1 { margin: 0 0 4px 0; font-size: 20px; }
header .meta { color: var(--muted); font-size: 12px; }
nav { padding: 8px 28px; border-bottom: 1px solid var(--line); font-size: 13px; }
nav a { margin-right: 14px; color: #2451a6; text-decoration: none; }
main { padding: 8px 28px 40px 28px; max-width: 1400px; }
section { margin-top: 22px; }
section h2 { font-size: 17px; margin: 0 0 6px 0; border-bottom: 1px solid var(--line); padding-bottom: 4px; }
section h3 { font-size: 14px; margin: 14px 0 4px 0; }
p.note { color: var(--muted); margin: 4px 0 8px 0; }
table { border-collapse: collapse; margin: 6px 0 10px 0; font-size: 13px; }
th, td { border: 1px solid var(--line); padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: var(--card); font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.src { font-size: 11px; padding: 0 5px; border-radius: 8px; background: #eef1f6; color: var(--muted); white-space: nowrap; }
@SOURCE_CSS@
#verdict { margin-top: 10px; border: 1px solid var(--line); border-radius: 6px; padding: 10px 16px; background: var(--card); }
#verdict h2 { border: 0; font-size: 15px; margin: 10px 0 4px 0; padding: 0; }
#verdict > h2:first-child { display: none; }
.verdicts p.verdict { margin: 2px 0; font-size: 14px; }
.verdicts p.verdict.lead { font-size: 18px; }
.verdict .what { color: var(--muted); } .verdict .detail { color: var(--fg); }
.verdicts p.verdict.lead .detail { font-size: 15px; }
@TONE_CSS@
.conf { font-size: 11px; padding: 0 6px; border-radius: 8px; background: #eef1f6; color: var(--muted); white-space: nowrap; font-weight: normal; }
.conf-high { background: #e6f4ea; color: #146c2e; } .conf-low { background: #fdf1e3; color: #9a4a00; }
.diag ul { margin: 2px 0 8px 0; padding-left: 22px; } .diag h3 .word { font-size: 15px; }
.next p { margin: 3px 0; } .next .action code { font-size: 14px; font-weight: 600; }
pre.serve { background: #1d2330; color: #f7f8fb; padding: 8px 12px; border-radius: 4px; white-space: pre-wrap;
  word-break: break-all; font-size: 13px; margin: 4px 0; }
details.appendix > summary { cursor: pointer; color: #2451a6; }
.verdict-bad { color: var(--bad); font-weight: 600; } .verdict-ok { color: var(--ok); font-weight: 600; }
.sev-problem { color: var(--bad); font-weight: 600; }
.sev-warn { color: var(--warn); font-weight: 600; }
.sev-info { color: var(--muted); }
.kvd-plot { width: 100%; min-height: 120px; }
details { margin: 6px 0; } details pre { max-height: 400px; overflow: auto; background: var(--card); padding: 8px; font-size: 12px; }
code { font-size: 12px; background: var(--card); padding: 0 3px; }
"""

_CSS = _CSS_TEMPLATE.replace("@SOURCE_CSS@", source_css()).replace("@TONE_CSS@", tone_css())

_BOOT_JS = """
(function () {
  var plots = document.querySelectorAll('div.kvd-plot[data-fig]');
  for (var i = 0; i < plots.length; i++) {
    var div = plots[i];
    var spec = JSON.parse(document.getElementById(div.getAttribute('data-fig')).textContent);
    Plotly.newPlot(div, spec.data, spec.layout, {displaylogo: false, responsive: true});
  }
})();
"""


class _Page:
    """Collects sections and plot specs; assigns stable element ids."""

    def __init__(self) -> None:
        self.sections: list[tuple[str, str, str]] = []  # (anchor, title, body html)
        self.figs: list[tuple[str, dict[str, Any]]] = []

    def plot(self, fig: dict[str, Any], height: int | None = None) -> str:
        fid = f"kvd-fig-{len(self.figs)}"
        self.figs.append((fid, fig))
        height = height or (fig.get("layout") or {}).get("height")
        style = f' style="height:{int(height)}px"' if height else ""
        return f'<div class="kvd-plot" id="{fid}-div" data-fig="{fid}"{style}></div>'

    def add(self, anchor: str, title: str, body: str) -> None:
        # anchors must be unique when several payloads of one kind are given
        base, n = anchor, 2
        taken = {a for a, _, _ in self.sections}
        while anchor in taken:
            anchor, n = f"{base}-{n}", n + 1
        self.sections.append((anchor, title, body))


def render_report(payloads: Iterable[dict[str, Any]], *, title: str = "kvdoctor report", raw: bool = True) -> str:
    """Render payloads (dicts from any verb's ``--json``) into one self-contained HTML document.

    Sections appear in a fixed order (the verdict and the next change first, then memory, plan,
    timelines, slow requests, findings, journal, summaries, and the raw payloads collapsed at the
    end unless ``raw=False``); a kind that is absent has no section. Raises InputError on a
    non-payload.
    """
    from kvdoctor import __version__
    from kvdoctor.report import sections as S

    payloads = list(payloads)
    if not payloads:
        raise InputError("nothing to report: give at least one kvdoctor --json payload")
    for p in payloads:
        payload_kind(p)  # validate what the caller gave before expanding anything
    payloads = expand_nested(payloads)
    kinds = [payload_kind(p) for p in payloads]

    page = _Page()
    S.build_sections(page, payloads, kinds, raw=raw)

    nonce = secrets.token_urlsafe(16)
    generated = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    out: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # default-src 'none': the page can fetch nothing at all (offline by construction); only
        # our nonce'd scripts run, so injected inline handlers would be inert.
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        f"script-src 'nonce-{nonce}'; style-src 'unsafe-inline'; img-src data:; font-src data:\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title>",
        f"<style>{_CSS}</style>",
        f'<script nonce="{nonce}">{plotly_js({t.get("type", "scatter") for _, f in page.figs for t in f["data"]})}</script>',
        "</head><body>",
        f"<header><h1>{esc(title)}</h1><div class=\"meta\">kvdoctor {esc(__version__)} · generated "
        f"{esc(generated)} · from {esc(', '.join(_count_kinds(kinds)))}</div></header>",
        "<main>",
    ]
    # the verdict comes before the navigation: it is what the reader opened the page for
    rest = page.sections
    if rest and rest[0][0] == "verdict":
        out.append(f'<section id="verdict"><h2>{esc(rest[0][1])}</h2>{rest[0][2]}</section>')
        rest = rest[1:]
    out.append("<nav>" + "".join(f'<a href="#{esc(a)}">{esc(t)}</a>' for a, t, _ in rest) + "</nav>")
    for anchor, stitle, body in rest:
        out.append(f'<section id="{esc(anchor)}"><h2>{esc(stitle)}</h2>{body}</section>')
    out.append("</main>")
    for fid, fig in page.figs:
        out.append(f'<script type="application/json" id="{fid}">{script_json(fig)}</script>')
    out.append(f'<script nonce="{nonce}">{_BOOT_JS}</script>')
    out.append("</body></html>")
    return "\n".join(out)


def plotly_js(trace_types: set[str] | None = None) -> str:
    """plotly.js for the page: the vendored basic bundle when every trace type is in it, else the
    full bundle that ships with plotly's Python package."""
    if BASIC_BUNDLE.exists() and (trace_types is None or set(trace_types) <= BASIC_TRACES):
        return gzip.decompress(BASIC_BUNDLE.read_bytes()).decode("utf-8")
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def _count_kinds(kinds: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    for k in kinds:
        seen[k] = seen.get(k, 0) + 1
    return [k if n == 1 else f"{k} ×{n}" for k, n in seen.items()]


def write_report(path: str | Path, payloads: Iterable[dict[str, Any]], *, title: str = "kvdoctor report",
                 raw: bool = True) -> Path:
    """Render and write atomically (a half-written report never replaces a good one)."""
    from kvdoctor.safeio import write_text_safely

    doc = render_report(payloads, title=title, raw=raw)
    # a symlink is written through, a device or FIFO written in place: never replaced (safeio)
    return write_text_safely(path, doc, what="report")


# --------------------------------------------------------------------------------------------
# the --html option other verbs reuse
# --------------------------------------------------------------------------------------------


def html_option():
    """A typer ``--html FILE`` option for any verb. Use as a parameter default::

        def ledger(..., html: Optional[Path] = html_option()):
            payload = ...                                   # the same dict --json prints
            write_html_if_asked(html, [payload], title="kvdoctor ledger: ...", quiet=quiet)
    """
    import typer

    return typer.Option(
        None, "--html", metavar="FILE", dir_okay=False,
        help="Also write a self-contained HTML report (offline, plotly inlined) to FILE.",
    )


def write_html_if_asked(
    path: str | Path | None, payloads: Iterable[dict[str, Any]], *, title: str, quiet: bool = False
) -> Path | None:
    """Write the report when ``--html`` was given; say where on stderr (stdout may carry --json)."""
    if path is None:
        return None
    out = write_report(path, payloads, title=title)
    if not quiet:
        import sys

        sys.stderr.write(f"kvdoctor: wrote {out}\n")
    return out


# alias named in the issue brief
add_html_option = html_option
