import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import pytest  # noqa: E402


@pytest.fixture
def general_path(monkeypatch):
    """Runs on the general path alone (Sim.engine_path off): the tests of its iterations, its cohort
    and its fast-forward observe them, which the engine path (serq/interp/enginepath.py) replaces."""
    from serq.interp.sim import Sim
    monkeypatch.setattr(Sim, "engine_path", False)
