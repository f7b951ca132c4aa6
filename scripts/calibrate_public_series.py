#!/usr/bin/env python3
"""`kvdoctor calibrate` on public multi-load series: calibrate on ONE run of a deployment, predict its
other runs (the issue's "calibrated" bar on public material).

    python scripts/calibrate_public_series.py [--all-anchors] [--json]

The series: the Tenstorrent "GPU reference" sweeps in tests/fixtures/bench_public/results.jsonl (stock
vLLM on NVIDIA GPUs, `vllm bench serve`-style random lengths, closed loop at concurrency 1; one
deployment per ``group``, 6-7 runs that differ in input/output length). Every run of a sweep is
simulated on ONE deployment (max_model_len: the next power of two that holds the sweep's longest
request, >= 4096 — the rule scripts/fit_serving.py uses per row).

Library calls only, the ones ``kvdoctor calibrate`` makes: ``sim.calibration.calibrate`` with the
roofline + linear model (``kind="roofline+linear"``, the default for GPUs) on a ``BenchRun`` per row
(its three published figures: output throughput, mean TTFT, mean TPOT; lengths drawn as the bench
draws them).

The anchor (the run calibrated on) is fixed by rule, not by result: the sweep's first published run
(128 in / 128 out). ``--all-anchors`` calibrates on every run in turn and reports the median over all
(anchor, other run) pairs too. The ``split`` column of the fixture (the uncalibrated fit's) is not used.

The prefix cache each run started on (docs/simulation.md, "The sweeps ran on a warm prefix cache"): every
run of a sweep ran back to back on one server with prefix caching on and one seeded prompt stream, so the
rows carry the procedure, ``prior_runs_same_server`` and ``bench_test_request``, and each ``BenchRun``
gets the warm prefix they imply (``sim.workload.warm_prefix_after_runs``, as scripts/fit_serving.py) for
the fit and every prediction alike; the same as ``kvdoctor calibrate --same-server --bench-test-request``
given the sweep's results in order. ``--cold`` simulates every run on a fresh server instead (the
evaluation before).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "fixtures" / "bench_public" / "results.jsonl"
METRICS = ("output_throughput", "mean_ttft_ms", "mean_tpot_ms")
MIN_RUNS = 3  # a series: at least three runs of one deployment


def load_series(path: Path = FIXTURE) -> dict[str, list[dict]]:
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("dataset") == "random" and r.get("max_concurrency") == 1 and r.get("id", "").startswith("tt"):
            groups.setdefault(r["group"], []).append(r)
    return {g: rs for g, rs in groups.items() if len(rs) >= MIN_RUNS}


def setup_for(rows: list[dict]):
    """One deployment for the whole sweep, resolved as the CLI resolves it."""
    from kvdoctor.cli.common import ConfigOptions, resolve_inputs
    from kvdoctor.ledger.build import build_ledger
    from kvdoctor.sim.calibration import Setup
    from kvdoctor.sim.steptime import from_deployment
    from kvdoctor.sim.whatif import layout_of, sched_config

    r0 = rows[0]
    need = max(int(r["input_len"]) + int(r["output_len"]) for r in rows) + 16
    mml = r0.get("max_model_len") or max(4096, 1 << math.ceil(math.log2(need)))
    model = r0["model"]
    if model.startswith("tests/"):
        model = str(REPO / model)
    opts = ConfigOptions(model=model, gpu=r0["gpu"], tensor_parallel_size=r0["tp"],
                         quantization=r0.get("quantization"), enforce_eager=r0.get("enforce_eager") or None,
                         max_model_len=str(mml), vllm_version=r0.get("vllm_version") or "0.9.2",
                         max_num_seqs=r0.get("max_num_seqs"),
                         gpu_memory_utilization=r0.get("gpu_memory_utilization"))
    inputs = resolve_inputs(opts)
    led = build_ledger(inputs.shape, inputs.gpu, inputs.resolved)
    nb = int(r0["num_gpu_blocks"]) if r0.get("num_gpu_blocks") else led.num_blocks  # the server's own log, where given
    cfg = sched_config(inputs.resolved, nb, layout_of(inputs.shape, inputs.gpu, inputs.resolved))
    return Setup(cfg=cfg, base=from_deployment(inputs.shape, inputs.gpu, inputs.resolved))


def warm_prefix_of(row: dict, prompt: list[int]) -> list[int] | None:
    """Prompt tokens of each request already cached when the row's run started, from the row's documented
    procedure only (never from a measured figure): the runs before it on the same server
    (``prior_runs_same_server``: [input_len, num_prompts]) and the bench's untimed test request."""
    from kvdoctor.sim.workload import warm_prefix_after_runs

    prior = row.get("prior_runs_same_server") or []
    test = bool(row.get("bench_test_request"))
    if not prior and not test:
        return None
    extra = prompt[0] - int(row["input_len"])  # the special tokens the workload adds, earlier runs' prompts too
    return warm_prefix_after_runs(list(prompt), [(int(n_in) + extra, int(n)) for n_in, n in prior], test_prompt=test)


