"""The auditors' commands: ``positions``, ``sinusoidal``, ``rope``, ``alibi``, ``attention``.

Each validates its options, runs one library auditor and prints its rows as a
table or, with ``--json``, ``{"auditor": NAME, "results": [row, ...]}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from ..alibi import RECIPES as _ALIBI_RECIPES
from ..formats import get_format
from ..rope import APPLY_MODES as _APPLY_MODES
from ..rope import PRESETS as _ROPE_PRESETS
from ..rope import STAGES as _ROPE_STAGES
from ..sinusoidal import RECIPES as _SIN_RECIPES
from ..render import bound_notes, pair_table
from ._shared import (DTYPE, DTYPE_HELP, JSON_HELP, LENGTH, AuditCommand, Column, distance_options,
                      distances_from_options, echo_table, emit, one_value, pct, progress_bar, rope_even,
                      schedule_from_options, schedule_options, stack_option, stacks_for, wide_option)


# --- positions --------------------------------------------------------------------------------

POSITION_COLUMNS: list[Column] = [
    ("dtype", "dtype"),
    ("length", "length"),
    ("exact", "exact_count"),
    ("exact %", pct("exact_fraction")),
    ("distinct", "distinct_values"),
    ("max run", "max_run"),
    ("collided %", pct("collision_fraction")),
    ("max |err|", "max_abs_error"),
    ("1st inexact", "first_inexact"),
    ("non-finite", "non_finite"),
    ("overflow at", "overflow_position"),
]


@click.command("positions", cls=AuditCommand)
@click.option("--length", "-l", "lengths", type=LENGTH, multiple=True, metavar="LENGTH",
              help="Context length (repeatable): 8192, 8k, 32K, 1M.  [default: 8k]")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, help=DTYPE_HELP + "  [default: bfloat16]")
@click.option("--method", type=click.Choice(["auto", "empirical", "closed-form"]), default="auto", show_default=True,
              help="empirical rounds every position (chunked); closed-form derives the metrics from the "
                   "format's binade structure (instant at any length); auto measures up to 2**26 positions.")
@click.option("--engine", type=click.Choice(["numpy", "torch", "torch-arange"]), default="numpy",
              show_default=True,
              help="Who rounds in the empirical pass: numpy (round_to: exact positions, correctly "
                   "rounded), torch (int64 positions .to(dtype)), or torch-arange "
                   "(torch.arange(L, dtype=...) as this CPU's torch kernel computes it: its values depend on "
                   "the CPU's vector width and, above 32768 positions (torch's parallel grain), on the thread "
                   "count, which is printed in a 'threads' column; set it with OMP_NUM_THREADS).")
@wide_option
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def positions(lengths: tuple[int, ...], dtypes: tuple[str, ...], method: str, engine: str, as_json: bool) -> None:
    """Audit position ids 0..L-1 cast to a number format.

    Counts the positions that survive exactly, the distinct values left, the
    longest run of neighbouring positions that share one value, the first
    inexact and the first overflowing position.

    Example: precision-audit positions --length 8192 --dtype bfloat16
    """
    from ..positions import CONSTRUCTIONS, audit_positions, construction, positions_to_scan

    lengths = lengths or (8192,)
    dtypes = dtypes or ("bfloat16",)
    if engine != "numpy":
        missing = [d for d in dtypes if get_format(d).torch_dtype is None]
        if missing:
            raise click.BadParameter(f"torch has no dtype for {', '.join(missing)}", param_hint="'--engine'")
    total = positions_to_scan(lengths, len(set(dtypes)), method)  # type: ignore[arg-type]
    with progress_bar(total, "rounding positions", enabled=total > 2**25) as bar:
        rows = audit_positions(lengths, dtypes, method=method, engine=engine, progress=bar.update)  # type: ignore[arg-type]
    columns = POSITION_COLUMNS + [("method", "method")]
    if engine == "torch-arange":  # the kernel's values depend on the thread count: record it per measured row
        rows = _with_threads(rows)
        columns = columns + [("threads", "threads")]
    other, other_name = _other_construction(lengths, dtypes, engine)
    text = construction(engine, dtypes)
    emit("positions", rows, as_json, columns,
         extra={"construction": text, "other_construction": {"construction": CONSTRUCTIONS[other_name],
                                                              "results": other}} if other else
         {"construction": text})
    if not as_json:
        click.echo(f"\nFigures: {text}.")
        if other:
            click.echo(f"The other construction, {CONSTRUCTIONS[other_name]}:")
            echo_table(other, _OTHER_COLUMNS + ([("threads", "threads")] if other_name == "torch-arange" else []))


_OTHER_COLUMNS = [c for c in POSITION_COLUMNS if c[0] in ("dtype", "length", "exact", "distinct", "max run",
                                                         "max |err|")]


def _with_threads(rows: Any) -> list[dict[str, Any]]:
    """Rows as dicts with torch's thread count on each measured one (torch's CPU arange depends on it)."""
    import torch

    threads = torch.get_num_threads()
    return [{**r.to_dict(), "threads": threads if r.method == "empirical" else None} for r in rows]


def _other_construction(lengths: Any, dtypes: Any, engine: str) -> tuple[list[dict[str, Any]], str]:
    """The rows of the construction the figures do not describe, where it can differ: this CPU's
    torch.arange(L, dtype=...) beside one rounding (numpy), and one rounding beside torch's CPU arange."""
    from ..positions import CPU_ARANGE_LIMIT, audit_positions, cpu_arange_rows

    if engine == "numpy":
        return _with_threads(cpu_arange_rows(lengths, dtypes)), "torch-arange"
    if engine == "torch-arange":
        lens = [n for n in lengths if n <= CPU_ARANGE_LIMIT]
        return ([r.to_dict() for r in audit_positions(lens, dtypes, method="empirical")] if lens else []), "numpy"
    return [], "numpy"


