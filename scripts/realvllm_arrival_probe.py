"""Exploratory (issue 11, 2026-12-06): where does the engine hide the decode step in flight from a request that arrives
while another decodes? (docs/simulation.md, "Arrivals while another request decodes"). One server session of version
14 (the 32.8M-parameter model, the live series' flags, env and pinning) with ``--enable-log-requests`` and every log
line stamped with its wall-clock time (``VLLM_LOGGING_CONFIG_PATH``: vLLM's own format, ``%(created).6f`` in front),
running the series' warm-up ramp, then the open loops r3 and g6. Per request, the server's times split its TTFT:
the API server's "Added request" (the request handed to the engine), the first prefill step logged after it, and the
client's first token. The bench's send times are ``time.perf_counter()`` (CLOCK_MONOTONIC, one clock for every
process here); the log's are ``time.time()``, mapped onto it with the offset this process measures.

    python scripts/realvllm_arrival_probe.py OUT_DIR            (record a session, then report)
    python scripts/realvllm_arrival_probe.py OUT_DIR --full     (version 14's whole series, instrumented)
    python scripts/realvllm_arrival_probe.py OUT_DIR --report   (report a recorded one again)
    python scripts/realvllm_arrival_probe.py OUT_DIR --evaluate (a --full one: procedure 10 vs the step periods,
                                                                 with and without the first-of-its-size term)

Nothing here is judged or pinned; docs/simulation.md reports what it measured.
"""

import argparse
import json
import statistics
import sys
from pathlib import Path

def server_events(log: Path, offset: float):
    from kvdoctor.sim.calibration import server_events as events

    return events(log, offset)


def session_log(out: Path) -> Path:
    """The session's server log, or a frozen session's cut copy (scripts/realvllm_calibration_series.py --freeze)."""
    return out / "serve.log" if (out / "serve.log").exists() else out / "serve.steps.log.gz"


def split(run: dict, added: list[float], steps: list) -> list[dict]:
    """Per request (bench order): front end (send -> Added), engine (Added -> its prefill step logged), out (-> the
    client's first token), and the group (``series.arrival_groups``)."""
    from kvdoctor.sim.calibration import handover_split
    from kvdoctor.testbed import series as S

    groups = {i: g for g, ix in S.arrival_groups(run).items() for i in ix}
    return [{**r, "group": groups[r["i"]]} for r in handover_split(run, added, steps)]


def evaluate(out: Path, offset: float) -> None:
    """Procedure 10 (the live test's) against two candidates, every run but the calibration ramp held out: procedure
    14 with the step terms from the calibration run's own step periods (``calibration.step_observations`` in the run's
    window, ``step_period_terms`` with the square), and the same with the first step of each size priced apart
    (``new_shape=True``, no square) and each run simulated on an engine that has run the sizes the server's log shows
    before it (``BenchRun.warm_shapes``, ``calibration.step_sizes_before``)."""
    from dataclasses import replace

    from kvdoctor.sim import calibration as C
    from kvdoctor.testbed import series as S

    log = session_log(out)
    obs = C.step_observations(log, C.run_window(json.loads((out / "cal_ramp.json").read_text()), offset))
    square, shaped = C.step_period_terms(obs), C.step_period_terms(obs, new_shape=True)
    runs = S.load_series_runs(out)
    warm = [replace(r, warm_shapes=C.step_sizes_before(
        log, C.run_window(json.loads((out / r.name).read_text()), offset)[0] + 0.05)) for r in runs]
    for label, terms in (("squared", square), ("first of its size", shaped)):
        print(f"cal_ramp: {len(obs)} back-to-back steps; {label} terms (ms): "
              + ", ".join(f"{k} {1e3 * v:.5f}" for k, v in terms.items() if v))
    for label, cal in (("procedure 10", S.calibrate_series_v10(out)[0]),
                       ("step periods", S._calibrate_on(out, None, "cal_ramp", **S._P10_PROCEDURE, step_terms=True,
                                                        given_step_terms=square)[0]),
                       ("step periods, first of its size", S._calibrate_on(
                           out, warm, "cal_ramp", **S._P10_PROCEDURE, step_terms=True, given_step_terms=shaped)[0])):
        per = cal.fit["runs"]
        errs = {n[:-5]: [round(100 * per[n]["error"][m], 1) for m in C.HEADLINE] for n in per}
        print(f"{label}: " + "; ".join(f"{n} {e}" for n, e in errs.items()))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--full", action="store_true", help="every run of version 14's series, not only r3 and g6")
    ap.add_argument("--evaluate", action="store_true",
                    help="a --full session: procedure 10 against the step periods (with and without the new-size term)")
    ap.add_argument("--bursty-ramp", action="store_true", help="with --full: the calibration ramp with gamma arrivals")
    a = ap.parse_args()
    if a.report or a.evaluate:
        offset = json.loads((Path(a.out_dir) / "clock_offset.json").read_text())["time_minus_perf_counter_s"]
        (evaluate if a.evaluate else report)(Path(a.out_dir), offset)
        return 0
    from kvdoctor.testbed import ensure
    from kvdoctor.testbed import series as S

    out = Path(a.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tb = ensure(log=lambda m: print(m, file=sys.stderr, flush=True))
    runs = S.SERIES_V14 if a.full else tuple(r for r in S.SERIES_V14 if r.name in ("warmup_ramp", "val_r3", "val_g6"))
    if a.bursty_ramp:
        # the calibration ramp (and its repeat) with gamma arrivals of burstiness 1/cv^2 = 0.25: bursts of prompts reach
        # the engine together, so its steps span the closed loop 8's ~1,800-token first-wave step
        from dataclasses import replace

        runs = tuple(replace(r, load=replace(r.load, arrival="gamma", cv=2.0)) if r.role in ("calibration", "drift")
                     else r for r in runs)
    S.record_series(tb, out, runs=runs, version=14, model=S.SERIES_V14_MODEL, stamped=True)
    report(out, json.loads((out / "clock_offset.json").read_text())["time_minus_perf_counter_s"])
    return 0


def report(out: Path, offset: float) -> None:
    added, steps = server_events(session_log(out), offset)
    print(f"{len(added)} Added lines, {len(steps)} steps logged")
    table = {}
    names = [n for n in ("cal_ramp", "val_r3", "val_g6", "val_c8_in256", "val_c6") if (out / f"{n}.json").exists()]
    for name in names:
        rows = split(json.loads((out / f"{name}.json").read_text()), added, steps)
        table[name] = rows
        for g in ("lone", "decoding", "busy"):
            sel = [r for r in rows if r["group"] == g]
            if sel:
                med = {k: 1e3 * statistics.median(r[k] for r in sel)
                       for k in ("front", "engine", "out", "ttft", "to_next_step")}
                waited = sum(r["steps_between"] > 0 for r in sel)
                print(f"{name} {g:8s} n={len(sel):2d} median ms: " + ", ".join(f"{k} {v:.1f}" for k, v in med.items())
                      + f"; a step logged between hand-over and prefill: {waited}/{len(sel)}")
    (out / "arrival_split.json").write_text(json.dumps(table, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
