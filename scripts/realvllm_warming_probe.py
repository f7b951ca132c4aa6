#!/usr/bin/env python
"""Exploratory probe of the real CPU engine (docs/simulation.md, "Does the host keep warming?"). Not a judged or
pinned session: one server with the live series' flags, env and pinning (version 9), sent the warm-up, the
calibration load four times back to back, the four validation loads, and the calibration load once more. Prints each
run's mean TTFT, mean TPOT and the engine's logged iteration time at one running request (with the uni executor the
sampling only: sim.calibration.IterObs).

Usage: python scripts/realvllm_warming_probe.py OUT_DIR   (about 2.5 minutes; builds the test bed when absent)
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def main() -> int:
    from kvdoctor.testbed import ensure
    from kvdoctor.testbed import series as S

    out = Path(sys.argv[1])
    by_name = {r.name: r for r in S.LIVE_SERIES}
    cal = by_name["cal_ramp"]
    runs = (by_name["warmup_ramp"],
            *[S.SeriesRun(f"cal_{k}", cal.load, "validation") for k in "abcd"],
            *[r for r in S.LIVE_SERIES if r.role == "validation"],
            S.SeriesRun("cal_e", cal.load, "validation"))
    S.record_series(ensure(), out, runs=runs)
    for r in runs:
        j = json.loads((out / f"{r.name}.json").read_text())
        one = [o.elapsed_s * 1e3 for o in S.load_iterations(out, r.name) if o.ctx_reqs == 0 and o.gen_reqs == 1]
        print(f"{r.name:14s} output {j['output_throughput']:7.1f} tok/s  TTFT {j['mean_ttft_ms']:6.2f} ms  "
              f"TPOT {j['mean_tpot_ms']:5.2f} ms  logged iteration at 1 running "
              f"{statistics.median(one) if one else float('nan'):.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