def bench_run(row: dict, warm: bool = True):
    """A published row as ``kvdoctor calibrate`` reads a result without --save-detailed: its figures, and
    the lengths its options draw (random dataset, --ignore-eos); ``warm``: with the prefix cache it ran on."""
    from kvdoctor.sim.calibration import BenchRun
    from kvdoctor.sim.workload import WorkloadSpec, random_lengths

    spec = WorkloadSpec(dataset_name="random", num_prompts=int(row["num_prompts"]), max_concurrency=1,
                        random_input_len=int(row["input_len"]), random_output_len=int(row["output_len"]),
                        ignore_eos=True, random_range_ratio=float(row.get("random_range_ratio") or 0.0))
    prompt, output = random_lengths(spec)
    figs = {k: float(v) for k, v in row["measured"].items() if k in METRICS and v is not None}
    return BenchRun(name=row["id"], figures=figs, prompt=prompt, output=output, send=None,
                    request_rate=math.inf, burstiness=1.0, max_concurrency=1,
                    warm_prefix=warm_prefix_of(row, prompt) if warm else None)


def series_runs(rows: list[dict], setup, warm: bool = True) -> list:
    """The sweep's runs with the prefix cache each started on. Where the rows' documented procedure is exactly
    "these runs, in this order, on one server" (each row's ``prior_runs_same_server`` lists the rows before it),
    the library's ``warm_prefixes`` gives it, as ``kvdoctor calibrate --same-server [--bench-test-request]`` would,
    with the deployment's KV pool (what earlier runs left cached that the pool still holds); otherwise each row's
    own procedure, pool unbounded (``warm_prefix_of``)."""
    from kvdoctor.sim import calibration as C

    if not warm:
        return [bench_run(r, False) for r in rows]
    in_order = all([list(map(int, x)) for x in (r.get("prior_runs_same_server") or [])]
                   == [[int(q["input_len"]), int(q["num_prompts"])] for q in rows[:k]] for k, r in enumerate(rows))
    tests = {bool(r.get("bench_test_request")) for r in rows}
    if not in_order or len(tests) > 1:
        return [bench_run(r, True) for r in rows]
    return C.warm_prefixes([bench_run(r, False) for r in rows], same_server=True, test_request=tests.pop(),
                           block_size=setup.cfg.block_size, num_blocks=setup.cfg.num_blocks)


def calibrate_series(rows: list[dict], anchor: str | list[str], warm: bool = True, prefill_term: bool = False) -> dict:
    from kvdoctor.sim import calibration as C

    setup = setup_for(rows)
    runs = series_runs(rows, setup, warm)
    cal = C.calibrate(runs, setup, kind="roofline+linear", fit_on=[anchor] if isinstance(anchor, str) else anchor,
                      prefill_term=prefill_term)
    return {name: {"split": v["split"], "error": {k: v["error"][k] for k in METRICS if k in v["error"]},
                   "measured": {k: v["measured"][k] for k in METRICS if k in v["measured"]},
                   "predicted": {k: v["predicted"][k] for k in METRICS if k in v["predicted"]},
                   **({"outside_range": v["outside_range"]} if "outside_range" in v else {})}
            for name, v in cal.fit["runs"].items()}


