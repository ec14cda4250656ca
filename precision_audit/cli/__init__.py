"""The ``precision-audit`` command line: a click group of thin commands.

Every command validates its input in click parameter types (bad input exits 2
with a usage message), calls the library and prints a table or, with
``--json``, ``{"auditor": NAME, "results": [row, ...]}``.

Tables are the plain text of ``table`` when stdout is not a terminal, and a
rich table fitted to the terminal (``--wide``: full width) when it is; progress
bars appear only when stderr is a terminal.

Modules: ``_shared`` (parameter types, the RoPE schedule options, table/JSON
output, progress bars, error handling), ``auditors`` (positions, sinusoidal, rope, alibi, attention),
``models`` (config, report, hf-rope, hf-scan, hf-alibi), ``incidents``
(reproduce).
"""

from __future__ import annotations

import click

from .. import __version__
from . import auditors, incidents, models, relative
from ._shared import AuditGroup, emit, table

__all__ = ["emit", "main", "table"]


@click.group(cls=AuditGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="precision-audit")
def main() -> None:
    """Audit the numerical precision of position information in transformers.

    Position ids, RoPE angles, ALiBi biases and sinusoidal encodings lose
    positions when computed in float16, bfloat16 or float8.  Each command
    counts the damage per context length and compares the broken code path
    with the float32 fix.  Lengths accept 8192, 8k, 32K, 1M (k = 1024).
    """


for _command in (auditors.positions, incidents.reproduce, auditors.sinusoidal_cmd, auditors.rope_cmd,
                 auditors.alibi_cmd, auditors.attention_cmd, models.report_cmd, models.config_cmd,
                 models.hf_rope_cmd, models.hf_scan_cmd, models.hf_alibi_cmd, relative.relative_cmd):
    main.add_command(_command)
del _command
