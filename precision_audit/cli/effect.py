"""The ``effect`` command: what a RoPE code path's precision costs the shipped probe model."""

from __future__ import annotations

from collections.abc import Sequence

from typing import Any

import click

from ..effect import GAPS, TASKS, evaluate_many
from ..rope import PRESETS as _ROPE_PRESETS
from ._shared import DTYPE, DTYPE_HELP, JSON_HELP, LENGTH, AuditCommand, Column, emit, progress_bar, stack_option
from ._shared import wide_option

__all__ = ["effect_cmd"]

DEFAULT_OFFSETS = (0, 2**10, 2**13, 2**16, 2**20)

EFFECT_COLUMNS: list[Column] = [
    ("task", "task"),
    ("gap", lambda r: "all" if r["gap"] is None else r["gap"]),
    ("path", "path"),
    ("dtype", "dtype"),
    ("offset", "offset"),
    ("accuracy", lambda r: f"{100 * r['accuracy']:.1f}%"),
    ("exact", lambda r: f"{100 * r['exact_accuracy']:.1f}%"),
    ("nll", "nll"),
    ("exact nll", "exact_nll"),
]


class OffsetType(click.ParamType):
    """An offset: 0, or a length as ``--length`` takes it (8192, 8k, 1M; k = 1024)."""

    name = "LENGTH"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        if isinstance(value, int) and value == 0 or str(value).strip() == "0":
            return 0
        return int(LENGTH.convert(value, param, ctx))


def _gap(ctx: Any, param: Any, value: tuple[int, ...]) -> tuple[int, ...]:
    bad = [g for g in value if g not in GAPS]
    if bad:
        raise click.BadParameter(f"{bad[0]} is not a distance the probe was trained on; valid: "
                                 + ", ".join(map(str, GAPS)))
    return value


@click.command("effect", cls=AuditCommand)
@click.option("--recipe", "-r", "recipes", type=click.Choice(list(_ROPE_PRESETS)), multiple=True,
              help="RoPE preset (repeatable): lowp, lowp-inv-freq, fp32, fp64 (see `precision-audit rope --help`).  "
                   "[default: all four, unless --stack]")
@stack_option("[default: all, unless --recipe]")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, help=DTYPE_HELP + "  [default: bfloat16]")
@click.option("--offset", "offsets", type=OffsetType(), multiple=True,
              help="Position of each probe sequence's first token (repeatable): 0, 8k, 1M (k = 1024).  "
                   "[default: 0 1K 8K 64K 1M]")
@click.option("--gap", "gaps", type=int, multiple=True, callback=_gap, metavar="G",
              help="Gap task: the distance read (repeatable), one of " + ", ".join(map(str, GAPS))
                   + ".  [default: every trained gap, mixed]")
@click.option("--task", "tasks", type=click.Choice(list(TASKS)), multiple=True,
              help="local = local order (induction, distance 1); gap = the token exactly G positions back among "
                   "tokens at G +- 1, G +- 2.  [default: both]")
@click.option("--sequences", type=click.IntRange(1, 65536), default=256, show_default=True,
              help="Evaluation sequences per row (the gap task's mixed set cycles through the gaps).")
@click.option("--plot", "plot", type=click.Path(dir_okay=False), default=None, metavar="FILE.png",
              help="Also write the figure: accuracy vs offset per path, one panel per task.")
@click.option("--calibration", is_flag=True,
              help="Print the verdict's calibration instead: per preset (or -r), length (or --offset, read as the "
                   "length the sequences end at; default 1K 8K 64K 1M 4M) and distance (1 and the gaps asked, "
                   "default 16..4096), the pairwise rotation error, the probe's accuracy there and the verdict.")
