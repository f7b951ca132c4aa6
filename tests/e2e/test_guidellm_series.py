"""GuideLLM results, end to end: its printed tables (0.2.x) are read as bench results, and `kvdoctor calibrate` fits
one row and predicts the others.

The public multi-load series (tests/fixtures/guidellm/series.json): IBM's lab runs a GuideLLM sweep (synchronous,
throughput, eight constant rates; 30 requests of 512 in / 256 out each) against one vLLM deployment of
granite-3.3-8b-instruct with --enforce-eager, on one L40S and on two (TP 2). Each is calibrated on its first row,
the synchronous run, by rule (the rule of the Tenstorrent series in docs/simulation.md), and the nine other loads are
predicted. The tables are printed here from the transcribed figures in GuideLLM's layout (the public captures are
not copied), with a wrapped and a `# `-commented copy for the reader. docs/simulation.md, "Calibrated on one run:
public multi-load series", reports the result.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import run_kvdoctor

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "guidellm"
SERIES = json.loads((FIX / "series.json").read_text())["series"]
RULE = "=" * 150


def _cells(values: list[str], widths: list[int]) -> str:
    return "|".join(v.rjust(w) for v, w in zip(values, widths))


def printed(rows: list[dict]) -> str:
    """GuideLLM 0.2's 'Benchmarks Info' and 'Benchmarks Stats' tables for these rows."""
    info = ["Benchmarks Info:", RULE,
            "Metadata                                      |||| Requests Made  ||| Prompt Tok/Req  ||| Output Tok/Req  "
            "||| Prompt Tok Total||| Output Tok Total  ||",
            "    Benchmark| Start Time| End Time| Duration (s)|  Comp|  Inc|  Err|   Comp|  Inc|  Err|   Comp|  Inc|  "
            "Err|   Comp|  Inc|  Err|   Comp|   Inc|   Err", "-" * 13 + "|-----------|" * 1 + "-" * 60]
    stats = ["Benchmarks Stats:", RULE,
             "Metadata     | Request Stats         || Out Tok/sec| Tot Tok/sec| Req Latency (ms)  ||| TTFT (ms)          "
             "||| ITL (ms)        ||| TPOT (ms)       ||",
             "    Benchmark| Per Second| Concurrency|        mean|        mean|  mean| median|   p99|  mean| median|    "
             "p99| mean| median|  p99| mean| median|  p99", "-" * 13 + "|" + "-" * 120]
    for r in rows:
        n = r["completed"]
        info.append(_cells([r["strategy"], "19:47:39", "19:50:53", f"{r['duration']:.1f}", f"{n:g}", "0", "0",
                            f"{r['total_input_tokens'] / n:.1f}", "0.0", "0.0", f"{r['total_output_tokens'] / n:.1f}",
                            "0.0", "0.0", f"{r['total_input_tokens']:g}", "0", "0", f"{r['total_output_tokens']:g}", "0",
                            "0"], [13, 11, 9, 13, 6, 5, 5, 7, 5, 5, 7, 5, 5, 7, 5, 5, 7, 6, 6]))
        stats.append(_cells([r["strategy"]] + [f"{r[k]:.2f}" for k in ("request_throughput", "concurrency")]
                            + [f"{r[k]:.1f}" for k in ("output_throughput", "total_token_throughput")]
                            + [f"{r[k] / 1000:.2f}" for k in ("mean_e2el_ms", "median_e2el_ms", "p99_e2el_ms")]
                            + [f"{r[k]:.1f}" for k in ("mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_itl_ms",
                                                        "median_itl_ms", "p99_itl_ms", "guidellm_tpot_ms",
                                                        "guidellm_median_tpot_ms", "guidellm_p99_tpot_ms")],
                            [13, 11, 12, 12, 12, 6, 7, 6, 6, 7, 7, 5, 7, 5, 5, 7, 5]))
    return "\n".join(["Benchmarks Metadata:", "    Run id:cd2ab424", *info, RULE, "", *stats, RULE,
                      "Saving benchmarks report..."]) + "\n"


def _wrapped(text: str, width: int = 80) -> str:
    """A terminal's hard wrap: every line cut every ``width`` columns."""
    return "\n".join(ln[i:i + width] for ln in text.splitlines() for i in range(0, max(len(ln), 1), width)) + "\n"


