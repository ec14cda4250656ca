"""``reproduce``: a published incident's figures next to the tool's, with a verdict."""

from __future__ import annotations

import difflib
from typing import Any

import click

from ..render import table
from ._shared import AuditCommand, Column, echo_json, echo_table, wide_option


def _incident_names() -> list[str]:
    from ..incidents import incident_names

    return incident_names()


class IncidentChoice(click.Choice):
    """An incident name; a bad one fails in one short line (the catalog is long: --list shows it)."""

    def get_invalid_choice_message(self, value: Any, ctx: Any) -> str:  # click >= 8.2
        close = difflib.get_close_matches(str(value), [str(c) for c in self.choices], n=3, cutoff=0.5)
        hint = f"; closest: {', '.join(close)}" if close else ""
        return f"{value!r} is not one of the {len(self.choices)} incidents (see --list){hint}."


def _fig(value: Any) -> str:
    """A figure with up to 7 significant digits (1044.268, not 1044: the digits are the point)."""
    from ..incidents import format_figure

    return format_figure(value)


def _echo_verdict(res: Any) -> None:
    """Published next to measured figures (a table), the verdict and its reasons, the explanation, the fix."""
    keys = list(res.published) + [k for k in res.measured if k not in res.published]
    rows = [{"figure": k, "published": _fig(res.published[k]) if k in res.published else "-",
             "measured": _fig(res.measured[k]) if k in res.measured else "-"} for k in keys]
    width = max(len(r["published"]) for r in rows)
    lines = [f"{res.name}: {res.reference} ({res.year}, {res.stack}) - {res.what}", f"code path: {res.code_path}",
             f"recipe: {', '.join(f'{k}={v}' for k, v in res.recipe.items())}",
             f"settings: {', '.join(f'{k}={_fig(v)}' for k, v in res.settings.items())}",
             f"published figures from: {res.published_source}", ""]
    click.echo("\n".join(lines))
    echo_table(rows, [("figure", "figure"), ("published", lambda r: r["published"].ljust(width)[:80]),
                      ("measured", "measured")])
    head = res.verdict_line if res.verdict != "differs" else res.verdict
    lines = ["", f"verdict: {head}"] + [f"  - {r}" for r in res.reasons]
    lines += ["", res.explanation, "", f"fix: {res.fix}"]
    click.echo("\n".join(lines))


def _list_catalog(as_json: bool) -> None:
    """Print the catalog grouped by stack and year, one line each with its verdict (a table or JSON).

    Each entry is run to give its verdict (the whole catalog takes a few seconds).
    """
    from ..incidents import CATALOG, reproduce

    entries = sorted(CATALOG.values(), key=lambda i: (i.stack.lower(), i.year, i.name))
    rows = [{"stack": i.stack, "year": i.year, "name": i.name, "reference": i.reference,
             "verdict": reproduce(i.name).verdict, "what": i.what} for i in entries]
    if as_json:
        echo_json({"auditor": "reproduce", "results": rows})
    else:
        echo_table(rows, [("stack", "stack"), ("year", "year"), ("name", "name"), ("reference", "reference"),
                          ("verdict", "verdict"), ("what", "what")])


def _run_all(as_json: bool) -> None:
    """Run every entry: JSON rows, or one line each (name, year, stack, verdict) and the reasons."""
    from ..incidents import reproduce_all

    results = reproduce_all()
    if as_json:
        echo_json({"auditor": "reproduce", "results": [r.to_dict() for r in results]})
        return
    echo_table([{"name": r.name, "year": r.year, "stack": r.stack, "verdict": r.verdict} for r in results],
               [("name", "name"), ("year", "year"), ("stack", "stack"), ("verdict", "verdict")])
    notes = [f"{r.name}: {r.verdict_line}" for r in results if r.verdict_line != "reproduced"]
    if notes:
        click.echo("\n" + "\n".join(notes))


@click.command("reproduce", cls=AuditCommand)
@click.argument("name", required=False, type=IncidentChoice(_incident_names()), metavar="NAME")
@click.option("--list", "as_list", is_flag=True,
              help="List the catalog grouped by stack and year, one line each: stack, year, name, reference, verdict, "
                   "what.")
@click.option("--all", "run_all", is_flag=True,
              help="Run every entry: one line each (name, year, stack, verdict), then every verdict line other "
                   "than a plain 'reproduced' (the reasons); with --json every entry's full row.")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"auditor": "reproduce", "results": [row]} (row: name, reference, year, stack, published, '
                   'measured, verdict, verdict_line, reasons, explanation, fix, ...) as JSON instead of text.')
@wide_option
def reproduce(name: str | None, as_list: bool, run_all: bool, as_json: bool) -> None:
    """Reproduce a published incident: its figures next to the tool's, with a verdict.

    NAME is one of the catalog (see --list).  Each runs the report's code
    path as a recipe and judges every figure the report states: reproduced,
    differs (the reason in numbers), or not recomputable (the report states
    no figure the tool can recompute, and why).  --all runs every entry.

    Example: precision-audit reproduce candle-3520
    """
    from ..incidents import CATALOG
    from ..incidents import reproduce as run_incident

    if sum((name is not None, as_list, run_all)) > 1:
        raise click.UsageError("give one of NAME, --list or --all")
    if as_list:
        _list_catalog(as_json)
        return
    if run_all:
        _run_all(as_json)
        return
    if name is None:
        raise click.UsageError(f"missing NAME (one of: {', '.join(CATALOG)}), --list or --all")
    res = run_incident(name)
    if name == "baichuan":
        _baichuan(as_json, res)
        return
    if as_json:
        echo_json({"auditor": "reproduce", "results": [res.to_dict()]})
        return
    _echo_verdict(res)


