"""Calibration series version 13's pre-warm (kvdoctor.testbed.series.prewarm_token_counts): one prompt of every length,
as token ids, one output token each, one request at a time, no two prompts sharing a cached block."""

from __future__ import annotations

import json

import httpx
import pytest

from kvdoctor.testbed import series as S


def _server(seen: list[dict], fail_at: int | None = None):
    def handle(request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/completions"
        body = json.loads(request.content)
        seen.append(body)
        if fail_at is not None and len(seen) == fail_at:
            return httpx.Response(500, json={"error": "boom"})
        return httpx.Response(200, json={"choices": [{"text": "x"}]})

    return httpx.MockTransport(handle)


def test_every_length_once_as_token_ids_with_one_output_token():
    seen: list[dict] = []
    out = S.prewarm_token_counts("http://server", "tiny", 40, transport=_server(seen))
    assert [len(b["prompt"]) for b in seen] == list(range(1, 41))
    assert all(b["max_tokens"] == 1 and b["model"] == "tiny" for b in seen)
    # ids of the tiny vocabulary past its four special tokens
    assert all(4 <= t < 1356 for b in seen for t in b["prompt"])
    # no two prompts share their first 32-token block (a cached block would shorten the step the pre-warm is for)
    heads = [tuple(b["prompt"][:32]) for b in seen if len(b["prompt"]) >= 32]
    assert len(set(heads)) == len(heads)
    assert out["prompts"] == 40 and out["first_100_median_ms"] >= 0


def test_a_server_error_stops_the_prewarm():
    seen: list[dict] = []
    with pytest.raises(httpx.HTTPStatusError):
        S.prewarm_token_counts("http://server", "tiny", 10, transport=_server(seen, fail_at=3))
    assert len(seen) == 3


def test_version_13_prewarms_up_to_the_servers_longest_single_prompt():
    # --max-model-len 512 less the one output token; the loads and order are version 9's
    assert S.PREWARM_TOKENS == int(S.SERVER_FLAGS[S.SERVER_FLAGS.index("--max-model-len") + 1]) - 1
    assert S.SERIES_V13 == S.LIVE_SERIES
