"""The rotation pass: a code path's stored rotations over positions 0..L-1, chunk by chunk, reduced to the
figures of every length (max and mean rotation error, collisions, pair errors).

Shared by live rotary modules (:func:`~precision_audit.hf.modules.audit_rope_module`) and apply kernels
(:func:`~precision_audit.trace.audit_rotary_kernel`).
"""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..rope import PairError
from ..rope.pairs import PairPass, chunk_bounds

__all__ = ["Block", "RotationErrors", "rotation_pass"]

F64 = npt.NDArray[np.float64]


@dataclass(frozen=True)
class RotationErrors:
    """Rotation errors of stored rotations over positions 0..length-1 (rad, against the oracle): max and mean
    over positions and columns, positions whose whole stored row equals the previous one's, the pair errors
    (:class:`~precision_audit.rope.PairError`) and the first position with a non-finite error (None: none)."""

    length: int
    max_rotation_error: float
    mean_rotation_error: float
    colliding_positions: int
    pair_errors: tuple[PairError, ...] = ()
    first_nonfinite: int | None = None


Block = Callable[[int, int], Any]
"""``block(start, stop) -> (rows, signed)`` for positions start..stop-1: the stored rows (any width, compared
for collisions) and the signed rotation errors ``wrap(atan2 - exact)`` (one column per pair; nan where not
finite), or a function of no argument that computes them (then on the reductions' thread); or a function of
no argument that returns the pair (all the reading then on the reductions' thread), whose ``seconds``
attribute, if any, is the reading it did already (timed as a reduction)."""


def rotation_pass(block: Block, width: int, lengths: Sequence[int], chunk: int, *,
                  shifted: Callable[[int, int], F64] | None = None, progress: Callable[[int], None] | None = None,
                  distances: Sequence[int] | None = (), frequencies: F64 | None = None) -> list[RotationErrors]:
    """One chunked pass over positions 0..max(lengths)-1 of a code path's stored rotations, each chunk computed
    once; prefix reductions give every length (and the pair errors at ``distances``,
    :class:`~precision_audit.rope.pairs.PairPass`: () none, None the defaults).  ``width``: the columns of
    ``signed``; ``frequencies``: their exact rad per position (the pair errors then say what the pairs that resolve
    each distance lose: :class:`~precision_audit.rope.pairs.PairError`).  A chunk never straddles a length.  With a distance above ``chunk`` (the default L/2) the chunks
    come in the pair pass's order (each right after its twin D earlier); each chunk's figures are kept and
    merged in position order, so the rows are those of a pass in position order, to the bit.  ``shifted(a, b)``
    (default ``block(a, b)[1]``) gives positions a..b-1 again only where holding their rows for later pairs
    would take more than 64 MiB (:class:`~precision_audit.rope.pairs.PairPass`).  The reductions run on a second
    thread where that pays (torch then maybe on one thread fewer until the pass ends: :class:`_ThreadPlan`);
    the rows are the same bits either way.  Used for live rotary modules
    (:func:`~precision_audit.hf.modules.audit_rope_module`) and apply kernels (:func:`precision_audit.trace.audit_rotary_kernel`).

    >>> def block(a, b):  # positions 0..b-1 rotated exactly, except position 5 (0.5 rad too far)
    ...     e = np.zeros((b - a, 1)); e[(np.arange(a, b) == 5)] = 0.5
    ...     return np.arange(a, b, dtype=float)[:, None], e
    >>> [(r.length, r.max_rotation_error, r.colliding_positions) for r in rotation_pass(block, 1, [4, 8], 3)]
    [(4, 0.0, 0), (8, 0.5, 0)]
    """
    shifted = shifted if shifted is not None else (lambda a, b: block(a, b)[1])
    pairs = None if distances == () else PairPass(lengths, distances, chunk, width, frequencies=frequencies)
    bounds = chunk_bounds(lengths, chunk) if pairs is None else pairs.chunks
    figures: dict[int, _Figures] = {}

    def reduce(j: int, item: Any) -> None:
        start, stop = bounds[j]
        rows, signed = item() if callable(item) else item
        signed = signed() if callable(signed) else signed
        figures[j] = _figures(rows, signed, start)
        if pairs is not None:
            pairs.add(signed, start, stop, shifted)

    # The reductions of a chunk run on a second thread while the next chunk is made (numpy releases the GIL in
    # its loops), in submission order; the code path itself (block, shifted) stays on this thread, and where
    # the pair pass re-runs earlier positions (shifted) everything runs here.  Beside torch's own threads the
    # two would fight over the cores (torch's idle workers spin for a while after each op, and a parallel op
    # waits for its slowest thread: 2 cores, 1M positions of a torch kernel, 3.3 s threaded against 2.4 s),
    # so where no core is spare the first chunks run here, timed, and the rest go threaded with one torch
    # thread fewer (:class:`_ThreadPlan`) only where that wins even if the code path scaled perfectly
    # with threads.  Either way the figures are the same bits.
    order = list(range(len(bounds)) if pairs is None else pairs.order)
    forced = pairs is not None and bool(pairs.rerun)
    plan = _ThreadPlan(serial=forced or not _spare_core(), may_switch=not forced)
    with ThreadPoolExecutor(max_workers=1) as pool, plan:
        pending = None
        for j in order:
            start, stop = bounds[j]
            t0 = time.perf_counter()
            item = block(start, stop)
            early = getattr(item, "seconds", 0.0)  # reading the block did here already: a reduction's time
            made = time.perf_counter() - t0 - early
            if pending is not None:
                pending.result()  # one chunk in flight: two chunks' rows alive at most
                pending = None
            if plan.serial:
                t0 = time.perf_counter()
                reduce(j, item)
                plan.timed(made, time.perf_counter() - t0 + early)
            else:
                pending = pool.submit(reduce, j, item)
            if progress is not None:
                progress(stop - start)
        if pending is not None:
            pending.result()
    worst, total, collisions, first_bad = 0.0, 0.0, 0, None
    last: F64 | None = None
    out, j = [], 0
    for L in sorted(lengths):  # the chunks' figures in position order
        while j < len(bounds) and bounds[j][1] <= L:
            f = figures.pop(j)
            collisions += f.collisions + (last is not None and _same_row(last, f.first))
            worst, total, last = max(worst, f.worst), total + f.total, f.last
            first_bad = f.first_bad if first_bad is None else first_bad
            j += 1
        out.append(RotationErrors(L, worst, total / (L * width), collisions,
                                  () if pairs is None else pairs.errors(L), first_bad))
    return out


