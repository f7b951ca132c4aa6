"""Runs after the other real-engine tests (file order): every process group they started is gone."""

from __future__ import annotations

import pytest

from tests.realvllm.conftest import CLI_GROUPS, live_groups
from kvdoctor.experiment.server import STARTED_GROUPS

pytestmark = pytest.mark.realvllm


def test_no_process_left(scenario_runs):
    # at least one scenario ran in this session (so the check is not vacuous)
    run = scenario_runs("startup_failure")
    assert run.status == "incomplete"
    assert STARTED_GROUPS or CLI_GROUPS
    assert not live_groups(), live_groups()