@pytest.mark.parametrize("shape", ["plain", "wrapped", "commented"])
def test_the_printed_tables_are_read_as_bench_results(tmp_path, shape):
    rows = SERIES["ibm-granite-3.3-8b-1xl40s"]["rows"]
    text = printed(rows)
    text = {"plain": text, "wrapped": _wrapped(text),
            "commented": "".join(f"# {ln}\n" for ln in text.splitlines())}[shape]
    p = tmp_path / "guidellm.txt"
    p.write_text("guidellm benchmark --target http://127.0.0.1:8000 --rate-type sweep --max-requests 30\n" + text)
    r = run_kvdoctor("evidence", str(p), "--json")
    assert r.rc == 0, r
    bench = json.loads(r.out)["bench"]
    assert [b["format"] for b in bench] == ["guidellm"] * len(rows)
    for b, row in zip(bench, rows):
        f, prov = b["fields"], b["provenance"]
        assert prov["strategy"] == row["strategy"]
        # each rate from the table that gives it more precisely (GuideLLM's own req/s is the mean of its rate
        # distribution, within ~1 % of completed / duration, which is vllm bench's figure)
        assert f["output_throughput"] == pytest.approx(row["output_throughput"], abs=0.051)
        assert f["request_throughput"] == pytest.approx(row["request_throughput"], rel=0.04)
        assert f["mean_ttft_ms"] == pytest.approx(row["mean_ttft_ms"])
        assert f["mean_tpot_ms"] == pytest.approx(row["mean_itl_ms"])  # GuideLLM's ITL is vLLM's TPOT here
        assert f["mean_e2el_ms"] == pytest.approx(row["mean_e2el_ms"])  # printed in seconds under "(ms)"
        assert f["completed"] == 30 and f["total_output_tokens"] == 7680
    by = {b["provenance"]["strategy"]: b["fields"] for b in bench}
    assert by["synchronous"]["max_concurrency"] == 1 and by["synchronous"]["request_rate"] == "inf"
    assert by["constant@0.50"]["request_rate"] == 0.5 and by["constant@0.50"]["burstiness"] >= 1e5  # evenly spaced
    assert by["throughput"]["max_concurrency"] == 512  # GuideLLM's default closed loop: all 30 at once


# The lab served through InstructLab, whose vLLM extra pins vllm==0.7.3 (instructlab/instructlab,
# requirements-vllm-cuda.txt at 0bb4aba): a synchronous engine. The sources print no release; until protocol 22 kvdoctor's
# default 0.33 stood in, which scheduled these loads alike (docs/simulation.md, "GuideLLM sweeps").
INSTRUCTLAB_VLLM = "0.7.3"


