"""The tracer: a torch dispatch mode that follows position-derived tensors and shadows each in float64.

:func:`run_traced` calls a function under :class:`~.mode.TraceMode` (its own module, imported when a trace
runs, as torch is).  A tensor is *derived* when it is a position input (``seeds``), the output of a factory that
makes positions (``arange``, ``linspace``) or the output of an op with a derived input.  Every op with a derived
input is recorded (:class:`OpRecord`) and rerun on float64 inputs: the derived tensors' shadows and the stored
values of every other operand (buffers such as ``inv_freq``, constants, Python scalars), with any floating
``dtype=`` argument made float64.  Integer-valued shadows stay integers, so indexing ops run on them as the real
code does.

``fix=i`` reruns the function with traced op ``i`` alone computed in float64 on its real inputs; the ops after
it then run in float64 wherever a float64 value reaches them (as type promotion does, matmul included), and
explicit casts still cast: what the final error would be had that one op not lost precision.  With
``rounded=True`` the op's float64 result is rounded once to its own output dtype and every later op runs in its
own dtype: what a correctly rounded op would give, so a first op does not own all later rounding.

>>> import torch
>>> def f(pos):
...     return pos.to(torch.bfloat16) * 1.0
>>> run = run_traced(f, (torch.arange(300),), seeds=[0])
>>> [(r.op, r.out_dtype, r.first_inexact) for r in run.records]
[('aten._to_copy.default', 'bfloat16', 257), ('aten.mul.Tensor', 'bfloat16', 257)]
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from .compare import error_between
from .records import Kept, OperandRecord, OpRecord, Traced

__all__ = ["Kept", "OpRecord", "OperandRecord", "Traced", "error_between", "run_traced"]


@contextlib.contextmanager
def _module_paths(fn: Any, stack: list[str] | None) -> Iterator[None]:
    """While the call runs, ``stack`` holds the path of each module whose forward is running (as ``fn``'s
    ``named_modules`` names it; a module outside ``fn``: its class name), innermost last (None: not kept)."""
    import torch

    if stack is None:
        yield
        return
    paths = {id(m): n for n, m in fn.named_modules()} if isinstance(fn, torch.nn.Module) else {}

    def enter(module: Any, args: Any) -> None:
        stack.append(paths.get(id(module), type(module).__name__))

    def leave(module: Any, args: Any, out: Any) -> None:
        if stack:
            stack.pop()

    hooks = [torch.nn.modules.module.register_module_forward_pre_hook(enter),
             torch.nn.modules.module.register_module_forward_hook(leave, always_call=True)]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


def run_traced(fn: Callable[..., Any], args: Sequence[Any], kwargs: dict[str, Any] | None = None, *,
               seeds: Sequence[int | str] = (), names: dict[str, Any] | None = None, fix: int | None = None,
               keep: Kept | None = None, rounded: bool = False) -> Traced:
    """Call ``fn(*args, **kwargs)`` under the trace mode.

    ``seeds``: which arguments are position inputs (an index into ``args`` or a key of ``kwargs``);
    ``names``: tensors to name when they meet a derived tensor (``{"inv_freq": module.inv_freq}``);
    ``fix``: the index of the traced op to compute in float64 (see the module's docstring); with ``fix``
    the records carry no errors.  ``keep`` (:class:`Kept`): the main run (no ``fix``) keeps its ops' real
    outputs there, and a rerun given the same object reuses them for the ops the fixed op does not reach
    (the same values, not computed again).  ``rounded``: the fixed op's float64 result is rounded once to its
    own output dtype and every other op runs as it did (no float64 reaches them): what a correctly rounded op
    in the same dtype would give.
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
    from .mode import TraceMode

    mode = TraceMode(seed_tensors, {id(t): (t, n) for n, t in (names or {}).items()}, fix, keep, rounded)
    with torch.no_grad(), _module_paths(getattr(fn, "__self__", fn), mode.modules if fix is None else None), mode:
        out = fn(*args, **kwargs)
    outs = [t for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
    return Traced(out, outs, [mode.shadow.get(t) for t in outs], mode.records, mode.operands,
                  [mode.producer.get(t) for t in outs], [None if fix is not None else mode.error.get(t) for t in outs],
                  [t in mode.changed for t in outs])
