#!/usr/bin/env python
"""Exploratory probe of the real CPU engine (docs/simulation.md, "Does the host keep warming?"). Not a judged or
pinned session: one server with the live series' flags, env and pinning (version 9), sent the warm-up, the
calibration load four times back to back, the four validation loads, and the calibration load once more. Prints each
run's mean TTFT, mean TPOT and the engine's logged decode step at one running request.

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
        steps = json.loads((out / f"{r.name}.iterations.json").read_text())
        one = [s[4] for s in steps if s[0] == 0 and s[2] == 1]  # [ctx_reqs, ctx_tokens, gen_reqs, gen_tokens, ms]
        print(f"{r.name:14s} output {j['output_throughput']:7.1f} tok/s  TTFT {j['mean_ttft_ms']:6.2f} ms  "
              f"TPOT {j['mean_tpot_ms']:5.2f} ms  decode step at 1 running "
              f"{statistics.median(one) if one else float('nan'):.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
