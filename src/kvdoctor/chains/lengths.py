"""The business's real request lengths: what level 1 of chain one needs before it may act.

From a request trace / length file (``sim.workload``), benchmark records, or a single
``--p99-context N``. A full distribution gives the share of requests a new limit would reject or
truncate and the expected KV demand per request; a bare p99 gives only the limit itself.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kvdoctor.errors import InputError


@dataclass
class LengthDist:
    source: str
    prompt: list[int] = field(default_factory=list)
    output: list[int] = field(default_factory=list)
    p99_given: int | None = None  # --p99-context N (no distribution)

    @property
    def n(self) -> int:
        return len(self.prompt)

    @property
    def totals(self) -> list[int]:
        return sorted(p + o for p, o in zip(self.prompt, self.output))

    def total_pct(self, p: float) -> int | None:
        if self.n == 0:
            return self.p99_given if p == 99 else None
        t = self.totals
        k = min(len(t) - 1, max(0, math.ceil(p / 100.0 * len(t)) - 1))
        return t[k]

    @property
    def p99_total(self) -> int | None:
        return self.total_pct(99)

    @property
    def max_total(self) -> int | None:
        return max(self.totals) if self.n else None

    @property
    def mean_total(self) -> float | None:
        return (sum(self.prompt) + sum(self.output)) / self.n if self.n else None

    def over_limit(self, limit: int) -> tuple[float | None, float | None]:
        """(share rejected, share truncated) at ``--max-model-len limit``.

        vLLM rejects a request whose prompt does not leave room for one output token
        (prompt >= max_model_len) and stops the others at the limit (finish_reason "length").
        """
        if self.n == 0:
            if self.p99_given is not None and limit >= self.p99_given:
                return None, None  # at most 1 %, split unknown
            return None, None
        rej = sum(1 for p in self.prompt if p >= limit)
        trunc = sum(1 for p, o in zip(self.prompt, self.output) if p < limit < p + o)
        return rej / self.n, trunc / self.n

    def describe(self) -> dict:
        return {
            "source": self.source, "requests": self.n, "p99_total": self.p99_total,
            "max_total": self.max_total,
            "mean_total": round(self.mean_total, 1) if self.mean_total is not None else None,
        }


def from_workload(w) -> LengthDist:
    return LengthDist(source=w.source or w.name, prompt=list(w.prompt), output=list(w.output))


def from_file(path: str) -> LengthDist:
    from kvdoctor.sim.workload import load_lengths

    pr, ou = load_lengths(path)
    return LengthDist(source=str(path), prompt=pr, output=ou)


def looks_like_vllm_log(path: str) -> bool:
    """A vLLM server log (its envelope or a request line in the first 64 KiB), not a CSV/JSONL length file.
    An unreadable path, a FIFO or a device is refused here (``safeio.head_bytes``), before anything blocks on it."""
    from kvdoctor.evidence.logs.envelope import LEVEL_TS_B
    from kvdoctor.safeio import head_bytes

    head = head_bytes(path)
    return b"Received request " in head or LEVEL_TS_B.search(head) is not None


def from_log(path: str) -> LengthDist:
    """The requests of a vLLM log with request logging on: each ``Received request`` line that carries both its
    ``prompt_token_ids`` and its ``max_tokens`` gives (prompt tokens, max_tokens).

    max_tokens is what the client allowed the output, so prompt + max_tokens is the context the request asked vLLM
    for (vLLM checks it against --max-model-len), an upper bound of what it used: the shares a lower limit would
    truncate are upper bounds too. vLLM <= 0.10 logs the token ids at INFO; later releases only at DEBUG
    (``Request <id> details:``, a separate line), which is not paired here."""
    from kvdoctor.evidence.logs.reader import read_log

    r = read_log(path).requests
    if r is None or not len(r.pair_prompt):
        seen = "no request lines" if r is None else (
            f"{r.received:,} request line(s), none with both its prompt_token_ids and its max_tokens")
        raise InputError(f"{path}: a vLLM log with {seen}: --lengths needs vLLM <= 0.10's request logging (on by "
                         "default there; later releases log the prompt only at DEBUG), a length file, or --p99-context")
    cut = f"; {r.prompt_tokens_cut:,} cut lines left out" if r.prompt_tokens_cut else ""
    return LengthDist(source=f"{path} ({len(r.pair_prompt):,} logged requests: prompt + max_tokens, an upper bound{cut})",
                      prompt=[int(x) for x in r.pair_prompt], output=[int(x) for x in r.pair_max_tokens])


def from_records(records, source: str) -> LengthDist | None:
    rows = [(r.prompt_tokens, r.output_tokens) for r in records
            if r.prompt_tokens is not None and r.output_tokens is not None]
    if not rows:
        return None
    return LengthDist(source=source, prompt=[int(p) for p, _ in rows], output=[int(o) for _, o in rows])


def from_p99(n: int) -> LengthDist:
    if n <= 0:
        raise InputError(f"--p99-context must be positive (got {n})")
    return LengthDist(source=f"--p99-context {n}", p99_given=int(n))
