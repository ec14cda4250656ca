"""Small rotary modules to trace (``precision-audit trace precision_audit.trace.examples:bf16_positions``): one
with the bfloat16 position bug, one with the float32 fix.  Each factory returns a fresh module.

>>> import torch
>>> cos, sin = fp32_rotary()(torch.zeros(1, 4, 1), torch.arange(4)[None])
>>> tuple(cos.shape)
(1, 4, 64)
"""

from __future__ import annotations

from typing import Any

__all__ = ["bf16_positions", "fp32_rotary"]


def _module(positions_in_bf16: bool, head_dim: int = 64, base: float = 10000.0) -> Any:
    import torch

    class ExampleRotary(torch.nn.Module):
        """forward(x, position_ids) -> (cos, sin); positions from torch.arange in bfloat16, or the ids given."""

        def __init__(self) -> None:
            super().__init__()
            exponent = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
            self.register_buffer("inv_freq", 1.0 / base**exponent, persistent=False)

        def forward(self, x: Any, position_ids: Any) -> tuple[Any, Any]:
            if positions_in_bf16:
                pos = torch.arange(x.shape[1], dtype=torch.bfloat16)[None]  # the bug: 257 becomes 256
            else:
                pos = position_ids
            freqs = pos[..., None].float() * self.inv_freq
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    return ExampleRotary()


def bf16_positions() -> Any:
    """A rotary module whose forward builds its positions with ``torch.arange(n, dtype=torch.bfloat16)``."""
    return _module(True)


def fp32_rotary() -> Any:
    """The same module with the fix: integer position ids, float32 angles, only cos/sin cast to ``x.dtype``."""
    return _module(False)
