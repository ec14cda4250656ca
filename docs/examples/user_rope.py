"""A user's own rotary module, as `precision-audit trace docs/examples/user_rope.py:Rotary` traces it (docs/trace.md).

It rotates queries (batch, seq, heads, dim) by positions it builds in the query's dtype: in bfloat16, 257
becomes 256 (the bug the trace names); ``rotate`` takes the positions it is given (the fix).
"""

import torch


class Rotary(torch.nn.Module):
    def __init__(self, dim: int, base: float = 10000.0) -> None:
        super().__init__()
        self.register_buffer("inv_freq", 1.0 / base ** (torch.arange(0, dim, 2).float() / dim))

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        t = torch.arange(q.shape[1], dtype=q.dtype)  # the bug: positions in the query's dtype
        return self._rotate(q, t.float())

    def rotate(self, q: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        return self._rotate(q, position_ids[0].float())

    def _rotate(self, q: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        ang = torch.outer(t, self.inv_freq)
        cos, sin = ang.cos()[None, :, None, :].to(q.dtype), ang.sin()[None, :, None, :].to(q.dtype)
        half = q.shape[-1] // 2
        q1, q2 = q[..., :half], q[..., half:]
        return torch.cat((q1 * cos - q2 * sin, q1 * sin + q2 * cos), dim=-1)
