"""The ``precision-audit`` command line: a click group of thin commands.

Every command validates its input in click parameter types (bad input exits 2
with a usage message), calls the library and prints a table or, with
``--json``, ``{"auditor": NAME, "results": [row, ...]}``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any

import click

from .. import __version__
from .._common import parse_length
from ..alibi import RECIPES as _ALIBI_RECIPES
from ..formats import format_names, get_format
from ..rope import PRESETS as _ROPE_PRESETS
from ..rope import SCALINGS as _ROPE_SCALINGS
from ..rope import STAGES as _ROPE_STAGES
from ..sinusoidal import RECIPES as _SIN_RECIPES


class LengthType(click.ParamType):
    """A context length: 8192, 8k, 32K, 1M (k = 1024), 1 .. 2**53."""

    name = "LENGTH"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        try:
            return parse_length(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class DtypeType(click.ParamType):
    """A format name or alias from the registry; converts to the canonical name."""

    name = "DTYPE"

    def convert(self, value: Any, param: Any, ctx: Any) -> str:
        try:
            return get_format(value).name
        except ValueError as e:
            self.fail(str(e), param, ctx)

    def get_metavar(self, param: Any, ctx: Any = None) -> str:  # click >= 8.2 passes ctx
        return "DTYPE"


LENGTH = LengthType()
DTYPE = DtypeType()
DTYPE_HELP = "Number format (repeatable): " + ", ".join(format_names()) + "; aliases bf16, fp16, half, fp32, e4m3, e5m2, ..."
JSON_HELP = 'Print {"auditor": ..., "results": [row, ...]} as JSON instead of a table.'


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if abs(value) >= 1e5 or abs(value) < 1e-3:
            return f"{value:.3e}"
        return f"{value:.4g}"
    return str(value)


def table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str | Callable[[dict[str, Any]], Any]]]) -> str:
    """Render rows as an aligned text table; each column is (title, key or function)."""
    cells = [[t for t, _ in columns]]
    for r in rows:
        cells.append([_cell(k(r) if callable(k) else r.get(k)) for _, k in columns])
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def emit(auditor: str, rows: Sequence[Any], as_json: bool, columns: Sequence[tuple[str, Any]], *, footer: str = "",
         extra: dict[str, Any] | None = None) -> None:
    """Print result rows (objects with ``to_dict()``) as JSON or as a table (``extra``: more JSON keys)."""
    dicts = [r.to_dict() if hasattr(r, "to_dict") else r for r in rows]
    if as_json:
        click.echo(json.dumps({"auditor": auditor, **(extra or {}), "results": dicts}, indent=2))
        return
    click.echo(table(dicts, columns))
    if footer:
        click.echo(footer)


class _Command(click.Command):
    """Turns a ValueError from the library (it names the bad value) into a usage error: exit 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ValueError as e:
            raise click.UsageError(str(e), ctx) from None


class _Group(click.Group):
    command_class = _Command
    group_class = type  # subgroups (reproduce) are _Group too


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="precision-audit")
def main() -> None:
    """Audit the numerical precision of position information in transformers.

    Position ids, RoPE angles, ALiBi biases and sinusoidal encodings lose
    positions when computed in float16, bfloat16 or float8.  Each command
    counts the damage per context length and compares the broken code path
    with the float32 fix.  Lengths accept 8192, 8k, 32K, 1M (k = 1024).
    """


def _pct(key: str) -> Callable[[dict[str, Any]], str]:
    return lambda r: f"{100 * r[key]:.2f}%"


POSITION_COLUMNS: list[tuple[str, Any]] = [
    ("dtype", "dtype"),
    ("length", "length"),
    ("exact", "exact_count"),
    ("exact %", _pct("exact_fraction")),
    ("distinct", "distinct_values"),
    ("max run", "max_run"),
    ("collided %", _pct("collision_fraction")),
    ("max |err|", "max_abs_error"),
    ("1st inexact", "first_inexact"),
    ("non-finite", "non_finite"),
    ("overflow at", "overflow_position"),
]


class _ProgressBar:
    """A stderr progress bar that appears with the first finished chunk.

    Input the library rejects fails before any work, so no bar is drawn
    before the error; click hides the bar when stderr is not a tty.
    """

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.total, self.label, self.enabled = total, label, enabled and total > 0
        self.bar: Any = None

    def __enter__(self) -> "_ProgressBar":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def update(self, n: int) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            import sys

            self.bar = click.progressbar(length=self.total, label=self.label, file=sys.stderr).__enter__()
        self.bar.update(n)


def _progress_bar(total: int, label: str, *, enabled: bool = True) -> _ProgressBar:
    """A progress bar for a pass over ``total`` positions (off unless ``enabled``)."""
    return _ProgressBar(total, label, enabled)


@main.command()
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
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def positions(lengths: tuple[int, ...], dtypes: tuple[str, ...], method: str, engine: str, as_json: bool) -> None:
    """Audit position ids 0..L-1 cast to a number format.

    Counts the positions that survive exactly, the distinct values left, the
    longest run of neighbouring positions that share one value, the first
    inexact and the first overflowing position.

    Example: precision-audit positions --length 8192 --dtype bfloat16
    """
    from ..positions import audit_positions, positions_to_scan

    lengths = lengths or (8192,)
    dtypes = dtypes or ("bfloat16",)
    if engine != "numpy":
        missing = [d for d in dtypes if get_format(d).torch_dtype is None]
        if missing:
            raise click.BadParameter(f"torch has no dtype for {', '.join(missing)}", param_hint="'--engine'")
    total = positions_to_scan(lengths, len(set(dtypes)), method)  # type: ignore[arg-type]
    with _progress_bar(total, "rounding positions", enabled=total > 2**25) as bar:
        rows = audit_positions(lengths, dtypes, method=method, engine=engine, progress=bar.update)  # type: ignore[arg-type]
    columns = POSITION_COLUMNS + [("method", "method")]
    if engine == "torch-arange":  # the kernel's values depend on the thread count: record it per measured row
        import torch

        threads = torch.get_num_threads()
        rows = [{**r.to_dict(), "threads": threads if r.method == "empirical" else None} for r in rows]
        columns = columns + [("threads", "threads")]
    emit("positions", rows, as_json, columns)


def _incident_names() -> list[str]:
    from ..incidents import incident_names

    return incident_names()


