"""Unit fixtures: the timer registry's virtual-time world."""

from __future__ import annotations

import pytest

from devkit.harness.timers import World, new_world


@pytest.fixture
def world() -> World:
    return new_world()
