"""What every command module shares: parameter types, help strings, output and error handling.

Parameter types validate input so bad values exit 2 with a usage message;
``table`` and ``emit`` print result rows as an aligned table or as JSON;
``progress_bar`` draws a stderr bar for long passes; ``AuditCommand`` turns
the library's ValueErrors into usage errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import click

from .._common import parse_length
from ..formats import format_names, get_format

__all__ = [
    "DTYPE", "DTYPE_HELP", "JSON_HELP", "LENGTH", "AuditCommand", "AuditGroup", "DtypeType", "LengthType",
    "ProgressBar", "emit", "echo_json", "pct", "progress_bar", "table",
]


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

Column = tuple[str, Any]
"""A table column: (title, row key or function of the row dict)."""


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


def echo_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON (every command's ``--json`` output)."""
    click.echo(json.dumps(obj, indent=2))


def emit(auditor: str, rows: Sequence[Any], as_json: bool, columns: Sequence[Column], *, footer: str = "",
         extra: dict[str, Any] | None = None) -> None:
    """Print result rows (objects with ``to_dict()``) as JSON or as a table (``extra``: more JSON keys)."""
    dicts = [r.to_dict() if hasattr(r, "to_dict") else r for r in rows]
    if as_json:
        echo_json({"auditor": auditor, **(extra or {}), "results": dicts})
        return
    click.echo(table(dicts, columns))
    if footer:
        click.echo(footer)


def pct(key: str) -> Callable[[dict[str, Any]], str]:
    """A column function: the row's fraction ``key`` as a percentage with two decimals."""
    return lambda r: f"{100 * r[key]:.2f}%"


class AuditCommand(click.Command):
    """Turns a ValueError from the library (it names the bad value) into a usage error: exit 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ValueError as e:
            raise click.UsageError(str(e), ctx) from None


class AuditGroup(click.Group):
    """The command group: its commands are AuditCommands."""

    command_class = AuditCommand
    group_class = type  # subgroups (reproduce) are AuditGroup too


class ProgressBar:
    """A stderr progress bar that appears with the first finished chunk.

    Input the library rejects fails before any work, so no bar is drawn
    before the error; click hides the bar when stderr is not a tty.
    """

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.total, self.label, self.enabled = total, label, enabled and total > 0
        self.bar: Any = None

    def __enter__(self) -> "ProgressBar":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def update(self, n: int) -> None:
        """Advance the bar by ``n`` (drawing it on the first call)."""
        if not self.enabled:
            return
        if self.bar is None:
            import sys

            self.bar = click.progressbar(length=self.total, label=self.label, file=sys.stderr).__enter__()
        self.bar.update(n)


def progress_bar(total: int, label: str, *, enabled: bool = True) -> ProgressBar:
    """A progress bar for a pass over ``total`` positions (off unless ``enabled``)."""
    return ProgressBar(total, label, enabled)


# --- stacks -----------------------------------------------------------------------------------


def stacks_for(names: Sequence[str], schedule: Any) -> tuple[list[str], list[str]]:
    """The stacks asked for (``all`` expands to every stack) that run ``schedule``'s rope type, and the reasons
    of those ``all`` left out.  A stack named explicitly that cannot run the schedule is a usage error."""
    from ..rope import STACKS

    out: list[str] = []
    skipped: list[str] = []
    for n in dict.fromkeys(n for name in names for n in (STACKS if name == "all" else [name])):
        try:
            STACKS[n].check(n, schedule.scaling)
        except ValueError as e:
            if "all" not in names or n in names:
                raise click.BadParameter(str(e), param_hint="'--stack'") from None
            skipped.append(str(e))
            continue
        out.append(n)
    return out, skipped
