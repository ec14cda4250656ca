"""The rotary-kernel harness: any apply-style RoPE kernel, run on unit vectors, against the exact schedule.

A kernel rotates q and k: ``apply(q, k, positions) -> (q_rot, k_rot)``, or, when it takes a cos/sin cache,
``apply(q, k, *cache(q, positions))``.  The harness gives it q and k of shape ``(n, head_dim)`` in a dtype,
holding (1, 0) in every frequency pair of the layout (``neox``: rotate-half, pair i is dims (i, i + r/2);
``gptj``: interleaved, pair i is dims (2i, 2i + 1); r the schedule's rotary dims), for positions
``0..L-1`` in chunks (memory stays bounded at 1M positions).  A pair (1, 0) rotated by angle a comes out as
the kernel's own stored (cos a, sin a): the harness reads the angles back (``atan2``, float64) and measures
them against the exact float64 angles ``m * theta_i`` of the schedule (:mod:`precision_audit.rope.oracle`),
as :func:`precision_audit.hf.audit_rope_module` measures a live rotary module's cos/sin (the same pass,
:func:`precision_audit.hf.rotation_pass`): absolute and pairwise rotation errors, collisions, the verdict.

Before the pass a probe (positions 0..63) checks that the kernel rotates the layout's pairs: each pair's
norm must be the same at every probe position (a rotation keeps it; the other layout mixes pairs, and
norms range from 0 to sqrt 2).  A kernel that raises, returns the wrong shapes, returns nan in the probe,
or rotates the other layout's pairs: ValueError naming it.

>>> import torch
>>> from precision_audit.rope import RopeSchedule
>>> inv = torch.tensor(RopeSchedule(head_dim=64).inv_freq_in("float32"))
>>> def rope(q, k, positions):  # a NeoX kernel: float32 angles, the rotation in the data's dtype
...     a = positions[:, None].float() * inv
...     cos, sin = torch.cat((a, a), -1).cos().to(q.dtype), torch.cat((a, a), -1).sin().to(q.dtype)
...     half = lambda x: torch.cat((-x[:, 32:], x[:, :32]), -1)
...     return q * cos + half(q) * sin, k * cos + half(k) * sin
>>> [(r.length, r.verdict) for r in audit_rotary_kernel(rope, RopeSchedule(head_dim=64), [4096, 65536])]
[(4096, 'safe'), (65536, 'safe')]
>>> audit_rotary_kernel(rope, RopeSchedule(head_dim=64), 4096, layout="gptj")
Traceback (most recent call last):
...
ValueError: layout 'gptj': rope does not rotate the interleaved pairs (dims 2i, 2i + 1): the pair norms range from 0 to 1.41 over positions 0..63; its output looks like layout 'neox' (rotate-half, dims i, i + r/2): pass layout='neox'
"""

from __future__ import annotations

import inspect
import math
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..checks import ArgumentTypeError, check_callable, check_choice, check_flag, check_int, describe
from ..formats import Format, get_format
from ..hf.modules import RotationErrors, match_recipe, named_schedule, rotation_pass
from ..rope import MAX_ROPE_LENGTH, PairError, cache_rounding_bound, check_rope_lengths
from ..rope.audit import default_chunk
from ..rope.oracle import ExactAngles
from ..rope.pairs import check_distances
from ..rope.schedules import RopeSchedule
from ..rows import Row
from ..verdicts import rope_verdict

__all__ = ["DEFAULT_KERNEL_LENGTHS", "LAYOUTS", "PROBE", "KernelRow", "audit_rotary_kernel", "pair_dims"]

F64 = npt.NDArray[np.float64]
LAYOUTS: dict[str, str] = {"neox": "rotate-half, dims i, i + r/2", "gptj": "interleaved, dims 2i, 2i + 1"}
DEFAULT_KERNEL_LENGTHS: tuple[int, ...] = (4096, 32768, 131072, 1048576)
PROBE = 64
"""Positions 0..PROBE-1 probe the layout: integers exact in every format with 8 or more significand bits."""
_TENSORS = ("torch", "numpy")


