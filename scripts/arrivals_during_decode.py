"""Measured and simulated TTFT of requests that arrive at an idle engine against those that arrive while one or more
other requests decode (``series.arrival_groups``), on frozen calibration sessions. The simulation is the live test's
procedure 10 calibrated on the session's ramp (``series.calibrate_series_v10``). Produces the table in
docs/simulation.md, "Arrivals while another request decodes".

    python scripts/arrivals_during_decode.py tests/fixtures/realvllm_bench/series4{5,6,7,8} --runs val_r3 val_g6
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from kvdoctor.sim import calibration as C
from kvdoctor.testbed import series as S


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sessions", nargs="+", type=Path)
    ap.add_argument("--runs", nargs="+", default=["val_r3", "val_g6"])
    a = ap.parse_args()
    print("| session | run | group | n | measured mean TTFT | simulated | simulated engine queue |")
    print("|---|---|---|---|---|---|---|")
    for d in a.sessions:
        cal, runs = S.calibrate_series_v10(d)
        for name in a.runs:
            run = next(r for r in runs if r.name == f"{name}.json")
            raw = json.loads((d / run.name).read_text())
            res = C.simulate_run(run, S._setup(), cal, detail=True)
            meas, pred, queue = np.asarray(raw["ttfts"]), np.asarray(res.ttft_s), np.asarray(res.queue_s)
            for g, ix in S.arrival_groups(raw).items():
                if ix:
                    print(f"| {d.name} | {name} | {g} | {len(ix)} | {1e3 * meas[ix].mean():.1f} ms | "
                          f"{1e3 * pred[ix].mean():.1f} ms | {1e3 * queue[ix].mean():.1f} ms |", flush=True)


if __name__ == "__main__":
    main()
