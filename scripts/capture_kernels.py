#!/usr/bin/env python3
"""Record what third-party RoPE code computes on a CUDA GPU, for CPU tests to referee our stack models.

Three pieces of real code run here, unmodified, on one deterministic grid of
positions (``POSITIONS``: 0..31, the positions of ``capture_cuda.py`` and
seeded random ones below 2**20):

* transformers' ``LlamaRotaryEmbedding`` built on the GPU (``with torch.device("cuda")``)
  from a Llama-2 config (base 1e4) and a Llama-3.1 config (base 5e5, llama3
  scaling): its ``inv_freq`` buffer (CUDA ``powf``), and ``forward``'s cos/sin
  for a float32 and a bfloat16 input (CUDA ``cosf``/``sinf`` of the float32
  angle; the bfloat16 cache is their cast).  Saved: ``hf_<cfg>_inv_freq``,
  ``hf_<cfg>_cos32``/``sin32`` (first half of each row; the second half
  repeats it) and ``hf_<cfg>_cos16``/``sin16`` (bfloat16 bits as uint16).
* Liger-Kernel's triton rotary kernel (``liger_kernel.ops.rope.rope_forward``,
  the kernel behind ``liger_rotary_pos_emb``) on random q/k in bfloat16 and
  float16 with the Llama-2 cos/sin cast to that dtype: ``liger_<dt>_q``,
  ``_k`` (inputs), ``_cos``, ``_sin`` (half rows), ``_q_out``, ``_k_out``;
  16-bit values as uint16 bits.
* flash-attention's triton ``apply_rotary`` (``flash_attn/ops/triton/rotary.py``,
  loaded from a file since the package needs a CUDA build) on the same inputs:
  ``flash_<dt>_x``, ``_cos``, ``_sin``, ``_out``.
* Unsloth's triton kernels (``unsloth/kernels/rope_embedding.py``
  ``fast_rope_embedding``, without and with ``rope_embedding_indices``; the file
  runs unchanged, its two helper imports answered by small stand-ins under
  ``--unsloth-root``): ``unsloth_<dt>_q``, ``_k``, ``_cos``, ``_sin``,
  ``_q_out``, ``_k_out``, ``_q_out_qk``, ``_k_out_qk``.

The rotation kernels run on every 4th position of the grid (64 rows), on
seeded N(0, 1) activations (2 query heads, 1 key head).

``meta`` holds JSON: GPU, versions, date, and where each piece came from.

Run on a CUDA machine from the repo root, with ``liger_kernel`` importable and
flash-attention's ``rotary.py`` at ``--flash-rotary``:
``python scripts/capture_kernels.py [--out tests/data/cuda_kernels.npz]``
(``--dry-run`` prints the grid without a GPU).  Tests read the file on any CPU.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from capture_cuda import POSITIONS as INTRINSIC_POSITIONS  # noqa: E402

DEFAULT_OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "cuda_kernels.npz"
HEAD_DIM = 128
N_HEADS = 4  # the rotary module's config
Q_HEADS, K_HEADS = 2, 1  # activations rotated by the apply kernels (random bits compress badly: kept small)
APPLY_EVERY = 4  # the apply kernels run on every 4th position of the grid (64 rows of cos/sin)
CONFIGS: dict[str, dict[str, Any]] = {
    "llama2": {"rope_type": "default", "rope_theta": 10000.0},
    "llama31": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
}
DTYPES = ("bfloat16", "float16")


def positions() -> np.ndarray:
    """256 sorted distinct positions: 0..31, capture_cuda's, and seeded random ones below 2**20."""
    rng = np.random.default_rng(2026)
    fixed = np.unique(np.concatenate([np.arange(32), INTRINSIC_POSITIONS]))
    fixed = fixed[fixed < 2**20]
    extra = rng.choice(np.setdiff1d(np.arange(32, 2**20), fixed), 256 - fixed.size, replace=False)
    return np.sort(np.concatenate([fixed, extra])).astype(np.int64)


def bits(t: Any) -> np.ndarray:
    """A 16-bit tensor's bits as uint16 (numpy has no bfloat16)."""
    import torch

    return t.detach().contiguous().cpu().view(torch.int16).numpy().view(np.uint16)