@wide_option
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def effect_cmd(recipes: tuple[str, ...], stacks: tuple[str, ...], dtypes: tuple[str, ...],
               offsets: tuple[int, ...], gaps: tuple[int, ...], tasks: tuple[str, ...], sequences: int,
               plot: str | None, calibration: bool, as_json: bool) -> None:
    """What a RoPE code path costs a model: the shipped probe's accuracy with each path's cos/sin.

    The probe is a small RoPE transformer (2 layers, heads of 128, base 1e4, rotate-half) that the project
    trained on two tasks that need position: local order (induction, distance 1) and the token exactly G
    positions back (G up to 4096).  Each row runs it with the path's stored cos/sin at the sequences'
    positions (every other operation in float64) next to its exact-arithmetic run at the same positions.
    """
    if calibration:
        return _calibration(recipes, dtypes, offsets, gaps, sequences, as_json)
    if not recipes and not stacks:
        recipes, stacks = tuple(_ROPE_PRESETS), ("all",)
    from ..rope import select_stacks

    paths = [*recipes, *select_stacks(stacks, ["default"])[0]] if stacks else list(recipes)
    tasks = tasks or TASKS
    gap_list = list(gaps) or [None]
    dtypes = dtypes or ("bfloat16",)
    offsets = offsets or DEFAULT_OFFSETS
    total = len(paths) * len(dict.fromkeys(dtypes)) * len(dict.fromkeys(offsets)) * sum(
        len(dict.fromkeys(gap_list)) if t == "gap" else 1 for t in dict.fromkeys(tasks))
    with progress_bar(total, "probe runs") as bar:
        rows = evaluate_many(paths, dtypes, offsets, tasks, gap_list, sequences=sequences, progress=bar.update)
    if plot:
        from ..report.effect import plot_effect

        plot_effect(rows, plot)
    from ..rope import STACKS

    fast = [p for p in dict.fromkeys(paths) if p in STACKS and STACKS[p].preset.fast_math]
    emit("effect", rows, as_json, EFFECT_COLUMNS,
         footer="accuracy: the probe with the path's cos/sin; exact: with exact RoPE at the same positions."
                + (f"\n{', '.join(fast)}: correctly rounded functions stand in for CUDA's fast-math intrinsics "
                   "(unpublished bits); the audit's rows bound what they may add (docs/stacks.md)." if fast else ""))


def _calibration(recipes: Sequence[str], dtypes: Sequence[str], lengths: Sequence[int], gaps: Sequence[int],
                 sequences: int, as_json: bool) -> None:
    """``effect --calibration``: the table the verdict's thresholds rest on (precision_audit.effect.calibration)."""
    from ..effect.calibration import (CALIBRATION_DISTANCES, CALIBRATION_LENGTHS, CALIBRATION_PATHS, calibrate,
                                      inconsistent)

    if len(dtypes) > 1:
        raise click.BadParameter("the calibration runs one dtype", param_hint="'--dtype'")
    lens = [n for n in (lengths or CALIBRATION_LENGTHS) if n > 1]
    if not lens:
        raise click.BadParameter("give lengths of at least 2 for the calibration", param_hint="'--offset'")
    dists = [1, *gaps] if gaps else list(CALIBRATION_DISTANCES)
    paths = list(recipes) or list(CALIBRATION_PATHS)
    with progress_bar(len(paths) * len(lens) * len(dists), "probe runs") as bar:
        rows = calibrate(paths, lens, dists, dtypes[0] if dtypes else "bfloat16", sequences=sequences,
                         progress=bar.update)
    bad = inconsistent(rows)
    emit("effect-calibration", rows, as_json, [
        ("path", "path"), ("dtype", "dtype"), ("length", "length"), ("distance", "distance"),
        ("pair err", "pair_max_error"), ("colliding", "colliding"), ("task", "task"),
        ("accuracy", lambda r: f"{100 * r['accuracy']:.1f}%"), ("exact", lambda r: f"{100 * r['exact_accuracy']:.1f}%"),
        ("verdict", "verdict")],
        footer="pair err: max pairwise rotation error (rad) between positions `distance` apart, positions < length; "
               "accuracy: the probe on the task reading that distance (local order for 1, the gap task at G = "
               "distance), its sequences ending at the length; verdict: precision_audit.verdicts on that distance "
               f"alone.  Inconsistent rows (broken while the probe loses <= 2 %, safe while it loses >= 5 %): "
               f"{len(bad)}.", extra={"inconsistent": [r.to_dict() for r in bad]})
