"""The host probe: one lone decode, timed the same way on every server of an experiment, before and after its load.

Why it exists: an experiment compares runs on servers started minutes apart. The machine under them can change
speed in between (a VM's steal time, another tenant on the GPU or its host, clocks throttled by heat), and by more
than the change under test moves the figures. The test bed measured it (docs/testing.md): `--max-num-seqs 2 → 8`
on a two-core VM gave 373 → 229 output tok/s in one CI run and +27 % in others, the same code both times. An
experiment that cannot tell the host from the change calls the knob harmful and says stop turning it.

The probe is one discarded request, then ``REQUESTS`` streamed completions sent one at a time: a fixed text prompt,
``TOKENS`` output tokens (``ignore_eos``), temperature 0. Each request's figure is its time per output token after
the first (first streamed token to last), a lone decode step plus the server's per-token overhead; the probe's is
the median over the requests, ``tpot_s``, and its ``spread`` the median absolute deviation over the median. Medians,
because the test bed's two-core VM showed why: between steady requests of 2.3 ms/token, one of 13.8 ms (a pause of
the VM); one such pause is seconds of a load's time at most, while a probe's median moving between runs is the host
running at another speed for minutes (the same VM read 7.1 ms/token one run and 2.2 ms/token the next hour).

A change that leaves a lone decode alone (``NEUTRAL``: a scheduling or KV-pool knob) must leave the probe where it
was, so what moves it between runs is the host. The probe runs after the warm-up and again after the last
``/metrics`` scrape, so the timed load's counters and log window never hold it.

Invariants: a probe never fails a run (an error is recorded and the drift is then unknown); it sends nothing
but its own few requests; with ``--no-host-probe`` nothing is sent.
"""

from __future__ import annotations

import json
import os
import statistics
import time
import urllib.error
import urllib.request
from typing import Any

from kvdoctor.experiment.server import loopback_opener

REQUESTS = 5
TOKENS = 32
# The prompt is text, not token ids: every model's tokenizer takes it, and both servers of an experiment share
# the model, so both tokenize it alike.
PROMPT = "A probe of the decode speed: count slowly from one to one hundred, one number per line."
# Fields whose change leaves the time of one decode step of one short request alone: they change how many
# requests run together, how long a prompt may be, or how large the KV pool is, not how a token is computed.
# max_num_seqs also sets the CUDA-graph capture sizes on GPUs, but batch 1 is captured at every setting.
NEUTRAL = frozenset({
    "max_model_len", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens", "kv_cache_memory_bytes",
    "num_gpu_blocks_override", "enable_prefix_caching", "enable_chunked_prefill", "long_prefill_token_threshold",
    "max_num_partial_prefills", "scheduling_policy", "swap_space",
})


def probe(base_url: str, model: str, timeout_s: float = 120.0) -> dict[str, Any]:
    """Time lone decodes on the server at ``base_url``: {"tpot_s": the median over ``REQUESTS`` requests of each one's
    time per output token after the first, "spread", "ttft_s", "samples": [...], "requests", "tokens"} or
    {"error": why}. One request is sent first and discarded: a server's first request of a shape pays one-time costs
    (the test bed measured a first TTFT of 94 ms, then 16-19 ms)."""
    samples: list[dict[str, float]] = []
    for i in range(REQUESTS + 1):
        try:
            got = _one(base_url, model, timeout_s)
        except (OSError, ValueError, urllib.error.URLError, TimeoutError) as exc:
            return {"error": f"probe request failed: {getattr(exc, 'reason', exc)}", "samples": samples}
        if i:
            samples.append(got)
    tpots = [s["tpot_s"] for s in samples if s.get("tpot_s") is not None]
    if not tpots:
        return {"error": "the server streamed fewer than two tokens per probe request", "samples": samples}
    med = statistics.median(tpots)
    return {"tpot_s": med, "spread": statistics.median(abs(x - med) for x in tpots) / med,
            "ttft_s": statistics.median(s["ttft_s"] for s in samples), "samples": samples,
            "requests": REQUESTS, "tokens": TOKENS}


