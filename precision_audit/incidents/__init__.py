"""The catalog of public incidents of this bug class, as data, and one runner.

Each :class:`Incident` names a public report (repository, issue/PR number or
paper, year, the stack it is about), the code path it is about as a recipe
(one format per stage, see :mod:`precision_audit.rope`) with its settings, the
figures the report states (``published``, quoted as numbers with their
meaning), a measurement that runs the same code path through the tool
(``measured``, same keys where they correspond) and the fix.
:func:`reproduce` runs one entry and judges each stated figure: the verdict is
``reproduced`` when every check holds, ``differs`` otherwise (the reasons in
numbers), ``not recomputable`` when the report states no figure the tool can
recompute (qualitative reports, or settings the report does not give).

The entries live in one module per year (:mod:`.y2023` .. :mod:`.y2026c`, a year split in parts) or per
subject (:mod:`.tensor_cores`: float32 GEMMs run in TF32), the
data model and checks in :mod:`.core`, the catalog and runner in
:mod:`.runner`; every public name is importable from here.

>>> sorted(CATALOG)[:3]
['aiter-4765', 'automodel-2549', 'baichuan']
>>> r = reproduce("gpt-neox-1003")
>>> r.verdict, r.measured["angle_fp16_1857_1"], r.published["angle_fp16_1857_1"]
('reproduced', 1045.0, 1045.0)
"""

from __future__ import annotations

from .core import VERDICTS, AngleOverflow, Incident, IncidentResult, angle_overflow, format_figure
from .runner import CATALOG, catalog_markdown, incident_names, reproduce, reproduce_all

__all__ = [
    "CATALOG",
    "VERDICTS",
    "AngleOverflow",
    "Incident",
    "IncidentResult",
    "angle_overflow",
    "catalog_markdown",
    "format_figure",
    "incident_names",
    "reproduce",
    "reproduce_all",
]
