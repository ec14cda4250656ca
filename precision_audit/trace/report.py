"""The trace's result rows and its words: which op loses what, which operand was downcast, and the fix.

:func:`op_rows` turns the tracer's records into :class:`TraceOp` rows (with each op's share of the final error,
measured by rerunning the code with that op in float64); :func:`operand_rows` checks each floating operand
against the narrower formats; :func:`summary_lines` writes the first lines a reader sees.

>>> operand_exact_in(np.array([1.0, 0.5625, 0.00390625]), "float32")
('bfloat16', 'float16')
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

import numpy as np

from ..formats import get_format, round_to
from ..rows import Row
from .shadow import OperandRecord, OpRecord

__all__ = ["CULPRIT_SHARE", "GEMM_OPS", "NARROW", "TF32_FIX", "TF32_NOTE", "TraceOp", "TraceOperand", "culprits",
           "mark_culprits", "op_fix", "op_rows", "operand_exact_in", "operand_rows", "summary_lines", "tf32_gemms"]

NARROW = ("bfloat16", "float16")
"""The formats an operand is checked against: every value exact in one of them while stored wider = downcast."""

CULPRIT_SHARE = 0.1
"""An op is named where the loss enters when its rerun removes at least this share of the final error (and at
least half the top op's share): rerun correctly rounded in its own dtype, or, where an output's verdict is
degraded or broken, rerun in float64 (:func:`mark_culprits`)."""

_ROLES = ("position factory", "output cast", "op")

GEMM_OPS = ("mm", "bmm", "addmm", "baddbmm", "addbmm")
"""The aten ops a float32 matmul reaches as a GEMM (``@`` / ``matmul``, a contracting ``einsum``, ``linear``): the
ops cuBLAS or a Triton template may run on tensor cores in TF32.  (An outer product by ``einsum`` or ``outer``
dispatches as ``aten.mul``: no GEMM, no TF32.)"""

TF32_NOTE = ("runs as TF32 under set_float32_matmul_precision('high') on tensor-core GPUs: positions exact only to "
             "2048")
TF32_FIX = ("a broadcast multiply for an outer product (transformers#48450), or set_float32_matmul_precision('highest') "
            "around it")
"""The fix said beside :data:`TF32_NOTE` (by ``trace`` and ``scan``)."""

_Op = TypeVar("_Op", "TraceOp", OpRecord)


def tf32_gemms(ops: Sequence[_Op]) -> list[_Op]:
    """The float32 GEMMs among the ops on position-derived tensors (:data:`GEMM_OPS`): trace's rows, or the
    tracer's records (:class:`~precision_audit.trace.shadow.OpRecord`, as ``scan`` has them).

    >>> op = TraceOp(3, "aten.bmm.default", "rope.py:12", ("float32", "float32"), "float32", (1, 64, 8), 0.0,
    ...              0.0, None, None, "op")
    >>> [o.index for o in tf32_gemms([op])]
    [3]
    """
    return [o for o in ops if o.op.split(".")[1:2] and o.op.split(".")[1] in GEMM_OPS
            and o.out_dtype == "float32" and "float32" in o.in_dtypes]


@dataclass(frozen=True)
class TraceOp(Row):
    """One op on a position-derived tensor.

    ``error``: max |real - float64 shadow| of its output (what it carries); ``added``: max |real - the same
    op in float64 on its real inputs| (what it adds itself); ``first_inexact``: for positions (integer-valued
    shadows), the position (or distance) nearest zero whose real value is not exact; ``explained``: the largest
    share of a returned tensor's error that goes away when this op's exact result (on its real inputs) is rounded
    once to its own output dtype, every other op unchanged: what a correctly rounded op in the same dtype would
    give (0 without a rerun where it already returns that everywhere; None: it adds nothing);
    ``explained_float64``: the share that goes away when it alone runs in float64, later ops in float64 where
    type promotion carries it (measured only where an output's verdict is degraded or broken: what computing it
    wider would fix); ``not_rounded``: how many of its values differ from its correctly rounded result;
    ``culprit``: named where the loss enters (:func:`mark_culprits`); ``role``: position
    factory (arange, linspace), output cast (a cast that makes a returned tensor and loses no position: the
    expected final rounding), or op.  ``where``: the source line that ran it; ``module``: the path of the module
    whose forward ran it, as the traced module's ``named_modules`` names it ("": the traced module itself or a
    function; a module from outside it: its class name); ``added_half_ulps``: ``added`` in half-ulps of the
    output's format at the exact value where it is largest (1: one correct rounding's worst; None: an integer
    output or not measured).
    """

    index: int
    op: str
    where: str
    in_dtypes: tuple[str, ...]
    out_dtype: str
    shape: tuple[int, ...]
    error: float
    added: float
    first_inexact: int | None
    explained: float | None
    role: str
    operands: tuple[str, ...] = ()
    module: str = ""
    added_half_ulps: float | None = None
    explained_float64: float | None = None
    not_rounded: int | None = None
    culprit: bool = False

    def __post_init__(self) -> None:
        if self.role not in _ROLES:
            raise ValueError(f"role {self.role!r} must be one of {', '.join(_ROLES)}")


@dataclass(frozen=True)
class TraceOperand(Row):
    """A floating operand that met a position-derived tensor (a buffer, a constant, a Python scalar).

    ``exact_in``: the narrower formats (bfloat16, float16) in which every stored value is exact;
    ``downcast``: stored in float32 or float64 with every value exact in one of them and some value not an
    integer (a float32 buffer that went through ``.to(bfloat16)``, e.g. ``inv_freq`` after ``model.to``);
    ``origin_dtype``: the narrower dtype it was copied from inside the call (``inv_freq.float()`` of a bf16
    buffer); ``first_op``: the index of the first op it met.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    exact_in: tuple[str, ...]
    downcast: bool
    origin_dtype: str | None
    first_op: int
    note: str