def pair_dims(layout: str, rotary: int) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """The dims of each frequency pair's two components (x, y) in a layout, for ``rotary`` rotated dims.

    >>> [a.tolist() for a in pair_dims("neox", 8)], [a.tolist() for a in pair_dims("gptj", 8)]
    ([[0, 1, 2, 3], [4, 5, 6, 7]], [[0, 2, 4, 6], [1, 3, 5, 7]])
    """
    half = rotary // 2
    if check_choice(layout, "layout", tuple(LAYOUTS)) == "neox":
        return np.arange(half), np.arange(half, rotary)
    return np.arange(0, rotary, 2), np.arange(1, rotary, 2)


@dataclass(frozen=True)
class KernelRow(Row):
    """Rotation error of an apply kernel at one context length (positions 0..length-1), one dtype.

    The metrics of :class:`precision_audit.hf.ModuleRow`: the rotation error of ``atan2`` of each rotated
    (1, 0) pair of q against the exact ``m * theta_i`` of ``schedule`` (rad, wrapped to [-pi, pi]; a non-finite
    value counts as pi), max and mean over positions and pairs; ``colliding_positions``: positions whose whole
    rotated q row equals the previous position's; ``pair_errors`` at distances D
    (:class:`~precision_audit.rope.PairError`); ``first_nonfinite``: the first position whose rotated q holds
    inf or nan (None: none); ``k_same_as_q``: k's rotation equals q's bit for bit at every position (both
    get the same unit vectors; False: audit k too, ``measure="k"``).  ``cache_bound`` is the rounding bound
    of ``dtype`` (:func:`~precision_audit.rope.cache_rounding_bound`), ``ratio`` the max error over it,
    ``verdict`` the rule of :mod:`precision_audit.verdicts`.  ``matches_recipe`` / ``diagnosis``: the rope
    preset with the closest figures (:func:`precision_audit.hf.match_recipe`; None unless ``match=True``).
    """

    kernel: str
    layout: str
    measured: str
    dtype: str
    length: int
    schedule: str
    max_rotation_error: float
    mean_rotation_error: float
    colliding_positions: int
    first_nonfinite: int | None
    k_same_as_q: bool
    cache_bound: float
    ratio: float
    verdict: str
    pair_errors: tuple[PairError, ...] = ()
    matches_recipe: str | None = None
    diagnosis: str | None = None

    def __post_init__(self) -> None:
        length = check_int(self.length, "length", minimum=1)
        check_int(self.colliding_positions, "colliding_positions", minimum=0, maximum=length - 1)


def _name(fn: Any) -> str:
    if inspect.isfunction(fn) or inspect.ismethod(fn) or inspect.isbuiltin(fn):
        return fn.__name__
    return type(fn).__name__


