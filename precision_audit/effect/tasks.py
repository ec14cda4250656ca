"""The probe's tasks: synthetic sequences that need position, generated from a seed.

Two tasks, each a :class:`Batch` of token ids, *relative* positions (the first
token at 0; an evaluation adds the offset) and the query positions whose next
token the probe predicts:

* ``local`` (local order, distance 1): :data:`LOCAL_PREFIX` distinct content
  tokens at contiguous positions, then :data:`LOCAL_QUERIES` of them again
  (distinct, in random order, never the last one); at each query token A the
  target is the token that followed A in the prefix.  Only a previous-token
  head (distance 1) tells which token followed A: an induction task.
* ``gap`` (exact distance at long range): :data:`GAP_TOKENS` content tokens
  placed *with gaps*, then a query token ``Q_G`` (one per gap in :data:`GAPS`);
  the target is the token exactly G positions before the query.  Distractors
  sit at distances G-2, G-1, G+1, G+2 (those >= 1) and the other tokens at
  random distances near G and below 1.5 G + 24, so a 16-token sequence spans up
  to about 1.5 G positions (6168 at G = 4096); the probe must resolve G from G +- 1.

Content tokens are ``0 .. CONTENT - 1``; ``Q_G`` is ``CONTENT + GAPS.index(G)``.
Generation uses numpy's PCG64 generator only (the same sequences on every
machine).

>>> b = local_batch(np.random.default_rng(0), 2)
>>> b.tokens.shape, b.queries.shape, b.positions[0, :3].tolist()
((2, 24), (2, 8), [0, 1, 2])
>>> g = gap_batch(np.random.default_rng(0), 3, gaps=[4096])
>>> d = g.positions[:, -1] - g.positions[np.arange(3), g.target_index]
>>> d.tolist(), bool((g.tokens[:, -1] == CONTENT + GAPS.index(4096)).all())
([4096, 4096, 4096], True)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["CONTENT", "GAPS", "GAP_TOKENS", "LOCAL_PREFIX", "LOCAL_QUERIES", "TASKS", "VOCAB", "Batch",
           "gap_batch", "local_batch", "make_batch"]

TASKS: tuple[str, ...] = ("local", "gap")
CONTENT = 32  # content tokens 0..31: the probe predicts one of them
GAPS: tuple[int, ...] = (1, 2, 3, 5, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)  # the distances it resolves
VOCAB = CONTENT + len(GAPS)
LOCAL_PREFIX = 16
LOCAL_QUERIES = 8
GAP_TOKENS = 15  # content tokens before the query token


@dataclass(frozen=True)
class Batch:
    """Sequences of one task: ``tokens`` and relative ``positions`` (n, T) (increasing along each row),
    the indices of the query tokens ``queries`` (n, k) and their ``targets`` (n, k) (content token ids),
    ``gap`` (n,) the distance each query reads (1 for local order)."""

    task: str
    tokens: npt.NDArray[np.int64]
    positions: npt.NDArray[np.int64]
    queries: npt.NDArray[np.int64]
    targets: npt.NDArray[np.int64]
    gap: npt.NDArray[np.int64]

    @property
    def target_index(self) -> npt.NDArray[np.int64]:
        """Index of the token each sequence's last query reads (the gap task's target)."""
        return np.array([int(np.searchsorted(p, p[q] - g)) for p, q, g in
                         zip(self.positions, self.queries[:, -1], self.gap)], dtype=np.int64)

    @property
    def span(self) -> int:
        """The largest relative position + 1: the positions a sequence occupies."""
        return int(self.positions.max()) + 1


def local_batch(rng: np.random.Generator, n: int) -> Batch:
    """``n`` local-order (induction) sequences: 16 distinct tokens, then 8 of them again as queries."""
    perm = np.argsort(rng.random((n, CONTENT)), axis=1)
    prefix = perm[:, :LOCAL_PREFIX]
    which = np.argsort(rng.random((n, LOCAL_PREFIX - 1)), axis=1)[:, :LOCAL_QUERIES]  # never the last token
    rows = np.arange(n)[:, None]
    tokens = np.concatenate([prefix, prefix[rows, which]], axis=1).astype(np.int64)
    t = LOCAL_PREFIX + LOCAL_QUERIES
    positions = np.broadcast_to(np.arange(t, dtype=np.int64), (n, t)).copy()
    queries = np.broadcast_to(np.arange(LOCAL_PREFIX, t, dtype=np.int64), (n, LOCAL_QUERIES)).copy()
    return Batch("local", tokens, positions, queries, prefix[rows, which + 1].astype(np.int64),
                 np.ones(n, dtype=np.int64))


def _gap_distances(rng: np.random.Generator, g: int) -> list[int]:
    """Distances (from the query) of the 15 content tokens: the target at g first, then 14 others,
    alternately near g (g +- 3..16) and anywhere below 1.5 g + 24."""
    used = [g] + [g + d for d in (-2, -1, 1, 2) if g + d >= 1]
    near = [g + d for d in range(-16, 17) if abs(d) >= 3 and g + d >= 1]
    while len(used) < GAP_TOKENS:
        free_near = [d for d in near if d not in used]
        pool = free_near if (len(used) % 2 and free_near) else range(1, g + g // 2 + 9 + len(used))
        d = int(pool[int(rng.integers(len(pool)))])
        if d not in used:
            used.append(d)
    return used


def gap_batch(rng: np.random.Generator, n: int, gaps: Sequence[int] = GAPS) -> Batch:
    """``n`` gap sequences; sequence ``i`` reads the distance ``gaps[i % len(gaps)]``."""
    t = GAP_TOKENS + 1
    tokens = np.empty((n, t), dtype=np.int64)
    positions = np.empty((n, t), dtype=np.int64)
    targets = np.empty((n, 1), dtype=np.int64)
    gap = np.array([gaps[i % len(gaps)] for i in range(n)], dtype=np.int64)
    for i, g in enumerate(gap.tolist()):
        dist = np.array(_gap_distances(rng, g), dtype=np.int64)
        content = rng.permutation(CONTENT)[:GAP_TOKENS]
        order = np.argsort(-dist)  # farthest first: positions increase along the row
        top = int(dist.max())
        positions[i, :-1] = top - dist[order]
        positions[i, -1] = top
        tokens[i, :-1] = content[order]
        tokens[i, -1] = CONTENT + GAPS.index(g)
        targets[i, 0] = content[0]
    queries = np.full((n, 1), t - 1, dtype=np.int64)
    return Batch("gap", tokens, positions, queries, targets, gap)


def make_batch(task: str, seed: int, n: int, gap: int | None = None) -> Batch:
    """The evaluation batch of a task: ``n`` sequences from ``seed`` (``gap``: only that distance).

    >>> make_batch("gap", 1, 4, gap=8).gap.tolist()
    [8, 8, 8, 8]
    """
    rng = np.random.default_rng(seed)
    if task == "local":
        return local_batch(rng, n)
    return gap_batch(rng, n, GAPS if gap is None else (gap,))