def operand_exact_in(values: np.ndarray, dtype: str) -> tuple[str, ...]:
    """The formats of :data:`NARROW` narrower than ``dtype`` that hold every finite value exactly."""
    v = np.asarray(values, dtype=np.float64).reshape(-1)
    v = v[np.isfinite(v)]
    wide = get_format_bits(dtype) if dtype != "python float" else 53
    out = []
    for f in NARROW:
        if get_format(f).significand_bits < wide and v.size and np.array_equal(round_to(v, f), v):
            out.append(f)
    return tuple(out)


def _simple(values: np.ndarray) -> bool:
    """Every value a multiple of a power of two by an integer below 16 (0.5, 0.375, 3.0): a constant written
    that way is exact in every format, so its exactness in bf16 says nothing of a downcast.

    >>> _simple(np.array([0.5, 0.375, -12.0])), _simple(np.array([0.5, 0.3984375]))
    (True, False)
    """
    m, _ = np.frexp(values)
    return bool(np.all(m * 16 == np.round(m * 16)))


def operand_rows(operands: dict[str, OperandRecord]) -> list[TraceOperand]:
    """One row per operand, downcast ones first."""
    rows = []
    for o in operands.values():
        exact = operand_exact_in(o.values, o.dtype)
        finite = o.values[np.isfinite(o.values)]
        fractional = bool(finite.size) and not np.array_equal(finite, np.round(finite))
        stored_wide = o.dtype in ("float32", "float64")
        downcast = stored_wide and bool(exact) and fractional and not _simple(finite)
        if downcast and o.origin_dtype:
            note = f"a {o.dtype} copy of a {o.origin_dtype} tensor: its values were rounded to {o.origin_dtype}"
        elif downcast:
            note = f"every value exact in {exact[0]} while stored in {o.dtype}: downcast before this call"
        elif o.dtype in ("bfloat16", "float16"):
            note = f"stored in {o.dtype}"
        else:
            note = ""
        rows.append(TraceOperand(o.name, o.dtype, o.shape, exact, downcast, o.origin_dtype, o.first_op, note))
    return sorted(rows, key=lambda r: (not r.downcast, r.first_op, r.name))


def _role(rec: OpRecord, producers: Sequence[int | None]) -> str:
    if rec.factory:
        return "position factory"
    if rec.index in producers and rec.op.startswith("aten._to_copy") and rec.in_dtypes \
            and rec.in_dtypes[0] != rec.out_dtype and rec.first_inexact is None:  # positions lost: not expected
        return "output cast"
    return "op"


def op_rows(records: Sequence[OpRecord], producers: Sequence[int | None], explained: dict[int, float],
            explained_float64: dict[int, float] | None = None) -> list[TraceOp]:
    """The tracer's records as rows, with each rerun op's shares of the final error (correctly rounded in its
    own dtype; in float64)."""
    wide = explained_float64 or {}
    return [TraceOp(r.index, r.op, r.where, r.in_dtypes, r.out_dtype, r.shape, r.error, r.added, r.first_inexact,
                    explained.get(r.index), _role(r, producers), tuple(r.operands), r.module, r.added_half_ulps,
                    wide.get(r.index), r.not_rounded)
            for r in records]


def _score(op: TraceOp, significant: bool, beyond: bool) -> float:
    """The share an op is ranked by: its correctly rounded rerun's where an output is degraded, broken or well
    beyond its format's rounding; its float64 rerun's too where an output is degraded or broken."""
    shares = [op.explained or 0.0] if significant or beyond else []
    if significant:
        shares.append(op.explained_float64 or 0.0)
    return max(shares, default=0.0)


