"""Duplicate stored rows, found exactly: the streaming pass hashes every row, then runs of equal rounded
positions sharing a hash are compared element by element and split into classes of equal rows."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import numpy.typing as npt

from ..formats import round_to
from .recipes import Array
from .tables import _Positions, scratch  # noqa: F401  (scratch: used here and by stream)


@functools.cache
def _hash_keys() -> npt.NDArray[np.uint64]:
    """8192 fixed random odd 64-bit factors (made on first use: numpy.random loads only then)."""
    return np.random.default_rng(20170612).integers(1, 2**63, size=8192, dtype=np.uint64) | np.uint64(1)


def _canonical_bits(rows: Array) -> npt.NDArray[np.uint64]:
    """Bit patterns with -0 -> +0 and every nan the same, so equal values <=> equal bits."""
    c = rows + 0.0
    c[np.isnan(c)] = np.nan
    return c.view(np.uint64)


def _row_hash(bits: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """A 64-bit hash per row (collisions are verified afterwards, so quality only affects speed); ``bits``
    (C-contiguous) is overwritten.  Each element is mixed by a bijection (an xorshift, then a random odd
    factor), so rows that differ in one element never collide."""
    tmp = scratch("hash", bits.shape, np.uint64)
    np.right_shift(bits, np.uint64(31), out=tmp)
    np.bitwise_xor(bits, tmp, out=bits)
    keys = _hash_keys()
    np.multiply(bits, keys[np.arange(bits.shape[1]) % len(keys)], out=bits)
    h = bits.sum(axis=1, dtype=np.uint64)
    h ^= h >> np.uint64(29)
    h *= np.uint64(0x9E3779B97F4A7C15)
    h ^= h >> np.uint64(33)
    return h * np.uint64(0xFF51AFD7ED558CCD)


class _RowHashes:
    """Pass 1: the hash of every stored row, kept in a one-element box that
    :func:`_duplicate_activation` empties (so the O(L) array is freed midway)."""

    def __init__(self, n: int) -> None:
        self.box = [np.empty(n, dtype=np.uint64)]

    def add(self, a: int, rows: Array) -> None:
        """Hash ``rows``, the stored rows of positions ``a, a+1, ...``."""
        self.box[0][a : a + len(rows)] = _row_hash(_canonical_bits(rows))


def _hash_rows(rows: Array) -> npt.NDArray[np.uint64]:
    """:func:`_row_hash` of the canonical bits of ``rows`` (finite or not), in reused buffers."""
    bits = scratch("bits", rows.shape, np.uint64)
    np.add(rows, 0.0, out=bits.view(np.float64))  # -0 -> +0
    if not np.isfinite(np.max(rows)) or not np.isfinite(np.min(rows)):
        f = bits.view(np.float64)
        f[np.isnan(f)] = np.nan
    return _row_hash(bits)


def _duplicate_activation(
    pos: _Positions, hash_box: list[npt.NDArray[np.uint64]], rows_of: Any, chunk: int
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.int32]]:
    """Classes of equal stored rows, as two sorted arrays: for each position the
    length from which it is a duplicate (``act``: max(p, second member of its
    class)), and the first position of each class.

    Rows are a function of the rounded position, which is monotone in p, so
    equal rounded positions are runs of neighbours; runs are sorted by hash
    (stable: position order within a hash), and runs sharing a hash are
    compared element by element (canonical bits) and split into classes.
    ``hash_box`` holds the per-position hashes and is emptied, so that they are
    freed as soon as they are no longer needed; indices are int32 (lengths stay
    below 2**24): both keep the peak memory low.
    """
    n = len(pos)
    block = 2**20
    starts = [np.zeros(1, dtype=np.int32)]
    prev = None
    for a in range(0, n, block):
        ub = _canonical_bits(pos[a : min(n, a + block)][:, None])[:, 0]
        change = (np.flatnonzero(ub[1:] != ub[:-1]) + (a + 1)).astype(np.int32)
        if prev is not None and ub[0] != prev:
            change = np.concatenate([np.array([a], dtype=np.int32), change])
        starts.append(change)
        prev = ub[-1]
    run_start = np.concatenate(starts)
    del starts
    n_runs = len(run_start)
    identity = n_runs == n  # every run is one position (e.g. float32 positions)
    hashes = hash_box.pop()
    run_hash = hashes if identity else hashes[run_start]
    del hashes
    order = np.argsort(run_hash, kind="stable").astype(np.int32)  # by hash, position order within
    new = np.empty(n_runs, dtype=bool)  # a class starts here (in sorted order)
    new[0] = True
    for a in range(1, n_runs, block):
        b = min(n_runs, a + block)
        np.not_equal(run_hash[order[a:b]], run_hash[order[a - 1 : b - 1]], out=new[a:b])
    del run_hash
    # groups of runs sharing a hash: [lo, hi) in sorted order
    lo = np.flatnonzero(new[:-1] & ~new[1:])
    hi = np.flatnonzero(~new & np.r_[new[1:], True]) + 1
    # split them by their rows, in batches that never split one hash value
    i = 0
    while i < len(lo):
        j, count = i, 0
        while j < len(lo) and (count == 0 or count + int(hi[j] - lo[j]) <= chunk):
            count += int(hi[j] - lo[j])
            j += 1
        at = np.concatenate([np.arange(x, y) for x, y in zip(lo[i:j], hi[i:j])])  # places in sorted order
        gid = np.concatenate([np.full(y - x, k) for k, (x, y) in enumerate(zip(lo[i:j], hi[i:j]))])
        sel = order[at]
        u = round_to(run_start[sel].astype(np.float64), pos.fmt)  # = pos[r] for each run start r
        bits = _canonical_bits(np.concatenate(rows_of(u), axis=1))
        _, sub = np.unique(bits, axis=0, return_inverse=True)
        sub = sub.reshape(-1)
        perm = np.lexsort((np.arange(len(sel)), sub, gid))  # by group, then row, then position
        order[at] = sel[perm]
        g2, s2 = gid[perm], sub[perm]
        new[at] = np.r_[True, (g2[1:] != g2[:-1]) | (s2[1:] != s2[:-1])]
        i = j
    del lo, hi
    cstart = np.concatenate(
        [(np.flatnonzero(new[a : a + block]) + a).astype(np.int32) for a in range(0, n_runs, block)]
    )
    del new
    ccount = np.diff(np.append(cstart, np.int32(n_runs)))
    first_run = order[cstart]
    never = np.int32(np.iinfo(np.int32).max)
    second = np.full(len(cstart), never, dtype=np.int32)
    two = ccount >= 2
    second[two] = run_start[order[cstart[two] + 1]]
    del cstart, two
    run_len = None if identity else np.diff(np.append(run_start, np.int32(n))).astype(np.int32)
    if run_len is not None:
        long_first = run_len[first_run] >= 2
        second[long_first] = run_start[first_run[long_first]] + 1
    firsts = run_start[first_run]
    del first_run, run_start
    firsts.sort()
    sec_run = np.empty(n_runs, dtype=np.int32)
    sec_run[order] = np.repeat(second, ccount)
    del order, second, ccount
    act = sec_run if run_len is None else np.repeat(sec_run, run_len)
    del sec_run
    for a in range(0, n, block):
        b = min(n, a + block)
        np.maximum(act[a:b], np.arange(a, b, dtype=np.int32), out=act[a:b])
    act.sort()
    return act, firsts
