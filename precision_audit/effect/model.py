"""The probe model: its shipped weights and a float64 numpy forward pass.

A pre-norm, attention-only RoPE transformer: token embedding, :data:`LAYERS`
layers of RMSNorm -> :data:`HEADS` heads of :data:`HEAD_DIM` (query, key, value,
output projections, no bias, no MLP) added to the residual, then RMSNorm and an
unembedding onto the content tokens.  RoPE rotates q and k with the
rotate-half (Llama / NeoX) pairing of transformers' ``rotate_half``:
``q * cat(cos, cos) + cat(-q2, q1) * cat(sin, sin)``, where ``q1``, ``q2``
are q's halves and cos/sin hold one column per frequency ``theta_i`` of
``RopeSchedule(head_dim=128, base=10000.0)``.

The forward pass runs in float64 whatever cos/sin it is given, so the only
thing that varies between code paths is the cos/sin table (numpy's float64
matmul and exp are accurate to a few ulp on every CPU).

>>> w = load_probe()
>>> w["emb"].shape, w["l0.wq"].shape, sorted(probe_metadata()["tasks"])
((46, 64), (64, 256), ['gap', 'local'])
"""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BASE", "D_MODEL", "EPS", "HEADS", "HEAD_DIM", "LAYERS", "PROBE_FILE", "forward", "load_probe",
           "probe_metadata", "rotate"]

F64 = npt.NDArray[np.float64]

PROBE_FILE = "probe.npz"  # package data of precision_audit.effect, written by scripts/train_probe.py
LAYERS = 2
HEADS = 2
HEAD_DIM = 128
D_MODEL = 64
BASE = 10000.0
EPS = 1e-6  # RMSNorm epsilon


@lru_cache(maxsize=1)
def _npz() -> dict[str, Any]:
    with resources.files(__package__).joinpath(PROBE_FILE).open("rb") as f:
        with np.load(f, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}


def load_probe() -> dict[str, F64]:
    """The shipped weights as float64 arrays (name -> array; a fresh copy), read once via importlib.resources."""
    return {k: v.copy() for k, v in _weights().items()}


@lru_cache(maxsize=1)
def _weights() -> dict[str, F64]:
    return {k: v.astype(np.float64) for k, v in _npz().items() if k != "metadata"}


def probe_metadata() -> dict[str, Any]:
    """The shipped probe's metadata: architecture, tasks, seeds, training steps, exact accuracies."""
    return json.loads(str(_npz()["metadata"]))


def rotate(x: F64, cos: F64, sin: F64) -> F64:
    """Rotate-half RoPE of ``x`` (..., T, 2f) by per-position ``cos``/``sin`` (..., T, f).

    >>> rotate(np.array([[1.0, 0.0]]), np.array([[0.0]]), np.array([[1.0]])).tolist()
    [[0.0, 1.0]]
    """
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _rms(x: F64, g: F64) -> F64:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + EPS) * g


def forward(w: dict[str, F64], tokens: npt.NDArray[np.int64], cos: F64, sin: F64,
            queries: npt.NDArray[np.int64]) -> F64:
    """Log-probabilities (n, k, content tokens) at the query indices, in float64.

    ``tokens`` (n, T); ``cos``/``sin`` (n, T, HEAD_DIM / 2): the stored cache at each token's position.
    The rotation is :func:`rotate`'s, written as ``x * cat(cos, cos) + cat(x2, x1) * cat(-sin, sin)``.
    """
    n, t = tokens.shape
    x = w["emb"][tokens]
    c2 = np.concatenate([cos, cos], axis=-1)[:, :, None]  # (n, T, 1, HEAD_DIM): broadcast over heads
    s2 = np.concatenate([-sin, sin], axis=-1)[:, :, None]
    mask = np.triu(np.full((t, t), -np.inf), 1)
    half = HEAD_DIM // 2
    for layer in range(LAYERS):
        h = _rms(x, w[f"l{layer}.norm"])
        # projections as one 2-D product each: a stack of n small products makes OpenBLAS start its threads
        # n times (seconds on a busy machine)
        qkv = (h.reshape(n * t, -1) @ _qkv(w, layer)).reshape(n, t, 3, HEADS, HEAD_DIM)
        q, k = (qkv[:, :, i] * c2 + np.roll(qkv[:, :, i], half, axis=-1) * s2 for i in (0, 1))
        s = np.matmul(q.transpose(0, 2, 1, 3), k.transpose(0, 2, 3, 1)) / np.sqrt(HEAD_DIM) + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        a = (s / s.sum(axis=-1, keepdims=True)) @ qkv[:, :, 2].transpose(0, 2, 1, 3)
        x = x + (a.transpose(0, 2, 1, 3).reshape(n * t, HEADS * HEAD_DIM) @ w[f"l{layer}.wo"]).reshape(n, t, -1)
    xq = _rms(x[np.arange(n)[:, None], queries], w["norm"])
    logits = (xq.reshape(-1, xq.shape[-1]) @ w["unembed"]).reshape(*xq.shape[:-1], -1)
    logits = logits - logits.max(axis=-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))


def _qkv(w: dict[str, F64], layer: int) -> F64:
    """The layer's query, key and value projections side by side (D_MODEL, 3 * HEADS * HEAD_DIM)."""
    return np.concatenate([w[f"l{layer}.w{c}"] for c in "qkv"], axis=1)