class _Kernel:
    """Calls the kernel on unit vectors for a range of positions and reads back its pairs (float64)."""

    def __init__(self, apply: Any, cache: Any, dtype: Format, tensors: str, head_dim: int, rotary: int,
                 layout: str, measure: str) -> None:
        self.apply, self.cache, self.dtype, self.tensors = apply, cache, dtype, tensors
        self.head_dim, self.layout, self.measure = head_dim, layout, measure
        self.x, self.y = pair_dims(layout, rotary)
        self.label = _name(apply)
        self.k_same = True
        self.top: int | None = None  # a dynamic schedule's group: each call also holds position top - 1
        self._ring: dict[str, list[Any]] = {}  # per use, two buffers taken in turn (torch outputs)
        self.calls, self.reuses, self._first = 0, False, None  # the first calls, read at once (:meth:`call`)

    def _buffer(self, use: str, rows: int, cols: int, dtype: Any) -> Any:
        """A torch buffer of (rows, cols) for ``use``, the other of its two each call: a chunk's copies stay
        intact while the next chunk is made (at most one chunk's reductions in flight), and no chunk allocates
        (fresh pages each chunk slowed the kernel itself by half here)."""
        import torch

        ring = self._ring.setdefault(use, [None, None, 0])
        i = ring[2]
        ring[2] ^= 1
        b = ring[i]
        if b is None or b.shape[0] < rows or b.shape[1] != cols or b.dtype != dtype:
            b = ring[i] = torch.empty(rows, cols, dtype=dtype)
        return b[:rows]

    def inputs(self, n: int) -> tuple[Any, Any, Any]:
        """q, k (unit vectors in the layout's pairs, ``n`` rows) and positions for a call."""
        if self.tensors == "torch":
            import torch

            q = torch.zeros(n, self.head_dim, dtype=self.dtype.torch_dtype)
            step = _step(self.x)
            if step:  # a slice: a plain fill, not an indexed write
                q[:, int(self.x[0]):int(self.x[-1]) + 1:step] = 1.0
            else:
                q[:, torch.as_tensor(self.x)] = 1.0
            return q, q.clone(), None
        q = np.zeros((n, self.head_dim), dtype=self.dtype.numpy_type)
        q[:, self.x] = 1.0
        return q, q.copy(), None

    def run(self, positions: npt.NDArray[np.int64]) -> tuple[Any, Any]:
        """The kernel's rotated q and k for these positions, as it returns them (checked: (n, head_dim) arrays or
        tensors)."""
        n = positions.size
        q, k, _ = self.inputs(n)
        if self.tensors == "torch":
            import torch

            pos: Any = torch.from_numpy(positions)
        else:
            pos = positions.copy()
        where = f"positions {int(positions.min())}..{int(positions.max())}, dtype {self.dtype.name}"
        args: tuple[Any, ...] = (pos,)
        if self.cache is not None:
            made = _guarded(self.cache, (q, pos), f"cache {_name(self.cache)}", where)
            args = tuple(made) if isinstance(made, (tuple, list)) else (made,)
            if not args or any(a is None for a in args):
                raise ValueError(f"cache {_name(self.cache)} returned {describe(made)}: give the tensors apply takes "
                                 f"after q and k, e.g. (cos, sin) ({where})")
            where += f", with cache {_name(self.cache)}'s output"
        out = _guarded(self.apply, (q, k, *args), f"apply kernel {self.label}", where)
        if not (isinstance(out, (tuple, list)) and len(out) == 2):
            got = type(out).__name__ + (f" of shape {tuple(out.shape)}" if hasattr(out, "shape") else "")
            raise ValueError(f"apply kernel {self.label} returned a {got}, not (q_rot, k_rot) ({where})")
        return self._checked(out[0], "q_rot", n, where), self._checked(out[1], "k_rot", n, where)

    def _checked(self, t: Any, what: str, n: int, where: str) -> Any:
        """``t`` when it is an (n, head_dim) tensor, or a numpy array of numbers (converted); else ValueError."""
        shape = getattr(t, "shape", None)
        if shape is None or tuple(shape) != (n, self.head_dim):
            raise ValueError(f"apply kernel {self.label} returned {what} of shape "
                             f"{None if shape is None else tuple(shape)}, not q's ({n}, {self.head_dim}) ({where})")
        if hasattr(t, "detach"):
            return t.detach().cpu()
        try:
            a = np.asarray(t)
            a.astype(np.float64)[:0]  # a numeric array (bf16 / fp8 from ml_dtypes included)
        except (TypeError, ValueError) as e:
            raise ValueError(f"apply kernel {self.label} returned {what} that is no array ({where}): {e}") from None
        return a

    def _rows(self, t: Any, use: str = "q", copy: bool = True) -> npt.NDArray[np.floating[Any]]:
        """The rows as numpy, in float32 when the output's format converts to it exactly (16-bit and 8-bit
        floats, float32: equal rows stay equal, nan stays nan), else float64; with ``copy=False``, a contiguous
        bfloat16, float16 or float32 tensor as it is (a view: the kernel's output is its own, not a buffer it
        writes again)."""
        if hasattr(t, "detach"):
            import torch

            if not copy and t.is_contiguous():
                if t.dtype == torch.bfloat16:
                    import ml_dtypes

                    return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
                if t.dtype in (torch.float16, torch.float32):
                    return t.numpy()

            narrow = t.is_floating_point() and t.element_size() <= 4
            b = self._buffer(f"rows {use}", t.shape[0], t.shape[1], torch.float32 if narrow else torch.float64)
            return b.copy_(t).numpy()
        kind, size = t.dtype.kind, t.dtype.itemsize  # ml_dtypes' bfloat16 / float8: kind "V", 2 / 1 bytes
        return t.astype(np.float32 if (kind == "f" and size <= 4) or (kind == "V" and size <= 2) else np.float64)

    def _columns(self, t: Any, rows: npt.NDArray[np.floating[Any]], dims: npt.NDArray[np.intp]) -> F64:
        """Columns ``dims`` in float64, C-ordered (``rows[:, dims]`` would be column-major: every later op
        against the C-ordered exact angles would walk memory across rows, several times slower)."""
        if hasattr(t, "detach"):
            import torch

            step = _step(dims)
            src = t[:, int(dims[0]):int(dims[-1]) + 1:step] if step else torch.index_select(t, 1, torch.from_numpy(dims))
            return self._buffer(f"columns {int(dims[0])}", src.shape[0], src.shape[1], torch.float64).copy_(src).numpy()
        return np.take(rows, dims, axis=1).astype(np.float64)

    def call(self, start: int, stop: int) -> Callable[[], tuple[npt.NDArray[np.floating[Any]], F64, F64]]:
        """The kernel run on positions start..stop-1 (here), and a function that reads its output
        (:meth:`read`; :func:`~precision_audit.hf.rotation_pass` calls it on the reductions' thread)."""
        pos = np.arange(start, stop, dtype=np.int64)
        if self.top is not None:
            pos = np.concatenate([np.array([self.top - 1], dtype=np.int64), pos])
        q, k = self.run(pos)
        if self.top is not None:
            q, k = q[1:], k[1:]
        if self.calls < 2 or self.reuses:  # read here: the first two calls, and a kernel that reuses its buffers
            if self.calls < 2:
                self.calls += 1
                self._note_buffers(q, k)
            t0 = time.perf_counter()
            got = self.read(q, k)
            return _Read(got, time.perf_counter() - t0)
        return lambda: self.read(q, k, copy=False)

    def _note_buffers(self, q: Any, k: Any) -> None:
        """On the first two calls: whether the second returned memory the first's outputs (still alive) hold:
        a kernel that writes into buffers of its own, whose output must be read before the next call."""
        mine = {_address(q), _address(k)} - {None}
        if self._first is None:
            self._first = (q, k, mine)  # kept alive: a new allocation cannot take these addresses meanwhile
            return
        self.reuses = bool(mine & self._first[2])
        self._first = None

    def read(self, q: Any, k: Any, copy: bool = True) -> tuple[npt.NDArray[np.floating[Any]], F64, F64]:
        """(rows, x, y) of the measured tensor: its whole rotated rows (float32 when exact, or the tensor's own
        memory with ``copy=False``, for collisions) and each pair's two components (float64); also notes whether
        k's rotation equals q's."""
        same = self.tensors == "torch" and _same_bits(q, k)  # k's rows are q's: one copy serves both
        qr = self._rows(q, "q", copy)
        kr = qr if same else self._rows(k, "k", copy)
        if self.k_same and kr is not qr and not np.array_equal(qr, kr, equal_nan=True):
            self.k_same = False
        t, rows = (q, qr) if self.measure == "q" or same else (k, kr)
        return rows, self._columns(t, rows, self.x), self._columns(t, rows, self.y)

    def pairs(self, start: int, stop: int) -> tuple[npt.NDArray[np.floating[Any]], F64, F64]:
        """(rows, x, y) for positions start..stop-1 (:meth:`call`, then :meth:`read`)."""
        return self.call(start, stop)()


