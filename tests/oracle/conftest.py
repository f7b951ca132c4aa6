"""The vLLM 0.33 oracle environment for the differential tests (marker ``oracle``).

The environment (vLLM 0.33.0's Python code on CPU torch, scripts/oracle_env.sh) lives at
``$KVDOCTOR_ORACLE_ENV`` or ``~/.cache/kvdoctor/vllm033``. It is reused when present and built when
absent (~100 s on an idle machine, ~3.7 GB; needs PyPI, which CI has). ``KVDOCTOR_ORACLE_NO_BUILD=1``
turns the build off: the tests then skip, saying why.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
TINY_MODEL = HERE / "tiny_llama"  # a config.json only: both sides read the model's shape from it


def oracle_env_dir() -> Path:
    return Path(os.environ.get("KVDOCTOR_ORACLE_ENV") or Path.home() / ".cache" / "kvdoctor" / "vllm033")


@pytest.fixture(scope="session")
def oracle_python() -> str:
    env = oracle_env_dir()
    py = env / "bin" / "python"
    if not (env / ".kvdoctor-oracle-ok").is_file() or not py.exists():
        if os.environ.get("KVDOCTOR_ORACLE_NO_BUILD") == "1":
            pytest.skip(f"vLLM 0.33 oracle env absent at {env} and KVDOCTOR_ORACLE_NO_BUILD=1 "
                        "(build it with: bash scripts/oracle_env.sh)")
        proc = subprocess.run(["bash", str(ROOT / "scripts" / "oracle_env.sh"), str(env)], capture_output=True,
                              text=True, timeout=3600)
        if proc.returncode != 0:
            pytest.fail(f"building the vLLM 0.33 oracle env failed (exit {proc.returncode}):\n"
                        f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return str(py)


class Oracle:
    """tests/oracle/vllm_side.py running in the oracle env, serving batches over a pipe: vLLM is
    imported once per session (its first engine config takes tens of seconds on a busy 2-core box)."""

    def __init__(self, python: str, warm: bool = False):
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
        env.update(VLLM_TARGET_DEVICE="cpu", PYTHONHASHSEED="0", VLLM_LOGGING_LEVEL="ERROR", OMP_NUM_THREADS="1")
        self.stderr = open(os.devnull, "w")
        self.proc = subprocess.Popen([python, str(HERE / "vllm_side.py"), "serve", *(["--warm"] if warm else [])],
                                     stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.stderr, text=True, env=env, cwd=str(HERE))

    def call(self, cmd: str, batch: dict) -> dict:
        self.proc.stdin.write(json.dumps({"cmd": cmd, **batch}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise AssertionError(f"vllm_side.py exited with {self.proc.wait()} (run it by hand: "
                                 f"python tests/oracle/vllm_side.py {cmd} < batch.json)")
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin.closed:
            return
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # only the process this fixture started
            self.proc.wait()
        self.stderr.close()


# Started at collection end when oracle tests are selected and the env is there: vLLM's import (~40 s on
# an idle 2-core runner) then overlaps the tests collected before tests/oracle instead of delaying them.
_EARLY: dict[str, Oracle] = {}


def pytest_collection_finish(session):
    py = oracle_env_dir() / "bin" / "python"
    if session.config.option.collectonly or not (oracle_env_dir() / ".kvdoctor-oracle-ok").is_file() or not py.exists():
        return
    if any(item.get_closest_marker("oracle") and "oracle" in getattr(item, "fixturenames", ()) for item in session.items):
        _EARLY[str(py)] = Oracle(str(py), warm=True)


def pytest_sessionfinish(session):
    for o in _EARLY.values():  # selected but never used (a -x stop before tests/oracle): stopped all the same
        o.close()
    _EARLY.clear()


@pytest.fixture(scope="session")
def oracle(oracle_python):
    o = _EARLY.pop(oracle_python, None) or Oracle(oracle_python)
    yield o
    o.close()
