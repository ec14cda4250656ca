"""The tracer's records: what one traced call leaves behind (:class:`OpRecord`, :class:`OperandRecord`,
:class:`Traced`) and what a main run keeps for its reruns (:class:`Kept`); plain data, no torch at import.

>>> OpRecord(0, "aten.arange.default", (), "bfloat16", (300,), "f.py:3", factory=True).added
0.0
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Kept", "OpRecord", "OperandRecord", "Traced"]


@dataclass
class OpRecord:
    """One traced op: what ran, in which dtypes, and its shadow (float64) beside its real output."""

    index: int
    op: str
    in_dtypes: tuple[str, ...]
    out_dtype: str
    shape: tuple[int, ...]
    where: str
    error: float = 0.0  # max |real - shadow| over the output (the error carried so far)
    added: float = 0.0  # max |real - op(real inputs) in float64|: the rounding this op adds itself
    first_inexact: int | None = None  # integer-valued shadows: the value nearest 0 the real one misses
    factory: bool = False
    operands: list[str] = field(default_factory=list)
    module: str = ""  # the module whose forward ran the op: its path in the traced module ("" the root itself)
    added_half_ulps: float | None = None  # ``added`` in half-ulps of the output's format where it is largest
    not_rounded: int | None = None  # how many values differ from the op's float64 result on its real inputs
    # rounded once to its output dtype (0: correctly rounded everywhere; None: not measured, it adds nothing)


@dataclass
class OperandRecord:
    """A floating operand (not derived from positions) that met a derived tensor."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    values: np.ndarray  # float64 copy of the stored values
    first_op: int
    origin_dtype: str | None = None  # the dtype it was stored in before a copy (e.g. a bf16 buffer .float())


def _dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def _returns_view(func: Any) -> bool:
    """Whether an op returns a view of an input (a rerun makes it again; unknown: True)."""
    schema = getattr(func, "_schema", None)
    return schema is None or any(r.alias_info is not None for r in schema.returns)


def _mutates(func: Any) -> bool:
    """Whether an op writes into one of its arguments (in place, or ``out=``); unknown: True."""
    return bool(getattr(getattr(func, "_schema", None), "is_mutable", True))


class Kept:
    """The real outputs of a main run's traced ops, by index, for the reruns to reuse where the fixed op's value
    does not reach (:func:`run_traced` ``keep=``): up to ``budget`` bytes, and not when a traced op mutates a
    tensor in place (a kept output could then change under a later rerun); otherwise ``usable`` is False and
    the reruns compute every op."""

    def __init__(self, budget: int = 2 << 30) -> None:
        self.outputs: dict[int, Any] = {}
        self.names: dict[int, str] = {}
        self.locals: dict[int, tuple[str, Any]] = {}  # a rounding op's float64 output on its real inputs
        self.shadows: dict[int, tuple[str, Any]] = {}  # an op's shadow output (what float64 computes from exact inputs)
        self.errors: dict[int, float] = {}  # the error each op's output carried in the main run
        self.exact_inputs: set[int] = set()  # ops whose derived inputs all carried no error in the main run
        self.budget, self.size, self.usable, self.misaligned = budget, 0, True, False

    def add_shadow(self, index: int, shadow: Any, name: str, error: float, exact_inputs: bool) -> None:
        """Note op ``index``'s error and whether its derived inputs were exact, and keep its shadow output if the
        budget allows (without it a rerun computes it again): a rerun that reaches the op in float64 with inputs
        equal to their shadows computes exactly this."""
        import torch
        from torch.utils._pytree import tree_flatten

        if not self.usable:
            return
        self.errors[index] = error
        if exact_inputs:
            self.exact_inputs.add(index)
        if shadow is None:
            return
        kept = self.locals.get(index)  # a shadow that is the op's kept local costs nothing more
        mine = {id(t) for t in tree_flatten(kept[1])[0]} if kept is not None else set()
        size = sum(t.numel() * t.element_size() for t in tree_flatten(shadow)[0]
                   if isinstance(t, torch.Tensor) and id(t) not in mine)
        if self.size + size <= self.budget:
            self.size += size
            self.shadows[index] = (name, shadow)

    def shadow(self, index: int, name: str) -> Any:
        """The kept shadow output of op ``index`` (None: not kept, or not the same op there)."""
        kept = self.shadows.get(index) if self.usable else None
        return kept[1] if kept is not None and kept[0] == name else None

    def error_free(self, index: int | None) -> bool:
        """Whether the main run's op ``index`` output carried no error (None: a position input, exact)."""
        return index is None or self.errors.get(index, math.inf) == 0.0

    def add_local(self, index: int, local: Any, name: str) -> None:
        """Keep op ``index``'s float64 output on its real inputs: the rerun that fixes that op computes exactly
        this (its inputs are the main run's: nothing before it changed), so it takes it instead."""
        import torch
        from torch.utils._pytree import tree_flatten

        if not self.usable:
            return
        self.size += sum(t.numel() * t.element_size() for t in tree_flatten(local)[0] if isinstance(t, torch.Tensor))
        if self.size > self.budget:
            self.drop()
            return
        self.locals[index] = (name, local)

    def local(self, index: int, name: str) -> Any:
        """The kept float64 output of op ``index`` (None: not kept, or not the same op there)."""
        kept = self.locals.get(index) if self.usable else None
        return kept[1] if kept is not None and kept[0] == name else None

    def not_rounded(self, index: int, name: str) -> int | None:
        """How many values of op ``index``'s real output differ from its kept float64 result on the same inputs
        rounded once to its dtype (0: it rounds correctly everywhere); None when either is not kept."""
        import torch

        from .compare import count_changed

        local, out = self.local(index, name), self.outputs.get(index) if self.names.get(index) == name else None
        if not (isinstance(local, torch.Tensor) and isinstance(out, torch.Tensor) and out.is_floating_point()
                and local.shape == out.shape):
            return None
        return count_changed(out, local)

    def matches(self, index: int, name: str) -> bool:
        """Whether a rerun's op ``index`` may take the kept output: kept, and the same op as the main run's
        there (a rerun whose ops do not line up with the main run's sets ``misaligned`` and computes)."""
        if index not in self.outputs:
            return False
        if self.names[index] != name:
            self.misaligned = True
            return False
        return True

    def add(self, index: int, out: Any, func: Any, name: str = "") -> None:
        import torch
        from torch.utils._pytree import tree_flatten

        if not self.usable:
            return
        if _mutates(func):
            self.drop()
            return
        if _returns_view(func):
            return  # a view: made again in the rerun (free; a dispatch mode must return a fresh view)
        self.size += sum(t.numel() * t.element_size() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor))
        if self.size > self.budget:
            self.drop()
            return
        self.outputs[index] = out
        self.names[index] = name

    def drop(self) -> None:
        self.outputs.clear()
        self.locals.clear()
        self.shadows.clear()
        self.errors.clear()
        self.exact_inputs.clear()
        self.usable = False


@dataclass
class Traced:
    """One traced call: its output, the output's tensors flattened with their shadows, the ops and operands."""

    output: Any
    outputs: list[Any]
    shadows: list[Any]  # the shadow of each output tensor (None where an output was not derived)
    records: list[OpRecord]
    operands: dict[str, OperandRecord]
    producers: list[int | None]  # the index of the traced op that made each output tensor (None: not traced)
    errors: list[float | None] = field(default_factory=list)  # main run: the error each output carries, as its
    # op measured it (None: not measured); rerun: unused
    changed: list[bool] = field(default_factory=list)  # rerun: whether each output differs from the main run's