# --- sinusoidal -------------------------------------------------------------------------------

def _even_dim(ctx: Any, param: Any, value: int) -> int:
    if value % 2:
        raise click.BadParameter(f"dim {value} must be a positive even integer (sin and cos come in pairs)")
    return value


@click.command("sinusoidal", cls=AuditCommand)
@click.option("--length", "-l", "lengths", type=LENGTH, multiple=True, default=("8K",), show_default=True,
              help="Context length (repeatable): 8192, 8k, 32K, 1M.")
@click.option("--dim", type=click.IntRange(2, 65536), default=512, show_default=True, callback=_even_dim,
              help="Model dimension d (positive, even): d/2 sin/cos pairs.")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, default=("bfloat16", "float16"),
              show_default=True, help=DTYPE_HELP)
@click.option("--recipe", "-r", "recipes", type=click.Choice(list(_SIN_RECIPES)),
              multiple=True, default=("lowp", "fp32"), show_default=True,
              help="How the table is built (repeatable): lowp = all stages in DTYPE; lowp-positions = "
                   "positions in DTYPE, rest fp32; fp32 = computed in float32, table cast (the fix); "
                   "fp64 = exact encoding rounded once (the floor).")
@click.option("--base", type=click.FloatRange(min=1.0, min_open=True), default=10000.0, show_default=True,
              help="Frequency base: w_i = base ** (-2i/d).")
@click.option("--nn-window", type=click.IntRange(1, 4096), default=4, show_default=True,
              help="Nearest stored neighbour searched among p +- 1..N, plus the far lags whose exact distance "
                   "is small enough to matter (\"NN exact?\" = yes when proven global).")
@click.option("--max-lag", type=click.IntRange(0, 4096), default=32, show_default=True,
              help="Decay curve mean_p PE(p).PE(p+k) compared for k = 0..MAX_LAG.")
