"""Run ggml's real rope op (llama.cpp's CPU kernel) on (1, 0) pairs, through the ``ggml-python`` bindings.

The rope op rotates each pair ``(x0, x1)`` of a row by ``theta = p * theta_i``:
``(x0 cos - x1 sin, x0 sin + x1 cos)`` with ``cos``/``sin`` already multiplied by
the YaRN mscale.  Fed ``(1, 0)`` it returns exactly its ``cos``/``sin`` values
(``1 * c - 0 * s = c`` and ``1 * s + 0 * c = s`` are exact in float32), stored
in the tensor's type: float32, or float16 rounded to nearest even.  So the
returned arrays ARE the kernel's cos/sin cache, as llama.cpp computes it in
``ggml_compute_forward_rope_flt`` (ggml ``src/ggml-cpu/ops.cpp``; see
``/work/notes/stacks-llamacpp.md`` for the arithmetic).

Pair layouts (``mode``): ``"neox"`` pairs element ``i`` with ``i + n_dims/2``
(GGML_ROPE_TYPE_NEOX = 2: Qwen, Gemma, Phi-3, ...); ``"normal"`` pairs the
neighbours ``2i, 2i + 1`` (GGML_ROPE_TYPE_NORMAL = 0: Llama, Mistral, DeepSeek,
as llama.cpp's converter permutes their q/k weights).  Either way, pair ``i``
uses frequency ``theta_i`` and ``freq_factors[i]``.

Used by the tests only (``tests/test_stack_ggml.py``, ``tests/test_stacks.py``); ``ggml`` is
imported lazily so importing this module never needs it (the tests get it through
:func:`referees.need`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["MODES", "ggml_mrope_angles", "ggml_rope_angles", "ggml_rope_apply", "libm_cosf_sinf"]

MODES: dict[str, int] = {"normal": 0, "neox": 2}  # GGML_ROPE_TYPE_NORMAL, GGML_ROPE_TYPE_NEOX (ggml.h)
_DTYPES: dict[str, tuple[str, Any]] = {"f32": ("GGML_TYPE_F32", np.float32), "f16": ("GGML_TYPE_F16", np.float16)}
_CHUNK = 1 << 15  # positions per graph: bounds the context's memory (32K x 128 x 4 bytes = 16 MiB)


def libm_cosf_sinf() -> tuple[Callable[[npt.ArrayLike], npt.NDArray[np.float32]], ...]:
    """The C library's own ``cosf`` and ``sinf`` (the functions ggml's CPU kernel calls), elementwise on float32.

    Raises OSError when no C math library can be found.
    """
    name = ctypes.util.find_library("m")
    if name is None:
        raise OSError("no C math library (libm) found")
    lib = ctypes.CDLL(name)
    out = []
    for fn in ("cosf", "sinf"):
        f = getattr(lib, fn)
        f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
        scalar = np.frompyfunc(lambda x, f=f: f(float(x)), 1, 1)
        out.append(lambda x, g=scalar: np.asarray(g(np.asarray(x, dtype=np.float32)), dtype=np.float32))
    return tuple(out)


def _check(positions: npt.NDArray[np.int64], n_dims: int, mode: str, dtype: str,
           freq_factors: Sequence[float] | None) -> None:
    if mode not in MODES:
        raise ValueError(f"mode {mode!r} must be one of {sorted(MODES)}")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype {dtype!r} must be one of {sorted(_DTYPES)}")
    if n_dims < 2 or n_dims % 2:
        raise ValueError(f"n_dims {n_dims} must be an even number >= 2")
    if positions.ndim != 1 or positions.size == 0:
        raise ValueError(f"positions must be a non-empty 1-d sequence, got shape {positions.shape}")
    if positions.min() < -(2**31) or positions.max() >= 2**31:
        raise ValueError("positions must fit llama.cpp's int32 position tensor")
    if freq_factors is not None and len(freq_factors) != n_dims // 2:
        raise ValueError(f"freq_factors has {len(freq_factors)} values, n_dims {n_dims} needs {n_dims // 2}")


def _input_row(n_dims: int, mode: str) -> npt.NDArray[np.float32]:
    """One head row holding (1, 0) in every pair of the given layout."""
    row = np.zeros(n_dims, dtype=np.float32)
    if mode == "neox":
        row[: n_dims // 2] = 1.0
    else:
        row[0::2] = 1.0
    return row


def _split(out: npt.NDArray[Any], n_dims: int, mode: str) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(cos, sin) per pair from output rows [n, n_dims] of the given layout."""
    half = n_dims // 2
    if mode == "neox":
        c, s = out[:, :half], out[:, half:]
    else:
        c, s = out[:, 0::2], out[:, 1::2]
    return c.astype(np.float64), s.astype(np.float64)


