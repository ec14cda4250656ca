"""``scan``: find the position code in any package, module, ``.py`` file or folder, build it, call it in each
mode (float32; bfloat16 / float16 vectors with float32 buffers; after ``.to(bfloat16)``) under the tracer, and
judge each output by its kind, naming the op and ``file:line`` where the loss enters and the fix.

* :mod:`.discover`: which modules to import and which classes and functions hold position code;
* :mod:`.build`: their arguments (defaults, inferred by name, ``--arg`` overrides) and the calls they support;
* :mod:`.verdict`: the verdict of one traced output (positions, buckets, angles, cos/sin, rotated vectors,
  biases) by :mod:`precision_audit.verdicts`' rules;
* :mod:`.run`: :func:`scan`, the entry point, and its rows (:class:`ScanFinding`).

Only importing the targets and calling the position callables found runs their code.  The package is itself
callable (``precision_audit.scan(...)`` is :func:`scan`), so ``import precision_audit; precision_audit.scan(
"mypkg")`` works whether or not this package was imported first.

>>> import precision_audit
>>> rows = precision_audit.scan("precision_audit.trace.examples", length=512, modes=["float32"])
>>> [(r.callable, r.verdict) for r in rows if r.status == "scanned"]  # each factory's module, built and called
[('bf16_positions().forward', 'broken'), ('fp32_rotary().forward', 'safe')]
"""

from __future__ import annotations

import sys
import types
from typing import Any

from .build import INFERRED, parse_arg
from .discover import Candidate, candidates, load_target_modules
from .run import MODES, ScanFinding, scan
from .verdict import output_verdict, pair_errors

__all__ = ["INFERRED", "MODES", "Candidate", "ScanFinding", "candidates", "load_target_modules", "output_verdict",
           "pair_errors", "parse_arg", "scan"]


class _CallableModule(types.ModuleType):
    """This package, callable as :func:`scan`."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return scan(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
