"""Code as people write it, written here to be run in eager torch: ports whose numbers the package models.

* :func:`t5_bucket_port`: T5's bucket formula as transformers writes it, without the ``.float()`` before the
  log (a port that runs the bucket in the tensor's dtype, as mindone's MindSpore port does); the ``lowp-eager``
  path of :mod:`precision_audit.relative`.
* :func:`sinusoid_port`: the classic sinusoidal encoding (sin on even dims, cos on odd, frequencies
  ``exp(-2i ln(base) / d)`` in float32), its positions held in ``position_dtype`` first (``lowp-positions``
  of :mod:`precision_audit.sinusoidal` with a narrow one, ``fp32`` with float32), the table cast to ``dtype``.
"""

from __future__ import annotations

import math
from typing import Any

import torch


def t5_bucket_port(rel: Any, bidirectional: bool = True, nb: int = 32, md: int = 128) -> Any:
    """Buckets of the relative positions ``rel`` (memory - query), every op in ``rel``'s dtype."""
    buckets: Any = 0
    if bidirectional:
        nb //= 2
        buckets = (rel > 0).to(torch.long) * nb
        rel = torch.abs(rel)
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    me = nb // 2
    large = me + (torch.log(rel / me) / math.log(md / me) * (nb - me)).to(torch.long)
    large = torch.min(large, torch.full_like(large, nb - 1))
    return buckets + torch.where(rel < me, rel.to(torch.long), large)


def sinusoid_port(positions: Any, dim: int, position_dtype: Any, dtype: Any, base: float = 10000.0) -> Any:
    """The (len(positions), dim) table of integer ``positions``."""
    pos = positions.to(position_dtype).float()[:, None]
    freq = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(base) / dim))
    angles = pos * freq
    table = torch.zeros(positions.shape[0], dim)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles)
    return table.to(dtype)
