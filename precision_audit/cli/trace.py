"""``precision-audit trace TARGET``: run any PyTorch rotary or position code with float64 shadows and name the op
that loses precision (:func:`precision_audit.trace.trace`)."""

from __future__ import annotations

from typing import Any

import click

from ._shared import DTYPE, JSON_HELP, LENGTH, AuditCommand, Column, echo_json, echo_table, one_value, wide_option

__all__ = ["trace_cmd"]


class _OneLineError(click.ClickException):
    """A bad TARGET (or one that raises): ``Error: ...`` on one line, exit 2."""

    exit_code = 2


class _TraceCommand(AuditCommand):
    """The library's ValueError (and transformers missing) become one line on stderr and exit 2."""

    def invoke(self, ctx: click.Context) -> Any:
        from ..hf import TransformersMissing

        try:
            return click.Command.invoke(self, ctx)
        except (ValueError, TransformersMissing) as e:
            raise _OneLineError(" ".join(str(e).split())) from None


_OP_COLUMNS: list[Column] = [
    ("#", "index"), ("op", "op"), ("where", "where"), ("in", lambda r: ",".join(r["in_dtypes"])),
    ("out", "out_dtype"), ("error", "error"), ("added", "added"),
    ("half-ulps", lambda r: "-" if r["added_half_ulps"] is None else f"{r['added_half_ulps']:.3g}"),
    ("first inexact", "first_inexact"),
    ("explains", lambda r: "-" if r["explained"] is None else f"{100 * r['explained']:.1f}%"),
    ("in float64", lambda r: "-" if r["explained_float64"] is None else f"{100 * r['explained_float64']:.1f}%"),
    ("role", lambda r: r["role"] + (" *" if r["culprit"] else "")),
]
_OPERAND_COLUMNS: list[Column] = [
    ("operand", "name"), ("dtype", "dtype"), ("shape", lambda r: "x".join(map(str, r["shape"])) or "-"),
    ("exact in", lambda r: ",".join(r["exact_in"]) or "-"), ("downcast", "downcast"), ("note", "note"),
]


@click.command("trace", cls=_TraceCommand)
@click.argument("target", metavar="TARGET")
@click.option("--cast", "cast_dtype", type=DTYPE, multiple=True, callback=one_value, metavar="DTYPE",
              help="Apply module.to(DTYPE) first, as model.to(DTYPE) does (e.g. bfloat16).")
@click.option("--length", "-l", type=LENGTH, default=8192, show_default=True,
              help="Positions 0..LENGTH-1: 8192, 8k, 32K (at most 1M: every derived tensor has a float64 shadow).")
@click.option("--dtype", "-d", "dtypes", type=DTYPE, multiple=True, default=("bfloat16",), show_default=True,
              help="dtype of x, hence of the cos/sin a rotary module returns; repeatable (one trace each).")
@click.option("--layer-type", default=None, metavar="NAME",
              help="Layer type of a per-layer-type module (Gemma 3: full_attention, sliding_attention).  "
                   "[default: the first]")
@click.option("--input", "-i", "input_specs", multiple=True, metavar="NAME=SHAPE[:DTYPE]",
              help="Call TARGET with this keyword argument (repeatable): a tensor of SHAPE (dims joined by x) in "
                   "DTYPE; an integer DTYPE or a position name (position_ids, positions, pos, cache_position) is "
                   "filled with positions 0..n-1 along its last dimension and followed, a mask and any other input "
                   "with ones; no DTYPE: int64 for a position name, else --dtype.  E.g. --input x=1x8192x8x64:bf16 "
                   "--input position_ids=1x8192:int64.")
@click.option("--call", "method", default=None, metavar="METHOD",
              help="Trace this method of the module TARGET names instead of forward (e.g. get_embed).")
@click.option("--arg", "arg_specs", multiple=True, metavar="NAME=VALUE",
              help="A constructor argument of a CLASS target, or an argument of a FUNCTION target (repeatable; "
                   "VALUE a Python literal: 128, 5e5, True); the others keep their defaults, and a required dim, "
                   "base or length is inferred (64, 10000, --length).")
