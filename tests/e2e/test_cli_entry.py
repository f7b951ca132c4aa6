"""The console entry point: one line per error, exit codes, and lazy verb registration."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

ENV = {**os.environ, "NO_COLOR": "1"}


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvdoctor", *args], capture_output=True, text=True, env=ENV)


@pytest.mark.parametrize(
    "args, needle",
    [
        (("rules", "--bogus"), "No such option: --bogus"),
        (("swap",), "Missing option '--from'"),
        (("ledger", "-m", "meta-llama/Llama-3.1-8B-Instruct", "--gpu-memory-utilization", "abc"), "'abc' is not a valid float"),
        (("ledgr",), "No such command 'ledgr'"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args, needle):
    p = run(*args)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_bad_input_from_the_library_is_one_line_exit_2():
    p = run("ledger", "-m", "no-such/model", "--gpu", "H100")
    assert p.returncode == 2
    assert p.stderr.startswith("kvdoctor: error: ") and len(p.stderr.strip().splitlines()) == 1


def test_help_and_version_exit_0():
    assert run().returncode == 0
    assert run("--help").stdout.count("ledger") >= 1
    v = run("--version")
    assert v.returncode == 0 and v.stdout.startswith("kvdoctor ")


def test_gate_exit_code_passes_through():
    # typer.Exit(1) inside a verb must reach the shell unchanged (standalone_mode=False returns it)
    p = run("check", "-m", "Qwen/Qwen2.5-14B", "--gpu", "L40S", "--max-model-len", "32768", "--min-concurrency", "4",
            "--quiet")
    assert p.returncode == 1, p.stderr


def _verbs_imported(argv: list[str]) -> tuple[subprocess.CompletedProcess, str]:
    """Run the console entry point with ``argv`` in a fresh interpreter; (the process, the verb modules it imported)."""
    code = (
        f"import sys; sys.argv = {['kvdoctor', *argv]!r};\n"
        "from kvdoctor.entry import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('kvdoctor.cli.') and m.endswith('_cmd'))\n"
        "sys.stderr.write(repr(loaded))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV)
    return p, p.stderr.strip()


def test_only_the_invoked_verb_is_imported():
    p, loaded = _verbs_imported(["catalog", "gpus", "--json"])
    assert loaded == "['kvdoctor.cli.catalog_cmd']", p.stderr


def test_version_imports_no_verb():
    p, loaded = _verbs_imported(["--version"])
    assert loaded == "[]", p.stderr
    assert p.stdout.startswith("kvdoctor "), p.stdout
