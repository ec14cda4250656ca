"""trace flags a float32 GEMM on position-derived tensors as a TF32 risk (issue 53 item 5).

On a CPU nothing is computed in TF32, so the flag is what a tensor-core GPU may do under
``set_float32_matmul_precision("high")``; its numbers are the ``tf32`` format's (tests/test_tf32.py referees them
against the H200 records).  The targets below are written here: the angle as transformers computed it before
transformers#48450 (a K = 1 ``@``), a contracting ``einsum``, ``F.linear``, and the broadcast multiply that is
not a GEMM.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from precision_audit.trace import trace  # noqa: E402
from precision_audit.trace.report import TF32_NOTE, tf32_gemms  # noqa: E402

L = 4096
INV = 1.0 / (10000.0 ** (torch.arange(0, 64, 2, dtype=torch.float32) / 64))


class MatmulRotary(torch.nn.Module):
    """The angle as a GEMM: inv_freq[None, :, None] @ position_ids[:, None, :] (K = 1), float32."""

    def forward(self, x, position_ids):
        inv = INV[None, :, None].expand(position_ids.shape[0], -1, 1)
        freqs = (inv.float() @ position_ids[:, None, :].float()).transpose(1, 2)
        return freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)


class EinsumRotary(torch.nn.Module):
    """A contracting einsum over a one-hot axis (K = 2): a bmm."""

    def forward(self, x, position_ids):
        p = torch.stack([position_ids.float(), torch.zeros_like(position_ids, dtype=torch.float32)], -1)
        w = torch.stack([INV, torch.zeros_like(INV)], 0)
        freqs = torch.einsum("bnk,kf->bnf", p, w)
        return freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)


class LinearRotary(torch.nn.Module):
    def forward(self, x, position_ids):
        freqs = torch.nn.functional.linear(position_ids[..., None].float(), INV[:, None])
        return freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)


class BroadcastRotary(torch.nn.Module):
    """transformers#48450's fix: a broadcast multiply, no GEMM."""

    def forward(self, x, position_ids):
        freqs = position_ids[..., None].float() * INV
        return freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)


@pytest.mark.parametrize("target, op", [(MatmulRotary, "aten.bmm"), (EinsumRotary, "aten.bmm"),
                                        (LinearRotary, "aten.mm")])
def test_float32_gemm_on_positions_is_flagged(target, op) -> None:
    r = trace(target(), L, rope=False)
    gemms = tf32_gemms(r.ops)
    assert len(gemms) == 1 and gemms[0].op.startswith(op) and gemms[0].where.startswith("test_trace_tf32.py:")
    flag = [ln for ln in r.lines if TF32_NOTE in ln]
    assert len(flag) == 1 and f"op {gemms[0].index} {gemms[0].op} (float32) at {gemms[0].where}" in flag[0]
    assert "GPU property" in flag[0] and "48450" in flag[0]
    # on this CPU the GEMM is float32: it adds no more than a float32 product does (nothing flagged as a loss)
    assert gemms[0].first_inexact is None


def test_broadcast_multiply_is_not_flagged() -> None:
    r = trace(BroadcastRotary(), L, rope=False)
    assert tf32_gemms(r.ops) == [] and not any(TF32_NOTE in ln for ln in r.lines)


def test_flag_in_the_cli_json(monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    from pathlib import Path

    from click.testing import CliRunner

    from precision_audit.cli import main

    monkeypatch.syspath_prepend(str(Path(__file__).parent))  # the CLI imports targets from sys.path
    res = CliRunner().invoke(main, ["trace", "test_trace_tf32:MatmulRotary", "-l", "2048", "--json"])
    assert res.exit_code == 0, res.output
    assert any(TF32_NOTE in ln for ln in json.loads(res.output)["results"][0]["lines"])
