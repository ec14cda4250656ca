"""What every command module shares: parameter types, options, output and error handling.

Parameter types validate input so bad values exit 2 with a usage message;
``schedule_options`` / ``schedule_from_options`` are the RoPE schedule options
of ``rope`` and ``attention``; ``emit`` and ``echo_table`` print result rows as
JSON or as a table: rich, fitted to the terminal (``--wide``: full width) when
stdout is a terminal, else the plain text of ``table``; ``progress_bar`` draws
a stderr bar for long passes when stderr is a terminal; ``AuditCommand`` turns
the library's ValueErrors into usage errors.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

import click

from ..checks import parse_length
from ..formats import format_names, get_format
from ..render import cell as _cell
from ..render import bottom_line_text as render_bottom_line
from ..render import table

__all__ = [
    "DISTANCE", "DTYPE", "DTYPE_HELP", "JSON_HELP", "LENGTH", "AuditCommand", "AuditGroup", "DistanceType", "DtypeType",
    "LengthType", "ProgressBar", "distance_options", "distances_from_options", "echo_json",
    "echo_table", "emit", "one_value", "pct", "progress_bar", "rope_even",
    "schedule_from_options", "schedule_options", "stderr_is_tty", "stdout_is_tty", "table", "wide_option",
]


class LengthType(click.ParamType):
    """A context length: 8192, 8k, 32K, 1M (k = 1024), 1 .. 2**53."""

    name = "LENGTH"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        try:
            return parse_length(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


class DistanceType(click.ParamType):
    """A pair distance in positions: 1, 16, 4K (k = 1024), at least 1."""

    name = "DISTANCE"

    def convert(self, value: Any, param: Any, ctx: Any) -> int:
        try:
            return parse_length(value)
        except ValueError:
            self.fail(f"distance {value!r} is not a positive whole number of positions (use e.g. 1, 16, 4K)",
                      param, ctx)


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
DISTANCE = DistanceType()
DTYPE = DtypeType()
DTYPE_HELP = "Number format (repeatable): " + ", ".join(format_names()) + "; aliases bf16, fp16, half, fp32, e4m3, e5m2, ..."
JSON_HELP = 'Print {"auditor": ..., "results": [row, ...]} as JSON instead of a table.'

Column = tuple[str, Any]
"""A table column: (title, row key or function of the row dict)."""


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
    echo_table(dicts, columns)
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
    before the error.  Only on a terminal: when stderr is not one (a pipe, a
    file, CI logs) nothing is printed, not even the label.
    """

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.total, self.label = total, label
        self.enabled = enabled and total > 0 and stderr_is_tty()
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
            self.bar = click.progressbar(length=self.total, label=self.label, file=sys.stderr).__enter__()
        self.bar.update(n)


def progress_bar(total: int, label: str, *, enabled: bool = True) -> ProgressBar:
    """A progress bar for a pass over ``total`` positions (off unless ``enabled``)."""
    return ProgressBar(total, label, enabled)


def stderr_is_tty() -> bool:
    """Whether stderr is a terminal (progress is drawn only then)."""
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def stdout_is_tty() -> bool:
    """Whether stdout is a terminal (tables are rich and fitted to it only then)."""
    return bool(getattr(sys.stdout, "isatty", lambda: False)())


def one_value(ctx: Any, param: click.Parameter, value: tuple[Any, ...]) -> Any:
    """Callback of an option declared ``multiple=True`` that takes one value: a repeat exits 2.

    (click keeps the last of repeated single options silently; this refuses instead.)
    """
    if len(value) > 1:
        raise click.BadParameter(f"given {len(value)} times ({', '.join(map(str, value))}); it takes one value: "
                                 "run the command once per value")
    return value[0] if value else None


# --- tables on a terminal: rich, fitted to its width; plain text otherwise ----------------------

_WIDE = "precision_audit.wide"
VERDICT_STYLES = {"safe": "green", "degraded": "yellow", "broken": "bold red", "damaged by the cast": "red",
                  "damaged as built": "bold red"}
"""Colours of the cells of a "verdict" column (on a terminal only; NO_COLOR turns them off)."""


