"""``reproduce``: a published incident's figures next to the tool's, with a verdict."""

from __future__ import annotations

import math
from typing import Any

import click

from ._shared import AuditCommand, Column, echo_json, echo_table, wide_option


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


def _echo_verdict(res: Any) -> None:
    """Published next to measured figures (a table), the verdict and its reasons, the explanation."""
    keys = list(res.published) + [k for k in res.measured if k not in res.published]
    rows = [{"figure": k, "published": _fig(res.published[k]) if k in res.published else "-",
             "measured": _fig(res.measured[k]) if k in res.measured else "-"} for k in keys]
    width = max(len(r["published"]) for r in rows)
    lines = [f"{res.name}: {res.reference} ({res.year}) - {res.what}", f"code path: {res.code_path}",
             f"recipe: {', '.join(f'{k}={v}' for k, v in res.recipe.items())}",
             f"settings: {', '.join(f'{k}={_fig(v)}' for k, v in res.settings.items())}",
             f"published figures from: {res.published_source}", ""]
    click.echo("\n".join(lines))
    echo_table(rows, [("figure", "figure"), ("published", lambda r: r["published"].ljust(width)[:80]),
                      ("measured", "measured")])
    lines = ["", f"verdict: {res.verdict}"] + [f"  - {r}" for r in res.reasons]
    lines += ["", res.explanation]
    click.echo("\n".join(lines))


def _list_catalog(as_json: bool) -> None:
    """Print the catalog: name, reference, year, what (a table or JSON)."""
    from ..incidents import CATALOG

    rows = [{"name": i.name, "reference": i.reference, "year": i.year, "what": i.what} for i in CATALOG.values()]
    if as_json:
        echo_json({"auditor": "reproduce", "results": rows})
    else:
        echo_table(rows, [("name", "name"), ("reference", "reference"), ("year", "year"), ("what", "what")])


@click.command("reproduce", cls=AuditCommand)
@click.argument("name", required=False, type=click.Choice(_incident_names()), metavar="NAME")
@click.option("--list", "as_list", is_flag=True, help="List the catalog: name, reference, year, what.")
@click.option("--json", "as_json", is_flag=True,
              help='Print {"auditor": "reproduce", "results": [row]} (row: name, reference, published, measured, '
                   'verdict, explanation, ...) as JSON instead of text.')
@wide_option
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
        _list_catalog(as_json)
        return
    if name is None:
        raise click.UsageError(f"missing NAME (one of: {', '.join(CATALOG)}) or --list")
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
            row[f"{d} run"] = r.max_run
        wide.append(row)
    short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}
    cols: list[Column] = [("length", "length")]
    for d in dtypes:
        cols += [(f"{short[d]} exact", f"{d} exact"), (f"{short[d]} distinct", f"{d} distinct"),
                 (f"{short[d]} max run", f"{d} run")]
    echo_table(wide, cols)


def _baichuan(as_json: bool, res: Any) -> None:
    """Baichuan's finding: bf16 position ids keep ~10 % of positions at 8K.

    Position ids 0..L-1 built in bfloat16 and float16 (the bug) next to
    float32 (the fix), for L = 1K .. 128K, each measured by rounding every
    position.
    """
    from ..positions import BAICHUAN_DTYPES, reproduce_baichuan

    rows = reproduce_baichuan()
    at = {(r.dtype, r.length): r for r in rows}
    summary = _baichuan_summary(at, max(r.length for r in rows))
    if as_json:
        echo_json({"auditor": "positions", "reproduction": "baichuan", "results": [r.to_dict() for r in rows],
                   "summary": summary, "incident": res.to_dict()})
        return
    click.echo("Position ids 0..L-1 cast to each format (exact = positions that survive; "
               "max run = most neighbouring tokens sharing one position)\n")
    _baichuan_table(at, sorted({r.length for r in rows}), BAICHUAN_DTYPES)
    click.echo("\n" + summary)
    click.echo(f"\npublished: {res.published}  ({res.published_source})\nmeasured:  {res.measured}\n"
               f"verdict: {res.verdict}" + "".join(f"\n  - {r}" for r in res.reasons))
