#!/usr/bin/env python3
"""The table of docs/simulation.md, "Versions 5 to 7" (and 9): every recorded ramp-up session (tests/fixtures/realvllm_bench/
series12-42) calibrated with version 4's procedure (on its closed loop 6, `val_c6`), version 5's, version 6's and
procedures 9 (the prompts' cached heads, not adopted), 10 (the response ends with its finish work, adopted), 11 (that
work holds no one else, not adopted), 12 (that work measured on the last tokens, not adopted) and 13 (the output work
charged as each step's tokens come out, not adopted) and 14 (the whole step line measured on the rebuilt steps, not
adopted), and
each validation load's error (output throughput / mean TTFT / mean TPOT), with the repeat's drift and the prefill rate
measured on the calibration run's rebuilt steps. tests/unit/test_calibrate_series.py pins series14, 16, 17, 19 and 20-42
(the twenty-five judged sessions, version 6's CI session, version 7's first); this script reproduces all thirty-one (about 6 min).

    python scripts/calibration_series_table.py [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SESSIONS = ("series12", "series13", "series14", "series15", "series16", "series17", "series18", "series19", "series20", "series21", "series22", "series23", "series24", "series25", "series26", "series27", "series28", "series29", "series30", "series31", "series32", "series33", "series34", "series35", "series36", "series37", "series38", "series39", "series40", "series41", "series42")


def table() -> dict:
    from kvdoctor.sim import calibration as C
    from kvdoctor.testbed import series as S

    out = {}
    for name in SESSIONS:
        d = REPO / "tests" / "fixtures" / "realvllm_bench" / name
        runs = S.load_series_runs(d)
        cals = {"v4@val_c6": S.calibrate_series_v4(d, runs=runs, fit_on="val_c6")[0],
                "v5": S.calibrate_series_v5(d, runs=runs)[0], "v6": S.calibrate_series_v6(d, runs=runs)[0],
                "p9": S.calibrate_series_v9(d, runs=runs)[0], "p10": S.calibrate_series_v10(d, runs=runs)[0],
                "p11": S.calibrate_series_v11(d, runs=runs)[0], "p12": S.calibrate_series_v12(d, runs=runs)[0],
                "p13": S.calibrate_series_v13(d, runs=runs)[0], "p14": S.calibrate_series_v14(d, runs=runs)[0]}
        res = {k: {r: [round(v["error"][m], 3) for m in C.HEADLINE] for r, v in cal.fit["runs"].items()}
               for k, cal in cals.items()}
        res["drift"] = S.session_drift(runs, "cal_ramp", "drift_ramp")
        res["per_token_ms"] = round(cals["v6"].fit["token_steps"]["per_token_s"] * 1e3, 4)
        for k in cals:
            vals = [abs(x) for r, v in res[k].items() if r.startswith("val_") and not (k.startswith("v4") and r == "val_c6.json")
                    for x in v]
            res[f"{k} median/max %"] = (round(statistics.median(vals) * 100, 1), round(max(vals) * 100, 1))
        out[name] = res
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", metavar="FILE")
    a = ap.parse_args()
    t = table()
    for name, res in t.items():
        print(f"{name}: repeat {res['drift']}, prefill {res['per_token_ms']} ms/token")
        for k in ("v4@val_c6", "v5", "v6", "p9", "p10", "p11", "p12", "p13", "p14"):
            rows = " | ".join(f"{r.removesuffix('.json')} " + "/".join(f"{x * 100:+.1f}" for x in v) for r, v in res[k].items())
            print(f"  {k:10s} {rows} | median/max {res[k + ' median/max %']}")
    if a.json:
        Path(a.json).write_text(json.dumps(t, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
