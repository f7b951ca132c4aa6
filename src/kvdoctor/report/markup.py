"""Escaping for the HTML report: the one place user text becomes markup or script data.

Every user-provided string (model names, log lines, request ids, notes...) reaches the page either
HTML-escaped in markup (``esc``), or as JSON inside ``<script type="application/json">`` with ``<``,
``>``, ``&`` and the JS line separators written as ``\\uXXXX`` escapes (``script_json``), so no
``</script>`` can close the block. Nothing here imports the page or its sections (no import circle).
"""

from __future__ import annotations

import html as _html
import json
from typing import Any

from kvdoctor.provenance import json_default as _json_default  # the one home of JSON defaults


def esc(value: Any) -> str:
    """HTML-escape anything for text or a quoted attribute (quotes included)."""
    return _html.escape("" if value is None else str(value), quote=True)


_SCRIPT_SAFE = {
    ord("<"): "\\u003c",
    ord(">"): "\\u003e",
    ord("&"): "\\u0026",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}


def script_json(obj: Any) -> str:
    """JSON that is safe inside a ``<script>`` element: no ``</script>``, ``<!--`` or line separators.

    ``\\u003c`` is still ``<`` once JSON.parse has read it, so the data round-trips exactly.
    """
    text = json.dumps(obj, default=_json_default, allow_nan=False, separators=(",", ":"))
    return text.translate(_SCRIPT_SAFE)