def _run_chunk(g: Any, pos: npt.NDArray[np.int32], n_dims: int, mode: str, dtype: str,
               ff: npt.NDArray[np.float32] | None, params: tuple[float, ...], n_ctx_orig: int,
               data: npt.NDArray[Any] | None = None) -> npt.NDArray[Any]:
    n = pos.size
    type_name, np_type = _DTYPES[dtype]
    gtype = getattr(g, type_name)
    item = np.dtype(np_type).itemsize
    mem = 3 * n * n_dims * item + 4 * n + 4 * n_dims + (1 << 22) + 8 * g.ggml_tensor_overhead() \
        + g.ggml_graph_overhead()
    ctx = g.ggml_init(g.ggml_init_params(mem_size=mem, mem_buffer=None, no_alloc=False))
    if not ctx:
        raise RuntimeError(f"ggml_init could not allocate {mem} bytes")
    try:
        a = g.ggml_new_tensor_3d(ctx, gtype, n_dims, 1, n)  # ne0 = head dim, ne1 = 1 head, ne2 = tokens
        b = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_I32, n)
        # the arrays are bound to names so they outlive the copies (a temporary's .ctypes.data would dangle)
        src = np.broadcast_to(_input_row(n_dims, mode), (n, n_dims)) if data is None else data
        rows = np.ascontiguousarray(np.asarray(src, dtype=np.float32).astype(np_type))
        pos32 = np.ascontiguousarray(pos, dtype=np.int32)
        ctypes.memmove(g.ggml_get_data(a), rows.ctypes.data, rows.nbytes)
        ctypes.memmove(g.ggml_get_data(b), pos32.ctypes.data, pos32.nbytes)
        c = None
        if ff is not None:
            c = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_F32, ff.size)
            ctypes.memmove(g.ggml_get_data(c), ff.ctypes.data, ff.nbytes)
        freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow = params
        r = g.ggml_rope_ext(ctx, a, b, c, n_dims, MODES[mode], n_ctx_orig, freq_base, freq_scale,
                            ext_factor, attn_factor, beta_fast, beta_slow)
        graph = g.ggml_new_graph(ctx)
        g.ggml_build_forward_expand(graph, r)
        status = g.ggml_graph_compute_with_ctx(ctx, graph, 1)
        if status != 0:
            raise RuntimeError(f"ggml_graph_compute_with_ctx failed with status {status}")
        buf = (ctypes.c_char * (n * n_dims * item)).from_address(g.ggml_get_data(r))
        return np.frombuffer(buf, dtype=np_type).reshape(n, n_dims).copy()
    finally:
        g.ggml_free(ctx)


def ggml_rope_angles(positions: Sequence[int] | npt.NDArray[np.integer], n_dims: int, freq_base: float,
                     freq_scale: float = 1.0, ext_factor: float = 0.0, attn_factor: float = 1.0,
                     beta_fast: float = 32.0, beta_slow: float = 1.0, n_ctx_orig: int = 0,
                     freq_factors: Sequence[float] | None = None, mode: str = "neox",
                     dtype: str = "f32") -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """ggml's rope op applied to (1, 0) pairs: its (cos, sin) values, float64 arrays [len(positions), n_dims/2].

    Arguments are those of ``ggml_rope_ext`` (float ones pass as C floats, i.e.
    rounded to float32, as llama.cpp passes them); ``freq_factors`` is the
    ``rope_freqs`` tensor (float32, one value per pair, dividing theta).
    ``dtype="f16"`` runs the op on float16 data: the values returned are the
    stored float16 outputs.  Runs on one thread; positions are fed in chunks
    of 32K (the op caches per position, so chunking changes nothing).
    """
    import ggml.ggml as g

    pos = np.asarray(positions, dtype=np.int64)
    _check(pos, n_dims, mode, dtype, freq_factors)
    ff = None if freq_factors is None else np.ascontiguousarray(freq_factors, dtype=np.float32)
    params = (freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow)
    parts = [_run_chunk(g, pos[i:i + _CHUNK].astype(np.int32), n_dims, mode, dtype, ff, params, n_ctx_orig)
             for i in range(0, pos.size, _CHUNK)]
    return _split(np.concatenate(parts), n_dims, mode)


