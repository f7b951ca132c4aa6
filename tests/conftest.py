"""Shared fixtures. Real samples live in ../shared/data (CI has them beside the clone)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


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
