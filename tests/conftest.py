"""Test-session settings shared by every test module.

Hypothesis runs derandomized by default (profile ``ci``): each test draws the
same examples on every run and machine, so a failure found once comes back.
``HYPOTHESIS_PROFILE=random`` draws new examples each run and prints the
``@reproduce_failure`` blob of a failure, to paste above the failing test.
No example database is written in either profile (the blob, or the fixed seed,
reproduces a failure).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("random", derandomize=False, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest -n N: the cores shared among the workers, none oversubscribed
    import torch

    # torch's OpenMP threads beside another busy process wait on each other at every parallel op (a forward took
    # several times its time on 2 cores with 2 workers of 2 threads each): each worker gets its share of the cores.
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))))


@pytest.fixture(scope="session")
def incident_results() -> dict[str, Any]:
    """Every catalog entry reproduced once per session, by name (``reproduce``; about 12 s of CPU for the catalog).

    Tests that run the whole catalog through the CLI (``reproduce --list``, ``--all``) or the headline report feed
    these rows to ``precision_audit.incidents.reproduce_all`` (:func:`shared_reproduce_all`) instead of measuring
    the catalog again; a test in the slow pass runs each of those commands on the real ``reproduce_all``."""
    from precision_audit.incidents import incident_names, reproduce

    return {n: reproduce(n) for n in incident_names()}


@pytest.fixture(scope="session")
def shared_reproduce_all(incident_results: dict[str, Any]) -> Callable[..., list[Any]]:
    """A stand-in for ``reproduce_all`` that returns the session's rows (in catalog order, or of ``names``)."""

    def reproduce_all(names: Iterable[str] | None = None) -> list[Any]:
        return [incident_results[n] for n in (incident_results if names is None else names)]

    return reproduce_all


@pytest.fixture(scope="session")
def shared_reproduce(incident_results: dict[str, Any]) -> Callable[[str], Any]:
    """A stand-in for ``reproduce`` (as ``reproduce --list`` calls it for each verdict): the session's row."""

    def reproduce(name: str) -> Any:
        return incident_results[name]

    return reproduce
