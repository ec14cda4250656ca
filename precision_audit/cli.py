"""The ``precision-audit`` command line: a click group of thin commands.

Every command validates its input in click parameter types (bad input exits 2
with a usage message), calls the library and prints a table or, with
``--json``, ``{"auditor": NAME, "results": [row, ...]}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import click

from . import __version__
from ._common import parse_length
from .formats import format_names, get_format


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


def emit(auditor: str, rows: Sequence[Any], as_json: bool, columns: Sequence[tuple[str, Any]], *, footer: str = "") -> None:
    """Print result rows (objects with ``to_dict()``) as JSON or as a table."""
    dicts = [r.to_dict() if hasattr(r, "to_dict") else r for r in rows]
    if as_json:
        click.echo(json.dumps({"auditor": auditor, "results": dicts}, indent=2))
        return
    click.echo(table(dicts, columns))
    if footer:
        click.echo(footer)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
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


def _progress_bar(total: int) -> Any:
    """A stderr progress bar for long empirical passes (hidden when not a tty)."""
    import sys

    return click.progressbar(length=total, label="rounding positions", file=sys.stderr)


@main.command()
@click.option("--length", "-l", "lengths", type=LENGTH, multiple=True, metavar="LENGTH",
              help="Context length (repeatable): 8192, 8k, 32K, 1M.  [default: 8k]")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, help=DTYPE_HELP + "  [default: bfloat16]")
@click.option("--method", type=click.Choice(["auto", "empirical", "closed-form"]), default="auto", show_default=True,
              help="empirical rounds every position (chunked); closed-form derives the metrics from the "
                   "format's binade structure (instant at any length); auto measures up to 2**26 positions.")
@click.option("--engine", type=click.Choice(["numpy", "torch", "torch-arange"]), default="numpy",
              show_default=True,
              help="Who rounds in the empirical pass: numpy+ml_dtypes (exact positions, correctly "
                   "rounded), torch (int64 positions .to(dtype)), or torch-arange "
                   "(torch.arange(L, dtype=...) as this CPU's torch kernel computes it).")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def positions(lengths: tuple[int, ...], dtypes: tuple[str, ...], method: str, engine: str, as_json: bool) -> None:
    """Audit position ids 0..L-1 cast to a number format.

    Counts the positions that survive exactly, the distinct values left, the
    longest run of neighbouring positions that share one value, the first
    inexact and the first overflowing position.

    Example: precision-audit positions --length 8192 --dtype bfloat16
    """
    from .positions import EMPIRICAL_LIMIT, audit_positions

    lengths = lengths or (8192,)
    dtypes = dtypes or ("bfloat16",)
    if engine != "numpy":
        missing = [d for d in dtypes if get_format(d).torch_dtype is None]
        if missing:
            raise click.BadParameter(f"torch has no dtype for {', '.join(missing)}", param_hint="'--engine'")
    measured = [n for n in lengths if method == "empirical" or (method == "auto" and n <= EMPIRICAL_LIMIT)]
    total = max(measured, default=0) * len(set(dtypes))
    if total > 2**25:
        with _progress_bar(total) as bar:
            done = [0]

            def step(n: int) -> None:
                bar.update(n - done[0] if n > done[0] else n)
                done[0] = n

            rows = audit_positions(lengths, dtypes, method=method, engine=engine, progress=step)  # type: ignore[arg-type]
    else:
        rows = audit_positions(lengths, dtypes, method=method, engine=engine)  # type: ignore[arg-type]
    emit("positions", rows, as_json, POSITION_COLUMNS + [("method", "method")])


@main.group()
def reproduce() -> None:
    """Reproduce published findings from one command."""


@reproduce.command()
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
def baichuan(as_json: bool) -> None:
    """Baichuan's finding: bf16 position ids keep ~10 % of positions at 8K.

    Position ids 0..L-1 built in bfloat16 and float16 (the bug) next to
    float32 (the fix), for L = 1K .. 128K, each measured by rounding every
    position.
    """
    from .positions import BAICHUAN_DTYPES, reproduce_baichuan

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
                               "results": [r.to_dict() for r in rows], "summary": summary}, indent=2))
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
