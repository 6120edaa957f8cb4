"""collector_paused: the cycle collector is off inside a bounded batch and restored after it."""

from __future__ import annotations

import gc

import pytest

from planner.modes.collector import collector_paused


@pytest.fixture(autouse=True)
def _collector_on():
    gc.enable()
    yield
    gc.enable()


def test_paused_inside_and_restored_after():
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_restored_when_the_block_raises():
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("boom")
    assert gc.isenabled()


def test_not_paused_when_asked_not_to():
    with collector_paused(pause=False):
        assert gc.isenabled()


def test_leaves_a_disabled_collector_disabled():
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()