def mark_culprits(ops: Sequence[TraceOp], significant: bool, beyond: bool) -> list[TraceOp]:
    """``ops`` with ``culprit`` set on the ops where the loss enters.  An op is named only where it matters:
    some output's verdict is degraded or broken (``significant``: then an op whose float64 rerun removes a share
    counts, as computing it wider is the fix), or some output's error is well beyond its format's own rounding
    of the exact result (``beyond``: more than :data:`~.judge.BEYOND_ROUNDING` half-ulps; then only an op that
    does worse than a correctly rounded op in its own dtype counts).  Named: a share of at least
    :data:`CULPRIT_SHARE` and at least half the top op's, output casts aside.

    >>> op = TraceOp(0, "aten.pow.Scalar", "f.py:3", ("float32",), "float32", (32,), 2e-4, 2e-4, None, 0.02, "op")
    >>> [o.culprit for o in mark_culprits([op], significant=False, beyond=True)]  # as correctly rounded: no
    [False]
    """
    ranked = [(o, _score(o, significant, beyond)) for o in ops if o.role != "output cast"]
    top = max((s for _, s in ranked), default=0.0)
    named = {o.index for o, s in ranked if s > 0 and s >= max(CULPRIT_SHARE, top / 2)}
    return [replace(o, culprit=o.index in named) for o in ops]


def culprits(ops: Sequence[TraceOp]) -> list[TraceOp]:
    """The ops where the loss enters (:func:`mark_culprits`), largest share first."""
    return sorted((o for o in ops if o.culprit),
                  key=lambda o: -max(o.explained or 0.0, o.explained_float64 or 0.0))


def op_fix(op: TraceOp) -> str:
    """The fix for an op that loses precision, by what it is."""
    narrow = op.out_dtype in ("bfloat16", "float16") or get_format_bits(op.out_dtype) < 24
    if op.role == "position factory":
        return f"build positions in int64 or float32 ({op.op.split('.')[1]} without dtype={op.out_dtype}); " \
               "cast only the final output (cos/sin, bias, bucket)"
    if op.role == "output cast":
        return f"expected: the final rounding to {op.out_dtype}"
    if op.op.startswith("aten._to_copy") and narrow:
        return f"do not cast to {op.out_dtype} here: keep float32 until the final output (cos/sin, bias, bucket)"
    if narrow:
        return f"run {op.op} in float32 (upcast its inputs with .float()); cast only the final output"
    return f"{op.op} in {op.out_dtype} loses this much at this length: compute it in float64 (or split the product)"


def get_format_bits(dtype: str) -> int:
    """Significand bits of a format name (integers and unknown names count as exact: 64)."""
    try:
        return get_format(dtype).significand_bits
    except ValueError:
        return 64


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _at(op: TraceOp) -> str:
    return op.where + (f" in {op.module}" if op.module else "")


def summary_lines(ops: Sequence[TraceOp], operands: Sequence[TraceOperand], final_error: float, length: int,
                  cast_fix: str, verdict: str | None = None) -> list[str]:
    """The first lines of a trace: downcast operands, the op(s) where the loss enters, and the fixes;
    ``verdict``: the outputs' worst, said where no op is named and the final rounding alone makes it."""
    lines = []
    for o in operands:
        if o.downcast:
            lines.append(f"operand {o.name} ({o.dtype}, {'x'.join(map(str, o.shape)) or 'scalar'}): {o.note}; "
                         f"fix: {cast_fix}")
    found = culprits(ops)
    for op in found:
        lost = f"first inexact position {op.first_inexact}, " if op.first_inexact is not None else ""
        h = op.added_half_ulps
        ulps = f" ({h:.3g} half-ulp{'' if h == 1 else 's'} of {op.out_dtype})" if h is not None else ""
        share = (f"in float64 removes {_pct(op.explained_float64)}" if (op.explained_float64 or 0.0) >
                 (op.explained or 0.0) else f"explains {_pct(op.explained)} (rounded once to {op.out_dtype})")
        lines.append(f"op {op.index} {op.op} -> {op.out_dtype} at {_at(op)}: {lost}adds {op.added:.3g}{ulps}, "
                     f"{share} of the final error {final_error:.3g} at length {length}; fix: {op_fix(op)}")
    for op in ops:  # positions lost in an op that is not named above still deserve a line, unless every output
        # is safe (its positions stay apart: inexact, not lost)
        if op.first_inexact is not None and op not in found and op.added > 0 and verdict != "safe":
            lines.append(f"op {op.index} {op.op} -> {op.out_dtype} at {_at(op)}: first inexact position "
                         f"{op.first_inexact}; fix: {op_fix(op)}")
    for op in tf32_gemms(ops):  # nothing differs on a CPU: the flag says what a tensor-core GPU may do
        lines.append(f"op {op.index} {op.op} (float32) at {_at(op)}: {TF32_NOTE} (a GPU property: on this CPU it "
                     f"computes in float32); fix: {TF32_FIX}")
    if not found:
        casts = [o for o in ops if o.role == "output cast" and o.added > 0]
        tail = f" (the final rounding to {casts[0].out_dtype})" if casts else ""
        worse = f"; the output is {verdict} by that rounding itself: keep it wider" \
            if casts and verdict in ("degraded", "broken") else ""
        lines.append(f"no op before the output loses a significant share of the final error {final_error:.3g}"
                     f"{tail}{worse}")
    return lines
