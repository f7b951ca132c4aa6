"""The committed step-time coefficients are exactly what scripts/calibrate_step_time.py fits."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _close(a, b) -> bool:
    # the fit is deterministic; allow last-bit differences of another BLAS build
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_close(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-12)
    return a == b


def test_calibration_reproduces_the_committed_coefficients(shared_data, tmp_path):
    import pytest

    pytest.importorskip("scipy", reason="scripts/calibrate_step_time.py fits with scipy.optimize")
    out = tmp_path / "coefficients.py"
    report = tmp_path / "report.md"
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "calibrate_step_time.py"),
                        "--profiles", str(shared_data / "vidur-profiles"), "--out", str(out), "--report", str(report)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    spec = importlib.util.spec_from_file_location("fresh_coefficients", out)
    fresh = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fresh)
    from kvdoctor.sim import coefficients as committed

    for name in ("COEFFS", "ATTENTION", "NETWORK", "OVERHEADS", "FIT_SUMMARY"):
        assert _close(getattr(fresh, name), getattr(committed, name)), name
    text = report.read_text()
    assert "Held-out error per step" in text and "Leave one GPU out" in text