def _set_wide(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[_WIDE] = True
    return value


wide_option = click.option(
    "--wide", is_flag=True, expose_value=False, callback=_set_wide,
    help="On a terminal, print every table column at full width (lines may exceed the terminal; try less -S).  "
         "[default: tables fit the terminal, long cells wrapped]  Output that is not a terminal is always the "
         "plain, full-width table.")


_NUMBER = re.compile(r"^(-|[-+]?(\d[\d.]*(e[-+]?\d+)?|inf|nan)%?)$")


def _shrink(widths: list[int], floors: Sequence[int], room: int) -> None:
    """Narrow the widest column above its floor by one until the widths fit ``room`` (in place)."""
    while sum(widths) > room:
        i = max((j for j in range(len(widths)) if widths[j] > floors[j]), key=widths.__getitem__, default=None)
        if i is None:
            return
        widths[i] -= 1


def _column_widths(cells: Sequence[Sequence[str]], width: int) -> tuple[list[int], int]:
    """Column widths and gap (2 or 1 spaces) that fit ``width``, giving up as little as possible.

    ``cells[0]`` holds the titles.  The widest columns narrow first, in steps that each cost more:
    titles wrap at spaces; text cells wrap to 8 characters; titles fold inside words; text to 4
    characters; numbers are cut only as the last resort (every column 4 characters); a table that is
    still too wide overflows.  A verdict is kept whole, as a number is.
    """
    n = len(cells[0])
    natural = [max(len(row[i]) for row in cells) for i in range(n)]
    numeric = [all(_NUMBER.match(row[i]) for row in cells[1:]) or cells[0][i] == "verdict" for i in range(n)]
    body = [max([len(row[i]) for row in cells[1:]], default=1) for i in range(n)]
    word = [max(len(w) for w in cells[0][i].split() or [""]) for i in range(n)]  # the title's longest word
    text = [body[i] if numeric[i] else min(body[i], 8) for i in range(n)]
    levels = [[max(body[i], word[i]) for i in range(n)],                       # titles wrap
              [min(natural[i], max(text[i], word[i])) for i in range(n)],      # text cells wrap
              text,                                                            # titles fold
              [body[i] if numeric[i] else min(natural[i], 4) for i in range(n)],  # text to 4
              [min(natural[i], 4) for i in range(n)]]                          # numbers fold
    widths = natural
    for gap, steps in ((2, levels[:2]), (1, levels)):
        room, widths = width - gap * (n - 1), list(natural)
        for floors in steps:
            _shrink(widths, floors, room)
            if sum(widths) <= room:
                return widths, gap
    return widths, 1


def _rich_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column], width: int | None) -> Any:
    """The rows as a rich Table: the plain renderer's cells (numbers right, text left), verdicts coloured.

    ``width``: fit the table to it (:func:`_column_widths`); None: every column at full width.
    """
    from rich import box
    from rich.table import Table
    from rich.text import Text

    cells = [[t for t, _ in columns]] + [[_cell(k(r) if callable(k) else r.get(k)) for _, k in columns] for r in rows]
    if width is None:
        widths, gap = [max(len(row[i]) for row in cells) for i in range(len(columns))], 2
    else:
        widths, gap = _column_widths(cells, width)
    t = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold",
              padding=(0, gap - 1, 0, 0))
    for i, (title, w) in enumerate(zip(cells[0], widths)):
        numbers = all(_NUMBER.match(row[i]) for row in cells[1:])
        t.add_column(Text(title), justify="right" if numbers else "left", overflow="fold", width=w)
    for row in cells[1:]:
        t.add_row(*(Text(c, style=VERDICT_STYLES.get(c, "") if title == "verdict" else "")
                    for title, c in zip(cells[0], row)))
    return t


def terminal_console() -> Any:
    """A rich Console on stdout when stdout is a terminal, else None."""
    if not stdout_is_tty():
        return None
    from rich.console import Console

    return Console(file=sys.stdout, force_terminal=True, highlight=False)


def _wide() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(_WIDE))


def echo_table(rows: Sequence[dict[str, Any]], columns: Sequence[Column]) -> None:
    """Print rows as a table: rich on a terminal, else exactly :func:`table`'s plain text.

    On a terminal the table fits its width (``--wide``: every column at full width) and verdict
    cells are coloured (NO_COLOR turns colour off); pipes, files and tests get the plain text.
    """
    console = terminal_console()
    if console is None:
        click.echo(table(rows, columns))
        return
    t = _rich_table(rows, columns, None if _wide() else console.width)
    console.width = 2**16  # the table sets its own widths: never re-fit or crop it (--wide: longer lines)
    console.print(t, crop=False)


# --- the RoPE schedule options, shared by rope and attention ---------------------------------

