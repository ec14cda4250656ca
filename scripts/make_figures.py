#!/usr/bin/env python3
"""Regenerate the committed headline report under figures/ (run from the repo root).

    python scripts/make_figures.py            # same as: precision-audit report -o figures/

A thin call of the report command: the PNGs the README shows and report.md
are committed; report.html (PNGs inline) and results.json (~1.7 MB) are not.
"""

import sys

from precision_audit.cli import main

if __name__ == "__main__":
    sys.argv = ["precision-audit", "report", "-o", "figures", *sys.argv[1:]]
    main()
