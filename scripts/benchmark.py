#!/usr/bin/env python3
"""Print speed and memory figures of the auditors (not a test: it only reports).

Run from the repo root: python scripts/benchmark.py
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable


def _timed(label: str, fn: Callable[[], object], work: float | None = None, unit: str = "") -> None:
    t0 = time.perf_counter()
    fn()
    dt = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rate = f"  {work / dt / 1e6:8.1f} M{unit}/s" if work else ""
    print(f"{label:<58} {dt:8.3f} s{rate}   peak RSS so far {rss:7.0f} MiB")


def main() -> None:
    from precision_audit.positions import measure_positions, predict_positions

    for fmt in ("bfloat16", "float16", "float8_e4m3fn"):
        _timed(f"positions measured, {fmt}, one pass to 2**26", lambda: measure_positions(
            [2**k for k in range(10, 27)], fmt), 2**26, "positions")
    _timed("positions closed form, 7 formats x 2**40", lambda: [predict_positions(2**40, f) for f in (
        "float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn")])

    from precision_audit.alibi import audit_alibi
    from precision_audit.rope import PRESETS, RopeSchedule, audit, preset
    from precision_audit.sinusoidal import audit_sinusoidal

    sweep = [2**k for k in range(11, 21)]
    recipes = [preset(name, "bfloat16") for name in PRESETS]
    _timed("rope, 4 presets, head_dim 128, one pass to 2**20", lambda: audit(
        RopeSchedule(head_dim=128, base=10000.0), recipes, sweep), 4 * 64 * 2**20, "angles")
    _timed("alibi cast-output, 64 heads, one sweep to 2**20", lambda: audit_alibi(
        sweep, 64, "cast-output", "bfloat16"), 64 * 2**20, "biases")
    _timed("sinusoidal lowp+fp32, d 512, bf16, one pass to 2**17", lambda: audit_sinusoidal(
        [2**k for k in range(11, 18)], 512, ["bfloat16"], ["lowp", "fp32"]), 2 * 512 * 2**17, "entries")

    try:
        import transformers  # noqa: F401
    except ImportError:
        print("hf-scan: transformers not installed (pip install 'precision-audit[hf]'), skipped")
        return
    from precision_audit.hf import rotary_classes, scan

    found: list[object] = []
    _timed("hf-scan: import transformers, find *RotaryEmbedding classes", lambda: found.extend(rotary_classes()))
    t0 = time.process_time()
    _timed(f"hf-scan: {len(found)} classes built + cast, 8K, bf16 (target: minutes)",
           lambda: scan(length=8192, classes=found))  # type: ignore[arg-type]
    print(f"{'':<58} {time.process_time() - t0:8.3f} s CPU")


if __name__ == "__main__":
    main()
