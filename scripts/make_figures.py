#!/usr/bin/env python3
"""Regenerate the committed figures under figures/ (run from the repo root).

    python scripts/make_figures.py                 # every figure (a few minutes)
    python scripts/make_figures.py positions rope  # only these groups
"""

import sys

from precision_audit.report import make_figures

if __name__ == "__main__":
    for name in make_figures("figures", sys.argv[1:] or None):
        print(f"wrote the {name} figures into figures/")
