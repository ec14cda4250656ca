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

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("random", derandomize=False, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