@click.option("--json", "as_json", is_flag=True, help=JSON_HELP)
@wide_option
def trace_cmd(target: str, cast_dtype: str | None, length: int, dtypes: tuple[str, ...], layer_type: str | None,
              input_specs: tuple[str, ...], method: str | None, arg_specs: tuple[str, ...], as_json: bool) -> None:
    """Run TARGET on positions 0..L-1, shadow every op on them in float64, and name the op that loses.

    TARGET is a config.json (transformers' rotary module for its model_type, built as hf-scan builds it; no
    weights, no downloads), or your own code: FILE.py:NAME or package.module:NAME (the current folder is
    importable, as with python -m), NAME a factory (a function returning a module), a class (built with its
    defaults, a required dim / base / length inferred, --arg for the rest) or a function (traced itself, its
    scalar arguments inferred the same way).  Importing TARGET runs its module's code, as python does.  The
    module is called as forward(x, position_ids) (or forward(x) when it makes its positions inside), or with
    the --input tensors, on --call METHOD if given.  Every op on a tensor
    derived from the positions is rerun in float64; each op's share of the final error comes from rerunning
    it alone in float64.  Operands met on the way (buffers such as inv_freq, constants) whose values are all
    exact in bfloat16 or float16 while stored in float32 are flagged as downcast.  A rotary module also gets
    the RoPE audit of its cos/sin and hf-scan's damage test.  The first lines say which op loses what, and
    the fix.

    Example: precision-audit trace tests/data/llama-3.1-8b.json --cast bfloat16 --length 8K

    Example: precision-audit trace mymod.py:make --input x=1x8192x8x64:bfloat16 --input position_ids=1x8192:int64
    """
    from ..trace import trace
    from ..trace.judge import BEYOND_ROUNDING

    inputs = _inputs(input_specs)
    args = _args(arg_specs)
    results = [trace(target, length, dtype=d, cast=cast_dtype, layer_type=layer_type, inputs=inputs, call=method,
                     args=args) for d in dict.fromkeys(dtypes)]
    if as_json:
        echo_json({"auditor": "trace", "results": [r.to_dict() for r in results]})
        return
    for i, result in enumerate(results):
        if i:
            click.echo("")
        _print(result)
    click.echo("\nerror: max |real - float64 shadow| of the op's output; added: what the op adds on its own inputs "
               "(half-ulps: in half-ulps of its output format where it adds the most; 1 = one correct rounding); "
               "explains: share of a returned tensor's error gone when the op's exact result is rounded once to its "
               "own dtype, every other op unchanged (a correctly rounded op; - where no op could be named: not "
               "rerun); in float64: gone when it alone runs in "
               "float64 (measured where an output is degraded or broken); *: named where the loss enters, only "
               "where an output's verdict is degraded or broken or its error is more than "
               f"{BEYOND_ROUNDING:g} half-ulps of its format.  Each output's verdict follows its kind's rule "
               "(positions, buckets, rotation: cos/sin or rotated pairs, angles, values: biases), precision_audit.verdicts.")


def _inputs(specs: tuple[str, ...]) -> dict[str, str] | None:
    """``--input NAME=SHAPE[:DTYPE]`` as trace's ``inputs`` (checked here: a bad one is one line, exit 2)."""
    from ..trace.build import parse_input

    out: dict[str, str] = {}
    for spec in specs:
        name, _, _ = parse_input(spec)
        if name in out:
            raise ValueError(f"--input {name} given twice")
        out[name] = spec.partition("=")[2].strip()
    return out or None


def _args(specs: tuple[str, ...]) -> dict[str, Any] | None:
    """``--arg NAME=VALUE`` as trace's ``args``."""
    from ..trace.build import parse_arg

    out: dict[str, Any] = {}
    for spec in specs:
        name, value = parse_arg(spec)
        if name in out:
            raise ValueError(f"--arg {name} given twice")
        out[name] = value
    return out or None


def _print(result: Any) -> None:
    given = ", ".join(f"{i['name']} {'x'.join(map(str, i['shape']))} {i['dtype']}" for i in result.inputs)
    click.echo(f"trace of {result.target} on positions 0..{result.length - 1}, "
               + (f"inputs {given}" if result.inputs else "positions made inside" if result.convention == "inferred"
                  else f"x in {result.dtype}")
               + (f", output verdict {result.output_verdict}" if result.output_verdict else "")
               + (f", layer type {result.layer_type}" if result.layer_type else ""))
    for line in result.lines:
        click.echo(f"  {line}")
    click.echo("")
    columns = list(_OP_COLUMNS)
    if any(o.module for o in result.ops):  # ops inside submodules: say which
        columns.insert(3, ("module", lambda r: r["module"] or "-"))
    echo_table([o.to_dict() for o in result.ops], columns)
    if result.operands:
        click.echo("")
        echo_table([o.to_dict() for o in result.operands], _OPERAND_COLUMNS)
