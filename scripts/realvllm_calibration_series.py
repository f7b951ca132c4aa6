#!/usr/bin/env python3
"""Record one calibration series on the real CPU engine (``kvdoctor.testbed.series``): one server, the
calibration run and the validation loads interleaved, each saved with ``--save-detailed``.

    nice python scripts/realvllm_calibration_series.py OUT_DIR [--freeze FIXTURE_DIR]

Uses the test bed (``python -m kvdoctor.testbed``; built when absent). ``--freeze`` copies the results into
FIXTURE_DIR with ``generated_texts`` and ``itls`` dropped (random-weight output; per-token gaps — kept for the
calibration run and its repeat, whose steps version 6 rebuilds from them), each run's logged
engine steps (``<run>.iterations.json``, version 2) and the server's start-up and periodic stats lines (the
per-request access lines and the per-step lines are left out).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def freeze(src: Path, dst: Path) -> None:
    from kvdoctor.testbed import series as S

    dst.mkdir(parents=True, exist_ok=True)
    meta = json.loads((src / "series.json").read_text())
    for r in meta["runs"]:
        doc = json.loads((src / f"{r['name']}.json").read_text())
        doc.pop("generated_texts", None)  # random-weight output, not used
        if r.get("role") not in ("calibration", "drift"):
            # per-token gaps: ~80 KB a run; the summary ITL figures stay. Kept for the calibration run and its repeat:
            # version 6's fit rebuilds the engine's steps from them (sim.calibration.token_steps)
            doc.pop("itls", None)
        (dst / f"{r['name']}.json").write_text(json.dumps(doc) + "\n")
        it = src / f"{r['name']}.iterations.json"  # version 2: the run's logged engine steps, compact
        if it.exists():
            (dst / it.name).write_text(it.read_text())
    S.write_token_steps(src, dst)  # every timed run's engine steps, rebuilt while the per-token gaps were there
    keep = ("non-default args", "KV cache", "Avg prompt throughput", "version")
    lines = (src / "serve.log").read_text(errors="replace").splitlines(keepends=True)
    # the per-step lines are in <run>.iterations.json already (one ~200-byte line per step)
    (dst / "serve.stats.log").write_text("".join(ln for ln in lines if any(k in ln for k in keep)
                                                 and "Iteration(" not in ln))
    (dst / "series.json").write_text(json.dumps(meta, indent=1) + "\n")
    if (src / "clock_offset.json").exists():
        # a session whose log lines carry their time (scripts/realvllm_arrival_probe.py): its steps and hand-overs,
        # each cut to what sim.calibration.step_periods and the probe's report read, gzipped (~150 KB)
        import gzip

        (dst / "clock_offset.json").write_text((src / "clock_offset.json").read_text())
        cut = [ln.split(") ", 1)[-1] if ln.startswith("(") else ln for ln in lines
               if "Iteration(" in ln or "Added request" in ln]
        cut = [f"{ln.split(' ', 1)[0]} {ln[ln.index('Iteration('):] if 'Iteration(' in ln else 'Added request'}"
               for ln in cut]
        with gzip.open(dst / "serve.steps.log.gz", "wt", encoding="utf-8") as f:
            f.write("".join(ln if ln.endswith("\n") else ln + "\n" for ln in cut))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("out_dir")
    ap.add_argument("--freeze", metavar="FIXTURE_DIR")
    ap.add_argument("--freeze-only", action="store_true", help="freeze an OUT_DIR recorded earlier; record nothing")
    ap.add_argument("--series-version", type=int, choices=(9, 10, 11, 12, 13, 14, 15), default=None,
                    help="record this version instead of the live one (kvdoctor/testbed/series.py: 10-15 are "
                         "stated versions)")
    a = ap.parse_args()
    if a.freeze_only:
        freeze(Path(a.out_dir), Path(a.freeze))
        return 0
    from kvdoctor.testbed import ensure
    from kvdoctor.testbed.series import record_series

    import fcntl

    tb = ensure(log=lambda m: print(m, file=sys.stderr, flush=True))
    with open(tb.root / "servers.lock", "w") as lock:  # one real-engine session per test bed (tests/realvllm)
        fcntl.flock(lock, fcntl.LOCK_EX)
        if a.series_version == 10:
            from kvdoctor.testbed.series import SERIES_V10
            record_series(tb, Path(a.out_dir), runs=SERIES_V10, version=10)
        elif a.series_version == 13:
            from kvdoctor.testbed import series as S
            record_series(tb, Path(a.out_dir), runs=S.SERIES_V13, version=13, prewarm_tokens=S.PREWARM_TOKENS)
        elif a.series_version == 14:
            from kvdoctor.testbed import series as S
            record_series(tb, Path(a.out_dir), runs=S.SERIES_V14, version=14, model=S.SERIES_V14_MODEL)
        elif a.series_version == 15:
            from kvdoctor.testbed import series as S
            record_series(tb, Path(a.out_dir), runs=S.SERIES_V15, version=15, model=S.SERIES_V15_MODEL, stamped=True)
        elif a.series_version in (11, 12):
            from kvdoctor.testbed import series as S
            record_series(tb, Path(a.out_dir), runs=getattr(S, f"SERIES_V{a.series_version}"), version=a.series_version)
        else:
            record_series(tb, Path(a.out_dir))
    if a.freeze:
        freeze(Path(a.out_dir), Path(a.freeze))
    return 0


if __name__ == "__main__":
    sys.exit(main())
