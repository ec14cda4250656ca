"""The catalog's data model: an :class:`Incident`, its :class:`IncidentResult`, the checks, shared measurements.

An :class:`Incident` is data: the report (reference, year, stack), the code
path as a recipe, the figures the report states, a function that measures the
same code path through the tool, the checks that compare the two, and the fix.
The runner (:mod:`precision_audit.incidents.runner`) turns one into an
:class:`IncidentResult` with a verdict (:data:`VERDICTS`).

>>> close("x", 0.5)({"x": 1.0}, {"x": 1.25}) is None
True
>>> close("x", 0.1)({"x": 1.0}, {"x": 1.25})
'x: published 1, measured 1.25 (|diff| 0.25 > 0.1)'
>>> format_figure(1044.2678), format_figure([15936.0, 16000.0]), format_figure(2.0 ** -24)
('1044.268', '[15936, 16000]', '5.9605e-08')
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..rows import Row
from ..rope import Recipe
from ..rope.overflow import AngleOverflow, angle_overflow

__all__ = [
    "VERDICTS",
    "AngleOverflow",
    "Check",
    "Figures",
    "Incident",
    "IncidentResult",
    "angle_overflow",
    "claim",
    "close",
    "format_figure",
    "rounded",
    "stages_of",
]

Figures = dict[str, Any]
# a check looks at (published, measured) and returns None when the figure holds, else the reason in numbers
Check = Callable[[Mapping[str, Any], Mapping[str, Any]], "str | None"]

# reproduced: every check holds; differs: a check fails (the reasons say which, in numbers);
# not recomputable: the report states no figure the tool can recompute (the line says why)
VERDICTS: tuple[str, ...] = ("reproduced", "differs", "not recomputable")


def rounded(x: float, digits: int = 6) -> float:
    """``x`` to ``digits`` significant digits (figures are shown, not re-derived, from these).

    >>> rounded(math.pi, 3)
    3.14
    """
    return float(f"{x:.{digits}g}")


def stages_of(recipe: Recipe) -> dict[str, str]:
    """A recipe's stage formats, as an entry's ``recipe`` field.

    >>> from precision_audit.rope import preset
    >>> stages_of(preset("lowp", "fp16"))["angle"]
    'float16'
    """
    return dict(recipe.stages)


def format_figure(value: Any) -> str:
    """A figure with up to 7 significant digits (1044.268, not 1044: the digits are the point)."""
    if isinstance(value, float):
        if value == 0 or not math.isfinite(value) or 1e-4 <= abs(value) < 1e7:
            return f"{value:.7g}"
        return f"{value:.4e}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(format_figure(v) for v in value) + "]"
    return str(value)


# --------------------------------------------------------------------------- checks (data helpers)


def close(key: str, tol: float) -> Check:
    """The published number ``key`` agrees with the measured one within ``tol`` (absolute)."""

    def check(pub: Mapping[str, Any], mea: Mapping[str, Any]) -> str | None:
        p, m = pub[key], mea[key]
        if abs(p - m) <= tol:
            return None
        return f"{key}: published {p:g}, measured {m:.6g} (|diff| {abs(p - m):.3g} > {tol:g})"

    return check


def claim(key: str, holds: Callable[[Mapping[str, Any]], bool], numbers: str) -> Check:
    """A stated claim (published[key], text) that the measurement confirms when ``holds(measured)``.

    ``numbers`` is a format string over the measured figures: the reason shown when it fails.
    """

    def check(pub: Mapping[str, Any], mea: Mapping[str, Any]) -> str | None:
        if holds(mea):
            return None
        return f"{key}: published {pub[key]!r}; measured " + numbers.format(**mea)

    return check


# --------------------------------------------------------------------------- an entry and its result


@dataclass(frozen=True)
class Incident:
    """One public report: where, what code path, what it states, how to measure it, and the fix.

    ``reference`` is ``owner/repo#number`` for a GitHub report; any other
    report (a paper, an article) gives its address in ``source``.
    ``not_recomputable`` says which published figures the tool cannot
    recompute and why (an entry with no check is judged ``not recomputable``
    with this reason, ``qualitative`` by default).  ``headline`` names the
    measured figures a one-line summary shows (default: those the report
    also states).
    """

    name: str
    reference: str
    year: int
    stack: str
    what: str
    code_path: str
    recipe: dict[str, str]
    settings: dict[str, Any]
    published: Figures
    published_source: str
    measure: Callable[[], Figures]
    checks: tuple[Check, ...]
    explanation: str
    fix: str
    source: str = ""
    not_recomputable: str | None = None
    headline: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("incident name must be a non-empty string")
        repo, _, num = self.reference.partition("#")
        if not (self.source or ("/" in repo and num.isdigit()) or self.name == "baichuan"):
            raise ValueError(f"incident {self.name!r}: reference {self.reference!r} must be owner/repo#number "
                             "(or give the report's address in source)")
        if not 2000 < self.year < 2100:
            raise ValueError(f"incident {self.name!r}: year {self.year!r} out of range")
        if not self.stack or not self.fix:
            raise ValueError(f"incident {self.name!r}: stack and fix must be given")

    @property
    def url(self) -> str:
        """The public address of the report (``source``, or the GitHub issue or pull request)."""
        if self.source:
            return self.source
        repo, _, num = self.reference.partition("#")
        return f"https://github.com/{repo}/issues/{num}" if num else ""


@dataclass(frozen=True)
class IncidentResult(Row):
    """One catalog entry run: the report's figures next to the tool's, and the verdict.

    ``verdict`` is one of :data:`VERDICTS`; ``verdict_line`` says it in one
    line: ``reproduced``, ``differs: <reasons>``, ``not recomputable: <why>``.
    """

    name: str
    reference: str
    year: int
    what: str
    code_path: str
    recipe: dict[str, str]
    settings: dict[str, Any]
    published: Figures
    published_source: str
    measured: Figures
    verdict: str
    reasons: tuple[str, ...]
    explanation: str
    url: str = field(default="")
    stack: str = ""
    fix: str = ""
    verdict_line: str = ""
    headline: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} must be one of {', '.join(VERDICTS)}")
