"""``precision-audit scan TARGET...``: find the position code in a package, module, ``.py`` file or folder, call
it in each mode under the tracer, and give a verdict per callable and mode (:func:`precision_audit.scan.scan`)."""

from __future__ import annotations

from typing import Any

import click

from ._shared import JSON_HELP, LENGTH, AuditCommand, Column, echo_json, echo_table, wide_option

__all__ = ["scan_cmd"]

_MODES = ("float32", "bfloat16-inputs", "float16-inputs", "cast-bfloat16")


class _OneLineError(click.ClickException):
    """A bad TARGET (missing, unparsable, not importable, no position code): ``Error: ...`` on one line, exit 2."""

    exit_code = 2


class _ScanCommand(AuditCommand):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return click.Command.invoke(self, ctx)
        except ValueError as e:
            raise _OneLineError(" ".join(str(e).split())) from None


def _where(r: dict[str, Any]) -> str:
    if r["status"] == "skipped":
        return r["reason"]
    if r["op"] is None:
        return "-"
    return f"{r['op']} at {r['where']}"


_COLUMNS: list[Column] = [
    ("callable", "callable"), ("call", "call"), ("mode", "mode"),
    ("verdict", lambda r: r["verdict"] or "skipped"), ("kind", lambda r: r["kind"] or "-"),
    ("why", lambda r: r["why"] or "-"), ("loss enters at (or why skipped)", _where),
]


def _check_arg(ctx: Any, param: Any, value: tuple[str, ...]) -> tuple[str, ...]:
    from ..scan import parse_arg

    for v in value:
        try:
            parse_arg(v)
        except ValueError as e:
            raise click.BadParameter(str(e).removeprefix("--arg "), ctx, param) from None
    return value


@click.command("scan", cls=_ScanCommand)
@click.argument("targets", metavar="TARGET...", nargs=-1, required=True)
@click.option("--length", "-l", type=LENGTH, default=8192, show_default=True,
              help="Positions 0..LENGTH-1 per call: 8192, 8k, 32K (at most 1M: every derived tensor has a float64 "
                   "shadow).")
@click.option("--mode", "modes", type=click.Choice(_MODES), multiple=True,
              help="Only these modes (repeatable).  [default: all four]")
@click.option("--arg", "args", multiple=True, metavar="NAME=VALUE", callback=_check_arg,
              help="Give the parameter NAME this value wherever a found callable takes it (a Python literal: "
                   "--arg dim=128 --arg axes_dim='(16,56,56)'); overrides inferred values and defaults.")
@click.option("--fail-on", type=click.Choice(["never", "broken", "degraded"]), default="never", show_default=True,
              help="Exit 1 when some row is this bad or worse (for a library's CI).")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@wide_option
def scan_cmd(targets: tuple[str, ...], length: int, modes: tuple[str, ...], args: tuple[str, ...], fail_on: str,
             as_json: bool) -> None:
    """Find the position code in each TARGET, call it in every mode under the tracer, and judge it.

    TARGET is an installed package or module name (its submodules whose text mentions positions), a .py file
    or a folder of .py files.  A class or function is position code when it builds or takes positions (an
    arange, a position argument, sin/cos of a product, a bucket or a bias from distances; names such as rotary,
    rope, position, alibi help).  Each is built with its defaults or small inferred arguments (--arg overrides)
    and called with positions 0..L-1 in every way it supports, in four modes: float32; bfloat16 and float16
    vectors with float32 buffers; after .to(bfloat16).  Each output is held against float64 shadows of the
    float32 run and judged by its kind's rule (positions, buckets, angles / cos/sin / rotated vectors, biases);
    where it is degraded or broken, the op and file:line where the loss enters are named, with the fix.
    Whatever cannot be imported, built or called is listed with why.

    What runs: a scan imports the TARGET's modules and calls the position callables it found (constructors,
    forward, their position methods, functions), nothing else of the package.  Progress: one line per module
    on stderr.

    Example: precision-audit scan transformers.models.llama.modeling_llama --length 4K --fail-on broken
    """
    from ..scan import scan

    rows = scan(list(targets), length=length, modes=modes or None, args=list(args),
                progress=lambda line: click.echo(line, err=True))
    dicts = [r.to_dict() for r in rows]
    if as_json:
        echo_json({"auditor": "scan", "length": length, "results": dicts})
    else:
        echo_table(dicts, _COLUMNS)
        fixes = {(r["op"], r["where"], r["fix"]) for r in dicts if r["fix"]}
        for op, where, fix in sorted(fixes, key=str):
            click.echo(f"fix for {op} at {where}: {fix}")
        for module, note in dict.fromkeys((r["module"], r["note"]) for r in dicts if r["note"]):
            click.echo(f"note: {module}: {note}")
        gemms = {g: None for r in dicts for g in r["tf32_gemms"]}
        if gemms:
            from ..trace.report import TF32_FIX, TF32_NOTE

            for g in gemms:  # nothing differs on a CPU: the flag says what a tensor-core GPU may do
                click.echo(f"tf32: float32 {g} {TF32_NOTE} (a GPU property: on this CPU it computes in float32); "
                           f"fix: {TF32_FIX}")
    if fail_on != "never":
        order = ("safe", "degraded", "broken")
        bad = [r for r in dicts if r["verdict"] and order.index(r["verdict"]) >= order.index(fail_on)]
        for r in bad:
            click.echo(f"fail-on {fail_on}: {r['module']}.{r['callable']} {r['mode']}: {r['verdict']} "
                       f"({r['why']})", err=True)
        if bad:
            raise SystemExit(1)
