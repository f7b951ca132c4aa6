"""Step-time models: how long one engine step takes for a given batch.

A model answers two questions:

* ``step(tokens, sampled, kv_decode, prefill_pairs, num_reqs)``: seconds for a step that computes
  ``tokens`` tokens (prefill chunks + decodes), samples ``sampled`` next tokens, whose decodes
  read ``kv_decode`` cached tokens and whose prefill chunks attend ``prefill_pairs`` (query, key)
  pairs;
* ``decode_line(n)``: ``(A, B)`` such that a step of ``n`` decodes reading ``kv`` cached tokens
  takes ``A + B * kv`` seconds — what the event loop uses to skip identical decode steps.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LinearStepTime:
    """A plain linear model (tests, and a fallback the user can reason about by hand)."""

    base_s: float = 0.005
    per_token_s: float = 0.0
    per_kv_token_s: float = 0.0
    per_pair_s: float = 0.0
    per_request_s: float = 0.0

    def step(self, tokens: int, sampled: int, kv_decode: int, prefill_pairs: float, num_reqs: int) -> float:
        return (self.base_s + self.per_token_s * tokens + self.per_kv_token_s * kv_decode
                + self.per_pair_s * prefill_pairs + self.per_request_s * num_reqs)

    def decode_line(self, n: int) -> tuple[float, float]:
        return self.base_s + (self.per_token_s + self.per_request_s) * n, self.per_kv_token_s