def _one(base_url: str, model: str, timeout_s: float) -> dict[str, Any]:
    body = json.dumps({"model": model, "prompt": PROMPT, "max_tokens": TOKENS, "min_tokens": TOKENS,
                       "ignore_eos": True, "temperature": 0.0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    headers = {"Content-Type": "application/json"}
    if os.environ.get("OPENAI_API_KEY"):  # a server started with --api-key: the key `vllm bench serve` sends too
        headers["Authorization"] = f"Bearer {os.environ['OPENAI_API_KEY']}"
    req = urllib.request.Request(f"{base_url}/v1/completions", data=body, headers=headers)
    opener = loopback_opener()
    t0 = time.perf_counter()
    first = last = None
    tokens = None
    with opener.open(req, timeout=timeout_s) as r:
        for raw in r:  # server-sent events, one "data: {...}" line per chunk
            line = raw.decode("utf-8", "replace").strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            chunk = json.loads(data)
            if any(c.get("text") for c in chunk.get("choices") or []):
                last = time.perf_counter()
                first = last if first is None else first
            usage = chunk.get("usage")
            if usage and usage.get("completion_tokens") is not None:
                tokens = int(usage["completion_tokens"])
    if first is None or last is None:
        raise ValueError("no token streamed")
    # First chunk to last, not the gaps between chunks: a client descheduled for a moment reads several chunks at
    # once (the test bed saw a median gap of 0.01 ms), and a server may put several tokens in one chunk.
    n = tokens if tokens is not None else TOKENS
    return {"ttft_s": first - t0, "tpot_s": (last - first) / (n - 1) if n > 1 and last > first else None, "tokens": n}


def drift(before: dict[str, Any] | None, after: dict[str, Any] | None, field: str | None) -> dict[str, Any]:
    """How far the host moved between two runs, from their probes ({"pre": probe, "post": probe} each).

    ``between``: the after run's mean probe ``tpot_s`` over the before run's, minus one (+0.4: the host ran 40 %
    slower for the change), judged only for a ``NEUTRAL`` field; ``within_before``/``within_after``: each run's
    post-load probe over its pre-load one, minus one (the host moving during one run, whatever the change).
    ``noise``: the largest ``spread`` among the probes; ``size``: the largest of the four known (what is reported)."""
    def mean(run: dict[str, Any] | None) -> float | None:
        xs = [p["tpot_s"] for p in ((run or {}).get("pre"), (run or {}).get("post")) if p and p.get("tpot_s")]
        return sum(xs) / len(xs) if xs else None

    def within(run: dict[str, Any] | None) -> float | None:
        pre, post = ((run or {}).get("pre") or {}).get("tpot_s"), ((run or {}).get("post") or {}).get("tpot_s")
        return post / pre - 1.0 if pre and post else None

    mb, ma = mean(before), mean(after)
    neutral = field in NEUTRAL
    out: dict[str, Any] = {
        "field": field, "neutral": neutral,
        "probe_tpot_before_s": mb, "probe_tpot_after_s": ma,
        "between": (ma / mb - 1.0) if (neutral and mb and ma) else None,
        "ratio_unjudged": (ma / mb) if (not neutral and mb and ma) else None,  # the change's own effect + the host's
        "within_before": within(before), "within_after": within(after),
    }
    spreads = [p.get("spread") or 0.0 for run in (before, after) for p in ((run or {}).get("pre"), (run or {}).get("post"))
               if p and p.get("tpot_s")]
    out["noise"] = max(spreads) if spreads else None
    known = [abs(out[k]) for k in ("between", "within_before", "within_after", "noise") if out[k] is not None]
    out["size"] = max(known) if known else None
    return out


def confounds(change: float | None, host: dict[str, Any] | None, flat: float) -> bool:
    """True when a throughput change cannot be told from the host's movement (``drift``'s record).

    A steady host (every movement within ``flat``) confounds nothing. On a moving host a flat change is no answer
    either way, and a change stands only when it survives the host: corrected for the drift between the runs
    (throughput taken to scale with the host's speed: ×(1 + between)) it keeps its sign and stays beyond the band
    widened by the movement within the runs and the probes' spread. A change against the drift (more throughput on
    a host that ran slower) is never the host's doing."""
    if change is None or not host:
        return False
    d = host.get("between") or 0.0
    u = max(abs(host.get(k) or 0.0) for k in ("within_before", "within_after", "noise"))
    if abs(d) <= flat and u <= flat:
        return False
    if abs(change) < flat:
        return True
    adjusted = (1.0 + change) * (1.0 + d) - 1.0
    return adjusted * change <= 0 or abs(adjusted) <= u + flat


def describe(d: dict[str, Any], labels: tuple[str, str] = ("before", "after")) -> str:
    """One line: the probe's figures and what they say (``labels``: the two runs' names)."""
    parts = []
    if d.get("between") is not None:
        parts.append(f"a lone decode took {d['probe_tpot_before_s'] * 1e3:.2f} → {d['probe_tpot_after_s'] * 1e3:.2f} "
                     f"ms/token between the runs ({d['between']:+.0%}; {d['field']} leaves a lone decode alone, "
                     "so this is the host)")
    elif d.get("ratio_unjudged") is not None:
        parts.append(f"a lone decode took {d['probe_tpot_before_s'] * 1e3:.2f} → {d['probe_tpot_after_s'] * 1e3:.2f} "
                     f"ms/token between the runs ({d['ratio_unjudged'] - 1:+.0%}; {d['field']} can change a lone "
                     "decode, so the host's share is not known)")
    for k, who in (("within_before", labels[0]), ("within_after", labels[1])):
        if d.get(k) is not None:
            parts.append(f"{who} run: {d[k]:+.0%} from before its load to after it")
    if parts and d.get("noise") is not None:
        parts.append(f"the probes' spread up to {d['noise']:.0%}")
    return "host probe: " + ("; ".join(parts) if parts else "no reading")