def median_abs(per_run: list[dict]) -> dict[str, float | None]:
    import numpy as np

    out: dict[str, float | None] = {}
    for m in METRICS:
        v = [abs(x["error"][m]) for x in per_run if m in x["error"]]
        out[m] = float(np.median(v)) if v else None
    out["n"] = len(per_run)
    return out


def ttft_floor(rows: list[dict]) -> float:
    """Median |error| of the best straight line TTFT = a + b * input_len fitted to ALL of a sweep's runs
    (least squares in relative error, hindsight included): what the sweep's own TTFTs allow at best. At
    concurrency 1 a TTFT is front end + one prefill, which grows with the prompt; a sweep whose means of
    2-8 requests do not (a 4096-token prompt faster than a 2048-token one) puts a floor under any model."""
    import numpy as np

    x = np.array([float(r["input_len"]) for r in rows])
    y = np.array([float(r["measured"]["mean_ttft_ms"]) for r in rows])
    A = np.stack([np.ones_like(x), x], axis=1) / y[:, None]
    coef, *_ = np.linalg.lstsq(A, np.ones_like(y), rcond=None)
    coef = np.maximum(coef, 0.0)  # a cost is not negative
    pred = coef[0] + coef[1] * x
    return float(np.median(np.abs(pred / y - 1)))


def ttft_shape(rows: list[dict], res: dict) -> dict:
    """How TTFT grows with the prompt, free of the prefill rate: each run's TTFT above the anchor's, over the
    1024-token run's (measured and predicted). A cold server computes every prompt token, so the shape grows with
    the prompt (2048 tokens: ~2.2); a warm one computes only what earlier runs did not send (2048, 3072 and 4096
    tokens all compute ~1,000 new ones: ~1.2-1.4). ``shape_error``: median |measured - predicted| over the runs
    after the 1024-token one; ``prefill_ratio``: the 1024-token run's measured TTFT increment over the predicted
    one (> 1: the calibrated prefill is faster than the server's)."""
    import numpy as np

    a = rows[0]["id"]
    ref = next((r["id"] for r in rows if int(r["input_len"]) == 1024 and r["id"] != a), None)
    if ref is None:
        return {}
    out: dict = {"reference": ref}
    for side in ("measured", "predicted"):
        t = {n: v[side]["mean_ttft_ms"] for n, v in res.items()}
        d = t[ref] - t[a]
        out[side] = {n: (t[n] - t[a]) / d for n in t if n != a} if d > 0 else {}
    m_inc = res[ref]["measured"]["mean_ttft_ms"] - res[a]["measured"]["mean_ttft_ms"]
    p_inc = res[ref]["predicted"]["mean_ttft_ms"] - res[a]["predicted"]["mean_ttft_ms"]
    out["prefill_ratio"] = m_inc / p_inc if p_inc > 0 else None
    later = [r["id"] for r in rows[rows.index(next(r for r in rows if r["id"] == ref)) + 1:]]
    diffs = [abs(out["measured"][n] - out["predicted"][n]) for n in later
             if n in out["measured"] and n in out["predicted"]]
    out["shape_error"] = float(np.median(diffs)) if diffs else None
    return out


def evaluate(all_anchors: bool = False, path: Path = FIXTURE, warm: bool = True) -> dict:
    series = load_series(path)
    out: dict = {"warm_prefix_cache": warm, "series": {}, "held_out": [], "all_anchors_held_out": []}
    for g, rows in sorted(series.items()):
        anchor = rows[0]["id"]
        res = calibrate_series(rows, anchor, warm)
        held = [v for v in res.values() if v["split"] == "held_out"]
        out["series"][g] = {"anchor": anchor, "runs": res, "held_out_median_abs_error": median_abs(held),
                            "ttft_floor": ttft_floor(rows), "ttft_shape": ttft_shape(rows, res)}
        out["held_out"] += held
        if all_anchors:
            pairs_g = []
            for r in rows:
                res_a = res if r["id"] == anchor else calibrate_series(rows, r["id"], warm)
                pairs_g += [v for v in res_a.values() if v["split"] == "held_out"]
            out["series"][g]["all_anchors_median_abs_error"] = median_abs(pairs_g)
            out["all_anchors_held_out"] += pairs_g
    out["median_abs_error"] = median_abs(out.pop("held_out"))
    pairs = out.pop("all_anchors_held_out")
    if all_anchors:
        out["all_anchors_median_abs_error"] = median_abs(pairs)
    return out


