"""The raw payloads, in one collapsed appendix at the end of the page (left out with ``raw=False``).

Long numeric arrays (timelines: megabytes of numbers) are elided: they are drawn above, and the
saved ``--json`` file keeps them whole."""

from __future__ import annotations

import json
from typing import Any

from kvdoctor.report.markup import esc

RAW_JSON_LIMIT = 200_000
MAX_ARRAY = 20


def _elide(o: Any, depth: int = 0) -> Any:
    if depth > 40:
        return "…"
    if isinstance(o, dict):
        return {k: _elide(v, depth + 1) for k, v in o.items()}
    if isinstance(o, list):
        if len(o) > MAX_ARRAY and all(isinstance(v, (int, float)) or v is None for v in o):
            return [*o[:5], f"… {len(o) - 5:,} more values (drawn above; whole in the --json file)"]
        return [_elide(v, depth + 1) for v in o]
    return o


def raw_block(payload: dict[str, Any]) -> str:
    text = json.dumps(_elide(payload), indent=1, default=str, allow_nan=True)
    note = ""
    if len(text) > RAW_JSON_LIMIT:
        text = text[:RAW_JSON_LIMIT]
        note = f"<p class=\"note\">Truncated to the first {RAW_JSON_LIMIT:,} characters.</p>"
    return f"<details><summary>{esc(payload.get('schema_version'))}</summary>{note}<pre>{esc(text)}</pre></details>"


def appendix_section(payloads: list[dict[str, Any]]) -> str:
    blocks = "".join(raw_block(p) for p in payloads)
    return ('<details class="appendix"><summary>Show the raw payloads (what each verb\'s --json printed)</summary>'
            f"{blocks}</details>")