@wide_option
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def sinusoidal_cmd(lengths: tuple[int, ...], dim: int, dtypes: tuple[str, ...], recipes: tuple[str, ...],
                   base: float, nn_window: int, max_lag: int, as_json: bool) -> None:
    """Sinusoidal encodings: how many positions keep a distinct encoding row.

    PE(p, 2i) = sin(p w_i), PE(p, 2i+1) = cos(p w_i) (Vaswani et al. 2017) built
    by each recipe and stored in DTYPE, against the float64 encoding.  dup rows =
    positions whose whole row equals another position's; NN = distance to the
    nearest other position's row (exact vs stored); decay dev = largest change of
    the mean inner product PE(p).PE(p+k) over lags k.

    Example: precision-audit sinusoidal --length 8K --dim 512 --dtype bfloat16
    """
    from ..sinusoidal import audit_sinusoidal

    total = len(set(recipes)) * len(set(dtypes)) * max(lengths)
    with progress_bar(total, "sinusoidal positions", enabled=total * dim >= 2**28) as bar:
        rows = audit_sinusoidal(dim, recipes, lengths, dtypes, base=base, nn_window=nn_window, max_lag=max_lag,
                                progress=bar.update)
    cols: list[Column] = [
        ("dtype", "dtype"), ("length", "length"), ("recipe", "recipe"),
        ("distinct rows", "distinct_rows"), ("dup rows", "duplicate_rows"),
        ("dup %", lambda r: f"{100 * r['duplicate_rows'] / r['length']:.1f}%"),
        ("non-finite", "nonfinite_rows"), ("max abs err", "max_abs_error"),
        ("exact NN", "exact_nn_distance"), ("min NN", "min_nn_distance"),
        ("NN shrink", lambda r: None if r["nn_shrink"] is None else f"{100 * r['nn_shrink']:.2f}%"),
        ("NN exact?", lambda r: None if r["min_nn_distance"] is None else ("yes" if r["nn_certified"] else "window")),
        ("decay dev", "decay_max_dev"),
    ]
    footer = (f"\ndim={dim}, base={base:g}; NN searched within +-{nn_window} positions and at the far lags "
              f"the error bound cannot exclude (\"yes\" = proven global); decay dev over lags 0..{max_lag}, exact PE(p).PE(p+k) = "
              f"sum_i cos(k w_i), {dim // 2} at k=0; '-' = undefined (non-finite rows or length 1).")
    emit("sinusoidal", rows, as_json, cols, footer=footer)


# --- rope -------------------------------------------------------------------------------------

_ROPE_DEFAULT_LENGTHS = (2048, 8192, 32768, 131072, 2**20)


def _rope_stages(ctx: Any, param: Any, value: tuple[str, ...]) -> tuple[str, ...]:
    from ..rope import parse_stages

    for text in value:
        try:
            parse_stages(text)
        except ValueError as e:
            raise click.BadParameter(str(e)) from None
    return value


@click.command("rope", cls=AuditCommand)
@click.option("--length", "-l", "lengths", type=LENGTH, multiple=True, metavar="LENGTH",
              help="Context length (repeatable): 8192, 8k, 32K, 1M; at most 64M.  [default: 2K 8K 32K 128K 1M]")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, help=DTYPE_HELP + "  [default: bfloat16]")
@click.option("--head-dim", type=click.IntRange(2, 8192), default=128, show_default=True, callback=rope_even,
              help="Head dimension d (positive, even).")
@click.option("--base", type=click.FloatRange(min=1.0, min_open=True), default=10000.0, show_default=True,
              help="rope_theta: theta_i = base ** (-2i / rotary_dim).")
@click.option("--recipe", "-r", "recipes", type=click.Choice(list(_ROPE_PRESETS)), multiple=True,
              help="Preset (repeatable): lowp = every stage in DTYPE, positions built in it; lowp-inv-freq = "
                   "inv_freq buffer downcast to DTYPE, used in fp32; fp32 = the fix (fp32 until the cache); "
                   "fp64 = float64 angle and cos/sin.  inv_freq is always the formula in fp32 (fp64 for fp64), "
                   "as model code computes it.  Cache in DTYPE.  [default: all four, unless --stages]")
@stack_option("[default: none, unless no --recipe/--stages]")
@click.option("--stages", "stages", multiple=True, callback=_rope_stages, metavar="STAGE=DTYPE,...",
              help="Custom recipe (repeatable), e.g. positions=bf16,inv_freq=fp32; stages: "
                   + ", ".join(_ROPE_STAGES) + "; stages not given keep the fp32 recipe's (cache: DTYPE).  "
                   "inv_freq=F@G: the formula evaluated in G, stored in F; inv_freq=F@exact: the exact value "
                   "rounded once to F.")
@schedule_options
@click.option("--engine", type=click.Choice(["numpy", "torch"]), default="numpy", show_default=True,
              help="numpy: every operation correctly rounded; torch: this machine's torch kernels (pow, cos, "
                   "sin are faithful, not correctly rounded, and differ between CPUs).")
@click.option("--budget", is_flag=True,
              help="Also compute the error budget: max rotation error with each stage alone made exact "
                   "(runs each recipe six times).")
