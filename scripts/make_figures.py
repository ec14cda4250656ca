#!/usr/bin/env python3
"""Regenerate every committed figure under figures/ (run from the repo root)."""

import sys

from precision_audit.report import make_figures

if __name__ == "__main__":
    out = sys.argv[1] if len(sys.argv) > 1 else "figures"
    for name in make_figures(out):
        print(f"wrote {name} into {out}/")
