"""What the API server's access lines say about refused requests.

uvicorn writes one line per response (``"POST /v1/chat/completions HTTP/1.1" 400 Bad Request``) and vLLM logs
nothing else for most refusals: the reason travels in the response body, to the client. So a log whose only trace of
trouble is a column of 4xx lines names a client or configuration fault, never the pool or the scheduler, and the
status with its path narrows which (sweep 249: five items, each read "no evidence" before).
"""

from __future__ import annotations

from typing import Any

from kvdoctor.evidence.logs.requests import http_by_endpoint

# endpoints a client of the OpenAI API calls; a 404 on one without /v1 is a base URL without it
_OPENAI = ("/models", "/chat/completions", "/completions", "/embeddings", "/responses", "/audio/transcriptions",
           "/score", "/rerank", "/pooling")
# probes (health checks, scrapes): their refusals are the prober's configuration, said apart
_PROBES = ("/metrics", "/health", "/ping", "/version", "/load")


def _probe(ep: str) -> bool:
    """An endpoint a prober calls ("GET /metrics"), not a client."""
    return ep.partition(" ")[2].startswith(_PROBES)


def _why_404(ep: str) -> str:
    path = ep.partition(" ")[2]
    if "//" in path:
        return (f"{ep}: the client's base URL ends with a '/' that it joins to another ('{path}'): drop the trailing "
                "slash from the base URL")
    if not path.startswith("/v1/") and path.startswith(_OPENAI):
        return f"{ep}: the client's base URL lacks /v1: set it to http://HOST:PORT/v1"
    if path.startswith("/v1/") and path[3:].startswith(_OPENAI) and path != "/v1/models":
        return (f"{ep}: vLLM answers 404 when the request's \"model\" is not a name it serves (\"The model `X` does not "
                "exist\"): send the --served-model-name (or the model path when none is set), as GET /v1/models lists "
                "it; a release or a task without that endpoint answers 404 too")
    return f"{ep}: an endpoint this server does not have (this release, or this model's task)"


_WHY = {
    400: ("vLLM refused the request as sent, and the reason is in the response body, not the log: most often the prompt "
          "plus max_tokens over the server's max-model-len{mml} (\"This model's maximum context length is N tokens\"), "
          "tools with tool_choice \"auto\" on a server started without --enable-auto-tool-choice and a "
          "--tool-call-parser, or a field or value this release does not accept; read the error the client received "
          "(or send the same request with curl)"),
    401: "the server runs with --api-key (or VLLM_API_KEY) and the client sent no key or another one",
    405: "a method the endpoint does not take (a GET where it wants a POST)",
    413: "a body larger than the server or a proxy in front of it accepts",
    422: "the JSON body does not fit the endpoint's schema (a missing field, a wrong type): the response lists the fields",
    429: "the server (or a gateway before it) shed load: its limit, or a queue the clients overflow",
    500: "the server failed inside the request: the ERROR lines near it in the log name the exception",
    503: "the server was not ready (still starting, overloaded, or its engine dead): the log around it says which",
}


def refusal_note(d: dict[str, Any], max_model_len: int | None = None) -> str | None:
    """A note on the access lines' 4xx/5xx answers (``describe``'s counts), with what each status means here; None when
    every response was a success. ``max_model_len``: the configured one, where the evidence gives it."""
    eps = http_by_endpoint(d)
    bad = {ep: {st: n for st, n in sts.items() if st >= 400} for ep, sts in eps.items()}
    bad = {ep: sts for ep, sts in bad.items() if sts}
    if not bad:
        return None
    total = sum(sum(sts.values()) for sts in eps.values())
    refused = sum(sum(sts.values()) for sts in bad.values())
    client = {ep: sts for ep, sts in bad.items() if not _probe(ep)}
    why: list[str] = []
    for st in sorted({st for sts in bad.values() for st in sts}):
        if st == 404:
            why += [_why_404(ep) for ep, sts in bad.items() if 404 in sts][:3]
        elif st in _WHY:
            why.append(f"{st}: " + _WHY[st].format(mml=f" ({max_model_len:,} tokens here)" if max_model_len else ""))
        else:
            why.append(f"{st}: the status uvicorn logged; the response body names the reason")
    counts = "; ".join(f"{ep} " + ", ".join(f"{st} ×{n:,}" for st, n in sorted(sts.items())) for ep, sts in bad.items())
    share = (f"{refused:,} of {total:,} responses" if total > refused else "its one response" if refused == 1
             else f"every one of its {refused:,} responses")
    four = any(st < 500 for sts in client.values() for st in sts)
    five = any(st >= 500 for sts in client.values() for st in sts)
    whose = ("probes refused (the prober's path or port, not the serving path)" if not client else
             # a 5xx is the server's own failure (sweep 260 item 10: HTTP 500 right after an EngineDeadError)
             "requests the server failed (a 5xx is its own error: the ERROR lines and any engine death near them say "
             "why)" if not four else
             "requests refused before reaching the engine (a client or configuration fault, not the pool or the "
             "scheduler)" + ("; and requests the server failed (5xx: its own error)" if five else ""))
    return f"the API server's access lines answered {share} with an error ({counts}): {whose}. " + " ".join(
        f"{w}." if not w.endswith(".") else w for w in why)


REFUSED_SHARE = 0.05  # of the clients' responses: below it a few bad requests are noted, not put before tuning


def refused(d: dict[str, Any]) -> bool:
    """Whether the access lines answered at least ``REFUSED_SHARE`` of the clients' requests (not probes) with a
    4xx/5xx: then those refusals come before any tuning."""
    sts = [(st, n) for ep, by in http_by_endpoint(d).items() if not _probe(ep) for st, n in by.items()]
    bad = sum(n for st, n in sts if st >= 400)
    return bad > 0 and bad >= REFUSED_SHARE * sum(n for _, n in sts)