def transformers_rows(pos: np.ndarray, device: str = "cuda") -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """LlamaRotaryEmbedding on the GPU for each config: inv_freq and cos/sin in float32 and bfloat16."""
    import torch
    import transformers
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    out: dict[str, np.ndarray] = {}
    pid = torch.from_numpy(pos)[None, :].to(device)
    half = HEAD_DIM // 2
    for name, params in CONFIGS.items():
        cfg = LlamaConfig(hidden_size=HEAD_DIM * N_HEADS, num_attention_heads=N_HEADS, head_dim=HEAD_DIM,
                          max_position_embeddings=2**20, rope_parameters=dict(params))
        with torch.device(device):  # inv_freq computed on the device, as under torch.set_default_device
            rotary = LlamaRotaryEmbedding(cfg)
        assert rotary.inv_freq.device.type == torch.device(device).type
        out[f"hf_{name}_inv_freq"] = rotary.inv_freq.detach().cpu().numpy()
        for tag, dt in (("32", torch.float32), ("16", torch.bfloat16)):
            x = torch.zeros(1, pos.size, HEAD_DIM, dtype=dt, device=device)
            cos, sin = rotary(x, pid)
            assert torch.equal(cos[..., :half], cos[..., half:]) and torch.equal(sin[..., :half], sin[..., half:])
            c, s = cos[0, :, :half], sin[0, :, :half]
            if tag == "32":
                out[f"hf_{name}_cos32"], out[f"hf_{name}_sin32"] = c.cpu().numpy(), s.cpu().numpy()
            else:
                out[f"hf_{name}_cos16"], out[f"hf_{name}_sin16"] = bits(c), bits(s)
    return out, {"transformers": transformers.__version__,
                 "transformers_module": "transformers.models.llama.modeling_llama.LlamaRotaryEmbedding"}