def _fig(value: Any) -> str:
    """A figure with up to 7 significant digits (1044.268, not 1044: the digits are the point)."""
    if isinstance(value, float):
        if value == 0 or not math.isfinite(value) or 1e-4 <= abs(value) < 1e7:
            return f"{value:.7g}"
        return f"{value:.4e}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fig(v) for v in value) + "]"
    return str(value)


def _verdict_text(res: Any) -> str:
    """Published next to measured figures, the verdict and its reasons, the explanation."""
    keys = list(res.published) + [k for k in res.measured if k not in res.published]
    rows = [{"figure": k, "published": _fig(res.published[k]) if k in res.published else "-",
             "measured": _fig(res.measured[k]) if k in res.measured else "-"} for k in keys]
    width = max(len(r["published"]) for r in rows)
    lines = [f"{res.name}: {res.reference} ({res.year}) - {res.what}", f"code path: {res.code_path}",
             f"recipe: {', '.join(f'{k}={v}' for k, v in res.recipe.items())}",
             f"settings: {', '.join(f'{k}={_fig(v)}' for k, v in res.settings.items())}",
             f"published figures from: {res.published_source}", ""]
    lines.append(table(rows, [("figure", "figure"),
                              ("published", lambda r: r["published"].ljust(width)[:80]),
                              ("measured", "measured")]))
    lines += ["", f"verdict: {res.verdict}"] + [f"  - {r}" for r in res.reasons]
    lines += ["", res.explanation]
    return "\n".join(lines)


@main.command()
@click.argument("name", required=False, type=click.Choice(_incident_names()), metavar="NAME")
@click.option("--list", "as_list", is_flag=True, help="List the catalog: name, reference, year, what.")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"auditor": "reproduce", "results": [row]} (row: name, reference, published, measured, '
                   'verdict, explanation, ...) as JSON instead of text.')
def reproduce(name: str | None, as_list: bool, as_json: bool) -> None:
    """Reproduce a published incident: its figures next to the tool's, with a verdict.

    NAME is one of the catalog (see --list): baichuan, gpt-neox-1003,
    transformers-25681, transformers-29285, modded-nanogpt-39, candle-3520,
    cactus-688, mlx-lm-1076.  Each runs the report's code path as a recipe
    and judges every figure the report states: reproduced, or differs with
    the reason in numbers.

    Example: precision-audit reproduce candle-3520
    """
    from ..incidents import CATALOG
    from ..incidents import reproduce as run_incident

    if as_list:
        if name is not None:
            raise click.UsageError("give NAME or --list, not both")
        rows = [{"name": i.name, "reference": i.reference, "year": i.year, "what": i.what} for i in CATALOG.values()]
        if as_json:
            click.echo(json.dumps({"auditor": "reproduce", "results": rows}, indent=2))
        else:
            click.echo(table(rows, [("name", "name"), ("reference", "reference"), ("year", "year"),
                                    ("what", "what")]))
        return
    if name is None:
        raise click.UsageError(f"missing NAME (one of: {', '.join(CATALOG)}) or --list")
    res = run_incident(name)
    if name == "baichuan":
        _baichuan(as_json, res)
        return
    if as_json:
        click.echo(json.dumps({"auditor": "reproduce", "results": [res.to_dict()]}, indent=2))
        return
    click.echo(_verdict_text(res))


def _baichuan(as_json: bool, res: Any) -> None:
    """Baichuan's finding: bf16 position ids keep ~10 % of positions at 8K.

    Position ids 0..L-1 built in bfloat16 and float16 (the bug) next to
    float32 (the fix), for L = 1K .. 128K, each measured by rounding every
    position.
    """
    from ..positions import BAICHUAN_DTYPES, reproduce_baichuan

    rows = reproduce_baichuan()
    at = {(r.dtype, r.length): r for r in rows}
    b, f32 = at["bfloat16", 8192], at["float32", max(r.length for r in rows)]
    summary = (
        f"At context 8192, position ids in bfloat16 keep {b.exact_count} of 8192 positions exact "
        f"({100 * b.exact_fraction:.1f} %; Baichuan reported about 10 %), {b.distinct_values} distinct values remain "
        f"and up to {b.max_run} neighbouring tokens share one position. "
        f"float32 (the fix) keeps all {f32.length} positions exact (every integer to 2**24 is exact)."
    )
    if as_json:
        click.echo(json.dumps({"auditor": "positions", "reproduction": "baichuan",
                               "results": [r.to_dict() for r in rows], "summary": summary,
                               "incident": res.to_dict()}, indent=2))
        return
    wide = []
    for n in sorted({r.length for r in rows}):
        row: dict[str, Any] = {"length": n}
        for d in BAICHUAN_DTYPES:
            r = at[d, n]
            row[f"{d} exact"] = f"{100 * r.exact_fraction:.1f}%"
            row[f"{d} distinct"] = r.distinct_values
            row[f"{d} run"] = r.max_run
        wide.append(row)
    short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
    cols: list[tuple[str, Any]] = [("length", "length")]
    for d in BAICHUAN_DTYPES:
        cols += [(f"{short[d]} exact", f"{d} exact"), (f"{short[d]} distinct", f"{d} distinct"),
                 (f"{short[d]} max run", f"{d} run")]
    click.echo("Position ids 0..L-1 cast to each format (exact = positions that survive; "
               "max run = most neighbouring tokens sharing one position)\n")
    click.echo(table(wide, cols))
    click.echo("\n" + summary)
    click.echo(f"\npublished: {res.published}  ({res.published_source})\nmeasured:  {res.measured}\n"
               f"verdict: {res.verdict}" + "".join(f"\n  - {r}" for r in res.reasons))




# --- sinusoidal -------------------------------------------------------------------------------

def _even_dim(ctx: Any, param: Any, value: int) -> int:
    if value % 2:
        raise click.BadParameter(f"dim {value} must be a positive even integer (sin and cos come in pairs)")
    return value


