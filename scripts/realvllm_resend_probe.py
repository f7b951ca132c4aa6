"""Exploratory (issue 11, 2026-12-05): is a load sent a second time faster because it is the second time, or because
time has passed? One server session of the live series' server, env and pinning, with version 13's pre-warm, then
the calibration ramp's load (seed 26) and another seed's (29) sent as A A A B B A (``--ramp``), or at concurrency 1
with 4-token outputs as A A B B A (``--c1``: each TTFT is then the front end plus one prefill alone).

    python scripts/realvllm_resend_probe.py OUT_DIR --ramp|--c1 [--env '{"NAME": "VALUE"}']

Nothing here is judged or pinned; docs/simulation.md ("Version 13's result") reports what it measured.
"""

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--ramp", action="store_true")
    g.add_argument("--c1", action="store_true")
    ap.add_argument("--env", default="{}", help="extra server environment, a JSON object")
    a = ap.parse_args()
    from kvdoctor.testbed import ensure
    from kvdoctor.testbed import series as S

    tb = ensure(log=lambda m: print(m, file=sys.stderr, flush=True))
    R = S.RAMP_LOAD
    if a.c1:
        one = dict(ramp_up_strategy=None, ramp_up_start_rps=None, ramp_up_end_rps=None, max_concurrency=1,
                   output_len=4)
        A, B, order = replace(R, **one), replace(R, seed=29, **one), ["A1", "A2", "B1", "B2", "A3"]
    else:
        A, B, order = R, replace(R, seed=29), ["A1", "A2", "A3", "B1", "B2", "A4"]
    runs = (S.SeriesRun("warmup_ramp", replace(R, seed=20), "warmup"),
            *(S.SeriesRun(n, A if n[0] == "A" else B, "validation") for n in order))
    S.record_series(tb, Path(a.out_dir), runs=runs, version=13, prewarm_tokens=S.PREWARM_TOKENS,
                    server_env=dict(S.SERVER_ENV, **json.loads(a.env)))
    for n in ["warmup_ramp", *order]:
        d = json.loads((Path(a.out_dir) / f"{n}.json").read_text())
        print(f"{n:12s} mean TTFT {d['mean_ttft_ms']:.2f} ms, mean TPOT {d['mean_tpot_ms']:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
