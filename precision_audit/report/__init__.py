"""The report: figures (one module per topic) and the report writer.

Modules: ``positions``, ``rope`` (incl. the position x frequency heatmap),
``attention``, ``alibi``, ``sinusoidal`` draw the figures; ``headline`` and
``model`` run the auditors and assemble a :class:`~.writer.Report`;
``writer`` writes report.md, report.html, results.json and the PNGs;
``_config`` picks from :mod:`precision_audit.config` what a model report draws.  matplotlib is imported only when a figure is
drawn (Agg backend); importing this package does not import it.

>>> from precision_audit import report
>>> sorted(report.__all__)
['headline_report', 'make_headline', 'model_report', 'write_report']
"""

from __future__ import annotations

from typing import Any

__all__ = ["headline_report", "make_headline", "model_report", "write_report"]

_WHERE = {"headline_report": "headline", "make_headline": "headline", "model_report": "model",
          "write_report": "writer"}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