@distance_options
@wide_option
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def rope_cmd(ctx: click.Context, lengths: tuple[int, ...], dtypes: tuple[str, ...], head_dim: int,
             rotary_dim: int | None, base: float, recipes: tuple[str, ...], stacks: tuple[str, ...],
             stages: tuple[str, ...],
             rope_parameters: dict[str, Any] | None, max_pos: int | None, engine: str, budget: bool,
             distances: tuple[int, ...], no_pairs: bool, as_json: bool, **schedule_opts: Any) -> None:
    """RoPE angles and rotations of each recipe against the exact m * theta_i.

    Per recipe and context length (positions 0..L-1, all rotary frequencies),
    in radians wrapped to [-pi, pi]: the error of the angle fed to cos/sin, the
    error of the rotation the stored cache applies (atan2(sin, cos)), the
    positions whose whole cos/sin row equals the previous one's, and the max
    rotation error as a multiple of the cache format's own rounding bound.
    A second table gives the pairwise errors: per distance D, the max error of
    the rotation between positions m - D and m (what attention sees), over
    m in [D, L); --json has them per row (pair_errors).

    Example: precision-audit rope --length 32K --dtype bfloat16 --recipe lowp --recipe fp32
    """
    asked = distances_from_options(distances, no_pairs)
    lengths = lengths or _ROPE_DEFAULT_LENGTHS
    dtypes = dtypes or ("bfloat16",)
    if not recipes and not stages and not stacks:
        recipes = tuple(_ROPE_PRESETS)
    schedule = schedule_from_options(ctx, head_dim, rotary_dim, base, rope_parameters, max_pos, **schedule_opts)
    stack_names, skipped = stacks_for(stacks, schedule)
    by_dtype = _rope_recipes(recipes, stages, dtypes, engine, stack_names, schedule)
    rows = _rope_rows(schedule, by_dtype, lengths, budget, engine, asked)
    footer = _rope_footer(schedule, rows, budget) + "".join(f"\nskipped: {why}" for why in skipped)
    extra: dict[str, Any] = {"schedule": schedule.describe(), "engine": engine}
    if engine == "torch":
        extra["inv_freq_ulps"], notes = _torch_inv_freq_ulps(schedule, by_dtype, max(lengths))
        footer += notes
    emit("rope", rows, as_json, _rope_columns(budget), footer=footer, extra=extra)


def _rope_recipes(recipes: Sequence[str], stages: Sequence[str], dtypes: Sequence[str],
                  engine: str, stacks: Sequence[str] = (), schedule: Any = None) -> dict[str, list[Any]]:
    """Per cache dtype: the presets, the stacks, then the --stages recipes (the torch engine needs a torch dtype
    per stage and runs product recipes only)."""
    from ..rope import parse_stages, preset, stack

    by_dtype = {d: [preset(r, d) for r in recipes] + [stack(n, d, schedule) for n in stacks]
                + [parse_stages(s, d) for s in stages] for d in dtypes}
    if engine == "torch" and stacks:
        raise click.BadParameter("stacks run on the numpy engine only (their angles are not position * inv_freq)",
                                 param_hint="'--engine'")
    if engine == "torch":
        bad = sorted({f for recs in by_dtype.values() for r in recs for f in r.stages.values()
                      if get_format(f).torch_dtype is None})
        if bad:
            raise click.BadParameter(f"torch has no dtype for {', '.join(bad)}", param_hint="'--engine'")
    return by_dtype


def _rope_rows(schedule: Any, by_dtype: dict[str, list[Any]], lengths: Sequence[int], budget: bool,
               engine: str, distances: Sequence[int] | None = None) -> list[Any]:
    """Audit every recipe: per dtype, lengths ascending, the recipes of one length side by side (with a bar)."""
    from ..rope import audit, positions_to_scan

    rows: list[Any] = []
    total = positions_to_scan(schedule, lengths) * len(by_dtype)
    with progress_bar(total, "rope positions", enabled=total >= 2**18) as bar:
        for recs in by_dtype.values():
            rank = {r.name: i for i, r in enumerate(recs)}
            rows += sorted(audit(schedule, recs, lengths, budget=budget, progress=bar.update, engine=engine,
                                 distances=distances), key=lambda r: (r.length, rank[r.recipe]))
    return rows


