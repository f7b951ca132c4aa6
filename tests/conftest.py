"""Shared fixtures. Real samples live in ../shared/data (CI has them beside the clone)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def load_script(name: str, module_name: str):
    """A fresh module instance of ``scripts/<name>.py``: each caller gets its own globals (fit_serving's caches and
    switches), so tests that flip them cannot leak into each other."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(module_name, REPO / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _shared_data() -> Path | None:
    env = os.environ.get("KVDOCTOR_SHARED_DATA")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared" / "data", REPO / ".." / "shared" / "data"]
    for c in candidates:
        if (c / "README.md").exists():
            return c.resolve()
    return None


SHARED_DATA = _shared_data()


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if SHARED_DATA is None:
        pytest.skip("../shared/data (the real samples) is not present beside this checkout")
    return SHARED_DATA


# --- the reference deployment's parts: Llama-3.1-8B-Instruct on an H100 (the step-time and engine-CPU tests) ----
@pytest.fixture(scope="module")
def llama8b():
    from kvdoctor.catalog.models import lookup_model

    return lookup_model("meta-llama/Llama-3.1-8B-Instruct")


@pytest.fixture(scope="module")
def h100():
    from kvdoctor.catalog.gpus import lookup_gpu

    return lookup_gpu("H100")


# --- CliRunner: build the click command tree once -------------------------------------------------------
# typer's CliRunner.invoke calls typer.main.get_command(app) on every call, which rebuilds every verb's
# click command (typing.get_type_hints on each option): 0.24 s of a 0.27 s invoke, hundreds of times a run.
# The product builds it once per process too. The tree is keyed by the app's registrations, so a verb
# registered later (a test importing another *_cmd module) gets a fresh build; reuse is safe because
# click makes a new Context per call and the root callback's harden_options is idempotent.
# The one private name used: CliRunner.invoke calls typer.testing's own binding of get_command
# (``from typer.main import get_command as _get_command``), so patching typer.main would not reach it; typer
# offers no public hook or cache for the built tree; click's own CliRunner is no substitute (typer 0.28
# vendors click as typer._click, so it would patch the wrong termui).
def _memoise_typer_get_command() -> None:
    import typer.main
    import typer.testing

    build = typer.main.get_command
    cache: dict[int, tuple[object, tuple, object]] = {}

    def registrations(app) -> tuple:
        groups = tuple((id(g), registrations(g.typer_instance)) for g in app.registered_groups
                       if g.typer_instance is not None)
        return (id(app.registered_callback), tuple(id(c) for c in app.registered_commands), groups)

    def get_command(app):
        key = registrations(app)
        hit = cache.get(id(app))
        if hit is not None and hit[0] is app and hit[1] == key:
            return hit[2]
        cmd = build(app)
        cache[id(app)] = (app, key, cmd)
        return cmd

    typer.testing._get_command = get_command


_memoise_typer_get_command()


# --- skips say why, in the summary (issue 14) --------------------------------------------------------
# addopts carries -rs (every skip reason listed); this adds one line naming how many tests the
# missing real samples skipped, so a CI log without ../shared/data cannot look like a full run.
def pytest_terminal_summary(terminalreporter, exitstatus, config):  # noqa: ARG001 - pytest hook
    skipped = terminalreporter.stats.get("skipped", [])
    no_data = [r for r in skipped if "shared/data" in str(getattr(r, "longrepr", ""))]
    if no_data:
        terminalreporter.write_line(
            f"kvdoctor: {len(no_data)} test(s) skipped because ../shared/data (the real samples) is absent; "
            "set KVDOCTOR_SHARED_DATA or place it beside the clone for a full run", yellow=True)


# --- hostile-input runs (tests/e2e/test_hostile*.py) ----------------------------------------------------
class CliRun:
    """One ``python -m kvdoctor`` run: exit code, stdout, stderr and the child's peak RSS (MiB)."""

    def __init__(self, rc: int, out: str, err: str, peak_mib: float, timed_out: bool):
        self.rc, self.out, self.err, self.peak_mib, self.timed_out = rc, out, err, peak_mib, timed_out

    def one_line_error(self) -> bool:
        """Exactly one non-empty stderr line, no traceback, no escape characters."""
        lines = [ln for ln in self.err.splitlines() if ln.strip()]
        return len(lines) == 1 and "Traceback" not in self.err and "\x1b" not in self.err

    def __repr__(self) -> str:
        return f"CliRun(rc={self.rc}, peak={self.peak_mib:.0f} MiB, err={self.err[-400:]!r}, out={self.out[-200:]!r})"


def run_kvdoctor(*args: str, timeout: float = 120.0, env: dict | None = None, stdin=None, cwd=None) -> CliRun:
    """Run the CLI in a child process and measure its peak RSS with ``os.wait4`` (the child's own
    rusage, not a sum over earlier children). ``timeout`` only guards against a hang: a run that
    outlives it is killed and reported with ``timed_out`` (tests assert it is False)."""
    import subprocess
    import sys
    import tempfile
    import time

    full_env = dict(os.environ)
    full_env.setdefault("PYTHONPATH", str(REPO / "src"))
    full_env.update({"NO_COLOR": "1", "COLUMNS": "200"})
    full_env.update(env or {})
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "kvdoctor", *args], stdout=out, stderr=err,
                                stdin=stdin if stdin is not None else subprocess.DEVNULL, env=full_env, cwd=cwd)
        deadline = time.monotonic() + timeout
        timed_out = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                timed_out = True
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.02)
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return CliRun(proc.returncode, out.read().decode("utf-8", "replace"), err.read().decode("utf-8", "replace"),
                      usage.ru_maxrss / 1024.0, timed_out)


# --- CPU-heavy fixtures computed in a worker process from collection end (tests/background.py) ---------------
def pytest_collection_finish(session):
    if session.config.option.collectonly:
        return
    from tests import background

    background.start(session.items)


def pytest_sessionfinish(session):  # noqa: ARG001 - pytest hook
    from tests import background

    background.stop()