def two_lengths(path: Path = FIXTURE, warm: bool = True) -> dict:
    """OBSERVATION, not the rule: calibrate each sweep on its first run AND its first 1024-token run (two prompt
    lengths), with the prefill term free (``prefill_term``), and predict the other runs. The rule stays "first run
    alone"; this asks whether the TTFT miss is the prefill rate that one 128-token run cannot measure."""
    out: dict = {"warm_prefix_cache": warm, "series": {}, "held_out": []}
    for g, rows in sorted(load_series(path).items()):
        ref = next((r["id"] for r in rows[1:] if int(r["input_len"]) == 1024), None)
        if ref is None or len(rows) < 4:  # nothing left to predict beyond the two
            continue
        res = calibrate_series(rows, [rows[0]["id"], ref], warm, prefill_term=True)
        held = [v for v in res.values() if v["split"] == "held_out"]
        out["series"][g] = {"anchors": [rows[0]["id"], ref], "runs": res, "held_out_median_abs_error": median_abs(held)}
        out["held_out"] += held
    out["median_abs_error"] = median_abs(out.pop("held_out"))
    return out


def series_rows(series: dict) -> list[str]:
    """One markdown row per run of each series (measured → predicted (error)); the fit run is tagged."""
    lines = []
    for g, s in series.items():
        for name, v in s["runs"].items():
            def cell(m):
                if m not in v["error"]:
                    return "—"
                return f"{v['measured'][m]:.4g} → {v['predicted'][m]:.4g} ({v['error'][m]:+.0%})"
            tag = " (calibration run)" if v["split"] == "fit" else ""
            lines.append(f"| {g} | {name.removeprefix(g + '-')}{tag} | {cell('output_throughput')} | "
                         f"{cell('mean_ttft_ms')} | {cell('mean_tpot_ms')} |")
    return lines


def table(res: dict) -> str:
    lines = ["| series (anchor: first run) | run | output tok/s | mean TTFT | mean TPOT |", "|---|---|---|---|---|"]
    return "\n".join(lines + series_rows(res["series"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--all-anchors", action="store_true", help="also calibrate on every run in turn")
    ap.add_argument("--cold", action="store_true",
                    help="simulate every run on a fresh server (ignore prior_runs_same_server, bench_test_request)")
    ap.add_argument("--two-lengths", action="store_true",
                    help="observation only: calibrate on the first run and the first 1024-token run, prefill term "
                         "free (sim.calibration.calibrate(prefill_term=True)); the rule stays the first run alone")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    sys.path.insert(0, str(REPO / "src"))
    if a.two_lengths:
        res = two_lengths(warm=not a.cold)
        print(json.dumps(res, indent=1) if a.json else "\n".join(
            [f"{g} {json.dumps(s['held_out_median_abs_error'])}" for g, s in res["series"].items()]
            + ["median_abs_error " + json.dumps(res["median_abs_error"])]))
        return 0
    res = evaluate(a.all_anchors, warm=not a.cold)
    if a.json:
        print(json.dumps(res, indent=1))
    else:
        print(table(res))
        for k in ("median_abs_error", "all_anchors_median_abs_error"):
            if k in res:
                print(k, json.dumps(res[k]))
        for g, s in res["series"].items():
            print(g, json.dumps(s["held_out_median_abs_error"]), "TTFT floor (best line, hindsight):",
                  f"{s['ttft_floor']:.1%}")
            sh = s["ttft_shape"]
            if sh.get("shape_error") is not None:
                print(f"   TTFT shape error (scale-free, after the 1024-token run): {sh['shape_error']:.2f}; "
                      f"measured / predicted TTFT increment 128 -> 1024 tokens: {sh['prefill_ratio']:.2f}")
            if "all_anchors_median_abs_error" in s:
                print("   all anchors:", json.dumps(s["all_anchors_median_abs_error"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