def _rope_columns(budget: bool) -> list[Column]:
    """The rope table's columns; with ``budget`` one "exact STAGE" column per stage."""
    cols: list[Column] = [
        ("dtype", "dtype"), ("length", "length"), ("recipe", "recipe"),
        ("max angle err", "max_angle_error"), ("mean angle err", "mean_angle_error"),
        ("max rot err", "max_rotation_error"), ("mean rot err", "mean_rotation_error"),
        ("x cache bound", lambda r: f"{r['max_rotation_error'] / r['cache_bound']:.3g}"),
        ("colliding", "colliding_positions"),
    ]
    if budget:
        cols += [(f"exact {s}", (lambda s: lambda r: r["error_budget"][s])(s)) for s in _ROPE_STAGES]
    return cols


def _rope_footer(schedule: Any, rows: Sequence[Any], budget: bool) -> str:
    """The schedule, the units and each cache dtype's own rounding bound."""
    from ..rope import cache_rounding_bound

    bounds = ", ".join(f"{d} {cache_rounding_bound(d, schedule.cos_sin_scale):.3e}"
                       for d in dict.fromkeys(r.dtype for r in rows))
    dicts = [r.to_dict() for r in rows]
    pairs = pair_table(dicts, [("dtype", "dtype"), ("length", "length"), ("recipe", "recipe")])
    if pairs:
        pairs = ("\npairwise: max rotation error (rad) between positions D apart, |phi(m) - phi(m-D) - D*theta_i| "
                 "over m in [D, L) ('-': D >= L)\n" + pairs + "\n")
    return (f"{pairs}\n{schedule.describe()}.  Errors in rad against the exact m*theta_i, wrapped to [-pi, pi]; "
            f"pi = phase lost.\n"
            f"x cache bound = max rot err / the cache format's own rounding bound ({bounds} rad); "
            f"colliding = positions whose cos/sin row equals the previous position's."
            + ("\nexact STAGE = max rot err with that stage alone in float64 (error budget)." if budget else "")
            + bound_notes(dicts))


def _torch_inv_freq_ulps(schedule: Any, by_dtype: dict[str, list[Any]],
                         longest: int) -> tuple[dict[str, list[int]], str]:
    """Per inv_freq format the recipes use: ulps between this machine's torch formula and the correctly rounded one.

    Returns the distances (the JSON's ``inv_freq_ulps``) and one footer line per format.
    """
    from ..rope.schedules import ulp_distance

    ulps: dict[str, list[int]] = {}
    notes = ""
    for recs in by_dtype.values():
        for r in recs:
            src = r.inv_freq_from
            if src == "exact" or src in ulps:
                continue
            key = schedule.frequency_key(longest)
            ours = schedule.inv_freq_in(src, key)
            dist = ulp_distance(schedule.inv_freq_in(src, key, engine="torch"), ours, src)
            ulps[src] = dist.tolist()
            notes += (f"\ntorch engine: this machine's {src} inv_freq formula is {int(dist.max())} ulp at most "
                      f"from the correctly rounded one ({int((dist > 0).sum())} of {dist.size} frequencies "
                      f"differ).")
    return ulps, notes


# --- alibi ------------------------------------------------------------------------------------

def _alibi_rows_sorted(rows: list[Any], dtypes: Sequence[str], recipes: Sequence[str]) -> list[Any]:
    return sorted(rows, key=lambda r: (dtypes.index(r.dtype), r.length, recipes.index(r.recipe)))


@click.command("alibi", cls=AuditCommand)
@click.option("--length", "-l", "lengths", type=LENGTH, multiple=True, metavar="LENGTH",
              help="Context length (repeatable): 8192, 8k, 32K, 1M.  [default: 8k]")
@click.option("--heads", "num_heads", type=click.IntRange(1, 4096), default=8, show_default=True,
              help="Number of attention heads; slopes follow the ALiBi reference rule (any count).")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, help=DTYPE_HELP + "  [default: bfloat16]")
@click.option("--recipe", "-r", "recipes", type=click.Choice(list(_ALIBI_RECIPES)),
              multiple=True,
              help="Code path (repeatable): lowp (slopes, distances, product in DTYPE), cast-output (Bloom: "
                   "float32 slope*key_position, cast to DTYPE), relative-cast (float32 slope*(i-j), cast), "
                   "fp32 (the fix: float32 bias).  [default: all four]")