def rope_even(ctx: Any, param: Any, value: int | None) -> int | None:
    """Callback: a head or rotary dimension must be even (RoPE rotates pairs)."""
    if value is not None and value % 2:
        raise click.BadParameter(f"{value} must be a positive even integer (RoPE rotates pairs of dims)")
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


def _schedule_option_list() -> list[Callable[[Any], Any]]:
    """The options, in help order: --rotary-dim, --scaling, --rope-parameters, ..., --long-factor."""
    from ..rope import SCALINGS

    pos = dict(min=0.0, min_open=True)
    return [
        click.option("--rotary-dim", type=click.IntRange(2, 8192), default=None, callback=rope_even,
                     help="Rotated dims for partial rotary (even, <= head-dim; int(head_dim * "
                          "partial_rotary_factor)).  [default: head-dim]"),
        click.option("--scaling", type=click.Choice(["none", *SCALINGS]), default="none", show_default=True,
                     help="rope_type: the frequency schedule (none = default RoPE)."),
        click.option("--rope-parameters", type=str, default=None, callback=_rope_parameters, metavar="JSON",
                     help="A config's rope_parameters / rope_scaling object as is (or @FILE holding it), e.g. "
                          "'{\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
                          "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192, "
                          "\"rope_theta\": 500000.0}'; replaces --scaling and its parameters."),
        click.option("--max-position-embeddings", "max_pos", type=click.IntRange(min=1), default=None,
                     help="The config's max_position_embeddings: dynamic grows the base above it; yarn/longrope "
                          "without a factor use max_position_embeddings / original_max_position_embeddings."),
        click.option("--factor", type=click.FloatRange(**pos), default=1.0, show_default=True,
                     help="Scaling factor (> 0)."),
        click.option("--original-max-position-embeddings", "orig_max_pos", type=click.IntRange(min=1),
                     default=8192, show_default=True,
                     help="Pretraining context L0 for yarn/llama3/longrope (for dynamic: max_position_embeddings)."),
        click.option("--low-freq-factor", type=click.FloatRange(**pos), default=1.0, show_default=True,
                     help="llama3 low_freq_factor."),
        click.option("--high-freq-factor", type=click.FloatRange(**pos), default=4.0, show_default=True,
                     help="llama3 high_freq_factor."),
        click.option("--beta-fast", type=click.FloatRange(**pos), default=32.0, show_default=True,
                     help="yarn beta_fast."),
        click.option("--beta-slow", type=click.FloatRange(**pos), default=1.0, show_default=True,
                     help="yarn beta_slow."),
        click.option("--truncate/--no-truncate", default=True, show_default=True,
                     help="yarn truncate: round the ramp ends to whole dims (gpt-oss sets false)."),
        click.option("--mscale", type=click.FloatRange(**pos), default=None,
                     help="yarn mscale (with --mscale-all-dim: attention factor = m(s, mscale) / "
                          "m(s, mscale_all_dim))."),
        click.option("--mscale-all-dim", type=click.FloatRange(**pos), default=None, help="yarn mscale_all_dim."),
        click.option("--attention-factor", type=click.FloatRange(**pos), default=None,
                     help="yarn/longrope attention_factor on cos/sin.  [default: from the factor]"),
        click.option("--short-factor", type=str, default=None, callback=_factor_list, metavar="LIST",
                     help="longrope short_factor: rotary_dim/2 comma-separated numbers."),
        click.option("--long-factor", type=str, default=None, callback=_factor_list, metavar="LIST",
                     help="longrope long_factor (used above original_max_position_embeddings)."),
    ]


def schedule_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """Decorator: the RoPE schedule options (one definition for ``rope`` and ``attention``).

    The command receives ``rotary_dim``, ``scaling``, ``rope_parameters``, ``max_pos``, ``factor``,
    ``orig_max_pos`` and the scaling parameters; :func:`schedule_from_options` turns them into a schedule.
    """
    for option in reversed(_schedule_option_list()):
        f = option(f)
    return f


_SCHEDULE_OPTIONS = ("scaling", "factor", "orig_max_pos", "low_freq_factor", "high_freq_factor", "beta_fast",
                     "beta_slow", "mscale", "mscale_all_dim", "attention_factor", "truncate", "short_factor",
                     "long_factor")


