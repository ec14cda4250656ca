"""``trace``: run any PyTorch code on position inputs with float64 shadows and name the op that loses precision.

The code runs once under the tracer (:mod:`.shadow`); every op that rounds is then rerun alone in float64 to
measure its share of the final error (:func:`~.report.culprits`); operands are checked for downcast values
(:func:`~.report.operand_rows`).  A rotary module (``forward(x, position_ids) -> (cos, sin)``) also gets the
usual RoPE audit of its cos/sin against the exact schedule its config declares
(:func:`precision_audit.hf.audit_rope_module`) and the scan's damage test
(:func:`precision_audit.hf.damage_threshold`).

>>> import torch
>>> class Bad(torch.nn.Module):  # positions made in bfloat16 inside forward
...     def forward(self, x, position_ids):
...         pos = torch.arange(x.shape[1], dtype=torch.bfloat16)
...         return (pos.float()[:, None] * 0.01).cos()
>>> r = trace(Bad(), 1024)
>>> [(op.op, op.first_inexact) for op in r.culprits]
[('aten.arange.default', 257)]
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..checks import ArgumentTypeError, check_flag, check_int, describe
from ..formats import Format, get_format
from ..rows import Row
from ..verdicts import worst
from .judge import BEYOND_ROUNDING, judge_outputs
from .report import TraceOp, TraceOperand, culprits, mark_culprits, op_rows, operand_rows, summary_lines
from .compare import count_changed, error_between
from .shadow import Kept, Traced, run_traced
from .target import Target, calling_convention, check_inputs, load_target, takes_layer_type

__all__ = ["MAX_TRACE_LENGTH", "TraceResult", "trace"]

MAX_TRACE_LENGTH = 2**20
"""The longest position input a trace builds: every derived tensor has a float64 shadow in memory."""

_CAST_FIX = "keep it float32 through the cast (precision_audit.fix.keep_rotary_fp32(model) before model.to(dtype))"
_POSITION_NAMES = ("position_ids", "positions", "cache_position", "attention_mask", "mask")


@dataclass(frozen=True)
class TraceResult(Row):
    """A trace: the lines to read first, every op on a position-derived tensor, the operands it met, and for
    a rotary module the RoPE rows (:class:`precision_audit.hf.ModuleRow` as dicts) with their verdict.

    ``final_error``: max |real - shadow| over the returned tensors; ``outputs``: per returned tensor with a
    shadow, ``{"index", "dtype", "shape", "error", "changed", "values"}``: its max |real - shadow| and how many
    of its values differ from the shadow rounded once to its dtype (a bucket that moved, a bias or cos/sin
    value beyond its final rounding; the shadow computes from the operands' stored values, so a downcast
    operand changes none: its flag says it); ``damaged``: the rotary module's max rotation error exceeds
    :func:`precision_audit.hf.damage_threshold` (``hf-scan``'s test; None without a schedule); ``verdict``: the
    RoPE audit's verdict (safe / degraded / broken), None without one; ``inputs``: with ``inputs=``, each tensor
    input ``{"name", "shape", "dtype", "position"}`` (``position``: followed as a position input);
    ``outputs`` also carry each one's judgement (:func:`~.judge.judge`: ``kind``, ``verdict``, ``why``,
    ``half_ulps``) and ``output_verdict`` is the worst of them (and of the RoPE audit's, when one ran);
    ``convention``: how the target was called (``rotary``: ``(x, position_ids)``; ``x``; ``inputs``;
    ``inferred``: every argument inferred, positions made inside).
    """

    target: str
    length: int
    dtype: str
    lines: tuple[str, ...]
    final_error: float
    ops: tuple[TraceOp, ...]
    operands: tuple[TraceOperand, ...]
    layer_type: str | None = None
    rope: tuple[dict[str, Any], ...] = ()
    verdict: str | None = None
    damaged: bool | None = None
    threshold: float | None = None
    outputs: tuple[dict[str, Any], ...] = ()
    inputs: tuple[dict[str, Any], ...] = ()
    output_verdict: str | None = None
    convention: str = ""

    @property
    def culprits(self) -> list[TraceOp]:
        """The ops where the loss enters, largest share of the final error first."""
        return culprits(self.ops)

    @property
    def downcast(self) -> list[TraceOperand]:
        """The operands whose values were rounded to a narrower format before they met the positions."""
        return [o for o in self.operands if o.downcast]


def _make_inputs(inputs: dict[str, Any], fmt: Format) -> dict[str, Any]:
    """``inputs`` with each ``"SHAPE[:DTYPE]"`` string made a tensor (:func:`~.build.make_input`; no DTYPE: int64
    for a position name, else the trace's dtype).  A string that does not start with a digit is an argument of
    its own (a ``layer_type``), passed as it is."""
    from .build import INT_DTYPES, is_position_name, make_input, parse_input

    out = {}
    for k, v in inputs.items():
        if isinstance(v, str) and v[:1].isdigit():
            try:
                name, shape, dt = parse_input(f"{k}={v}")
            except ValueError as e:  # said as the API names it
                raise ValueError(str(e).replace(f"--input {f'{k}={v}'!r}", f"inputs[{k!r}] {v!r}", 1)) from None
            dt = dt or ("int64" if is_position_name(name) else fmt.name)
            if (dt in INT_DTYPES or is_position_name(name)) and "mask" not in name and shape[-1] > MAX_TRACE_LENGTH:
                raise ValueError(f"inputs[{k!r}] {v!r}: {shape[-1]} positions; a trace builds at most "
                                 f"{MAX_TRACE_LENGTH} (every derived tensor has a float64 shadow)")
            v = make_input(name, shape, dt)
        out[k] = v
    return out


def _completed(t: Target, length: int, given: dict[str, Any]) -> dict[str, Any]:
    """The arguments ``t.fn`` needs besides ``given``: its ``--arg`` values and each required one inferred by name
    (:func:`~.build.infer_arguments`)."""
    from .build import infer_arguments

    fn = getattr(t.fn, "forward", t.fn)
    if not t.args and not _required_missing(fn, given):
        return {}
    every = infer_arguments(fn, length, t.args, skip=tuple(given))
    need = set(t.args) | set(_required_missing(fn, given))
    return {k: v for k, v in every.items() if k in need}


def _required_missing(fn: Any, given: dict[str, Any]) -> list[str]:
    import inspect

    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return []
    return [p.name for p in params if p.default is p.empty and p.name not in given
            and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]


def _is_seed(name: str, value: Any) -> bool:
    """A position input by default: a position name (:data:`~.build.POSITION_NAMES`) or an integer tensor."""
    import torch

    from .build import is_position_name

    return isinstance(value, torch.Tensor) and (
        is_position_name(name) or not (value.is_floating_point() or value.is_complex() or value.dtype == torch.bool))


def _call(t: Target, length: int, tdt: Any, layer_type: str | None, inputs: dict[str, Any] | None,
          positions: tuple[str, ...] | None) -> tuple[Any, tuple, dict, list[Any], str]:
    """(fn, args, kwargs, seeds, convention) for one run."""
    import torch

    if inputs is not None:
        try:
            kwargs = {**_completed(t, length, inputs), **inputs}
        except ValueError:
            check_inputs(t.fn, inputs)  # an input that does not fit says so first
            raise
        check_inputs(t.fn, kwargs)
        seeds = list(positions if positions is not None else [k for k, v in inputs.items() if _is_seed(k, v)])
        missing = [s for s in seeds if s not in inputs]
        if missing:
            raise ValueError(f"positions {missing} are not keys of inputs ({', '.join(inputs)})")
        return t.fn, (), kwargs, seeds, "inputs"
    _check_args(t)
    try:
        conv = calling_convention(t.fn)
    except ValueError:
        try:  # a function of scalars (a length, a dim): every argument inferred, the positions made inside
            kwargs = _completed(t, length, {})
        except ValueError:
            kwargs = {}
        if not kwargs:
            raise
        return t.fn, (), kwargs, [], "inferred"
    x = torch.zeros(1, length, 1, dtype=tdt)
    if conv == "x":
        return t.fn, (x,), dict(t.args), [], conv
    args: tuple = (x, torch.arange(length)[None])
    if layer_type is not None:
        args += (layer_type,)
    return t.fn, args, dict(t.args), [1], conv


def _check_args(t: Target) -> None:
    """ValueError naming an ``args`` name that the traced callable does not take (nor its constructor)."""
    import inspect

    fn = getattr(t.fn, "forward", t.fn)
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return
    for k in t.args:
        if k not in params:
            shown = f"{getattr(fn, '__qualname__', describe(fn))}({', '.join(params)})"
            raise ValueError(f"--arg {k}: {shown} takes no argument {k!r}" + (
                " (nor does its class's constructor)" if hasattr(fn, "__self__") else ""))


def _torch_format(value: Any, name: str) -> Format:
    """The format ``value`` names, which must have a torch dtype; errors name ``name``."""
    try:
        fmt = get_format(value)
    except ValueError as e:
        if str(e).startswith(f"unknown {name} "):
            raise
        raise type(e)(f"{name} {describe(value)}: {e}") from None
    if fmt.torch_dtype is None:
        raise ValueError(f"{name} {fmt.name}: torch has no dtype for it; the traced code runs in a torch dtype")
    return fmt


def _check_positions(positions: Any, inputs: Any) -> tuple[str, ...] | None:
    """``positions``: None, one name or an iterable of names, only with ``inputs``."""
    if positions is None:
        return None
    if isinstance(positions, str):
        names: list[Any] = [positions]
    elif isinstance(positions, (bytes, dict)) or not isinstance(positions, Iterable):
        raise ArgumentTypeError(f"positions {describe(positions)} must be names of inputs' keys (a string or an "
                                "iterable of strings)")
    else:
        names = list(positions)
    for i, n in enumerate(names):
        if not isinstance(n, str):
            raise ArgumentTypeError(f"positions[{i}] {describe(n)} must be a string (a key of inputs)")
    if inputs is None:
        raise ValueError(f"positions {describe(positions)} name keys of inputs, and no inputs= is given (without "
                         "it the position input is position_ids, or positions made inside)")
    return tuple(names)


def _check_layer_type(t: Target, layer_type: Any, inputs: Any) -> None:
    """A layer type the target's forward takes: a string, one of ``t.layer_types`` when those are known."""
    if layer_type is None:
        return
    if not isinstance(layer_type, str):
        raise ArgumentTypeError(f"layer_type {describe(layer_type)} must be a string or None")
    if inputs is not None:
        raise ValueError(f"layer_type {layer_type!r} is for the rotary protocol forward(x, position_ids, "
                         "layer_type); with inputs= put it in inputs")
    if t.layer_types != (None,):
        if layer_type not in t.layer_types:
            raise ValueError(f"unknown layer_type {layer_type!r}; valid: {', '.join(map(str, t.layer_types))}")
    elif calling_convention(t.fn) != "rotary" or not takes_layer_type(t.fn):
        raise ValueError(f"layer_type {layer_type!r} given for {t.label}: the module's forward takes no layer_type "
                         "(it is not forward(x, position_ids, layer_type))")


def _schedule(t: Target, layer_type: str | None, schedule: Any) -> Any:
    """The reference schedule of the RoPE audit; errors name ``schedule`` (or the target's config)."""
    from ..hf import named_schedule, reference_schedule

    if schedule is None:
        return reference_schedule(t.fn, t.config, layer_type, name="the target's config")
    return named_schedule(t.fn, schedule, layer_type)


def _run(fn: Any, args: tuple, kwargs: dict, seeds: list[Any], names: dict[str, Any], label: str,
         fix: int | None = None, keep: Kept | None = None, rounded: bool = False) -> Traced:
    try:
        return run_traced(fn, args, kwargs, seeds=seeds, names=names, fix=fix, keep=keep, rounded=rounded)
    except ValueError as e:
        if "position input" in str(e):
            raise
        raise ValueError(f"{label} raised ValueError: {e}") from None
    except Exception as e:
        raise ValueError(f"{label} raised {type(e).__name__}: {' '.join(str(e).split())[:300]}") from None


def _output_errors(run: Traced, shadows: list[Any], before: list[float] | None = None) -> list[float]:
    """max |real - shadow| of each returned tensor that has a shadow: for the main run as its ops measured it
    where they did; for a rerun (``before``: the main run's errors), the main run's error where the rerun
    returned the same values (no changed value reached that output)."""
    out = []
    for i, (o, s) in enumerate(zip(run.outputs, shadows)):
        if s is None:
            continue
        if before is not None and not run.changed[i]:
            out.append(before[len(out)])
        elif before is None and run.errors and run.errors[i] is not None:
            out.append(run.errors[i])
        else:
            out.append(error_between(o, s))
    return out


def _changed(run: Traced, before: list[float], judged: list[dict[str, Any] | None]) -> list[dict[str, Any]]:
    """Each returned tensor with a shadow: its error, the values that differ from its shadow rounded once to
    its dtype (nan equal to nan) and its judgement (:func:`~.judge.judge`: kind, verdict, why, half-ulps)."""
    import torch

    out, k = [], 0
    for i, (o, s) in enumerate(zip(run.outputs, run.shadows)):
        if s is None:
            continue
        err, k = before[k], k + 1
        changed = None
        if isinstance(s, torch.Tensor) and s.shape == o.shape and not o.is_complex() and o.dtype != torch.bool:
            changed = count_changed(o, s)
        j = judged[i] or {}
        out.append({"index": i, "dtype": str(o.dtype).removeprefix("torch."), "shape": tuple(o.shape),
                    "error": err if math.isfinite(err) else math.inf, "changed": changed, "values": o.numel(),
                    "kind": j.get("kind"), "verdict": j.get("verdict"), "why": j.get("why"),
                    "half_ulps": j.get("half_ulps")})
    return out


def _output_line(o: dict[str, Any]) -> str:
    """A returned tensor's line: its kind and verdict, and how far it is from its shadow rounded to its dtype."""
    judged = f"; {o['kind']}: {o['verdict']}" + (f", {o['why']}" if o["why"] else "") if o.get("verdict") else ""
    ulps = f", {o['half_ulps']:.3g} half-ulps" if o.get("half_ulps") is not None else ""
    return (f"output {o['index']} ({o['dtype']}, {'x'.join(map(str, o['shape'])) or 'scalar'}{judged}): "
            f"{o['changed']} of {o['values']} values differ from its float64 shadow rounded to {o['dtype']} "
            f"(max error {o['error']:.3g}{ulps})")


def _share(before: list[float], after: list[float]) -> float:
    """The largest share of one output's error that went away (0 when none did)."""
    shares = [(b - a) / b for b, a in zip(before, after) if b > 0 and math.isfinite(b)]
    shares += [1.0 for b, a in zip(before, after) if not math.isfinite(b) and math.isfinite(a)]
    return max(0.0, *shares)


def _explain(first: Traced, before: list[float], final: float, significant: bool, rerun: Any,
             keep: Kept) -> tuple[dict[int, float], dict[int, float]]:
    """Each rounding op's share of the final error: rerun with its exact result rounded once to its own dtype
    (``rounded``; 0 without a rerun where the op already returned that everywhere), and, where an output's
    verdict is degraded or broken, rerun in float64 (``wide``: what computing it wider removes).  ``final`` 0:
    nothing to explain (no error, or no output where an op could be named): no rerun."""
    rounded: dict[int, float] = {}
    wide: dict[int, float] = {}
    if not final > 0:
        keep.drop()
        return rounded, wide
    for rec in first.records:
        if rec.added <= 0:
            continue
        if rec.not_rounded is None:
            rec.not_rounded = keep.not_rounded(rec.index, rec.op)
        for how, store in ((True, rounded), (False, wide)):
            if how and rec.not_rounded == 0:
                store[rec.index] = 0.0  # it returned its correctly rounded result everywhere: nothing to gain
                continue
            if not how and not significant:
                continue
            again = rerun(fix=rec.index, keep=keep, rounded=how)
            if keep.misaligned:  # its ops did not line up with the first run's: compute every op from now on
                keep.drop()
                again = rerun(fix=rec.index, rounded=how)
            store[rec.index] = _share(before, _output_errors(again, first.shadows, before))
    keep.drop()
    return rounded, wide


def _rope(t: Target, length: int, dtype: str, layer_type: str | None, sched: Any) -> dict[str, Any]:
    from ..hf import audit_rope_module, damage_threshold

    (row,) = audit_rope_module(t.fn, sched, length, dtype=dtype, layer_type=layer_type)
    thr, _ = damage_threshold(sched, dtype, length)
    err = row.max_rotation_error
    return dict(rope=(row.to_dict(),), verdict=row.verdict, damaged=not err <= thr, threshold=thr)


def trace(target: Any, length: int = 8192, *, dtype: Any = "bfloat16", cast: Any = None,
          layer_type: str | None = None, schedule: Any = None, inputs: dict[str, Any] | None = None,
          positions: tuple[str, ...] | list[str] | None = None, rope: bool | None = None,
          call: str | None = None, args: dict[str, Any] | None = None) -> TraceResult:
    """Trace ``target`` on positions ``0..length-1``: which op loses what, which operand was downcast, the fix.

    ``target``: a module or callable, a ``config.json`` path (transformers' rotary module for its model type,
    built as ``hf-scan`` builds it) or ``"package.module:factory"`` (called with no argument, returning a
    module); ``cast``: apply ``.to(cast)`` first, as ``model.to(dtype)`` does.  It is called as
    ``target(x, position_ids[, layer_type])`` when its forward takes ``position_ids`` second (``x``: zeros of
    shape (1, length, 1) in ``dtype``), as ``target(x)`` when it takes one argument (positions made inside:
    an ``arange`` is a position input too), or as ``target(**inputs)`` with ``positions`` naming the
    position inputs (default: those of ``position_ids, positions, cache_position, attention_mask, mask``;
    ``length`` is then theirs: the result's ``length`` is their last dimension).
    ``rope`` (default: when called with the rotary protocol and a schedule is known: ``schedule``, else the
    config it was built from, else ``target.config``) adds the RoPE audit of its cos/sin and hf-scan's damage
    test.  A target that is not callable, takes no position input, never uses one, or raises: ValueError.

    The user's own code: ``"FILE.py:NAME"`` or ``"package.module:NAME"`` (the current folder importable) where
    NAME is a factory, a class (built with its defaults; a required dim, base or length argument gets 64, 10000
    or ``length``; ``args`` gives any by name) or a function (traced itself: called with ``inputs`` and its other
    arguments inferred the same way, e.g. ``build_rope_cache(seq_len, n_elem)``); ``call``: trace that method
    instead of ``forward``.  An ``inputs`` value may be ``"SHAPE[:DTYPE]"`` (``"1x8192x8x64:bfloat16"``; a string
    that does not start with a digit is passed as it is, a ``layer_type`` say): an
    integer dtype or a position name is filled with positions ``0..n-1`` along its last dimension (a position
    input), anything else with ones; without DTYPE, int64 for a position name, else ``dtype``.  The position
    inputs by default: the inputs with a position name and the integer ones.
    """
    import torch

    length = check_int(length, "length", minimum=1, maximum=MAX_TRACE_LENGTH)
    fmt = _torch_format(dtype, "dtype")
    cast_name = None if cast is None else _torch_format(cast, "cast").name
    want = None if rope is None else check_flag(rope, "rope")
    if inputs is not None and not isinstance(inputs, dict):
        raise ArgumentTypeError(f"inputs {describe(inputs)} must be a dict of keyword arguments, not "
                                f"{type(inputs).__name__}")
    names_in = _check_positions(positions, inputs)
    if call is not None and not isinstance(call, str):
        raise ArgumentTypeError(f"call {describe(call)} must be a method name (a string) or None")
    if args is not None and not isinstance(args, dict):
        raise ArgumentTypeError(f"args {describe(args)} must be a dict of arguments by name, not "
                                f"{type(args).__name__}")
    t = load_target(target, cast_name, call=call, length=length, args=args)
    _check_layer_type(t, layer_type, inputs)
    if layer_type is None and t.layer_types != (None,):
        layer_type = t.layer_types[0]
    if inputs is not None:
        inputs = _make_inputs(inputs, fmt)
    fn, args_, kwargs, seeds, conv = _call(t, length, fmt.torch_dtype, layer_type, inputs, names_in)
    want_rope = want if want is not None else (
        conv == "rotary" and (schedule is not None or t.config is not None or hasattr(fn, "config")))
    sched = None
    if want_rope:
        if conv != "rotary":
            raise ValueError(f"rope=True needs the rotary protocol forward(x, position_ids); {t.label} is not")
        sched = _schedule(t, layer_type, schedule)
    owner = getattr(fn, "__self__", fn)  # --call: the method's module names its buffers
    names = dict(owner.named_buffers()) if hasattr(owner, "named_buffers") else {}
    if hasattr(owner, "named_parameters"):
        names.update(dict(owner.named_parameters()))
    if inputs is not None:  # an input that meets the positions is named after its argument
        names.update({k: v for k, v in kwargs.items() if k not in seeds and isinstance(v, torch.Tensor)})
    keep = Kept()
    first = _run(fn, args_, kwargs, seeds, names, t.label, keep=keep)
    if not first.records:
        raise ValueError(f"{t.label}: no op used a position input or made positions (arange): nothing to trace")
    if inputs is not None or conv == "inferred":  # the length the code ran: its position inputs' last dimension,
        # else the longest position factory's (positions made inside)
        made = [r.shape[-1] for r in first.records if r.factory and r.shape]
        length = max((int(kwargs[s].shape[-1]) for s in seeds if getattr(kwargs[s], "ndim", 0)),
                     default=max(made, default=length))
    before = _output_errors(first, first.shadows)
    final = max(before, default=0.0)
    judged = judge_outputs(first.outputs, first.shadows, length)
    extra: dict[str, Any] = _rope(t, length, fmt.name, layer_type, sched) if want_rope else {}
    verdicts = [j["verdict"] for j in judged if j is not None]  # the outputs against their shadows: what an op
    # of this code can be blamed for (the RoPE audit compares with the schedule: a downcast operand, a formula)
    significant = any(v != "safe" for v in verdicts)
    beyond = any(j is not None and j["half_ulps"] is not None and j["half_ulps"] > BEYOND_ROUNDING for j in judged)
    rounded, wide = _explain(first, before, final if significant or beyond else 0.0, significant,
                             lambda **kw: _run(fn, args_, kwargs, seeds, names, t.label, **kw), keep)
    ops = mark_culprits(op_rows(first.records, first.producers, rounded, wide), significant, beyond)
    operands = operand_rows(first.operands)
    outs = _changed(first, before, judged)
    lines = summary_lines(ops, operands, final, length, _CAST_FIX, worst(verdicts) if verdicts else None)
    lines += [_output_line(o) for o in outs if o["changed"] is not None]
    if want_rope:
        row = extra["rope"][0]
        lines.append(f"RoPE audit: {extra['verdict']}, max rotation error {row['max_rotation_error']:.3g} rad "
                     f"({row['schedule']}); {'damaged' if extra['damaged'] else 'not damaged'} by hf-scan's test "
                     f"(limit {extra['threshold']:.3g} rad)")
    if verdicts or extra:
        extra["output_verdict"] = worst(verdicts + ([extra["verdict"]] if extra else []))
    shown = tuple({"name": k, "shape": tuple(v.shape), "dtype": str(v.dtype).removeprefix("torch."),
                   "position": k in seeds} for k, v in kwargs.items() if isinstance(v, torch.Tensor)) \
        if conv == "inputs" else ()
    label = t.label + (f"({', '.join(f'{k}={v!r}' for k, v in kwargs.items())})" if conv == "inferred" else "")
    return TraceResult(label, length, fmt.name, tuple(lines), final if math.isfinite(final) else math.inf,
                       tuple(ops), tuple(operands), layer_type, **extra, outputs=tuple(outs), inputs=shown,
                       convention=conv)
