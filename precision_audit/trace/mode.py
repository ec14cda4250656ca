"""The tracer's dispatch mode (:class:`TraceMode`): it follows every tensor derived from the position inputs, shadows
each in float64 and records every op on one; a rerun (``fix=i``) computes op ``i`` alone in float64, or
(``rounded``) correctly rounded to its own dtype.

torch is imported here at module level: :mod:`.shadow` imports this module when a trace runs, as it imports
torch, so ``import precision_audit.trace`` stays light.

>>> from precision_audit.trace.records import Kept
>>> pos = torch.arange(300)
>>> mode = TraceMode([pos], {}, None, Kept())
>>> with torch.no_grad(), mode:
...     y = pos.to(torch.bfloat16) * 0.5
>>> [(r.op, r.out_dtype, r.first_inexact) for r in mode.records]
[('aten._to_copy.default', 'bfloat16', 257), ('aten.mul.Tensor', 'bfloat16', None)]
"""

from __future__ import annotations

import os
import sys
import weakref
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten
from torch.utils.weak import WeakIdKeyDictionary

from .compare import _errors, _first_inexact, count_changed, error_between, half_ulps
from .records import Kept, OperandRecord, OpRecord, _dtype_name, _mutates, _returns_view

__all__ = ["TraceMode"]

_FACTORIES = ("aten.arange", "aten.linspace", "aten.range")
# ops that move or copy values without computing new ones: they add no rounding of their own (``added`` 0, not
# rerun in float64 for it)
_EXACT_OPS = frozenset(f"aten.{n}" for n in (
    "view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "expand", "permute", "transpose", "t", "slice",
    "select", "cat", "stack", "clone", "alias", "contiguous", "flatten", "unflatten", "repeat", "detach",
    "index_select", "narrow", "split", "split_with_sizes", "chunk", "unbind", "flip", "roll", "lift_fresh"))
# of those, the ops whose output holds every value of every input and no other value: the error they carry is the
# largest their derived inputs carry (computed, not measured again)
_SAME_VALUES = frozenset(f"aten.{n}" for n in (
    "view", "_unsafe_view", "reshape", "unsqueeze", "squeeze", "expand", "permute", "transpose", "t", "clone",
    "alias", "contiguous", "flatten", "unflatten", "repeat", "detach", "flip", "roll", "lift_fresh", "cat", "stack"))
_HERE = os.path.dirname(os.path.abspath(__file__))
_SKIP_FILES = {os.path.join(_HERE, f) for f in ("mode.py", "shadow.py", "audit.py")}  # the tracer's frames are not "where"


def _where() -> str:
    """file:line of the innermost frame outside torch and precision_audit (the user's code that ran the op)."""
    skip = os.path.dirname(torch.__file__) + os.sep  # torch's own files, not torchtune's or torchvision's
    f = sys._getframe(1)
    while f is not None:
        path = f.f_code.co_filename
        if not path.startswith(skip) and path not in _SKIP_FILES and "<frozen" not in path:
            return f"{os.path.basename(path)}:{f.f_lineno}"
        f = f.f_back
    return "?"


def _is_cast(name: str, args: tuple, kwargs: dict) -> bool:
    """A plain cast of a float tensor to a float dtype (``x.to(torch.bfloat16)``, ``x.float()``)."""
    return (name == "aten._to_copy.default" and len(args) == 1 and isinstance(args[0], torch.Tensor)
            and args[0].is_floating_point() and set(kwargs) == {"dtype"} and isinstance(kwargs["dtype"], torch.dtype)
            and kwargs["dtype"].is_floating_point)


def _is_identity(name: str, args: tuple, kwargs: dict) -> bool:
    """A float tensor multiplied or divided by exactly 1 (``cos * attention_scaling`` at its default 1.0): every
    value unchanged, in its dtype (x * 1 == x in IEEE arithmetic), so the op adds no rounding."""
    if kwargs or len(args) != 2 or name not in ("aten.mul.Tensor", "aten.mul.Scalar", "aten.div.Tensor",
                                                "aten.div.Scalar"):
        return False
    a, b = args
    if name.startswith("aten.mul") and not isinstance(a, torch.Tensor):
        a, b = b, a
    return (isinstance(a, torch.Tensor) and a.is_floating_point() and not isinstance(b, (bool, torch.Tensor))
            and isinstance(b, (int, float)) and b == 1)