@click.option("--per-head", is_flag=True, help="List every head instead of one summary row per recipe and length.")
@wide_option
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def alibi_cmd(lengths: tuple[int, ...], num_heads: int, dtypes: tuple[str, ...], recipes: tuple[str, ...],
              per_head: bool, as_json: bool) -> None:
    """Audit ALiBi biases: how many distinct biases survive per head and length.

    For the last query of each context (it sees all L keys) and every head,
    counts the distinct stored biases, the longest run of neighbouring keys
    sharing one bias, the largest error against the float64 bias, order
    inversions, overflowed biases and the largest change in attention
    probability the rounding alone causes (equal content scores).

    Example: precision-audit alibi --length 8K --heads 40 --dtype bfloat16 --recipe cast-output --recipe fp32
    """
    from ..alibi import audit_alibi

    lengths = lengths or (8192,)
    dtypes = tuple(dict.fromkeys(dtypes or ("bfloat16",)))
    recipes = tuple(dict.fromkeys(recipes or _ALIBI_RECIPES))
    total = 2 * max(lengths) * len(recipes) * len(dtypes)  # two passes per (recipe, dtype)
    with progress_bar(total, "alibi positions", enabled=total * num_heads >= 2**28) as bar:
        rows = audit_alibi(num_heads, recipes, lengths, dtypes, progress=bar.update)
    rows = _alibi_rows_sorted(rows, dtypes, recipes)
    common: list[Column] = [("dtype", "dtype"), ("length", "length"), ("recipe", "recipe"),
                                     ("bias in", "bias_dtype"), ("form", "form")]
    note = ("\nform key = slope*j for key positions j (Bloom), relative = slope*(i-j); the query is the last one.  "
            "dP = largest change in an attention probability caused by the bias rounding alone (equal content "
            "scores), '-' if undefined (a +inf/NaN bias).")
    if per_head and not as_json:
        flat = [{**row.to_dict(), **h.to_dict()} for row in rows for h in row.heads]
        cols = common + [("head", "head"), ("slope", "slope"), ("distinct", "distinct_biases"),
                         ("distinct %", lambda r: f"{100 * r['distinct_biases'] / r['length']:.2f}%"),
                         ("max run", "max_run"), ("max |err|", "max_abs_error"), ("inversions", "order_inversions"),
                         ("non-finite", "nonfinite_biases"), ("max dP", "max_prob_change")]
        emit("alibi", flat, False, cols, footer=f"{num_heads} heads." + note)
        return
    cols = common + [("min distinct", "min_distinct_biases"), ("distinct %", pct("distinct_fraction")),
                     ("max run", "max_run"), ("max |err|", "max_abs_error"), ("inversions", "order_inversions"),
                     ("non-finite", "nonfinite_biases"), ("max dP", "max_prob_change")]
    emit("alibi", rows, as_json, cols,
         footer=f"Summary over {num_heads} heads (min distinct, max of the rest, total inversions/non-finite); "
                "--per-head lists each head." + note)


# --- attention --------------------------------------------------------------------------------

@click.command("attention", cls=AuditCommand)
@click.option("--length", "-l", type=LENGTH, default="32K", show_default=True,
              help="Context length: query positions are spread over 0..L-1.")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, help=DTYPE_HELP + "  [default: bfloat16]")
@click.option("--head-dim", type=click.IntRange(2, 8192), default=128, show_default=True, callback=rope_even,
              help="Head dimension d (positive, even).")
@click.option("--base", type=click.FloatRange(min=1.0, min_open=True), default=10000.0, show_default=True,
              help="rope_theta.")
@schedule_options
@click.option("--recipe", "-r", "recipes", type=click.Choice(list(_ROPE_PRESETS)), multiple=True,
              help="RoPE preset (repeatable), as in `precision-audit rope`.  [default: all four, unless --stack]")
@stack_option("Each stack rotates by its own angles in its own apply mode (the mode column).  [default: none]")
@click.option("--distance", "distances", type=click.IntRange(min=0), multiple=True,
              help="Offset m - n (repeatable, < length).  [default: 0, 1, 2, 4, ... and L-1]")
@click.option("--pairs", type=click.IntRange(1, 64), default=8, show_default=True,
              help="Random standard-normal (q, k) pairs.")
