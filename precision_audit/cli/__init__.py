"""The ``precision-audit`` command line: a click group of thin commands.

Every command validates its input in click parameter types (bad input exits 2
with a usage message), calls the library and prints a table or, with
``--json``, ``{"auditor": NAME, "results": [row, ...]}``.

Tables are the plain text of ``table`` when stdout is not a terminal, and a
rich table fitted to the terminal (``--wide``: full width) when it is; progress
bars appear only when stderr is a terminal.

Modules: ``_shared`` (parameter types, the RoPE schedule options, table/JSON
output, progress bars, error handling), ``auditors`` (positions, sinusoidal, rope, alibi, attention),
``models`` (config, report), ``live`` (hf-rope, hf-scan, hf-alibi), ``weights`` (config --weights),
``incidents`` (reproduce), ``relative``, ``effect`` (``effect_model``: with --model), ``trace`` and ``scan``; each loads
when its command runs.
"""

from __future__ import annotations

import importlib

import click

from .. import __version__
from ._shared import AuditGroup, emit, table

__all__ = ["emit", "main", "table"]

# every command: (module of this package, attribute); a command's module is imported when it runs (or when
# --help lists the commands), so ``precision-audit rope`` does not load the transformers or effect code
COMMANDS: dict[str, tuple[str, str]] = {
    "positions": ("auditors", "positions"),
    "reproduce": ("incidents", "reproduce"),
    "sinusoidal": ("auditors", "sinusoidal_cmd"),
    "rope": ("auditors", "rope_cmd"),
    "alibi": ("auditors", "alibi_cmd"),
    "attention": ("auditors", "attention_cmd"),
    "report": ("models", "report_cmd"),
    "config": ("models", "config_cmd"),
    "hf-rope": ("live", "hf_rope_cmd"),
    "hf-scan": ("live", "hf_scan_cmd"),
    "hf-alibi": ("live", "hf_alibi_cmd"),
    "relative": ("relative", "relative_cmd"),
    "effect": ("effect", "effect_cmd"),
    "trace": ("trace", "trace_cmd"),
    "scan": ("scan", "scan_cmd"),
}


class _Main(AuditGroup):
    """The top-level group: its commands load on first use (:data:`COMMANDS`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module, attr = COMMANDS[cmd_name]
            self.add_command(getattr(importlib.import_module(f".{module}", __name__), attr), cmd_name)
        return super().get_command(ctx, cmd_name)

    def every_command(self) -> dict[str, click.Command]:
        """Every top-level command by name, each loaded."""
        ctx = click.Context(self)
        return {n: c for n in self.list_commands(ctx) if (c := self.get_command(ctx, n)) is not None}


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="precision-audit")
def main() -> None:
    """Audit the numerical precision of position information in transformers.

    Position ids, RoPE angles, ALiBi biases and sinusoidal encodings lose
    positions when computed in float16, bfloat16 or float8.  Each command
    counts the damage per context length and compares the broken code path
    with the float32 fix.  Lengths accept 8192, 8k, 32K, 1M (k = 1024).
    """
