"""Run ``vllm bench serve`` several times from ONE Python process (calibration series version 8).

Executed by the test bed venv's interpreter, never imported by kvdoctor (it needs vLLM, kvdoctor does not):

    VENV_PYTHON bench_client.py < jobs

Why: a ``vllm bench serve`` process spends ~17-21 s on this box importing vLLM (torch, the tokenizer stack) before
it sends its first request, and a series of seven runs paid that seven times — about 2 of the live series' 4
minutes. Here the import is paid once, before the first job; each run is then the CLI's own entry point
(``vllm.entrypoints.cli.main.main`` with the run's argv), so parsing, defaults, seeding and the load are exactly
what the command line does.

Protocol. One JSON line per run on stdin: ``{"argv": ["bench", "serve", ...], "log": PATH, "done": PATH}``. The
run's stdout and stderr (what the bench prints) go to ``log``; when it ends, its exit status is written to ``done``
(``{"rc": N}``, by rename, so a reader never sees half of it). End of stdin ends the process. The first line a
caller can wait for is the file named by ``--ready PATH``, written once the imports are done.
"""

import json
import os
import sys
import traceback


def _write_atomic(path: str, doc: dict) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(json.dumps(doc) + "\n")
    os.replace(tmp, path)


def _run(argv: list, log: str) -> int:
    from vllm.entrypoints.cli import main as cli

    sys.stdout.flush()
    sys.stderr.flush()
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    saved = os.dup(1), os.dup(2)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    rc = 0
    try:
        sys.argv = ["vllm", *argv]
        cli.main()
    except SystemExit as exc:  # argparse errors and the bench's own exits, as the CLI would end
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except Exception:  # noqa: BLE001 - the CLI would die with this traceback; it goes to the run's log
        traceback.print_exc()
        rc = 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for x in (fd, *saved):
            os.close(x)
    return rc


def main() -> int:
    ready = sys.argv[sys.argv.index("--ready") + 1] if "--ready" in sys.argv else None
    # what `vllm bench serve` imports before its first request, paid once here
    import vllm.benchmarks.serve  # noqa: F401
    import vllm.entrypoints.cli.main  # noqa: F401

    if ready:
        _write_atomic(ready, {"pid": os.getpid()})
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        _write_atomic(job["done"], {"rc": _run(list(job["argv"]), job["log"])})
    return 0


if __name__ == "__main__":
    sys.exit(main())
