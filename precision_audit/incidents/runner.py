"""The catalog (every year's entries, in order) and the one runner: measure, judge, render.

>>> incident_names()[:2]
['baichuan', 'gpt-neox-1003']
>>> r = reproduce("openvino-34716")
>>> r.verdict, r.measured["fp16_of_4173"], r.measured["fp16_of_4174"]
('reproduced', 4172.0, 4176.0)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from . import tensor_cores, y2023, y2024, y2024b, y2025, y2026, y2026b, y2026c
from .core import Incident, IncidentResult, format_figure

__all__ = [
    "CATALOG",
    "catalog_markdown",
    "incident_names",
    "reproduce",
    "reproduce_all",
]

CATALOG: dict[str, Incident] = {i.name: i for mod in (y2023, y2024, y2024b, y2025, y2026, y2026b, y2026c, tensor_cores)
                             for i in mod.INCIDENTS}


def incident_names() -> list[str]:
    """The catalog's names, in catalog order (by year, then as reported).

    >>> "vllm-27722" in incident_names()
    True
    """
    return list(CATALOG)


def _verdict(inc: Incident, reasons: tuple[str, ...]) -> tuple[str, str]:
    """The verdict and its one-line form."""
    if reasons:
        return "differs", "differs: " + "; ".join(reasons)
    if not inc.checks:
        return "not recomputable", f"not recomputable: {inc.not_recomputable or 'qualitative'}"
    return "reproduced", "reproduced" + (f" (not recomputable: {inc.not_recomputable})" if inc.not_recomputable
                                         else "")


def reproduce(name: str) -> IncidentResult:
    """Run one catalog entry: measure its code path and judge each published figure.

    >>> reproduce("candle-3520").measured["bf16_value_of_15962"]
    15936.0
    >>> reproduce("transformer-engine-1245").verdict_line
    'not recomputable: qualitative (a loss gap, no figure)'
    >>> reproduce("nope")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: unknown incident 'nope'; valid: baichuan, gpt-neox-1003, transformers-25681, ...
    """
    try:
        inc = CATALOG[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown incident {name!r}; valid: {', '.join(CATALOG)}") from None
    measured = inc.measure()
    reasons = tuple(r for r in (c(inc.published, measured) for c in inc.checks) if r is not None)
    verdict, line = _verdict(inc, reasons)
    headline = inc.headline or tuple(k for k in inc.published if k in measured) or tuple(list(measured)[:3])
    return IncidentResult(
        name=inc.name,
        reference=inc.reference,
        year=inc.year,
        what=inc.what,
        code_path=inc.code_path,
        recipe=dict(inc.recipe),
        settings=dict(inc.settings),
        published=dict(inc.published),
        published_source=inc.published_source,
        measured=measured,
        verdict=verdict,
        reasons=reasons,
        explanation=inc.explanation,
        url=inc.url,
        stack=inc.stack,
        fix=inc.fix,
        verdict_line=line,
        headline=headline,
    )


def reproduce_all(names: Iterable[str] | None = None) -> list[IncidentResult]:
    """Run the given entries (default: the whole catalog, in catalog order).

    >>> [r.verdict for r in reproduce_all(["tinygrad-4587", "vllm-27722"])]
    ['differs', 'reproduced']
    """
    return [reproduce(n) for n in (incident_names() if names is None else names)]


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _figures(values: dict[str, object], keys: Sequence[str]) -> str:
    return "; ".join(f"{k} = {format_figure(values[k])}" for k in keys if k in values)


def catalog_markdown(results: Sequence[IncidentResult] | None = None) -> str:
    """The catalog as a markdown table: id, year, stack, code path, published, measured, verdict, fix.

    ``results`` defaults to :func:`reproduce_all`.  Published: every figure the
    report states; measured: the entry's headline figures.

    >>> print(catalog_markdown([reproduce("tinygrad-4587")]).splitlines()[0])
    | id | year | stack | code path | published | measured | verdict | fix |
    """
    rows = reproduce_all() if results is None else list(results)
    lines = ["| id | year | stack | code path | published | measured | verdict | fix |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        name = f"[`{r.name}`]({r.url})" if r.url.startswith("https://") else f"`{r.name}`"
        cells = [name, r.year, r.stack, r.code_path, _figures(r.published, list(r.published)),
                 _figures(r.measured, r.headline), r.verdict_line, r.fix]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)