class _Read:
    """A kernel output read already (on the kernel's thread): calling it gives the reading; ``seconds`` is what
    reading took (:func:`~precision_audit.hf.rotation_pass` counts it with the reductions, not the kernel)."""

    def __init__(self, got: tuple[Any, F64, F64], seconds: float) -> None:
        self.got, self.seconds = got, seconds

    def __call__(self) -> tuple[Any, F64, F64]:
        return self.got


def _address(t: Any) -> int | None:
    """Where a tensor's (or array's) memory starts (its storage's, for a view)."""
    if hasattr(t, "untyped_storage"):
        return int(t.untyped_storage().data_ptr())
    base = t
    while getattr(base, "base", None) is not None:
        base = base.base
    return int(base.__array_interface__["data"][0]) if hasattr(base, "__array_interface__") else None


def _step(dims: npt.NDArray[np.intp]) -> int:
    """The step of ``dims`` when they are an increasing arithmetic progression (a slice), else 0.

    >>> _step(np.arange(0, 8, 2)), _step(np.array([0, 1, 3]))
    (2, 0)
    """
    step = int(dims[1] - dims[0]) if dims.size > 1 else 1
    return step if dims.size and step > 0 and np.array_equal(dims, dims[0] + step * np.arange(dims.size)) else 0