@pytest.mark.parametrize("name", sorted(SERIES))
def test_calibrated_on_the_synchronous_run_the_other_loads_are_predicted(tmp_path, name):
    s = SERIES[name]
    p = tmp_path / f"{name}.txt"
    p.write_text(printed(s["rows"]))
    serve = (f"vllm serve {FIX / 'granite-3.3-8b-instruct.config.json'} --enforce-eager --disable-custom-all-reduce "
             f"--tensor-parallel-size {s['tensor_parallel_size']}")
    out = tmp_path / "cal.json"
    r = run_kvdoctor("calibrate", str(p), "--serve", serve, "--gpu", s["gpu"], "-o", str(out), "--json",
                     "--vllm-version", INSTRUCTLAB_VLLM, timeout=300)
    assert r.rc == 0, r
    fit = json.loads(out.read_text())["fit"]
    runs = fit["runs"]
    assert [k for k in runs if runs[k]["error"]] and len(runs) == 10
    assert list(runs)[0].endswith("#synchronous")
    own = runs[f"{p.name}#synchronous"]["error"]
    assert all(abs(own[m]) <= 0.02 for m in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"))
    held = fit["held_out_median_abs_error"]
    # docs/simulation.md, pinned: the medians of the 9 predicted loads (throughput / TTFT / TPOT). The bar is
    # 10 %: met on two GPUs; on one, throughput and TPOT meet it and TTFT sits at it (10.03 %)
    want = {"ibm-granite-3.3-8b-1xl40s": (0.031, 0.100, 0.008), "ibm-granite-3.3-8b-2xl40s": (0.044, 0.060, 0.027)}
    for m, w in zip(("output_throughput", "mean_ttft_ms", "mean_tpot_ms"), want[name]):
        assert held[m] == pytest.approx(w, abs=0.005), (m, held)


def _dist(mean: float, median: float | None = None, p99: float | None = None, total: float | None = None) -> dict:
    return {"successful": {"mean": mean, "median": median if median is not None else mean, "mode": mean,
                           "variance": 0.0, "std_dev": 0.0, "min": mean, "max": mean, "count": 30,
                           "total_sum": total if total is not None else mean * 30,
                           "percentiles": {"p50": median if median is not None else mean,
                                           "p99": p99 if p99 is not None else mean}},
            "errored": None, "incomplete": None, "total": None}


def saved_report(rows: list[dict], era: str) -> dict:
    """GuideLLM's saved benchmarks.json for these rows: 0.2's layout (args.strategy, start/end times, request_totals
    beside the metrics) or 0.4+'s (config.strategy, scheduler_metrics, metrics.request_totals), per its schema."""
    benches = []
    for k, r in enumerate(rows):
        kind, _, arg = r["strategy"].partition("@")
        strategy = {"type_": kind, **({"rate": float(arg)} if arg else {}),
                    **({"max_concurrency": 512} if kind == "throughput" else {})}
        totals = {"successful": int(r["completed"]), "errored": 0, "incomplete": 0, "total": int(r["completed"])}
        metrics = {"requests_per_second": _dist(r["request_throughput"]),
                   "request_concurrency": _dist(r["concurrency"]),
                   "request_latency": _dist(r["mean_e2el_ms"] / 1000, r["median_e2el_ms"] / 1000,
                                            r["p99_e2el_ms"] / 1000),
                   "prompt_token_count": _dist(r["total_input_tokens"] / r["completed"], total=r["total_input_tokens"]),
                   "output_token_count": _dist(r["total_output_tokens"] / r["completed"],
                                               total=r["total_output_tokens"]),
                   "time_to_first_token_ms": _dist(r["mean_ttft_ms"], r["median_ttft_ms"], r["p99_ttft_ms"]),
                   "inter_token_latency_ms": _dist(r["mean_itl_ms"], r["median_itl_ms"], r["p99_itl_ms"]),
                   "time_per_output_token_ms": _dist(r["guidellm_tpot_ms"]),
                   "output_tokens_per_second": _dist(r["output_throughput"])}
        t0 = 1756300000.0 + 1000 * k
        if era == "0.2":
            benches.append({"type_": "generative_benchmark", "id_": str(k), "args": {"strategy": strategy},
                            "start_time": t0, "end_time": t0 + r["duration"], "request_totals": totals,
                            "metrics": metrics})
        else:
            benches.append({"type_": "generative_benchmark", "config": {"strategy": strategy, "run_index": k},
                            "scheduler_metrics": {"measure_start_time": t0, "measure_end_time": t0 + r["duration"],
                                                  "requests_made": totals},
                            "metrics": {"request_totals": totals, **metrics}})
    return {"metadata": {"guidellm_version": "0.2.1" if era == "0.2" else "0.5.0"}, "benchmarks": benches}


@pytest.mark.parametrize("era", ["0.2", "0.5", "0.5-yaml"])
def test_the_saved_report_reads_and_calibrates_as_the_printed_tables(tmp_path, era):
    s = SERIES["ibm-granite-3.3-8b-1xl40s"]
    printed_p = tmp_path / "printed.txt"
    printed_p.write_text(printed(s["rows"]))
    if era.endswith("-yaml"):  # --outputs yaml: the same report as a YAML mapping, its keys in the model's order
        import yaml

        saved_p = tmp_path / "benchmarks.yaml"
        saved_p.write_text(yaml.safe_dump(saved_report(s["rows"], era.removesuffix("-yaml")), sort_keys=False))
    else:
        saved_p = tmp_path / "benchmarks.json"
        saved_p.write_text(json.dumps(saved_report(s["rows"], era)))
    r = run_kvdoctor("evidence", str(saved_p), "--json")
    assert r.rc == 0, r
    bench = json.loads(r.out)["bench"]
    assert [b["provenance"]["strategy"] for b in bench] == [row["strategy"] for row in s["rows"]]
    for b, row in zip(bench, s["rows"]):
        f = b["fields"]
        assert f["output_throughput"] == pytest.approx(row["total_output_tokens"] / row["duration"])  # saved exactly
        assert f["mean_ttft_ms"] == row["mean_ttft_ms"] and f["mean_tpot_ms"] == row["mean_itl_ms"]
        assert f["mean_e2el_ms"] == pytest.approx(row["mean_e2el_ms"])
    serve = f"vllm serve {FIX / 'granite-3.3-8b-instruct.config.json'} --enforce-eager"
    held = {}
    for p in (printed_p, saved_p):
        out = tmp_path / f"{p.stem}.cal.json"
        r = run_kvdoctor("calibrate", str(p), "--serve", serve, "--gpu", "L40S", "-o", str(out),
                         "--vllm-version", INSTRUCTLAB_VLLM, timeout=300)
        assert r.rc == 0, r
        fit = json.loads(out.read_text())["fit"]
        assert list(fit["runs"])[0] == f"{p.name}#synchronous"
        held[p] = fit["held_out_median_abs_error"]
    for m in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms"):
        assert held[saved_p][m] == pytest.approx(held[printed_p][m], abs=0.01)
