"""The report's real-model section (``report --weights PATH``): a pretrained model with each path's cos/sin.

>>> from precision_audit.effect.measures import PasskeyRow, TextEffectRow
>>> t = TextEffectRow("m", "fp32", "bfloat16", "bfloat16", "float32", 0, 64, 1e-5, 0.99, 0.0, 1e-5, 0.99, 2e-4,
...                   5e-5, 1e-5, 0.99, 0.0, 1e-5, 2e-4, 5e-5, None, None)
>>> k = PasskeyRow("m", "fp32", "bfloat16", "bfloat16", "float32", 0, 32, 2, 2, 2, 2, None)
>>> [type(b).__name__ for b in real_model_blocks([t], [k])]
['Para', 'Table', 'Figure']
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ._plotting import length_label
from .effect import plot_model_effect
from .writer import Block, Figure, Para, Section, Table

__all__ = ["REPORT_OFFSETS", "real_model_blocks", "real_model_section"]

REPORT_OFFSETS = (0, 2**13, 2**20)


def real_model_blocks(text: Sequence[Any], keys: Sequence[Any]) -> list[Block]:
    """A paragraph, the table (top-1 beside the floor, pass keys beside the exact run) and the figure."""
    by_key = {(k.path, k.dtype, k.offset): k for k in keys}
    rows = tuple((t.path, t.dtype, length_label(t.offset) if t.offset else "0",
                  f"{100 * t.top1:.1f} %", f"{100 * t.floor_top1:.1f} %", f"{t.kl:.2e}",
                  (f"{by_key[t.path, t.dtype, t.offset].correct}/{by_key[t.path, t.dtype, t.offset].keys}"
                   if (t.path, t.dtype, t.offset) in by_key else "-")) for t in text)
    first = (text or keys)[0]
    return [
        Para(f"{first.model} (weights in {first.model_dtype}; `precision-audit effect --model`) run with each path's "
             "stored cos/sin injected into its rotary module, against its own run with exact cos/sin at the same "
             "positions: top-1 agreement of its next-token predictions on text (beside the floor: exact cos/sin "
             "merely stored in the cache format), KL in nats, and pass keys retrieved "
             f"{keys[0].gap if keys else '-'} tokens back."),
        Table(("path", "dtype", "offset", "top-1", "top-1 floor", "KL", "pass keys"), rows),
        Figure("effect_real_model.png", f"{first.model}: top-1 agreement and pass keys vs offset per path",
               lambda p: plot_model_effect(text, keys, p)),
    ]


def real_model_section(weights: str, progress: Callable[[str], None] | None = None) -> Section:
    """Load ``weights`` (as ``effect --model`` does) and measure the four presets' bfloat16 paths at 0, 8K, 1M."""
    from ..effect.measures import measure_model
    from ..effect.real import load_real_model

    if progress is not None:
        progress(f"real model {weights}: loading, then three presets at offsets 0, 8K, 1M (minutes on a CPU)")
    rm = load_real_model(weights)
    text, keys = measure_model(rm, ["lowp", "lowp-inv-freq", "fp32"], ["bfloat16"], REPORT_OFFSETS, tokens=1536,
                               gaps=[1024], keys=2)
    return Section(f"What {rm.name} notices", real_model_blocks(text, keys),
                   {"real_model": {"text": [r.to_dict() for r in text], "passkey": [r.to_dict() for r in keys]}})