def _same_bits(a: Any, b: Any) -> bool:
    """Two torch tensors of one dtype and shape with the same bits (compared as integers: a few times faster
    than ``torch.equal`` here); False where they differ, then the float rows are compared as numbers."""
    import torch

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype
            and a.shape == b.shape):
        return False
    ints = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(a.element_size())
    if ints is None or a.is_complex() or not (a.is_contiguous() and b.is_contiguous()):
        return bool(torch.equal(a, b))
    return bool(np.array_equal(a.view(ints).numpy(), b.view(ints).numpy()))


def _guarded(fn: Any, args: tuple[Any, ...], label: str, where: str) -> Any:
    """``fn(*args)``; any exception becomes ValueError naming ``label`` and ``where``."""
    try:
        return fn(*args)
    except Exception as e:
        raise ValueError(f"{label} raised {type(e).__name__} at {where}: {' '.join(str(e).split())[:300]}") from None


def _signed_into(d: F64, x: F64, y: F64, start: int, oracle: ExactAngles) -> None:
    """``d = wrap(atan2(y, x) - exact)`` (nan where not finite; ``oracle``: the schedule's exact angles): both lie
    in [-pi, pi], so the difference is wrapped by one step of 2 pi where it leaves [-pi, pi] (exact, by
    Sterbenz's lemma)."""
    with np.errstate(invalid="ignore"):
        np.arctan2(y, x, out=d)
        d -= oracle(np.arange(start, start + x.shape[0]))
        if d.size and not (np.maximum.reduce(d, axis=None) <= math.pi and np.minimum.reduce(d, axis=None) >= -math.pi):
            flat = d.reshape(-1)  # rare (a few per 10**4), or nan somewhere
            over = np.flatnonzero(np.abs(flat) > math.pi)
            flat[over] -= np.copysign(2 * math.pi, flat[over])


class _Signed:
    """The signed rotation errors of a chunk (:func:`_signed_into`) against the schedule's exact angles (its
    oracle buffers made once), a new array each call (the pair pass may hold it).  Splitting a chunk's rows over
    two threads gained nothing on 2 cores (0.50 s either way at 1M positions: torch's idle workers hold the
    other core)."""

    def __init__(self, theta: F64) -> None:
        self.oracle = ExactAngles(theta)

    def __call__(self, x: F64, y: F64, start: int) -> F64:
        d = np.empty_like(x)
        _signed_into(d, x, y, start, self.oracle)
        return d


def _spread(kernel: _Kernel, n: int) -> tuple[float, float, int | None]:
    """The smallest and largest pair norm over positions 0..n-1, and the first position with a non-finite
    output (None: none)."""
    _, x, y = kernel.pairs(0, n)
    bad = ~(np.isfinite(x) & np.isfinite(y))
    if bad.any():
        return math.nan, math.nan, int(np.argmax(bad.any(axis=1)))
    r = np.hypot(x, y)
    return float(r.min()), float(r.max()), None


def _probe(kernel: _Kernel, make_other: Callable[[], _Kernel], length: int) -> None:
    """ValueError unless the kernel rotates the layout's pairs (equal norms at positions 0..PROBE-1)."""
    n = min(PROBE, length)
    lo, hi, bad = _spread(kernel, n)
    if bad is not None:
        raise ValueError(f"apply kernel {kernel.label} returned inf or nan at position {bad} (dtype {kernel.dtype.name}): "
                         "a rotation of a unit vector is finite")
    tol = max(0.05, 8 * 2.0 ** -(kernel.dtype.significand_bits - 1))  # the data's rounding, with room
    if hi > 0 and hi - lo <= tol * hi:
        return
    other = make_other()
    desc = f"the pair norms range from {lo:.3g} to {hi:.3g} over positions 0..{n - 1}"
    lo2, hi2, bad2 = _spread(other, n)
    head = f"layout {kernel.layout!r}: {kernel.label} does not rotate the {LAYOUTS[kernel.layout].split(', ', 1)[0]}"
    head += f" pairs ({LAYOUTS[kernel.layout].split(', ', 1)[1]}): {desc}"
    if bad2 is None and hi2 > 0 and hi2 - lo2 <= tol * hi2:
        raise ValueError(f"{head}; its output looks like layout {other.layout!r} ({LAYOUTS[other.layout]}): pass "
                         f"layout={other.layout!r}")
    raise ValueError(f"{head}, nor the {other.layout} pairs: it is not a rotation of (1, 0) pairs (check the "
                     "schedule's head_dim and rotary_dim, and what the kernel returns)")