@main.command("sinusoidal")
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
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def sinusoidal_cmd(lengths: tuple[int, ...], dim: int, dtypes: tuple[str, ...], recipes: tuple[str, ...],
                   base: float, nn_window: int, max_lag: int, as_json: bool) -> None:
    """Sinusoidal encodings: how many positions keep a distinct encoding row.

    PE(p, 2i) = sin(p w_i), PE(p, 2i+1) = cos(p w_i) (Vaswani et al. 2017) built
    by each recipe and stored in DTYPE, against the float64 encoding.  dup rows =
    positions whose whole row equals another position's; NN = distance to the
    nearest other position's row (exact vs stored); decay dev = largest change of
    the mean inner product PE(p).PE(p+k) over lags k.
    """
    from ..sinusoidal import audit_sinusoidal

    total = len(set(recipes)) * len(set(dtypes)) * max(lengths)
    with _progress_bar(total, "sinusoidal positions", enabled=total * dim >= 2**28) as bar:
        rows = audit_sinusoidal(lengths, dim, dtypes, recipes, base=base, nn_window=nn_window, max_lag=max_lag,
                                progress=bar.update)
    cols: list[tuple[str, Any]] = [
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


def _rope_even(ctx: Any, param: Any, value: int | None) -> int | None:
    if value is not None and value % 2:
        raise click.BadParameter(f"{value} must be a positive even integer (RoPE rotates pairs of dims)")
    return value


def _rope_stages(ctx: Any, param: Any, value: tuple[str, ...]) -> tuple[str, ...]:
    from ..rope import parse_stages

    for text in value:
        try:
            parse_stages(text)
        except ValueError as e:
            raise click.BadParameter(str(e)) from None
    return value


def _factor_list(ctx: Any, param: Any, value: str | None) -> tuple[float, ...] | None:
    if value is None:
        return None
    try:
        out = tuple(float(x) for x in value.replace("[", "").replace("]", "").split(",") if x.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of numbers") from None
    if not out:
        raise click.BadParameter(f"{value!r} holds no number")
    return out


def _rope_parameters(ctx: Any, param: Any, value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        try:
            with open(value[1:], encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise click.BadParameter(f"cannot read {value[1:]!r}: {e.strerror}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise click.BadParameter(f"not valid JSON ({e})") from None
    if not isinstance(obj, dict):
        raise click.BadParameter("must be a JSON object, e.g. '{\"rope_type\": \"yarn\", \"factor\": 4.0}'")
    return obj


_SCHEDULE_OPTIONS = ("scaling", "factor", "orig_max_pos", "low_freq_factor", "high_freq_factor", "beta_fast",
                     "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate", "short_factor",
                     "long_factor")


def _schedule_from_options(ctx: click.Context, head_dim: int, rotary_dim: int | None, base: float,
                           rope_parameters: dict[str, Any] | None, max_pos: int | None, **opts: Any) -> Any:
    """The RopeSchedule the rope options describe (``--rope-parameters`` or the single options)."""
    from dataclasses import replace

    from ..schedules import RopeSchedule, schedule_from_rope_parameters

    if rope_parameters is not None:
        given = [k for k in _SCHEDULE_OPTIONS
                 if ctx.get_parameter_source(k) not in (None, click.core.ParameterSource.DEFAULT)]
        if given:
            names = ", ".join("--" + k.replace("_", "-").replace("orig-max-pos", "original-max-position-embeddings")
                              for k in given)
            raise click.UsageError(f"--rope-parameters already gives the schedule; drop {names}", ctx)
        base_given = ctx.get_parameter_source("base") != click.core.ParameterSource.DEFAULT
        s = schedule_from_rope_parameters(rope_parameters, head_dim=head_dim,
                                          base=base if base_given or "rope_theta" not in rope_parameters else None,
                                          max_position_embeddings=max_pos)
        return s if rotary_dim is None else replace(s, rotary_dim=rotary_dim)
    kw = {k: opts[k] for k in _SCHEDULE_OPTIONS if k != "orig_max_pos"}
    L0 = opts["orig_max_pos"]
    if kw["scaling"] == "dynamic" and max_pos is not None:
        L0 = max_pos  # dynamic grows the base above max_position_embeddings
    elif kw["scaling"] in ("yarn", "longrope") and ctx.get_parameter_source("factor") == \
            click.core.ParameterSource.DEFAULT and max_pos is not None:
        kw["factor"] = max_pos / L0  # transformers: factor = max_position_embeddings / L0
    return RopeSchedule(head_dim=head_dim, base=base, rotary_dim=rotary_dim,
                        original_max_position_embeddings=L0, **kw)


@main.command("rope")
@click.option("--length", "-l", "lengths", type=LENGTH, multiple=True, metavar="LENGTH",
              help="Context length (repeatable): 8192, 8k, 32K, 1M; at most 64M.  [default: 2K 8K 32K 128K 1M]")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, help=DTYPE_HELP + "  [default: bfloat16]")
@click.option("--head-dim", type=click.IntRange(2, 8192), default=128, show_default=True, callback=_rope_even,
              help="Head dimension d (positive, even).")
@click.option("--rotary-dim", type=click.IntRange(2, 8192), default=None, callback=_rope_even,
              help="Rotated dims for partial rotary (even, <= head-dim; int(head_dim * partial_rotary_factor)).  "
                   "[default: head-dim]")
@click.option("--base", type=click.FloatRange(min=1.0, min_open=True), default=10000.0, show_default=True,
              help="rope_theta: theta_i = base ** (-2i / rotary_dim).")
@click.option("--recipe", "-r", "recipes", type=click.Choice(list(_ROPE_PRESETS)), multiple=True,
              help="Preset (repeatable): lowp = every stage in DTYPE, positions built in it; lowp-inv-freq = "
                   "inv_freq buffer downcast to DTYPE, used in fp32; fp32 = the fix (fp32 until the cache); "
                   "fp64 = float64 angle and cos/sin.  inv_freq is always the formula in fp32 (fp64 for fp64), "
                   "as model code computes it.  Cache in DTYPE.  [default: all four, unless --stages]")
@click.option("--stages", "stages", multiple=True, callback=_rope_stages, metavar="STAGE=DTYPE,...",
              help="Custom recipe (repeatable), e.g. positions=bf16,inv_freq=fp32; stages: "
                   + ", ".join(_ROPE_STAGES) + "; stages not given keep the fp32 recipe's (cache: DTYPE).  "
                   "inv_freq=F@G: the formula evaluated in G, stored in F; inv_freq=F@exact: the exact value "
                   "rounded once to F.")
@click.option("--scaling", type=click.Choice(["none", *_ROPE_SCALINGS]), default="none", show_default=True,
              help="rope_type: the frequency schedule (none = default RoPE).")
@click.option("--rope-parameters", type=str, default=None, callback=_rope_parameters, metavar="JSON",
              help="A config's rope_parameters / rope_scaling object as is (or @FILE holding it), e.g. "
                   "'{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                   "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, "
                   "\"rope_theta\": 500000.0}'; replaces --scaling and its parameters.")
@click.option("--max-position-embeddings", "max_pos", type=click.IntRange(min=1), default=None,
              help="The config's max_position_embeddings: dynamic grows the base above it; yarn/longrope without "
                   "a factor use max_position_embeddings / original_max_position_embeddings.")
@click.option("--factor", type=click.FloatRange(min=0.0, min_open=True), default=1.0, show_default=True,
              help="Scaling factor (> 0).")
@click.option("--original-max-position-embeddings", "orig_max_pos", type=click.IntRange(min=1), default=8192,
              show_default=True,
              help="Pretraining context L0 for yarn/llama3/longrope (for dynamic: max_position_embeddings).")
@click.option("--low-freq-factor", type=click.FloatRange(min=0.0, min_open=True), default=1.0, show_default=True,
              help="llama3 low_freq_factor.")
@click.option("--high-freq-factor", type=click.FloatRange(min=0.0, min_open=True), default=4.0, show_default=True,
              help="llama3 high_freq_factor.")
@click.option("--beta-fast", type=click.FloatRange(min=0.0, min_open=True), default=32.0, show_default=True,
              help="yarn beta_fast.")
@click.option("--beta-slow", type=click.FloatRange(min=0.0, min_open=True), default=1.0, show_default=True,
              help="yarn beta_slow.")
@click.option("--truncate/--no-truncate", default=True, show_default=True,
              help="yarn truncate: round the ramp ends to whole dims (gpt-oss sets false).")
@click.option("--mscale", type=click.FloatRange(min=0.0, min_open=True), default=None,
              help="yarn mscale (with --mscale-all-dim: attention factor = m(s, mscale) / m(s, mscale_all_dim)).")
@click.option("--mscale-all-dim", type=click.FloatRange(min=0.0, min_open=True), default=None,
              help="yarn mscale_all_dim.")
@click.option("--attention-factor", type=click.FloatRange(min=0.0, min_open=True), default=None,
              help="yarn/longrope attention_factor on cos/sin.  [default: from the factor]")
@click.option("--short-factor", type=str, default=None, callback=_factor_list, metavar="LIST",
              help="longrope short_factor: rotary_dim/2 comma-separated numbers.")
@click.option("--long-factor", type=str, default=None, callback=_factor_list, metavar="LIST",
              help="longrope long_factor (used above original_max_position_embeddings).")
@click.option("--engine", type=click.Choice(["numpy", "torch"]), default="numpy", show_default=True,
              help="numpy: every operation correctly rounded; torch: this machine's torch kernels (pow, cos, "
                   "sin are faithful, not correctly rounded, and differ between CPUs).")
@click.option("--budget", is_flag=True,
              help="Also compute the error budget: max rotation error with each stage alone made exact "
                   "(runs each recipe six times).")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@click.pass_context
def rope_cmd(ctx: click.Context, lengths: tuple[int, ...], dtypes: tuple[str, ...], head_dim: int,
             rotary_dim: int | None, base: float, recipes: tuple[str, ...], stages: tuple[str, ...],
             rope_parameters: dict[str, Any] | None, max_pos: int | None, engine: str, budget: bool,
             as_json: bool, **schedule_opts: Any) -> None:
    """RoPE angles and rotations of each recipe against the exact m * theta_i.

    Per recipe and context length (positions 0..L-1, all rotary frequencies),
    in radians wrapped to [-pi, pi]: the error of the angle fed to cos/sin, the
    error of the rotation the stored cache applies (atan2(sin, cos)), the
    positions whose whole cos/sin row equals the previous one's, and the max
    rotation error as a multiple of the cache format's own rounding bound.

    Example: precision-audit rope --length 32K --dtype bfloat16 --recipe lowp --recipe fp32
    """
    from ..rope import audit, cache_rounding_bound, parse_stages, positions_to_scan, preset
    from ..schedules import ulp_distance

    lengths = lengths or _ROPE_DEFAULT_LENGTHS
    dtypes = dtypes or ("bfloat16",)
    if not recipes and not stages:
        recipes = tuple(_ROPE_PRESETS)
    schedule = _schedule_from_options(ctx, head_dim, rotary_dim, base, rope_parameters, max_pos, **schedule_opts)
    by_dtype = {d: [preset(r, d) for r in recipes] + [parse_stages(s, d) for s in stages] for d in dtypes}
    if engine == "torch":
        bad = sorted({f for recs in by_dtype.values() for r in recs for f in r.stages.values()
                      if get_format(f).torch_dtype is None})
        if bad:
            raise click.BadParameter(f"torch has no dtype for {', '.join(bad)}", param_hint="'--engine'")
    rows = []
    total = positions_to_scan(schedule, lengths) * len(by_dtype)
    with _progress_bar(total, "rope positions", enabled=total >= 2**18) as bar:
        for recs in by_dtype.values():  # per dtype: lengths ascending, the recipes of one length side by side
            rank = {r.name: i for i, r in enumerate(recs)}
            rows += sorted(audit(schedule, recs, lengths, budget=budget, progress=bar.update, engine=engine),
                           key=lambda r: (r.length, rank[r.recipe]))
    cols: list[tuple[str, Any]] = [
        ("dtype", "dtype"), ("length", "length"), ("recipe", "recipe"),
        ("max angle err", "max_angle_error"), ("mean angle err", "mean_angle_error"),
        ("max rot err", "max_rotation_error"), ("mean rot err", "mean_rotation_error"),
        ("x cache bound", lambda r: f"{r['max_rotation_error'] / r['cache_bound']:.3g}"),
        ("colliding", "colliding_positions"),
    ]
    if budget:
        cols += [(f"exact {s}", (lambda s: lambda r: r["error_budget"][s])(s)) for s in _ROPE_STAGES]
    bounds = ", ".join(f"{d} {cache_rounding_bound(d, schedule.cos_sin_scale):.3e}" for d in dict.fromkeys(r.dtype for r in rows))
    footer = (f"\n{schedule.describe()}.  Errors in rad against the exact m*theta_i, wrapped to [-pi, pi]; "
              f"pi = phase lost.\n"
              f"x cache bound = max rot err / the cache format's own rounding bound ({bounds} rad); "
              f"colliding = positions whose cos/sin row equals the previous position's."
              + ("\nexact STAGE = max rot err with that stage alone in float64 (error budget)." if budget else ""))
    extra: dict[str, Any] = {"schedule": schedule.describe(), "engine": engine}
    if engine == "torch":
        seen = set()
        extra["inv_freq_ulps"] = {}
        for recs in by_dtype.values():
            for r in recs:
                src = r.inv_freq_from
                if src == "exact" or src in seen:
                    continue
                seen.add(src)
                key = schedule.frequency_key(max(lengths))
                ours = schedule.inv_freq_in(src, key)
                dist = ulp_distance(schedule.inv_freq_in(src, key, engine="torch"), ours, src)
                extra["inv_freq_ulps"][src] = dist.tolist()
                footer += (f"\ntorch engine: this machine's {src} inv_freq formula is {int(dist.max())} ulp at most "
                           f"from the correctly rounded one ({int((dist > 0).sum())} of {dist.size} frequencies "
                           f"differ).")
    emit("rope", rows, as_json, cols, footer=footer, extra=extra)


def _alibi_rows_sorted(rows: list[Any], dtypes: Sequence[str], recipes: Sequence[str]) -> list[Any]:
    return sorted(rows, key=lambda r: (dtypes.index(r.dtype), r.length, recipes.index(r.recipe)))


@main.command("alibi")
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
    with _progress_bar(total, "alibi positions", enabled=total * num_heads >= 2**28) as bar:
        rows = [row for d in dtypes for r in recipes
                for row in audit_alibi(lengths, num_heads, r, d, progress=bar.update)]
    rows = _alibi_rows_sorted(rows, dtypes, recipes)
    common: list[tuple[str, Any]] = [("dtype", "dtype"), ("length", "length"), ("recipe", "recipe"),
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
    cols = common + [("min distinct", "min_distinct_biases"), ("distinct %", _pct("distinct_fraction")),
                     ("max run", "max_run"), ("max |err|", "max_abs_error"), ("inversions", "order_inversions"),
                     ("non-finite", "nonfinite_biases"), ("max dP", "max_prob_change")]
    emit("alibi", rows, as_json, cols,
         footer=f"Summary over {num_heads} heads (min distinct, max of the rest, total inversions/non-finite); "
                "--per-head lists each head." + note)


@main.command("attention")
@click.option("--length", "-l", type=LENGTH, default="32K", show_default=True,
              help="Context length: query positions are spread over 0..L-1.")
@click.option("--dtype", "-d", type=DTYPE, default="bfloat16", show_default=True, help="Cache format (one).")
@click.option("--head-dim", type=click.IntRange(2, 8192), default=128, show_default=True, callback=_rope_even,
              help="Head dimension d (positive, even).")
@click.option("--base", type=click.FloatRange(min=1.0, min_open=True), default=10000.0, show_default=True,
              help="rope_theta.")
@click.option("--recipe", "-r", "recipes", type=click.Choice(list(_ROPE_PRESETS)), multiple=True,
              help="RoPE preset (repeatable), as in `precision-audit rope`.  [default: all four]")
@click.option("--distance", "distances", type=click.IntRange(min=0), multiple=True,
              help="Offset m - n (repeatable, < length).  [default: 0, 1, 2, 4, ... and L-1]")
@click.option("--pairs", type=click.IntRange(1, 64), default=8, show_default=True,
              help="Random standard-normal (q, k) pairs.")
@click.option("--shifts", type=click.IntRange(1, 4096), default=1024, show_default=True,
              help="Query positions per offset, evenly spread along the context.")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True, help="Seed of the (q, k) pairs.")
@click.option("--apply", "apply_dtype", type=DTYPE, default=None,
              help="Store q/k in this format and rotate them in it (q*cos + rotate_half(q)*sin), as a "
                   "model in that dtype does; float64 leaves the cache's error alone.  [default: each "
                   "recipe's apply stage: the cache format, DTYPE]")
@click.option("--apply-mode", type=click.Choice(["elementwise", "fp32-then-cast"]), default=None,
              help="Each product and sum rounded to the apply format (elementwise, as eager bf16/fp16 code "
                   "runs it), or the rotation computed in float32 and the result cast (fp32-then-cast, fused "
                   "kernels).  [default: elementwise]")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def attention_cmd(length: int, dtype: str, head_dim: int, base: float, recipes: tuple[str, ...],
                  distances: tuple[int, ...], pairs: int, shifts: int, seed: int, apply_dtype: str | None,
                  apply_mode: str, as_json: bool) -> None:
    """RoPE attention logits q_m . k_n per offset: error and shift invariance.

    For seeded random (q, k) pairs, the logit each recipe's rotation gives at
    offset m - n, against the exact one, over query positions spread along
    the context; `spread` is how much one pair's logit varies when both
    positions shift (exact RoPE: 0, it depends on m - n only).

    Example: precision-audit attention --length 128K --recipe lowp --recipe fp32
    """
    from ..attention import attention_errors
    from ..rope import RopeSchedule, preset

    recs = [preset(r, dtype) for r in (recipes or _ROPE_PRESETS)]
    rows = attention_errors(RopeSchedule(head_dim=head_dim, base=base), recs, length, distances or None,
                            pairs=pairs, shifts=shifts, seed=seed, apply=apply_dtype, mode=apply_mode)
    rank = {r.name: i for i, r in enumerate(recs)}
    rows = sorted(rows, key=lambda r: (r.distance, rank[r.recipe]))
    cols: list[tuple[str, Any]] = [
        ("dtype", "dtype"), ("length", "length"), ("distance", "distance"), ("recipe", "recipe"),
        ("max logit err", "max_logit_error"), ("mean logit err", "mean_logit_error"),
        ("spread", "score_spread"), ("logit rms", "logit_rms"),
    ]
    emit("attention", rows, as_json, cols,
         footer=f"\nhead_dim={head_dim}, base={base:g}, {pairs} (q, k) pairs, up to {shifts} shifts per offset, "
                "logits before 1/sqrt(d); spread = max - min of one pair's logit over the shifts (exact: 0)."
                + f"\nq/k stored and rotated in {apply_dtype or dtype} ({apply_mode or 'elementwise'}); the exact "
                  "logit uses the same stored q/k.")


# --- report -----------------------------------------------------------------------------------

@main.command("report")
@click.option("--config", "config_path", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A Hugging Face config.json: write that model's report.")
@click.option("--model-type", default=None, metavar="TYPE",
              help="A transformers model type (llama, qwen2, bloom, ...): its default config (needs transformers; "
                   "nothing is downloaded).")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True,
              help=DTYPE_HELP + "  [default: headline: each section's own; model: the config's dtype, else "
                   "bfloat16]")
@click.option("--max-length", type=LENGTH, default=None, metavar="LENGTH",
              help="Headline: the longest context audited [default: 1M]. Model: replaces its maximum context "
                   "(the verdict checks it, 2x and 4x).")
@click.option("--out", "out", type=click.Path(file_okay=False, writable=True), required=True, metavar="DIR",
              help="Folder for report.md, report.html, results.json and the PNGs (created; files replaced).")
@click.option("--quiet", "-q", is_flag=True, help="No progress messages on stderr.")
def report_cmd(config_path: str | None, model_type: str | None, dtypes: tuple[str, ...], max_length: int | None,
               out: str, quiet: bool) -> None:
    """Write a report: report.md, a self-contained report.html, results.json and the figures.

    Without --config/--model-type: the project's headline report (position ids,
    RoPE recipes, attention logits, ALiBi, sinusoidal encodings); `--out figures/`
    regenerates the committed figures.  With a model: a verdict per code path at
    its maximum context and at 2x/4x, then its own figures.  Two runs write
    byte-identical files.

    Example: precision-audit report --config config.json --out report/
    """
    import sys

    from ..report.writer import output_dir, write_into

    if config_path and model_type:
        raise click.UsageError("give --config or --model-type, not both")
    if max_length is not None and not 256 <= max_length <= 2**24:
        raise click.BadParameter(f"{max_length} is not in 256 .. 16M (2**24)", param_hint="'--max-length'")
    show = not quiet and sys.stderr.isatty()

    def progress(text: str) -> None:
        if show:
            click.echo(f"report: {text}", err=True)

    spec = None
    if config_path or model_type:
        from ..report._config import load_config, spec_for_model_type

        spec = load_config(config_path) if config_path else spec_for_model_type(str(model_type))
    with output_dir(out) as tmp:
        if spec is None:
            from ..report.headline import DEFAULT_MAX_LENGTH, headline_report

            rep = headline_report(max_length or DEFAULT_MAX_LENGTH, dtypes or None, progress)
        else:
            from ..report.model import model_report

            rep = model_report(spec, dtypes or None, max_length, progress)
        paths = write_into(rep, tmp, progress)
    click.echo(f"wrote {len(paths)} files into {out}: " + ", ".join(p.name for p in paths))


# --- config -----------------------------------------------------------------------------------

CONFIG_VERDICT_HELP = (
    "Verdict per row: broken = phase lost (max rotation error >= pi/2) or colliding positions > 0 (or an "
    "ALiBi bias overflowed / swapped order); degraded = max rotation error above TOLERANCE x the cache "
    "format's own rounding bound (ALiBi: a head's bias error above TOLERANCE half-ulps of its largest "
    "bias); safe otherwise.")


def _config_path(ctx: Any, param: Any, value: str) -> Any:
    from ..config import load_config

    try:
        return load_config(value)
    except ValueError as e:
        raise click.BadParameter(str(e)) from None


@main.command("config")
@click.argument("model", metavar="PATH", callback=_config_path)
@click.option("--length", "-l", "lengths", type=LENGTH, multiple=True, metavar="LENGTH",
              help="Context length (repeatable): 8192, 8k, 32K, 1M; RoPE at most 64M.  "
                   "[default: the config's context, 2x and 4x]")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, help=DTYPE_HELP + "  [default: bf16, fp16]")
@click.option("--recipe", "-r", "recipes", multiple=True, metavar="NAME",
              help="Code path (repeatable): RoPE presets " + ", ".join(_ROPE_PRESETS) + "; ALiBi recipes "
                   + ", ".join(_ALIBI_RECIPES) + ".  [default: all of the model's kind]")
@click.option("--engine", type=click.Choice(["numpy", "torch"]), default="numpy", show_default=True,
              help="numpy: every operation correctly rounded; torch: this machine's torch kernels (RoPE and "
                   "positions; ALiBi runs numpy).")
@click.option("--tolerance", type=click.FloatRange(min=0.0, min_open=True), default=8.0, show_default=True,
              help="degraded above TOLERANCE x the cache format's rounding bound.")
@click.option("--no-positions", is_flag=True, help="Leave out the position-id rows.")
@click.option("--fail-on", type=click.Choice(["never", "broken", "degraded"]), default="never", show_default=True,
              help="Exit 1 when a row of the default code path (RoPE fp32 / ALiBi fp32) is this bad or worse; "
                   "for CI.")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"auditor": "config", "model": {...}, "results": [row, ...]} as JSON.')
def config_cmd(model: Any, lengths: tuple[int, ...], dtypes: tuple[str, ...], recipes: tuple[str, ...],
               engine: str, tolerance: float, no_positions: bool, fail_on: str, as_json: bool) -> None:
    """Audit a model from its Hugging Face config.json with the tool's own schedules.

    PATH is a config.json (or a directory holding one); it is parsed as JSON,
    never executed.  RoPE models: every RoPE preset for each layer type's
    schedule; ALiBi models: every ALiBi recipe with the model's head count;
    plus the position ids cast to each dtype.  By default at the model's
    context and 2x, 4x (context extension), in bfloat16 and float16.

    Verdicts: broken = phase lost (max rotation error >= pi/2) or colliding
    positions > 0; degraded = max rotation error above TOLERANCE (8) x the
    cache format's own rounding bound, i.e. the code path, not the format,
    sets the precision; safe otherwise.

    Example: precision-audit config tests/data/llama-3.1-8b.json --length 128K
    """
    from ..config import audit_config, default_lengths, work_to_scan

    lens = tuple(lengths) or default_lengths(model)
    dts = dtypes or ("bfloat16", "float16")
    try:  # before the bar: an oversized length fails at once
        if model.kind == "rope":
            from ..rope import check_rope_lengths

            check_rope_lengths(lens)
        else:
            from .._common import check_lengths
            from ..alibi import MAX_ALIBI_LENGTH

            check_lengths(lens, limit=MAX_ALIBI_LENGTH, why="the ALiBi audit streams L x heads biases")
    except ValueError as e:
        hint = "" if lengths else f"; the default lengths are the config's context {lens[0]}, 2x and 4x: give --length"
        raise click.UsageError(f"{e}{hint}") from None
    total = work_to_scan(model, lens, dts, recipes or None)
    with _progress_bar(total, f"{model.kind} positions", enabled=total >= 2**18) as bar:
        rows = audit_config(model, lens, dts, recipes=recipes or None, engine=engine, tolerance=tolerance,
                            positions=not no_positions, progress=bar.update)
    dicts = [r.to_dict() for r in rows]
    if as_json:
        click.echo(json.dumps({"auditor": "config", "model": model.to_dict(), "engine": engine,
                               "tolerance": tolerance, "results": dicts}, indent=2))
    else:
        cols: list[tuple[str, Any]] = [("dtype", "dtype"), ("length", "length"), ("component", "component")]
        if any(r["layer_type"] for r in dicts):
            cols.append(("layer", "layer_type"))
        cols.append(("recipe", "recipe"))
        if model.kind == "rope":
            cols += [("max rot err", "max_rotation_error"), ("mean rot err", "mean_rotation_error"),
                     ("x cache bound", lambda r: None if r["ratio"] is None else f"{r['ratio']:.3g}")]
        else:
            cols += [("min distinct", "min_distinct_biases"), ("max |err|", "max_abs_error"),
                     ("max dP", "max_prob_change")]
        cols += [("max run", "max_run"), ("colliding", "colliding_positions"), ("verdict", "verdict")]
        click.echo(model.describe() + "\n")
        click.echo(table(dicts, cols))
        click.echo("\n" + CONFIG_VERDICT_HELP.replace("TOLERANCE", f"{tolerance:g}") +
                   "\ncolliding = positions whose cos/sin row (rope), id (positions) or bias (alibi, worst head) "
                   "equals the previous one's; '-' = not measured for that component.")
    worst = {"never": None, "broken": ("broken",), "degraded": ("broken", "degraded")}[fail_on]
    if worst and any(r.verdict in worst and r.recipe == "fp32" for r in rows):
        raise SystemExit(1)


# --- live code: transformers' rotary modules and ALiBi builders (precision_audit.hf) ---------------


class _HfCommand(_Command):
    """A command that needs transformers: without it, exit 2 with the install hint."""

    def invoke(self, ctx: click.Context) -> Any:
        from ..hf import TransformersMissing

        try:
            return super().invoke(ctx)
        except TransformersMissing as e:
            raise click.UsageError(str(e), ctx) from None


def _read_config(ctx: Any, param: Any, value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    try:
        with open(value, encoding="utf-8") as fh:
            data = json.load(fh)
    except OSError as e:
        raise click.BadParameter(f"cannot read {value!r}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise click.BadParameter(f"{value!r} is not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise click.BadParameter(f"{value!r} must hold a JSON object (a config.json)")
    return data


@main.command("hf-rope", cls=_HfCommand)
@click.option("--model-type", "-m", default=None, metavar="TYPE",
              help="transformers model type (llama, qwen2, gemma3_text, ...).  [default: the config's model_type]")
@click.option("--config", "config", default=None, callback=_read_config, metavar="PATH",
              help="A config.json (parsed, never executed).  [default: the model type's default config]")
@click.option("--length", "-l", "lengths", type=LENGTH, multiple=True, metavar="LENGTH",
              help="Context length (repeatable): 8192, 8k, 32K.  [default: 8k]")
@click.option("--dtype", "-d", type=DTYPE, default="bfloat16", show_default=True,
              help="dtype of x, hence of the cos/sin the module returns (and of the cast).")
@click.option("--cast-module", is_flag=True, help="Apply module.to(DTYPE) first, as model.to(DTYPE) does.")
@click.option("--layer-type", default=None, metavar="NAME",
              help="Layer type of a per-layer-type module (Gemma: full_attention, sliding_attention).  "
                   "[default: every one]")
@click.option("--class", "class_name", default=None, metavar="NAME",
              help="Rotary class of the model type's modeling module.  [default: its first text *RotaryEmbedding]")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def hf_rope_cmd(model_type: str | None, config: dict[str, Any] | None, lengths: tuple[int, ...], dtype: str,
                cast_module: bool, layer_type: str | None, class_name: str | None, as_json: bool) -> None:
    """Audit the rotary module transformers builds for a model type (no weights, no downloads).

    Calls the module for positions 0..L-1 with x in DTYPE and measures its
    cos/sin against the exact angles of the schedule its config declares;
    "matches" names the rope recipe with the same figures (e.g. lowp-inv-freq:
    the inv_freq buffer was cast to DTYPE).

    Example: precision-audit hf-rope --model-type llama --length 32K --cast-module
    """
    from ..hf import audit_model_type

    if model_type is None:
        if config is None or not isinstance(config.get("model_type"), str):
            raise click.UsageError("give --model-type (or a --config whose model_type names it)")
        model_type = config["model_type"]
    lengths = lengths or (8192,)
    rows = audit_model_type(model_type, lengths, dtype=dtype, cast_module=cast_module, config=config,
                            layer_type=layer_type, class_name=class_name)
    cols: list[tuple[str, Any]] = [
        ("model type", "model_type"), ("class", "class"), ("layer", "layer_type"), ("dtype", "dtype"),
        ("length", "length"), ("cast", "cast_module"), ("inv_freq in", "inv_freq_dtype"),
        ("max rot err", "max_rotation_error"), ("mean rot err", "mean_rotation_error"),
        ("colliding", "colliding_positions"), ("matches", "matches_recipe"),
    ]
    schedules = "; ".join(dict.fromkeys(f"{r.layer_type + ': ' if r.layer_type else ''}{r.schedule}" for r in rows))
    diagnoses = "; ".join(dict.fromkeys(f"{r.matches_recipe} = {r.diagnosis}" for r in rows))
    emit("hf-rope", rows, as_json, cols,
         footer=f"\nSchedule from the config: {schedules}.\nErrors in rad against the exact m*theta_i, wrapped to "
                f"[-pi, pi]; matches = the rope preset with the closest max/mean error: {diagnoses}.")


def _scan_note(r: dict[str, Any]) -> str:
    if r["status"] == "audited":  # the cast match is its own column
        return "phase lost" if "phase lost" in r["reason"] else ""
    return r["reason"] if len(r["reason"]) <= 80 else r["reason"][:77] + "..."


@main.command("hf-scan", cls=_HfCommand)
@click.option("--dtype", "-d", type=DTYPE, default="bfloat16", show_default=True,
              help="Model dtype: x and cos/sin in it, and the cast module.to(DTYPE).")
@click.option("--length", "-l", type=LENGTH, default="8K", show_default=True, help="Context length.")
@click.option("--family", "families", multiple=True, metavar="PACKAGE",
              help="Only these transformers.models packages (repeatable: llama, qwen2, gemma3, ...).  [default: all]")
@click.option("--fix", is_flag=True,
              help="Audit each class a third time with precision_audit.fix.keep_rotary_fp32 applied before the "
                   "cast: the 'fixed' columns, and whether they equal the as-built errors.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def hf_scan_cmd(dtype: str, length: int, families: tuple[str, ...], fix: bool, as_json: bool) -> None:
    """Scan every *RotaryEmbedding class of the installed transformers.

    Each class is built from its model's default config (no weights, no
    downloads), audited as built and after .to(DTYPE), and given a verdict:
    safe, damaged by the cast, or damaged as built (max rotation error above
    2x the fp32 recipe's figure plus one float32 ulp of each frequency per
    position).  Classes that cannot be audited are listed as skipped with
    the reason.

    Example: precision-audit hf-scan --length 8K --dtype bfloat16
    """
    import sys
    from collections import Counter

    from ..hf import rotary_classes, scan

    found = rotary_classes(families or None)
    if families:
        missing = sorted(set(families) - {f.package for f in found})
        if missing:
            raise click.BadParameter(f"no *RotaryEmbedding class in {', '.join(missing)}", param_hint="'--family'")
    with _progress_bar(len(found), "rotary classes", enabled=sys.stderr.isatty()) as bar:
        rows = scan(dtype=dtype, length=length, classes=found, progress=bar.update, fix=fix)
    counts = Counter(r.verdict or "skipped" for r in rows)
    summary = {v: counts.get(v, 0) for v in ("safe", "damaged by the cast", "damaged as built", "skipped")}
    if fix:
        damaged = [r for r in rows if r.verdict == "damaged by the cast"]
        summary["restored by the fix"] = sum(bool(r.fix_restored) for r in damaged)
    if as_json:
        click.echo(json.dumps({"auditor": "hf-scan", "dtype": dtype, "length": length, "summary": summary,
                               "results": [r.to_dict() for r in rows]}, indent=2))
        return
    cols: list[tuple[str, Any]] = [
        ("model type", "model_type"), ("class", "class"), ("layer", "layer_type"), ("status", "status"),
        ("built max", "built_max_rotation_error"), ("cast max", "cast_max_rotation_error"),
        ("cast mean", "cast_mean_rotation_error"), ("threshold", "threshold"), ("cast matches", "cast_matches_recipe"),
        ("verdict", "verdict"), ("note / reason skipped", _scan_note),
    ]
    if fix:
        cols[-1:-1] = [("fixed max", "fix_max_rotation_error"),
                       ("fix = built", lambda r: {True: "yes", False: "NO", None: "-"}[r["fix_restored"]])]
    click.echo(table([r.to_dict() for r in rows], cols))
    click.echo(f"\n{len(rows)} rows ({len(found)} classes; per-layer-type modules give one row per layer type) "
               f"at length {length}, {dtype}: " + ", ".join(f"{n} {v}" for v, n in summary.items()) + ".")
    click.echo("Errors in rad against the exact m*theta_i of the config's schedule; threshold = 2 x the fp32 recipe's "
               "max + one float32 ulp of each frequency per position."
               + ("  fixed = keep_rotary_fp32(module) before the cast; fix = built: its errors equal the as-built "
                  "ones exactly." if fix else ""))


@main.command("hf-alibi", cls=_HfCommand)
@click.option("--model-type", "-m", type=click.Choice(["bloom", "falcon", "mpt"]), required=True,
              help="Whose builder: Bloom's and Falcon's build_alibi_tensor, MPT's build_mpt_alibi_tensor.")
@click.option("--heads", "num_heads", type=click.IntRange(1, 4096), default=8, show_default=True,
              help="Number of attention heads.")
@click.option("--length", "-l", type=LENGTH, default="8K", show_default=True, help="Context length.")
@click.option("--dtype", "-d", type=DTYPE, default="bfloat16", show_default=True, help="Model dtype.")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def hf_alibi_cmd(model_type: str, num_heads: int, length: int, dtype: str, as_json: bool) -> None:
    """Run transformers' ALiBi builder and audit its bias next to the matching alibi recipe.

    The builder's bias for the last query of one sequence is measured with the
    alibi auditor's metrics; each alibi preset is built too, and the one that
    stores the same biases is audited alongside ("identical" = share of
    heads x keys with equal stored bias).

    Example: precision-audit hf-alibi --model-type falcon --heads 32 --length 8K --dtype float16
    """
    from ..hf import audit_alibi_builder

    row = audit_alibi_builder(model_type, num_heads, length, dtype)
    d = row.to_dict()
    rec = d.pop("recipe")
    rows = [{"source": f"{model_type} builder", **d},
            {"source": f"recipe {row.matches_recipe} ({row.recipe_dtype})", "model_type": model_type, **rec}]
    if as_json:
        click.echo(json.dumps({"auditor": "hf-alibi", "results": rows}, indent=2))
        return
    cols: list[tuple[str, Any]] = [
        ("source", "source"), ("dtype", "dtype"), ("bias in", lambda r: r.get("value_format", r.get("bias_dtype"))),
        ("form", "form"), ("length", "length"), ("heads", "num_heads"), ("min distinct", "min_distinct_biases"),
        ("distinct %", _pct("distinct_fraction")), ("max run", "max_run"), ("max |err|", "max_abs_error"),
        ("inversions", "order_inversions"), ("non-finite", "nonfinite_biases"), ("max dP", "max_prob_change"),
    ]
    click.echo(table(rows, cols))
    click.echo(f"\n{row.builder} returns {row.bias_dtype} holding {row.value_format} values; "
               f"{100 * row.identical_fraction:.2f} % of its {num_heads} x {length} biases equal recipe "
               f"{row.matches_recipe} in {row.recipe_dtype}.")
