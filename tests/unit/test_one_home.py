"""One home each: the JSON cleaner, the Timeline serialiser, the GiB formatter, the compute-capability normaliser."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from kvdoctor.evidence.model import Timeline
from kvdoctor.facts.gpu import GpuSpec, capability_int, capability_text
from kvdoctor.provenance import Figure, json_clean
from kvdoctor.units import gib_text


def test_json_clean_makes_any_payload_strict_json():
    doc = {"a": float("nan"), "b": [1.5, float("inf"), (2, -math.inf)], 3: np.array([1.0, np.nan]),
           "f": Figure(7, "given", "--x 7"), "s": np.float64(2.5), "i": np.int64(4)}
    out = json_clean(doc)
    assert out == {"a": None, "b": [1.5, None, [2, None]], "3": [1.0, None],
                   "f": {"value": 7, "source": "given", "how": "--x 7"}, "s": 2.5, "i": 4}
    json.dumps(out, allow_nan=False)  # would raise on a NaN left behind


def _tl(n: int) -> Timeline:
    t = np.arange(n, dtype=float)
    return Timeline(t=t, running=np.full(n, 2.0), waiting=np.zeros(n), kv_usage_pct=np.linspace(0, 90, n),
                    preemptions=np.where(t % 2 == 0, 1.0, np.nan), prompt_tps=np.full(n, 100.0),
                    gen_tps=np.full(n, np.inf), ttft_p99=np.full(n, np.nan), line_no=np.arange(n, dtype=np.int64) + 10)


def test_timeline_to_json_columns_nulls_and_line_numbers():
    d = _tl(3).to_json(("t", "preemptions", "gen_tps", "ttft_p99", "line_no"))
    assert d == {"t": [0.0, 1.0, 2.0], "preemptions": [1.0, None, 1.0], "gen_tps": [None, None, None],
                 "ttft_p99": [None, None, None], "line_no": [10, 11, 12]}
    assert all(type(x) is int for x in d["line_no"])
    # only the core columns survive when all null; an all-NaN optional column is dropped
    d = _tl(3).to_json(("t", "gen_tps", "ttft_p99"), keep_empty=("t", "gen_tps"))
    assert set(d) == {"t", "gen_tps"}


def test_timeline_to_json_pools_long_timelines():
    # 6 rows into 3 points: runs [0,1], [2,3], [4,5]; t and line_no = the run's last, preemptions = sum of
    # the reported ones (rows 0, 2, 4 each report 1), kv = max, prompt throughput = mean
    d = _tl(6).to_json(("t", "preemptions", "kv_usage_pct", "prompt_tps", "line_no"), max_points=3)
    assert d["downsampled_from"] == 6
    assert d["t"] == [1.0, 3.0, 5.0] and d["line_no"] == [11, 13, 15]
    assert d["preemptions"] == [1.0, 1.0, 1.0]
    assert d["kv_usage_pct"] == pytest.approx([18.0, 54.0, 90.0])  # linspace(0, 90, 6) step 18: rows 1, 3, 5
    assert d["prompt_tps"] == [100.0, 100.0, 100.0]


def test_gib_text():
    # 14.99 GiB is what vLLM logs for Llama-3.1-8B's weights: 16,095,641,600 B / 2**30 = 14.990...
    assert gib_text(16_095_641_600) == "14.99 GiB"
    assert gib_text(2**40, grouping=True) == "1,024.00 GiB"
    assert gib_text(3 * 2**29, unit="") == "1.50"
    assert gib_text(None) == "—" and gib_text(None, missing="–") == "–"


@pytest.mark.parametrize("cc,want", [((9, 0), 90), ([8, 9], 89), ("8.6", 86), (7.5, 75), (9, 90), (90, 90),
                                     ("120", 120), (None, None), ("n/a", None), ((1, 2, 3), None), (True, None)])
def test_one_capability_normaliser(cc, want):
    assert capability_int(cc) == want


def test_capability_text_and_gpu_spec():
    assert capability_text((8, 9)) == "8.9" and capability_text(90, sep="") == "90"
    assert capability_text(None) == "unknown" and capability_text(None, unknown="?") == "?"
    g = GpuSpec("X", (), 80 * 2**30, "given: test", compute_capability=(10, 0))
    assert g.capability == 100


def test_timeline_concat_orders_by_time_and_fills_missing_columns():
    a = Timeline(t=np.array([10.0, 30.0]), running=np.array([1.0, 3.0]), waiting=np.zeros(2),
                 kv_usage_pct=np.zeros(2), preemptions=np.zeros(2), prompt_tps=np.zeros(2), gen_tps=np.zeros(2),
                 ttft_p99=np.array([0.5, 0.7]))
    b = Timeline(t=np.array([20.0]), running=np.array([2.0]), waiting=np.zeros(1), kv_usage_pct=np.zeros(1),
                 preemptions=np.zeros(1), prompt_tps=np.zeros(1), gen_tps=np.zeros(1))
    m = Timeline.concat([a, b])
    assert m.t.tolist() == [10.0, 20.0, 30.0] and m.running.tolist() == [1.0, 2.0, 3.0]
    assert m.ttft_p99[0] == 0.5 and math.isnan(m.ttft_p99[1]) and m.ttft_p99[2] == 0.7  # b had no column
    assert m.line_no is None and m.swapped is None
