"""Audit any code: run PyTorch code on position inputs with float64 shadows and name the op that loses precision.

* :mod:`.shadow`: the tracer (:func:`run_traced`) over :mod:`.mode`, a ``TorchDispatchMode`` (imported when a
  trace runs) that follows every tensor derived from the position inputs (and every ``arange`` made inside) and
  reruns each op in float64; :mod:`.records`: what a run leaves; :mod:`.compare`: real against shadow.
* :mod:`.judge`: each output's verdict by its kind (positions, buckets, rotation, angles, cos/sin, values).
* :mod:`.report`: the rows (:class:`TraceOp`, :class:`TraceOperand`), which ops are named, the downcast test,
  the first lines and the fixes.
* :mod:`.target`: what runs (a config.json, ``FILE.py:NAME`` / ``package.module:NAME``, a module) and how it is
  called; :mod:`.build`: the user's own file, a class with inferred arguments, ``--input`` tensors.
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
from .build import infer_arguments, make_input, parse_input
from .judge import BEYOND_ROUNDING, judge, judge_outputs
from .kernel import DEFAULT_KERNEL_LENGTHS, LAYOUTS, KernelRow, audit_rotary_kernel, pair_dims
from .report import CULPRIT_SHARE, NARROW, TraceOp, TraceOperand
from .shadow import OperandRecord, OpRecord, Traced, run_traced
from .target import Target, calling_convention, load_target

__all__ = ["BEYOND_ROUNDING", "CULPRIT_SHARE", "DEFAULT_KERNEL_LENGTHS", "LAYOUTS", "MAX_TRACE_LENGTH", "NARROW",
           "KernelRow", "OpRecord", "OperandRecord", "Target", "TraceOp", "TraceOperand", "TraceResult", "Traced",
           "audit_rotary_kernel", "calling_convention", "infer_arguments", "judge", "judge_outputs", "load_target",
           "make_input", "pair_dims", "parse_input", "run_traced", "trace"]
