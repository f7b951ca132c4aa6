"""The one style table: which colour means what, for the terminal (rich style names, also mapped to
plain ANSI by the verbs that avoid rich) and for the HTML report (CSS colours, plot colours).

The terminal and the report used to keep their own tables and drifted apart (``given`` was blue in
one place and cyan in another). Meaning never depends on colour: a source or verdict is always
printed as a word; colour only helps the eye. Pure data: importing this costs nothing.
"""

from __future__ import annotations

# provenance source -> (rich style, CSS text colour, CSS badge background)
SOURCES: dict[str, tuple[str, str, str]] = {
    "measured": ("green", "#146c2e", "#e6f4ea"),
    "simulated": ("magenta", "#862e9c", "#f3e8fb"),
    "given": ("blue", "#1d4ed8", "#e8eefc"),
    "predicted": ("yellow", "#9a4a00", "#fdf1e3"),
    "default": ("dim", "#5b6475", "#eef1f6"),
}

# before/after verdict words (journal) -> rich style, CSS colour
VERDICTS: dict[str, tuple[str, str]] = {
    "better": ("green", "#067647"),
    "worse": ("red", "#b42318"),
    "flat": ("dim", "#5b6475"),
    "changed": ("yellow", "#b54708"),
}

# verdict word (reconciliation, diagnosis, plan, gate, experiment) -> tone. The terminal, the HTML
# headline and the diagnosis section all colour a verdict from here. diagnose's words are listed in
# full (chains.diagnose.VERDICTS; a unit test keeps the two in step): a grave fault is "bad", a cause
# outside the configuration or thin evidence is "warn", a window with nothing to judge is "info".
TONES: dict[str, str] = {
    "ok": "good", "healthy": "good", "enough": "good", "pass": "good",
    "idle": "info", "unknown": "info",
    "starved": "warn", "insufficient-evidence": "warn", "arrival-bursts": "warn", "deferred": "warn", "spikes-elsewhere": "warn",
    "decode-bound": "warn", "inconclusive": "warn",
    "does-not-fit": "bad", "config-starved": "bad", "capacity-short": "bad", "prefill-bound": "bad",
    "stalled": "bad", "engine-died": "bad", "not enough": "bad", "fail": "bad", "problem": "bad", "stop-loss": "bad",
}

# tone -> (rich style, CSS colour)
TONE_STYLE: dict[str, tuple[str, str]] = {
    "good": ("green", "#067647"),
    "warn": ("yellow", "#b54708"),
    "bad": ("red", "#b42318"),
    "info": ("cyan", "#5b6475"),
}

# reconciliation / diagnosis verdict words -> rich style; anything else is "bad" (red)
OUTCOMES: dict[str, str] = {word: TONE_STYLE[tone][0] for word, tone in TONES.items()}

# diagnose's confidence words -> (rich style, CSS class suffix). Low is flagged: the verdict is the most
# likely answer on thin evidence, and the reader should look at "what would raise it".
CONFIDENCE: dict[str, str] = {"high": "bold", "medium": "", "low": "yellow"}

# rich style name -> SGR code, for verbs that print plain ANSI (ledger: rich costs start-up time)
SGR: dict[str, str] = {"green": "32", "blue": "34", "cyan": "36", "yellow": "33", "red": "31",
                       "magenta": "35", "dim": "2", "bold": "1"}

# plot series colours in the HTML report
PLOT: dict[str, str] = {
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
    "ttft": "#74c0fc",
    "gen_tps": "#2b8a3e",
    "prompt_tps": "#adb5bd",
    "spike": "#e03131",
    "spike_free": "#f59f00",
    "queue": "#f76707",
    "prefill": "#4c6ef5",
    "decode": "#12b886",
    "event": "#862e9c",
    "not_applicable": "#ced4da",
    "not_judged": "#868e96",
    "measured": SOURCES["measured"][1],
    "predicted": "#f76707",
}


def source_style(source: str | None) -> str:
    """The rich style for a provenance source ('' for an unknown one)."""
    return SOURCES.get(source or "", ("",))[0]


def outcome_style(verdict: str | None) -> str:
    return OUTCOMES.get(str(verdict or ""), "red")


def verdict_tone(verdict: str | None) -> str:
    """good / warn / bad / info, or '' for a word the table does not know (shown uncoloured)."""
    return TONES.get(str(verdict or ""), "")


def confidence_style(confidence: str | None) -> str:
    return CONFIDENCE.get(str(confidence or ""), "")


def tone_css() -> str:
    """The verdict colour rules of the HTML report, one per tone (``tone-bad`` ...)."""
    return " ".join(f".tone-{t} .word, .word.tone-{t} {{ color:{css}; }}" for t, (_, css) in TONE_STYLE.items())


def source_css() -> str:
    """The badge rules of the HTML report, one per source."""
    return " ".join(f".src-{name} {{ background:{bg}; color:{fg}; }}" for name, (_, fg, bg) in SOURCES.items())
