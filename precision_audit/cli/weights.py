"""``config MODEL --weights PATH``: the bottom line measured on the model's own weights (effect.measures)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from ._shared import progress_bar, stderr_is_tty

__all__ = ["WEIGHTS_HELP", "weights_effects", "weights_lines"]

WEIGHTS_HELP = ("Also run the model itself (RoPE models): smollm2, a checkpoint directory, a .gguf file or a cached "
                "Hub id (as `effect --model`).  Each stack audited, in each dtype, gets the model's top-1 agreement "
                "with its exact-RoPE run on text and its pass keys, its input ending at the longest length "
                "audited, beside the cache format's floor.  Needs transformers; minutes on a CPU.")
TOKENS = 512
KEYS = 2
GAP = 1024


def weights_effects(weights: str, model: Any, names: Sequence[str], dtypes: Sequence[str],
                    length: int) -> dict[str, Any]:
    """Load ``weights``, check that their schedule is the config's, measure each stack in each dtype at ``length``."""
    from ..effect.measures import measure_model, passkey_span
    from ..effect.real import load_real_model

    if model.kind != "rope":
        raise click.BadParameter(f"{model.name} uses {model.kind}: --weights injects RoPE cos/sin",
                                 param_hint="'--weights'")
    if not names:
        raise click.BadParameter("no stack audited to measure (give --stack)", param_hint="'--weights'")
    if stderr_is_tty():
        click.echo(f"loading {weights} ...", err=True)
    try:
        rm = load_real_model(weights)
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--weights'") from None
    declared = {s for _, s in model.rope}
    other = next((s for s in rm.schedules if s not in declared), None)
    if other is not None:
        raise click.BadParameter(f"the weights' config declares {other.describe()}, not the schedule of "
                                 f"{model.name} ({'; '.join(s.describe() for s in declared)})",
                                 param_hint="'--weights'")
    gap = min(GAP, max(1, (rm.context or length) // 2))
    span = passkey_span(rm.tokenizer, gap)
    if span > length:
        raise click.BadParameter(f"the longest length audited ({length}) is shorter than the pass-key prompt "
                                 f"({span} tokens)", param_hint="'--weights'")
    with progress_bar(len(names) * len(dtypes) * 4, "cos/sin tables") as bar:
        text, _ = measure_model(rm, names, dtypes, [length - TOKENS], tokens=TOKENS, gaps=[], progress=bar.update)
        _, keys = measure_model(rm, names, dtypes, [length - span], tokens=0, gaps=[gap], keys=KEYS,
                                progress=bar.update)
    return {"model": rm.name, "model_dtype": rm.dtype, "length": length, "text": [r.to_dict() for r in text],
            "passkey": [r.to_dict() for r in keys]}


def weights_lines(found: dict[str, Any]) -> list[str]:
    """One line per stack and dtype: top-1 and KL beside the floor, pass keys beside the exact run."""
    from ..rope import STACKS

    from ..verdicts import human_length

    out = [f"With the weights ({found['model']}, {found['model_dtype']}), the input ending at "
           f"{human_length(found['length'])}:"]
    for t, k in zip(found["text"], found["passkey"]):
        label = STACKS[t["path"]].label if t["path"] in STACKS else t["path"]
        out.append(f"  {label}, {t['dtype']}: top-1 agreement {100 * t['top1']:.1f} % (floor {100 * t['floor_top1']:.1f}"
                   f" %), KL {_kl(t['kl'])} (floor {_kl(t['floor_kl'])}), passkey {k['correct']}/{k['keys']} "
                   f"{k['gap']} back (exact {k['exact']}/{k['keys']})")
    return out


def _kl(v: float | None) -> str:
    return "inf" if v is None else f"{v:.1e}"