def schedule_from_options(ctx: click.Context, head_dim: int, rotary_dim: int | None, base: float,
                          rope_parameters: dict[str, Any] | None, max_pos: int | None, **opts: Any) -> Any:
    """The RopeSchedule the :func:`schedule_options` describe (``--rope-parameters`` or the single options)."""
    from dataclasses import replace

    from ..rope.schedules import RopeSchedule, schedule_from_rope_parameters

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


# --- stacks -----------------------------------------------------------------------------------


def stacks_for(names: Sequence[str], schedules: Any) -> tuple[list[str], list[str]]:
    """The stacks asked for (``all`` expands to every stack) that run the rope type of every schedule given (one
    schedule or several), and the reasons of those ``all`` left out.  A stack named explicitly that cannot run a
    schedule is a usage error."""
    from ..rope import select_stacks

    scheds = list(schedules) if isinstance(schedules, (list, tuple)) else [schedules]
    try:
        return select_stacks(names, [s.scaling for s in scheds])
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="'--stack'") from None


class _NameChoice(click.Choice):
    """A choice whose error lists the names bare (the stacks are many: one short line)."""

    def get_invalid_choice_message(self, value: Any, ctx: click.Context | None) -> str:
        return f"{value!r} is not one of {', '.join(map(str, self.choices))}."


def stack_option(help_default: str) -> Callable[[Any], Any]:
    """``--stack NAME`` (repeatable; ``all``, ``serve``, ``train``), the same on every command that takes it."""
    from ..rope import STACKS

    return click.option(
        "--stack", "stacks", type=_NameChoice(["all", "serve", "train", *STACKS]), multiple=True, metavar="NAME",
        help="Serving or training stack (repeatable): the code path a stack runs, written from its source: "
             + ", ".join(STACKS) + "; all = every stack that runs the rope type, serve / train = every serving / "
             "training stack that does.  " + help_default)


def bottom_line_text(summaries: Sequence[Any]) -> str:
    """:func:`precision_audit.render.bottom_line_text`, its verdict words coloured on a terminal."""
    colour = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    return render_bottom_line(summaries, _coloured if colour else None)


def _coloured(word: str) -> str:
    return click.style(word, fg={"safe": "green", "degraded": "yellow", "broken": "red"}[word])


def fail_on(rows: Sequence[Any], threshold: str, paths: Sequence[str] | None, key: str = "recipe") -> None:
    """``--fail-on``: print each failing row of the judged ``paths`` (None: every row) and why on stderr, then
    exit 1."""
    if threshold == "never":
        return
    from ..bottomline import failing

    bad = failing(rows, threshold, key=key, paths=paths)
    for row, why in bad:
        get = row.get if isinstance(row, dict) else lambda k, r=row: getattr(r, k, None)
        detail = []  # what the verdict rests on (precision_audit.verdicts.rope_why), not the absolute error
        if get("why"):
            detail.append(str(get("why")))
        elif get("colliding_positions"):
            detail.append(f"{get('colliding_positions')} colliding positions")
        lt = get("layer_type")
        click.echo(f"fail-on {threshold}: {get(key)}{f' ({lt})' if lt else ''}: {why}"
                   + (f" ({'; '.join(detail)})" if detail else ""), err=True)
    if bad:
        raise SystemExit(1)


def distance_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """``--distance D`` (repeatable) and ``--no-pairs``: the pairwise RoPE errors' distances."""
    f = click.option("--no-pairs", "no_pairs", is_flag=True,
                     help="Skip the pairwise errors (faster: each distance costs about one more pass over the "
                          "errors, L/2 and other distances above a chunk one more pass over the recipe).")(f)
    return click.option(
        "--distance", "distances", type=DISTANCE, multiple=True, metavar="D",
        help="Pair distance (repeatable): 1, 16, 4K.  Also report the pairwise error: the error of the rotation "
             "between positions m - D and m that attention sees (phi(m) - phi(m-D) against D*theta_i; "
             "coherent drifts cancel at short D, independent per-position errors do not), max and mean over "
             "m in [D, L).  A row of length L carries the distances below L; one at or above every length "
             "exits 2.  [default: 1 16 256 4K and L/2, each capped at L-1]")(f)


def distances_from_options(distances: Sequence[int], no_pairs: bool) -> tuple[int, ...] | None:
    """The ``distances`` argument of the audits: None (the defaults), the asked ones, or () with --no-pairs."""
    if no_pairs and distances:
        raise click.UsageError("--no-pairs and --distance exclude each other")
    return () if no_pairs else (tuple(distances) or None)