@click.option("--shifts", type=click.IntRange(1, 4096), default=1024, show_default=True,
              help="Query positions per offset, evenly spread along the context.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the (q, k) pairs.")
@click.option("--apply", "apply_dtype", type=DTYPE, multiple=True, callback=one_value,
              help="Store q/k in this format and rotate them in it (q*cos + rotate_half(q)*sin), as a "
                   "model in that dtype does; float64 leaves the cache's error alone (one format: a repeat "
                   "exits 2).  [default: each recipe's apply stage: the cache format, DTYPE]")
@click.option("--apply-mode", type=click.Choice(_APPLY_MODES), default=None,
              help="Each product and sum rounded to the apply format (elementwise, as eager bf16/fp16 code "
                   "runs it), the rotation computed in float32 and the result cast (fp32-then-cast: "
                   "flash-attention, MLX, vLLM), or one product per output fused into the sum (fused: triton's multiply-add "
                   "contraction, liger's and unsloth's kernels).  [default: elementwise]")
@wide_option
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def attention_cmd(ctx: click.Context, length: int, dtypes: tuple[str, ...], head_dim: int, base: float,
                  rotary_dim: int | None, rope_parameters: dict[str, Any] | None, max_pos: int | None,
                  recipes: tuple[str, ...], stacks: tuple[str, ...], distances: tuple[int, ...], pairs: int,
                  shifts: int, seed: int, apply_dtype: str | None, apply_mode: str, as_json: bool,
                  **schedule_opts: Any) -> None:
    """RoPE attention logits q_m . k_n per offset: error and shift invariance.

    For seeded random (q, k) pairs, the logit each recipe's rotation gives at
    offset m - n, against the exact one, over query positions spread along
    the context; `spread` is how much one pair's logit varies when both
    positions shift (exact RoPE: 0, it depends on m - n only).  The schedule
    options are those of `precision-audit rope` (llama3, YaRN, ...); --stack
    audits the code path an inference stack runs (its angles, cache and
    rotation), as in `precision-audit rope`.

    Example: precision-audit attention --length 128K --recipe lowp --recipe fp32 --stack llama.cpp-cpu
    """
    from ..rope.attention import attention_errors
    from ..rope import RopeSchedule, preset, stack

    dtypes = tuple(dict.fromkeys(dtypes or ("bfloat16",)))
    schedule = schedule_from_options(ctx, head_dim, rotary_dim, base, rope_parameters, max_pos, **schedule_opts)
    stack_names, skipped = stacks_for(stacks, schedule)
    if not recipes and not stacks:
        recipes = tuple(_ROPE_PRESETS)
    rows: list[Any] = []
    for dtype in dtypes:  # per dtype: offsets ascending, the recipes of one offset side by side
        recs = [preset(r, dtype) for r in recipes] + [stack(n, dtype, schedule) for n in stack_names]
        rank = {r.name: i for i, r in enumerate(recs)}
        rows += sorted(attention_errors(schedule, recs, length, distances or None, pairs=pairs, shifts=shifts,
                                        seed=seed, apply=apply_dtype, mode=apply_mode),
                       key=lambda r: (r.distance, rank[r.recipe]))
    described = (f"head_dim={head_dim}, base={base:g}" if schedule == RopeSchedule(head_dim=head_dim, base=base)
                 else schedule.describe())
    cols: list[Column] = [
        ("dtype", "dtype"), ("length", "length"), ("distance", "distance"), ("recipe", "recipe"),
        ("max logit err", "max_logit_error"), ("mean logit err", "mean_logit_error"),
        ("spread", "score_spread"), ("logit rms", "logit_rms"),
    ]
    mode = apply_mode or "elementwise"
    if stack_names and apply_mode is None:
        cols.append(("mode", "mode"))
        mode = "each recipe's own: the mode column"
    emit("attention", rows, as_json, cols, extra={"schedule": schedule.describe()},
         footer=f"\n{described}, {pairs} (q, k) pairs, up to {shifts} shifts per offset, "
                "logits before 1/sqrt(d); spread = max - min of one pair's logit over the shifts (exact: 0)."
                + f"\nq/k stored and rotated in {apply_dtype or ', '.join(dtypes)} ({mode}); "
                  "the exact logit uses the same stored q/k." + "".join(f"\nskipped: {why}" for why in skipped))
