"""Audit any code: run PyTorch code on position inputs with float64 shadows and name the op that loses precision.

* :mod:`.shadow`: the tracer, a ``TorchDispatchMode`` that follows every tensor derived from the position
  inputs (and every ``arange`` made inside) and reruns each op in float64 (:func:`run_traced`).
* :mod:`.report`: the rows (:class:`TraceOp`, :class:`TraceOperand`), the downcast test, the first lines and
  the fixes.
* :mod:`.target`: what runs (a config.json, ``package.module:factory``, a module) and how it is called.
* :mod:`.audit`: :func:`trace`, the entry point.
* :mod:`.kernel`: :func:`audit_rotary_kernel`, the harness for apply-style rotary kernels (q, k, positions ->
  rotated q, k) on unit vectors, against the exact schedule.

torch is imported when a function needs it; transformers only for a config.json target or the RoPE audit.

>>> import torch
>>> inv_freq = (1.0 / 10000 ** (torch.arange(0, 8, 2) / 8)).to(torch.bfloat16).float()  # as after model.to
>>> def rotary(x, position_ids):
...     ang = position_ids[..., None].float() * inv_freq
...     return ang.cos().to(x.dtype), ang.sin().to(x.dtype)
>>> r = trace(rotary, 64)
>>> [(o.name, o.downcast) for o in r.downcast]
[('constant 1', True)]
"""

from __future__ import annotations

from .audit import MAX_TRACE_LENGTH, TraceResult, trace
from .kernel import DEFAULT_KERNEL_LENGTHS, LAYOUTS, KernelRow, audit_rotary_kernel, pair_dims
from .report import CULPRIT_SHARE, NARROW, TraceOp, TraceOperand
from .shadow import OperandRecord, OpRecord, Traced, run_traced
from .target import Target, calling_convention, load_target

__all__ = ["CULPRIT_SHARE", "DEFAULT_KERNEL_LENGTHS", "LAYOUTS", "MAX_TRACE_LENGTH", "NARROW", "KernelRow",
           "OpRecord", "OperandRecord", "Target", "TraceOp", "TraceOperand", "TraceResult", "Traced",
           "audit_rotary_kernel", "calling_convention", "load_target", "pair_dims", "run_traced", "trace"]