def _spare_core() -> bool:
    """Whether this machine has a core beside the threads torch computes with (1 where torch is not imported)."""
    torch = sys.modules.get("torch")
    return (os.cpu_count() or 1) > (torch.get_num_threads() if torch is not None else 1)


class _ThreadPlan:
    """Whether :func:`rotation_pass` reduces its chunks on this thread (``serial``) or on the second one.

    Serial from the start where no core is spare beside torch's threads; then, if ``may_switch``, the second
    chunk's times (making it: ``made``, reducing it: ``reduced``; the first pays the warm-up) decide: with T
    cores for torch (its threads, at most the CPU count), making a chunk on T - 1 threads takes at most
    ``made * T / (T - 1)``, and threaded the pass takes the larger of that and ``reduced`` per chunk against
    ``made + reduced`` serial: it switches when ``made / (T - 1) < reduced``, torch's threads lowered by one
    until the pass ends (restored then)."""

    def __init__(self, serial: bool, may_switch: bool) -> None:
        self.serial, self.may_switch, self.seen, self.restore = serial, may_switch and serial, 0, 0

    def __enter__(self) -> _ThreadPlan:
        return self

    def timed(self, made: float, reduced: float) -> None:
        self.seen += 1
        if not self.may_switch or self.seen < 2:
            return
        self.may_switch = False
        torch = sys.modules.get("torch")
        cores = min(os.cpu_count() or 1, torch.get_num_threads()) if torch is not None else 1
        if self.switches(made, reduced, cores):
            self.restore = torch.get_num_threads()
            torch.set_num_threads(cores - 1)
            self.serial = False

    @staticmethod
    def switches(made: float, reduced: float, cores: int) -> bool:
        """Whether the pass goes threaded, torch on ``cores - 1`` threads.

        >>> _ThreadPlan.switches(0.005, 0.007, 2), _ThreadPlan.switches(0.02, 0.007, 2), _ThreadPlan.switches(0.02, 0.007, 4)
        (True, False, True)
        """
        return cores >= 2 and made / (cores - 1) < reduced

    def __exit__(self, *exc: object) -> None:
        if self.restore:
            sys.modules["torch"].set_num_threads(self.restore)


@dataclass(frozen=True)
class _Figures:
    """One chunk's figures: the max and sum of its absolute errors (non-finite: pi), its first non-finite
    position (None: none), the collisions within it, and its first and last stored rows."""

    worst: float
    total: float
    first_bad: int | None
    collisions: int
    first: F64
    last: F64


def _same_row(a: F64, b: F64) -> bool:
    """Rows equal element by element, nan equal to nan."""
    return bool(np.all((a == b) | (np.isnan(a) & np.isnan(b))))


def _collisions(rows: F64) -> int:
    """Rows equal to the row before, element by element (nan equal to nan).  Only rows whose first element
    equals the one before can be (a column, cheap to compare): the whole rows are compared for those.

    >>> _collisions(np.array([[1.0, 2.0], [1.0, 2.0], [1.0, 3.0], [np.nan, 3.0], [np.nan, 3.0]]))
    2
    """
    if rows.shape[0] < 2 or not rows.shape[1]:
        return max(rows.shape[0] - 1, 0)  # no column: every row equals the one before
    a, b = rows[1:, 0], rows[:-1, 0]
    maybe = np.flatnonzero((a == b) | (np.isnan(a) & np.isnan(b)))
    if maybe.size * 4 > a.size:  # most rows may collide: compare all at once
        a, b = rows[1:], rows[:-1]
    else:
        a, b = rows[maybe + 1], rows[maybe]
    return int(np.count_nonzero(((a == b) | (np.isnan(a) & np.isnan(b))).all(axis=1)))


def _figures(rows: F64, signed: F64, start: int) -> _Figures:
    """The figures of the chunk of positions start.. with these stored rows and signed errors."""
    collisions = _collisions(rows)
    err = np.abs(signed)
    mx, first_bad = float(err.max()), None
    if not math.isfinite(mx):
        bad = ~np.isfinite(err)
        first_bad = start + int(np.argmax(bad.any(axis=1)))
        err[bad] = math.pi
        mx = float(err.max())
    return _Figures(mx, float(err.sum()), first_bad, collisions, rows[0].copy(), rows[-1].copy())