def _inputs(pos: np.ndarray, dt: Any, n_heads: int, seed: int) -> Any:
    """Seeded N(0, 1) activations (1, seq, heads, head_dim) in dtype dt on the GPU."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    return torch.randn(1, pos.size, n_heads, HEAD_DIM, generator=gen).to(dt).cuda()


def _full_rows(cos32: np.ndarray, sin32: np.ndarray, dt: Any) -> tuple[Any, Any]:
    """The half rows of cos/sin repeated to full head_dim rows (seq, head_dim), as rotate_half kernels take
    them, cast to dtype dt on the GPU."""
    import torch

    return tuple(torch.from_numpy(np.concatenate([v, v], axis=1)).to(dt).cuda() for v in (cos32, sin32))


def liger_rows(pos: np.ndarray, cos32: np.ndarray, sin32: np.ndarray) -> tuple[dict[str, np.ndarray], dict]:
    """Liger's triton kernel rotating q/k with the Llama-2 cos/sin cast to each dtype."""
    import liger_kernel
    import torch
    from liger_kernel.ops.rope import rope_forward

    out: dict[str, np.ndarray] = {}
    for i, name in enumerate(DTYPES):
        dt = getattr(torch, name)
        q = _inputs(pos, dt, Q_HEADS, 10 + i).transpose(1, 2)  # (1, heads, seq, dim), as transformers passes it
        k = _inputs(pos, dt, K_HEADS, 20 + i).transpose(1, 2)
        full_c, full_s = (v[None] for v in _full_rows(cos32, sin32, dt))  # (1, seq, head_dim)
        out[f"liger_{name}_q"], out[f"liger_{name}_k"] = bits(q), bits(k)
        q_out, k_out, _, _ = rope_forward(q.clone(), k.clone(), full_c, full_s)
        torch.cuda.synchronize()
        out[f"liger_{name}_q_out"], out[f"liger_{name}_k_out"] = bits(q_out), bits(k_out)
        out[f"liger_{name}_cos"], out[f"liger_{name}_sin"] = bits(full_c[0, :, :HEAD_DIM // 2]), \
            bits(full_s[0, :, :HEAD_DIM // 2])
    return out, {"liger_kernel": getattr(liger_kernel, "__version__", None) or _dist_version("liger-kernel"),
                 "liger_function": "liger_kernel.ops.rope.rope_forward (q, k of shape (1, heads, seq, 128))"}


def flash_rows(pos: np.ndarray, cos32: np.ndarray, sin32: np.ndarray, rotary_py: Path) -> tuple[dict, dict]:
    """flash-attention's triton apply_rotary with the Llama-2 cos/sin cached in each dtype."""
    import torch

    spec = importlib.util.spec_from_file_location("flash_rotary", rotary_py)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out: dict[str, np.ndarray] = {}
    for i, name in enumerate(DTYPES):
        dt = getattr(torch, name)
        x = _inputs(pos, dt, Q_HEADS, 30 + i)  # (batch, seqlen, nheads, headdim)
        c = torch.from_numpy(cos32).to(dt).cuda()  # (seqlen_ro, rotary_dim / 2)
        s = torch.from_numpy(sin32).to(dt).cuda()
        y = mod.apply_rotary(x, c, s)
        torch.cuda.synchronize()
        out.update({f"flash_{name}_x": bits(x), f"flash_{name}_cos": bits(c), f"flash_{name}_sin": bits(s),
                    f"flash_{name}_out": bits(y)})
    return out, {"flash_rotary": f"{rotary_py.name} from Dao-AILab/flash-attention (apply_rotary, "
                                 "interleaved=False)"}


def unsloth_rows(pos: np.ndarray, cos32: np.ndarray, sin32: np.ndarray, root: Path) -> tuple[dict, dict]:
    """Unsloth's triton kernels: fast_rope_embedding without indices (_rope_embedding, q/k cast to the cos/sin
    dtype) and with rope_embedding_indices (_rope_embedding_QK, as TRL calls it)."""
    import torch

    sys.path.insert(0, str(root))
    from unsloth.kernels.rope_embedding import fast_rope_embedding

    out: dict[str, np.ndarray] = {}
    for i, name in enumerate(DTYPES):
        dt = getattr(torch, name)
        full_c, full_s = _full_rows(cos32, sin32, dt)  # (seq, head_dim)
        q = _inputs(pos, dt, Q_HEADS, 40 + i).transpose(1, 2).contiguous()  # (batch, heads, seq, dim)
        k = _inputs(pos, dt, K_HEADS, 50 + i).transpose(1, 2).contiguous()
        out[f"unsloth_{name}_q"], out[f"unsloth_{name}_k"] = bits(q), bits(k)
        out[f"unsloth_{name}_cos"], out[f"unsloth_{name}_sin"] = bits(full_c[:, :HEAD_DIM // 2]), \
            bits(full_s[:, :HEAD_DIM // 2])
        q_out, k_out = fast_rope_embedding(q.clone(), k.clone(), full_c, full_s)
        torch.cuda.synchronize()
        out[f"unsloth_{name}_q_out"], out[f"unsloth_{name}_k_out"] = bits(q_out), bits(k_out)
        idx = torch.arange(pos.size, device="cuda")
        q_out, k_out = fast_rope_embedding(q.clone(), k.clone(), full_c, full_s, rope_embedding_indices=idx)
        torch.cuda.synchronize()
        out[f"unsloth_{name}_q_out_qk"], out[f"unsloth_{name}_k_out_qk"] = bits(q_out), bits(k_out)
    return out, {"unsloth_kernel": "unsloth/kernels/rope_embedding.py fast_rope_embedding (the file unchanged; "
                                   "its two helper imports stubbed)"}


def _dist_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001 (best effort)
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where to write the .npz (default: %(default)s)")
    parser.add_argument("--flash-rotary", type=Path, default=Path(".kern/rotary.py"),
                        help="flash-attention's flash_attn/ops/triton/rotary.py (default: %(default)s)")
    parser.add_argument("--flash-commit", default="", help="the flash-attention commit the file came from")
    parser.add_argument("--unsloth-root", type=Path, default=Path(".kern/unsloth_stub"),
                        help="a folder holding unsloth/kernels/rope_embedding.py (default: %(default)s)")
    parser.add_argument("--unsloth-commit", default="", help="the unsloth commit the file came from")
    parser.add_argument("--dry-run", action="store_true", help="print the position grid; no GPU needed")
    args = parser.parse_args(argv)
    pos = positions()
    if args.dry_run:
        print(f"{pos.size} positions in [{pos.min()}, {pos.max()}]; configs {list(CONFIGS)}; dtypes {DTYPES}")
        return 0
    import torch

    if not torch.cuda.is_available():
        print("capture_kernels: torch sees no CUDA device", file=sys.stderr)
        return 2
    arrays: dict[str, np.ndarray] = {"positions": pos}
    meta: dict[str, Any] = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__,
                            "torch_cuda": torch.version.cuda, "numpy": np.__version__,
                            "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    rows, info = transformers_rows(pos)
    arrays.update(rows)
    meta.update(info)
    sub = slice(None, None, APPLY_EVERY)
    ap, cos32, sin32 = pos[sub], rows["hf_llama2_cos32"][sub], rows["hf_llama2_sin32"][sub]
    for label, fn in (("liger", lambda: liger_rows(ap, cos32, sin32)),
                      ("flash", lambda: flash_rows(ap, cos32, sin32, args.flash_rotary)),
                      ("unsloth", lambda: unsloth_rows(ap, cos32, sin32, args.unsloth_root))):
        try:
            part, info = fn()
        except Exception as e:  # noqa: BLE001 (record what ran; say what did not)
            print(f"capture_kernels: {label} not recorded: {type(e).__name__}: {e}", file=sys.stderr)
            continue
        arrays.update(part)
        meta.update(info)
    import triton

    meta["triton"] = triton.__version__
    meta["flash_commit"] = args.flash_commit
    meta["unsloth_commit"] = args.unsloth_commit
    meta["apply_positions"] = f"positions[::{APPLY_EVERY}]"
    arrays["meta"] = np.array(json.dumps(meta, indent=1))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **arrays)
    print(f"wrote {args.out} ({args.out.stat().st_size / 1e6:.3f} MB): {sorted(k for k in arrays if k != 'meta')}")
    print(json.dumps(meta, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
