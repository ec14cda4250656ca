"""The tracer: a torch dispatch mode that follows position-derived tensors and shadows each in float64.

:func:`run_traced` calls a function under :class:`_TraceMode`.  A tensor is *derived* when it is a position
input (``seeds``), the output of a factory that makes positions (``arange``, ``linspace``) or the output of an
op with a derived input.  Every op with a derived input is recorded (:class:`OpRecord`) and rerun on float64
inputs: the derived tensors' shadows and the stored values of every other operand (buffers such as
``inv_freq``, constants, Python scalars), with any floating ``dtype=`` argument made float64.  Integer-valued
shadows stay integers, so indexing ops run on them as the real code does.

``fix=i`` reruns the function with traced op ``i`` alone computed in float64 on its real inputs; the ops after
it then run in float64 wherever a float64 value reaches them (as type promotion does, matmul included), and
explicit casts still cast: what the final error would be had that one op not lost precision.

>>> import torch
>>> def f(pos):
...     return pos.to(torch.bfloat16) * 1.0
>>> run = run_traced(f, (torch.arange(300),), seeds=[0])
>>> [(r.op, r.out_dtype, r.first_inexact) for r in run.records]
[('aten._to_copy.default', 'bfloat16', 257), ('aten.mul.Tensor', 'bfloat16', 257)]
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["OpRecord", "OperandRecord", "Traced", "error_between", "run_traced"]

_FACTORIES = ("aten.arange", "aten.linspace", "aten.range")
_HERE = os.path.dirname(os.path.abspath(__file__))
_SKIP_FILES = {os.path.join(_HERE, f) for f in ("shadow.py", "audit.py")}  # the tracer's frames are not "where"


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
    first_inexact: int | None = None  # integer-valued shadows: the first position whose real value differs
    factory: bool = False
    operands: list[str] = field(default_factory=list)


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


def _where() -> str:
    """file:line of the innermost frame outside torch and precision_audit (the user's code that ran the op)."""
    import torch

    skip = os.path.dirname(torch.__file__)
    f = sys._getframe(1)
    while f is not None:
        path = f.f_code.co_filename
        if not path.startswith(skip) and path not in _SKIP_FILES and "<frozen" not in path:
            return f"{os.path.basename(path)}:{f.f_lineno}"
        f = f.f_back
    return "?"


def error_between(real: Any, shadow: Any) -> float:
    """max |real - shadow| as float64 (inf where one is finite and the other not, 0 where both equal)."""
    import torch

    if not (isinstance(real, torch.Tensor) and isinstance(shadow, torch.Tensor)) or real.numel() == 0:
        return 0.0
    if real.dtype == torch.bool or real.is_complex():
        return float((real != shadow.to(real.dtype)).any())
    a, b = real.detach().double(), shadow.detach().double()
    if a.shape != b.shape:
        return math.inf
    d = (a - b).abs()
    same = (a == b) | (a.isnan() & b.isnan())
    d = torch.where(same, torch.zeros_like(d), d)
    d = torch.where(d.isnan(), torch.full_like(d, math.inf), d)
    return float(d.max())


def _first_inexact(real: Any, shadow: Any) -> int | None:
    """For an integer-valued shadow (positions): the shadow's value at the first element the real one misses."""
    import torch

    if real.numel() == 0 or real.dtype == torch.bool or real.is_complex() or real.shape != shadow.shape:
        return None
    s = shadow.detach().double().reshape(-1)
    if not bool((s == s.round()).all()):
        return None
    bad = (real.detach().double().reshape(-1) != s).nonzero()
    return None if bad.numel() == 0 else int(s[int(bad[0])])


@dataclass
class Traced:
    """One traced call: its output, the output's tensors flattened with their shadows, the ops and operands."""

    output: Any
    outputs: list[Any]
    shadows: list[Any]  # the shadow of each output tensor (None where an output was not derived)
    records: list[OpRecord]
    operands: dict[str, OperandRecord]
    producers: list[int | None]  # the index of the traced op that made each output tensor (None: not traced)


def _mode_class() -> type:
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten, tree_map
    from torch.utils.weak import WeakIdKeyDictionary

    def is_float(t: Any) -> bool:
        return isinstance(t, torch.Tensor) and t.is_floating_point()

    class TraceMode(TorchDispatchMode):  # type: ignore[misc]
        def __init__(self, seeds: Sequence[Any], names: dict[int, tuple[Any, str]], fix: int | None) -> None:
            super().__init__()
            self.shadow = WeakIdKeyDictionary()  # derived tensor -> its float64 (or integer) shadow
            self.names = WeakIdKeyDictionary()  # other tensor -> (name, origin dtype)
            for t, name in names.values():
                self.names[t] = (name, None)
            for t in seeds:
                self.shadow[t] = t.detach().double() if t.is_floating_point() else t.detach().clone()
            self.fix = fix
            self.records: list[OpRecord] = []
            self.operands: dict[str, OperandRecord] = {}
            self.producer = WeakIdKeyDictionary()  # derived tensor -> index of the op that made it
            self.n_const = 0

        def _operand(self, t: Any, index: int) -> str:
            name, origin = self.names.get(t, (None, None))
            if name is None:
                self.n_const += 1
                name = f"constant {self.n_const}"
                self.names[t] = (name, None)
            if name not in self.operands:
                self.operands[name] = OperandRecord(name, _dtype_name(t), tuple(t.shape),
                                                    t.detach().double().cpu().numpy().copy(), index, origin)
            return name

        def _scalar(self, x: float, index: int) -> str:
            name = f"scalar {x!r}"
            if name not in self.operands:
                self.operands[name] = OperandRecord(name, "python float", (), np.array([x]), index)
            return name

        def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
            kwargs = kwargs or {}
            flat, _ = tree_flatten((args, kwargs))
            tensors = [t for t in flat if isinstance(t, torch.Tensor)]
            name = str(func)
            factory = not tensors and name.startswith(_FACTORIES)
            if not factory and not any(t in self.shadow for t in tensors):
                out = func(*args, **kwargs)
                self._propagate_name(tensors, out)
                return out
            return self._traced(func, name, args, kwargs, tensors, factory)

        def _propagate_name(self, tensors: list[Any], out: Any) -> None:
            """A view or copy of one named tensor keeps its name (and the lowest-precision dtype it had)."""
            if len(tensors) != 1 or not isinstance(out, torch.Tensor) or tensors[0] not in self.names:
                return
            name, origin = self.names[tensors[0]]
            src = tensors[0].dtype
            if out.dtype != src and src.is_floating_point and out.is_floating_point():
                if origin is None or torch.finfo(src).bits < torch.finfo(getattr(torch, origin)).bits:
                    origin = _dtype_name(tensors[0])
            self.names[out] = (name, origin)

        def _traced(self, func: Any, name: str, args: tuple, kwargs: dict, tensors: list[Any], factory: bool) -> Any:
            index = len(self.records)

            def up(dtype: Any) -> Any:
                return torch.float64 if isinstance(dtype, torch.dtype) and dtype.is_floating_point else dtype

            kw64 = {k: up(v) if k == "dtype" else v for k, v in kwargs.items()}
            operands = []

            def shadow_of(x: Any) -> Any:
                if isinstance(x, float):
                    operands.append(self._scalar(x, index))
                if not isinstance(x, torch.Tensor):
                    return x
                if x in self.shadow:
                    return self.shadow[x]
                if x.is_floating_point():
                    operands.append(self._operand(x, index))
                    return x.detach().double()
                return x

            def upcast(x: Any) -> Any:
                return x.detach().double() if is_float(x) else x

            if self.fix == index:
                out = func(*tree_map(upcast, args), **kw64)
            elif self.fix is not None and any(is_float(t) and t.dtype == torch.float64 for t in tensors):
                out = func(*tree_map(upcast, args), **kwargs)  # promotion after the fixed op
            else:
                out = func(*args, **kwargs)
            shadow_out = func(*tree_map(shadow_of, args), **kw64)
            local = func(*tree_map(upcast, args), **kw64) if self.fix is None else None
            outs, _ = tree_flatten(out)
            shadows, _ = tree_flatten(shadow_out)
            locals_ = tree_flatten(local)[0] if local is not None else [None] * len(outs)
            rec = None
            for o, s, lo in zip(outs, shadows, locals_):
                if not isinstance(o, torch.Tensor) or not isinstance(s, torch.Tensor):
                    continue
                self.shadow[o] = s
                self.producer[o] = index
                if rec is None:
                    rec = OpRecord(index, name, tuple(_dtype_name(t) for t in tensors), _dtype_name(o),
                                   tuple(o.shape), _where(), factory=factory, operands=sorted(set(operands)))
                    if self.fix is None:
                        rec.error = error_between(o, s)
                        rec.added = error_between(o, lo)
                        rec.first_inexact = _first_inexact(o, s)
            if rec is None:  # a scalar result (e.g. .item()): still one traced op, so indices stay aligned
                rec = OpRecord(index, name, tuple(_dtype_name(t) for t in tensors), type(out).__name__, (), _where(),
                               factory=factory, operands=sorted(set(operands)))
            self.records.append(rec)
            return out

    return TraceMode


def run_traced(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any] | None = None, *,
               seeds: Sequence[int | str] = (), names: dict[str, Any] | None = None, fix: int | None = None
               ) -> Traced:
    """Call ``fn(*args, **kwargs)`` under the trace mode.

    ``seeds``: which arguments are position inputs (an index into ``args`` or a key of ``kwargs``);
    ``names``: tensors to name when they meet a derived tensor (``{"inv_freq": module.inv_freq}``);
    ``fix``: the index of the traced op to compute in float64 (see the module's docstring); with ``fix``
    the records carry no errors.
    """
    import torch
    from torch.utils._pytree import tree_flatten

    kwargs = dict(kwargs or {})
    seed_tensors = []
    for s in seeds:
        t = args[s] if isinstance(s, int) else kwargs[s]
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"position input {s!r} is {type(t).__name__}, not a tensor")
        seed_tensors.append(t)
    mode = _mode_class()(seed_tensors, {id(t): (t, n) for n, t in (names or {}).items()}, fix)
    with torch.no_grad(), mode:
        out = fn(*args, **kwargs)
    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return Traced(out, outs, [mode.shadow.get(t) for t in outs], mode.records, mode.operands,
                  [mode.producer.get(t) for t in outs])
