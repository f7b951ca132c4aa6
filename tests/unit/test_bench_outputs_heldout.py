"""The bench reader on 24 public outputs of vLLM's benchmark client, collected for their format and committed before
kvdoctor read them (tests/fixtures/bench_outputs_heldout). First read: 17 of 24 gave every figure the collector copied.
Then, found on them (disclosed): saved results appended one per line (JSON Lines) were taken for a request trace;
values re-typed with thousands separators; blocks whose line breaks were lost in a paste. Three are left as they are,
listed below with the reason, so a change in them is seen."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvdoctor.errors import KvdoctorError
from kvdoctor.evidence.load import load_evidence

BASE = Path(__file__).resolve().parents[1] / "fixtures" / "bench_outputs_heldout"
CASES = [json.loads(x) for x in (BASE / "cases.jsonl").read_text().splitlines() if x.strip()]
KEYS = {"completed": "completed", "duration_s": "duration", "output_throughput": "output_throughput",
        "mean_ttft_ms": "mean_ttft_ms", "median_ttft_ms": "median_ttft_ms", "p99_ttft_ms": "p99_ttft_ms",
        "mean_tpot_ms": "mean_tpot_ms", "mean_itl_ms": "mean_itl_ms", "request_throughput": "request_throughput",
        "max_concurrency": "max_concurrency", "request_rate": "request_rate", "failed": "failed"}
NOT_READ = {
    "bench_throughput_and_latency_rocm_zh": "offline `vllm bench throughput` / `latency`: read apart as Evidence.offline "
                                            "(tests/unit/test_offline_bench.py), never as serving results",
    "mystous_readme_md_table_two_runs": "markdown tables a person wrote from two runs (Korean headings)",
    "pre2024_total_time_format_zh": "2023 summary: its request rate is only in the Namespace line",
}


def _problems(case) -> list[str]:
    exp = case["expected"] if isinstance(case["expected"], list) else [case["expected"]]
    try:
        got = [b.fields for b in load_evidence([str(BASE / case["file"])]).bench]
    except KvdoctorError as exc:
        return [str(exc)]
    out = [] if len(got) == len(exp) else [f"{len(got)} results, {len(exp)} stated"]
    for i, (e, g) in enumerate(zip(exp, got)):
        for k, v in (e or {}).items():
            if k not in KEYS or v is None or (v == "inf" and g.get(KEYS[k], float("inf")) == float("inf")):
                continue
            shown = g.get(KEYS[k])
            if shown is None or abs(shown - float(v)) > max(0.011, 1e-3 * abs(float(v))):
                out.append(f"#{i} {k}: {shown} != {v}")
    return out


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_every_stated_figure_is_read(case):
    problems = _problems(case)
    if case["id"] in NOT_READ:
        assert problems, f"{case['id']} is read now: remove it from NOT_READ"
    else:
        assert not problems, problems


def test_a_value_followed_by_a_full_stop_is_read():
    # the thousands-separator change had made "100." unreadable; what the reader took before is taken again
    from kvdoctor.evidence.bench import parse_text

    text = ("============ Serving Benchmark Result ============\nSuccessful requests: 100.\n"
            "Benchmark duration (s): 12.5\nOutput token throughput (tok/s): 1,024.5\n"
            "==================================================\n")
    (r,) = parse_text(text)
    assert r.fields["completed"] == 100 and r.fields["output_throughput"] == 1024.5