def ggml_mrope_angles(positions: npt.NDArray[np.integer], n_dims: int, freq_base: float,
                      sections: Sequence[int], interleaved: bool = False) -> tuple[npt.NDArray[np.float64], ...]:
    """ggml's multi-section rope op (``ggml_rope_multi``, mode GGML_ROPE_TYPE_MROPE = 8, or IMROPE = 40 when
    ``interleaved``: llama.cpp's Qwen2-VL / Qwen3-VL path) applied to (1, 0) pairs in the NeoX layout (ggml
    rotates M-RoPE that way): its (cos, sin), float64 arrays [tokens, n_dims/2].

    ``positions``: int array [4, tokens] (temporal, height, width, extra ids, as llama.cpp lays them out:
    ``pos[i + n * axis]``); ``sections``: up to 4 section sizes (pairs).  float32 data, one thread.
    """
    import ggml.ggml as g

    pos = np.asarray(positions, dtype=np.int64)
    if pos.ndim != 2 or pos.shape[0] != 4 or pos.shape[1] == 0:
        raise ValueError(f"positions must be [4, tokens], got shape {pos.shape}")
    n = pos.shape[1]
    _check(pos[0], n_dims, "neox", "f32", None)
    sect = (ctypes.c_int * 4)(*(list(sections) + [0] * (4 - len(sections))))
    mem = 3 * n * n_dims * 4 + 16 * n + (1 << 22) + 8 * g.ggml_tensor_overhead() + g.ggml_graph_overhead()
    ctx = g.ggml_init(g.ggml_init_params(mem_size=mem, mem_buffer=None, no_alloc=False))
    if not ctx:
        raise RuntimeError(f"ggml_init could not allocate {mem} bytes")
    try:
        a = g.ggml_new_tensor_3d(ctx, g.GGML_TYPE_F32, n_dims, 1, n)
        b = g.ggml_new_tensor_1d(ctx, g.GGML_TYPE_I32, 4 * n)
        rows = np.ascontiguousarray(np.broadcast_to(_input_row(n_dims, "neox"), (n, n_dims)))
        pos32 = np.ascontiguousarray(pos.reshape(-1), dtype=np.int32)  # axis-major, as pos[i + n * axis]
        ctypes.memmove(g.ggml_get_data(a), rows.ctypes.data, rows.nbytes)
        ctypes.memmove(g.ggml_get_data(b), pos32.ctypes.data, pos32.nbytes)
        mode = g.GGML_ROPE_TYPE_IMROPE if interleaved else g.GGML_ROPE_TYPE_MROPE
        r = g.ggml_rope_multi(ctx, a, b, None, n_dims, sect, mode, 0, freq_base, 1.0, 0.0, 1.0, 32.0, 1.0)
        graph = g.ggml_new_graph(ctx)
        g.ggml_build_forward_expand(graph, r)
        status = g.ggml_graph_compute_with_ctx(ctx, graph, 1)
        if status != 0:
            raise RuntimeError(f"ggml_graph_compute_with_ctx failed with status {status}")
        buf = (ctypes.c_char * (n * n_dims * 4)).from_address(g.ggml_get_data(r))
        out = np.frombuffer(buf, dtype=np.float32).reshape(n, n_dims).copy()
    finally:
        g.ggml_free(ctx)
    return _split(out, n_dims, "neox")


def ggml_rope_apply(x: npt.ArrayLike, positions: Sequence[int] | npt.NDArray[np.integer], freq_base: float,
                    mode: str = "neox", dtype: str = "f32") -> npt.NDArray[np.float64]:
    """ggml's rope op on the given rows ``x`` (n, n_dims), one head per token at ``positions``: the rotated rows
    as float64 (the op's stored float32 or float16 values).  The apply-kernel form of :func:`ggml_rope_angles`
    (no YaRN, no factors), for the rotary-kernel harness."""
    import ggml.ggml as g

    pos = np.asarray(positions, dtype=np.int64)
    data = np.asarray(x, dtype=np.float64)
    n_dims = data.shape[1]
    _check(pos, n_dims, mode, dtype, None)
    params = (freq_base, 1.0, 0.0, 1.0, 32.0, 1.0)
    parts = [_run_chunk(g, pos[i:i + _CHUNK].astype(np.int32), n_dims, mode, dtype, None, params, 0,
                        data[i:i + _CHUNK]) for i in range(0, pos.size, _CHUNK)]
    return np.concatenate(parts).astype(np.float64)