def _check_tensors(tensors: Any, dtypes: Sequence[Format]) -> str:
    tensors = check_choice(tensors, "tensors", _TENSORS)
    for f in dtypes:
        if tensors == "torch" and f.torch_dtype is None:
            raise ValueError(f"dtype {f.name}: torch has no dtype for it; use tensors='numpy' or another dtype")
    if tensors == "torch":
        import torch  # noqa: F401  (a clear ImportError before the run)
    return tensors


def _check_dtypes(dtypes: Any) -> list[Format]:
    items = [dtypes] if isinstance(dtypes, (str, Format)) or not isinstance(dtypes, Iterable) else list(dtypes)
    if not items:
        raise ValueError("dtypes is empty: give at least one dtype (e.g. 'bfloat16')")
    out = []
    for d in items:
        try:
            out.append(get_format(d))
        except ValueError as e:
            raise ValueError(f"dtype {describe(d)}: {e}") from None
    return list(dict.fromkeys(out))


def audit_rotary_kernel(
    apply: Callable[..., Any],
    schedule: Any,
    lengths: int | Iterable[int] = DEFAULT_KERNEL_LENGTHS,
    dtypes: Any = "bfloat16",
    *,
    layout: str = "neox",
    cache: Callable[..., Any] | None = None,
    tensors: str = "torch",
    measure: str = "q",
    match: bool = False,
    chunk: int | None = None,
    distances: int | Iterable[int] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[KernelRow]:
    """Audit an apply-style rotary kernel on unit vectors: one :class:`KernelRow` per (dtype, length).

    ``apply(q, k, positions) -> (q_rot, k_rot)``: ``q`` and ``k`` of shape ``(n, head_dim)`` in the dtype
    (``tensors="torch"``: torch tensors, positions an int64 tensor of shape (n,); ``"numpy"``: numpy arrays,
    ml_dtypes for bfloat16 and float8), the rotated tensors of the same shape.  With ``cache``, the kernel
    takes a cos/sin cache: ``apply(q, k, *cache(q, positions))`` (``cache`` returns the tensors ``apply``
    takes after q and k, e.g. ``(cos, sin)``; a rotary module's ``forward(x, position_ids)`` fits with a
    reshape).  Positions ``0..max(lengths)-1`` go in contiguous chunks (``chunk`` positions, default about
    2**19 angles), each position once: for a pair distance D above a chunk (the default L/2) a chunk D later
    runs right after its twin D earlier (:func:`precision_audit.hf.rotation_pass`); for a schedule whose frequencies depend on the length (dynamic NTK, LongRoPE above its
    pretraining context) each call also holds the length's last position first, as one forward over the whole
    sequence does.  ``schedule``: the float64 schedule the kernel is meant to implement (a
    :class:`~precision_audit.rope.RopeSchedule`, a config dict, a config.json path, a transformers config).
    ``layout``: ``"neox"`` (rotate-half) or ``"gptj"`` (interleaved) pairs within the first ``rotary_dim``
    dims.  ``measure``: the rotated tensor whose angles are read (``"q"`` or ``"k"``; each row says whether k's
    rotation equals q's).  ``match=True`` adds the rope preset with the closest figures (a recipe audit per
    length: slower).  ``distances``: the pair distances, as :func:`precision_audit.rope.audit` takes them.

    The kernel runs on the calling thread and the reading of its output on a second one, one chunk behind
    (:func:`precision_audit.hf.rotation_pass`); where no core is spare beside torch's threads and the first
    chunks show it pays, torch computes on one thread fewer until the pass ends (restored then, also on an
    error).  The rows are the same either way, bit for bit.

    A kernel that raises, returns the wrong shapes, returns inf or nan at positions 0..63, or rotates the other
    layout's pairs: ValueError naming it.  Beyond position 63 a non-finite output is a finding: error pi, the row
    says where it starts (``first_nonfinite``).

    >>> import numpy as np
    >>> from precision_audit.rope import RopeSchedule, exact_angles
    >>> s = RopeSchedule(head_dim=8)
    >>> def exact(q, k, positions):  # rotates in float64: no error
    ...     a = exact_angles(positions, s.inv_freq())
    ...     c, n = np.cos(a), np.sin(a)
    ...     return [np.concatenate([x[:, :4] * c - x[:, 4:] * n, x[:, :4] * n + x[:, 4:] * c], 1) for x in (q, k)]
    >>> (row,) = audit_rotary_kernel(exact, s, 1000, "float64", tensors="numpy")
    >>> row.max_rotation_error < 1e-15, row.verdict, row.k_same_as_q
    (True, 'safe', True)
    """
    check_callable(apply, "apply")
    if apply is None:
        raise ArgumentTypeError("apply must be a callable kernel: apply(q, k, positions) -> (q_rot, k_rot)")
    check_callable(cache, "cache")
    if schedule is None:
        raise ArgumentTypeError("schedule must be given: the RopeSchedule (or config) the kernel implements")
    sched = named_schedule(apply, schedule)
    lens = check_rope_lengths(lengths)
    fmts = _check_dtypes(dtypes)
    layout = check_choice(layout, "layout", tuple(LAYOUTS))
    tensors = _check_tensors(tensors, fmts)
    measure = check_choice(measure, "measure", ("q", "k"))
    match = check_flag(match, "match")
    chunk = default_chunk(sched.n_freq) if chunk is None else check_int(chunk, "chunk", minimum=1,
                                                                         maximum=MAX_ROPE_LENGTH)
    progress = check_callable(progress, "progress")
    asked = check_distances(distances, lens)
    rows: list[KernelRow] = []
    for fmt in fmts:
        def make(lay: str, fmt: Format = fmt) -> _Kernel:
            return _Kernel(apply, cache, fmt, tensors, sched.head_dim, sched.rotary, lay, measure)

        kernel = make(layout)
        _probe(kernel, lambda: make("gptj" if layout == "neox" else "neox"), lens[-1])
        errs = _pass(kernel, sched, lens, chunk, progress, asked)
        bound = cache_rounding_bound(fmt, sched.cos_sin_scale)
        for e in errs:
            m: tuple[Any, ...] = (None, None)
            if match:
                m = match_recipe(sched, fmt.name, e.length, e.max_rotation_error, e.mean_rotation_error)[:2]
            rows.append(KernelRow(
                kernel=kernel.label, layout=layout, measured=measure, dtype=fmt.name, length=e.length,
                schedule=sched.describe(), max_rotation_error=e.max_rotation_error,
                mean_rotation_error=e.mean_rotation_error, colliding_positions=e.colliding_positions,
                first_nonfinite=e.first_nonfinite, k_same_as_q=kernel.k_same, cache_bound=bound,
                ratio=e.max_rotation_error / bound,
                verdict=rope_verdict(e.max_rotation_error, e.colliding_positions, pair_errors=e.pair_errors),
                pair_errors=e.pair_errors, matches_recipe=m[0], diagnosis=m[1]))
    return rows


def _pass(kernel: _Kernel, sched: RopeSchedule, lens: Sequence[int], chunk: int,
          progress: Callable[[int], None] | None, distances: Sequence[int] | None) -> list[RotationErrors]:
    """One pass per frequency group (:meth:`RopeSchedule.frequency_key`) over the kernel's rotated pairs."""
    groups: dict[int | None, list[int]] = {}
    for L in lens:
        groups.setdefault(sched.frequency_key(L), []).append(L)
    out: list[RotationErrors] = []
    for key, ls in sorted(groups.items(), key=lambda kv: max(kv[1])):
        signed = _Signed(sched.inv_freq(key))  # used by one thread at a time: the reductions', or this one
        kernel.top = None if key is None else max(ls)
        kernel.calls, kernel._first = 0, None  # the pass's first two calls tell whether it reuses its buffers

        def block(start: int, stop: int, signed: _Signed = signed) -> Callable[[], tuple[Any, F64]]:
            read = kernel.call(start, stop)  # the kernel on this thread; reading its output on the reductions'

            def reduced() -> tuple[Any, F64]:
                rows, x, y = read()
                return rows, signed(x, y, start)

            reduced.seconds = getattr(read, "seconds", 0.0)  # type: ignore[attr-defined]  # read here already
            return reduced

        def shifted(start: int, stop: int, signed: _Signed = signed) -> F64:
            _, x, y = kernel.pairs(start, stop)
            return signed(x, y, start)

        out += rotation_pass(block, sched.n_freq, ls, chunk, shifted=shifted, progress=progress, distances=distances,
                             frequencies=sched.inv_freq(key))
    return sorted(out, key=lambda e: e.length)
