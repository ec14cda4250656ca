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