def is_float(t: Any) -> bool:
    """A floating-point tensor."""
    return isinstance(t, torch.Tensor) and t.is_floating_point()

class TraceMode(TorchDispatchMode):  # type: ignore[misc]
    """A torch dispatch mode that shadows position-derived tensors in float64 (see the module docstring)."""

    def __init__(self, seeds: Sequence[Any], names: dict[int, tuple[Any, str]], fix: int | None,
                 keep: "Kept | None" = None, rounded: bool = False) -> None:
        super().__init__()
        self.rounded = rounded  # rerun: the fixed op's float64 result rounded once to its own output dtype
        self.keep = keep  # main run: the real outputs it keeps; rerun: those it may reuse
        self.changed = WeakIdKeyDictionary()  # rerun: tensors whose values differ from the main run's
        self.exact = WeakIdKeyDictionary()  # rerun: changed tensors equal to the main run's shadow there
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
        self.error = WeakIdKeyDictionary()  # derived tensor -> the error it carries (max |real - shadow|)
        self.written: dict[int, Any] = {}  # storage -> its derived base written in place (a weak reference)
        self.upcasts: dict[tuple[int, int], tuple[Any, Any]] = {}  # (id, version) -> (tensor ref, float64 copy)
        self.n_const = 0
        self.modules: list[str] = []  # the module paths whose forward is running, innermost last

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
        if not factory and not any(t in self.shadow for t in tensors) and not (
                self.written and self._adopt(tensors)):
            out = func(*args, **kwargs)
            self._propagate_name(tensors, out)
            return out
        return self._traced(func, name, args, kwargs, tensors, factory)

    def _base_written(self, t: Any) -> Any:
        """The derived base written in place whose storage ``t`` shares (None: none)."""
        ref = self.written.get(t.untyped_storage().data_ptr())
        base = ref() if ref is not None else None
        return base if base is not None and base in self.shadow and base.dtype == t.dtype else None

    def _alias_shadow(self, t: Any, base: Any) -> Any:
        """``t``'s shadow: its region of its base's shadow (laid out with the base's strides)."""
        sb = self.shadow[base]
        if not isinstance(sb, torch.Tensor):
            return sb  # a rerun's marker
        if sb.stride() != base.stride() or sb.shape != base.shape:
            laid = torch.empty_strided(base.size(), base.stride(), dtype=sb.dtype)
            laid.copy_(sb)
            sb = self.shadow[base] = laid
        return sb.as_strided(t.size(), t.stride(), sb.storage_offset() + t.storage_offset() - base.storage_offset())

    def _adopt(self, tensors: list[Any]) -> bool:
        """Views taken of a tensor before a write in place made it derived (``col = cache[:, 0]``, then
        ``cache[:, 0] = positions``): derived from then on, their shadow their region of the base's."""
        found = False
        for t in tensors:
            base = None if t in self.shadow else self._base_written(t)
            if base is None:
                continue
            self.shadow[t] = self._alias_shadow(t, base)
            self.producer[t] = self.producer.get(base)
            if self.fix is None:
                self.error[t] = error_between(t, self.shadow[t])
            elif base in self.changed:
                self.changed[t] = True
            found = True
        return found

    def _refresh(self, outs: list[Any]) -> None:
        """After a write in place: note the written bases, and give every derived view of them its region of
        the base's shadow again (and its error), since their values changed with the base's."""
        bases = []
        for o in outs:
            if isinstance(o, torch.Tensor):
                base = o._base if o._base is not None else o
                if base in self.shadow:
                    self.written[base.untyped_storage().data_ptr()] = weakref.ref(base)
                    bases.append(base)
        for base in bases:
            ptr = base.untyped_storage().data_ptr()
            for t in list(self.shadow.keys()):
                if t is base or t.dtype != base.dtype or t.untyped_storage().data_ptr() != ptr:
                    continue
                self.shadow[t] = self._alias_shadow(t, base)
                if self.fix is None:
                    self.error[t] = error_between(t, self.shadow[t])
                elif base in self.changed:
                    self.changed[t] = True

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

    def _write_through(self, outs: list[Any], shadows: list[Any]) -> None:
        """An op that wrote into a view (``cache[:, 0] = positions``): the view's base now holds derived
        values there, so the base is derived too; its shadow is its values with the view's region replaced
        by the view's shadow (laid out with the base's strides, so the region is the same ``as_strided``)."""
        for o, s in zip(outs, shadows):
            base = o._base if isinstance(o, torch.Tensor) else None
            if base is None or not isinstance(s, torch.Tensor):
                continue
            old = self.shadow.get(base)
            if not isinstance(old, torch.Tensor) or old.stride() != base.stride():
                old = torch.empty_strided(base.size(), base.stride(),
                                          dtype=s.dtype if base.is_floating_point() else base.dtype)
                old.copy_(base.detach())
            old.as_strided(o.size(), o.stride(), o.storage_offset() - base.storage_offset()).copy_(s)
            self.shadow[base] = old
            self.producer[base] = self.producer.get(o)
            self.error[base] = error_between(base, old)

    def _rerun(self, func: Any, name: str, args: tuple, kwargs: dict, kw64: dict, tensors: list[Any],
               index: int, factory: bool, upcast: Callable[[Any], Any]) -> Any:
        """One op of a rerun: the fixed op in float64 on its real inputs; an op a changed value reaches in
        float64 where a float64 input reaches it (type promotion; explicit casts still cast); any other op's
        output is the main run's (when it kept them: the same values) or computed again."""
        reached = any(t in self.changed for t in tensors)
        keep = self.keep
        kept = keep.local(index, name) if self.fix == index and keep is not None else None
        exact = False  # the output equals the main run's shadow of this op (float64, bit for bit)
        if kept is not None:
            out = kept  # the main run's float64 output of this op on the same inputs
            exact = index in keep.exact_inputs and not self.rounded  # its inputs were their shadows: so is it
        elif self.fix == index:
            out = func(*tree_map(upcast, args), **kw64)
        elif reached and any(is_float(t) and t.dtype == torch.float64 for t in tensors):
            # promotion after the fixed op; where every derived input equals its shadow (a float64 value
            # that is one, or an exact one not reached) and no dtype is asked, this op computes its shadow
            exact = keep is not None and kw64 == kwargs and all(
                t in self.exact or (t not in self.changed and keep.error_free(self.producer.get(t)))
                for t in tensors if t in self.shadow)
            shadow = keep.shadow(index, name) if exact else None
            out = shadow if shadow is not None else func(*tree_map(upcast, args), **kwargs)
        elif not reached and keep is not None and keep.matches(index, name):
            out = keep.outputs[index]
        else:
            out = func(*args, **kwargs)
        if self.fix == index and self.rounded:  # what a correctly rounded op in its own dtype returns
            real, spec = tree_flatten(func(*args, **kwargs))
            wide = tree_flatten(out)[0]
            out = tree_unflatten([w.to(r.dtype) if is_float(r) and isinstance(w, torch.Tensor) else r
                                  for w, r in zip(wide, real)], spec)
        for o in tree_flatten(out)[0]:  # the reruns need which tensors are derived, not their shadows
            if isinstance(o, torch.Tensor):
                for t in ((o, o._base) if _mutates(func) and o._base is not None else (o,)):
                    self.shadow[t] = True
                    self.producer[t] = index
                    if reached or self.fix == index:
                        self.changed[t] = True
                    if exact and t is o:
                        self.exact[t] = True
        if _mutates(func):
            self._refresh(tree_flatten(out)[0])
        self.records.append(OpRecord(index, name, (), "", (), "", factory=factory))
        return out

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

        memo = not _mutates(func)  # an op that writes into its input would write into a shared copy

        def upcast(x: Any) -> Any:
            if not is_float(x):
                return x
            if not memo:
                return x.detach().double()
            key = (id(x), x._version)  # the last two float64 copies: cos and sin share emb, cat(f, f)
            hit = self.upcasts.get(key)
            if hit is not None and hit[0]() is x:
                return hit[1]
            up = x.detach().double()
            self.upcasts[key] = (weakref.ref(x), up)
            while len(self.upcasts) > 2:
                self.upcasts.pop(next(iter(self.upcasts)))
            return up

        def owned(x: Any) -> Any:
            """A float64 copy of ``x`` no later op shares (the memo's, taken out of it, or a new one)."""
            hit = self.upcasts.pop((id(x), x._version), None)
            return hit[1] if hit is not None and hit[0]() is x else x.detach().double()

        if self.fix is not None:
            return self._rerun(func, name, args, kwargs, kw64, tensors, index, factory, upcast)
        base = name.rsplit(".", 1)[0]
        same = base in _SAME_VALUES or _is_identity(name, args, kwargs)  # the output holds its input's values
        # an op that writes into its input: its float64 copies are taken before the real op writes
        before = None if memo or base in _EXACT_OPS or same else tree_map(upcast, args)
        out = func(*args, **kwargs)
        if self.keep is not None and not factory:  # a factory is cheap to make again, and a kept factory
            self.keep.add(index, out, func, name)   # output makes torch add a detach to the trace
        shadow_args = tree_map(shadow_of, args)
        if base in _EXACT_OPS or same:
            local = None
        elif before is None and _is_cast(name, args, kwargs):
            local = owned(args[0])  # a float cast computed in float64 is its input's float64 copy
        else:
            local = func(*(before if before is not None else tree_map(upcast, args)), **kw64)
        exact_in = all(self.error.get(t, 0.0) == 0.0 for t in tensors if t in self.shadow)
        if local is not None and exact_in:
            shadow_out = local  # every derived input exact so far: its shadow IS its value in float64
        else:
            shadow_out = func(*shadow_args, **kw64)
        outs, _ = tree_flatten(out)
        module = self.modules[-1] if self.modules else ""  # the innermost module running
        carried = max((self.error.get(t, 0.0) for t in tensors if t in self.shadow), default=0.0) \
            if same and len(outs) == 1 else None
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
                               tuple(o.shape), _where(), factory=factory, operands=sorted(set(operands)),
                               module=module)
                rec.error, rec.added, at = _errors(o, s, lo, carried)
                rec.added_half_ulps = (0.0 if rec.added == 0 and o.is_floating_point() else None) if at is None \
                    else half_ulps(rec.added, at, _dtype_name(o))
                rec.first_inexact = _first_inexact(o, s) if rec.error > 0 else None
                if rec.added > 0 and _is_cast(name, args, kwargs):
                    rec.not_rounded = 0  # a float cast is one correct rounding of its input (others: measured
                    # when an op may be named, from the kept outputs: Kept.not_rounded)
                elif rec.added > 0 and factory and isinstance(lo, torch.Tensor) and lo.shape == o.shape:
                    rec.not_rounded = count_changed(o, lo)  # a factory is not kept: counted now (one row)
                if rec.added > 0 and self.keep is not None and local is not None and not _mutates(func):
                    self.keep.add_local(index, local, name)
            self.error[o] = rec.error
        if rec is not None and self.keep is not None and not factory:
            wanted = kw64 == kwargs and not _returns_view(func) and not _mutates(func)  # a rerun takes only these
            self.keep.add_shadow(index, shadow_out if wanted else None, name, rec.error, exact_in)
        if rec is not None and _mutates(func):
            self._write_through(outs, shadows)
            self._refresh(outs)
        if rec is None:  # a scalar result (e.g. .item()): still one traced op, so indices stay aligned
            rec = OpRecord(index, name, tuple(_dtype_name(t) for t in tensors), type(out).__name__, (), _where(),
                           factory=factory, operands=sorted(set(operands)), module=module)
        self.records.append(rec)
        return out