def _baichuan_summary(at: dict[tuple[str, int], Any], longest: int) -> str:
    """One paragraph: bf16 at 8K (exact, distinct, longest run) against float32 at the longest length."""
    b, f32 = at["bfloat16", 8192], at["float32", longest]
    return (
        f"At context 8192, position ids in bfloat16 keep {b.exact_count} of 8192 positions exact "
        f"({100 * b.exact_fraction:.1f} %; Baichuan reported about 10 %), {b.distinct_values} distinct values remain "
        f"and up to {b.max_run} neighbouring tokens share one position. "
        f"float32 (the fix) keeps all {f32.length} positions exact (every integer to 2**24 is exact)."
    )


def _baichuan_table(at: dict[tuple[str, int], Any], lengths: list[int], dtypes: tuple[str, ...]) -> None:
    """Print one row per length, each dtype's exact %, distinct values and longest run side by side."""
    wide = []
    for n in lengths:
        row: dict[str, Any] = {"length": n}
        for d in dtypes:
            r = at[d, n]
            row[f"{d} exact"] = f"{100 * r.exact_fraction:.1f}%"
            row[f"{d} distinct"] = r.distinct_values
            # a run that holds overflowed positions says so: they are all inf (one value), not colliding ids
            row[f"{d} run"] = (f"{r.max_run} (inf from {r.overflow_position})" if r.non_finite and
                               r.overflow_position is not None else r.max_run)
        wide.append(row)
    short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
    cols: list[Column] = [("length", "length")]
    for d in dtypes:
        cols += [(f"{short[d]} exact", f"{d} exact"), (f"{short[d]} distinct", f"{d} distinct"),
                 (f"{short[d]} max run", f"{d} run")]
    echo_table(wide, cols)


def _baichuan_other(cpu: Any, by: dict[tuple[str, int], Any], at: dict[tuple[str, int], Any]) -> str:
    """One sentence: torch's CPU arange(L, dtype=...) measured here beside the one-rounding figures."""
    import torch

    b, h = by.get(("bfloat16", 8192)), by.get(("float16", 65536))
    if b is None or h is None:
        return ""
    same = all(r.max_run == at[r.dtype, r.length].max_run for r in cpu)
    return (f"The other construction, torch.arange(L, dtype=...) by this CPU's torch {torch.__version__} "
            f"({_threads(torch.get_num_threads())}): bfloat16 at 8192 keeps {b.exact_count} exact and "
            f"{b.distinct_values} distinct, runs up to {b.max_run}; float16 at 65536 runs up to {h.max_run}"
            + (" (the same here)." if same else
               f" (one rounding: {at['bfloat16', 8192].max_run} and {at['float16', 65536].max_run}): not one rounding "
               "above the exact range, a rounded block start plus lane offsets."))


def _threads(n: int) -> str:
    return f"{n} thread" + ("s" if n != 1 else "")


def _baichuan(as_json: bool, res: Any) -> None:
    """Baichuan's finding: bf16 position ids keep ~10 % of positions at 8K.

    Position ids 0..L-1 built in bfloat16 and float16 (the bug) next to
    float32 (the fix), for L = 1K .. 128K, each measured by rounding every
    position.
    """
    from ..effect import baichuan_effect
    from ..positions import BAICHUAN_DTYPES, CONSTRUCTIONS, cpu_arange_rows, reproduce_baichuan

    rows = reproduce_baichuan()
    at = {(r.dtype, r.length): r for r in rows}
    summary = _baichuan_summary(at, max(r.length for r in rows))
    cpu = cpu_arange_rows([8192, 65536], ["bfloat16", "float16"])
    other = _baichuan_other(cpu, {(r.dtype, r.length): r for r in cpu}, at)
    probe = baichuan_effect()
    if as_json:
        echo_json({"auditor": "positions", "reproduction": "baichuan", "construction": CONSTRUCTIONS["numpy"],
                   "results": [r.to_dict() for r in rows], "summary": summary,
                   "other_construction": {"construction": CONSTRUCTIONS["torch-arange"], "summary": other,
                                          "results": [r.to_dict() for r in cpu]},
                   "probe": [r.to_dict() for r in probe], "incident": res.to_dict()})
        return
    click.echo("Position ids 0..L-1 cast to each format (exact = positions that survive; "
               "max run = most neighbouring tokens sharing one position; inf from P: positions P and up overflowed)\n")
    _baichuan_table(at, sorted({r.length for r in rows}), BAICHUAN_DTYPES)
    click.echo("\n" + summary)
    click.echo(f"\nThese figures: {CONSTRUCTIONS['numpy']}. {other}")
    click.echo("\nOn a model: the project's RoPE probe (precision-audit effect) at the end of an 8192-token context, "
               "its cos/sin built in bfloat16 from bfloat16 position ids (lowp) and by the float32 fix (fp32):\n")
    click.echo(table([r.to_dict() for r in probe], [
        ("task", "task"), ("path", "path"), ("offset", "offset"),
        ("accuracy", lambda r: f"{100 * r['accuracy']:.1f}%"),
        ("exact RoPE", lambda r: f"{100 * r['exact_accuracy']:.1f}%"), ("NLL", "nll")]))
    click.echo(f"\npublished: {res.published}  ({res.published_source})\nmeasured:  {res.measured}\n"
               f"verdict: {res.verdict}" + "".join(f"\n  - {r}" for r in res.reasons))
