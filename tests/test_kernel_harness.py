"""The rotary-kernel harness (precision_audit.trace.kernel) with real kernels as referees.

Expected values come from: closed forms (an exact float64 kernel: error 0 up to the float64 reading; bfloat16
positions: the collisions of :func:`precision_audit.predict_positions`, first after 256); the rows the project
already computes for the same code path (transformers' rotary module through ``audit_rope_module``, the
``transformers`` / ``transformers-cast`` / ``mlx-cpu`` / ``llama.cpp-cpu`` / ``torchtune`` stack rows); and the
real third-party kernels read through the referee helpers of tests/referees (``mlx_rope_pairs``,
``ggml_rope_angles``), which read the same kernels on (1, 0) pairs independently of the harness.
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from referees import need

import precision_audit as pa
from precision_audit import testing
from precision_audit.rope import RopeSchedule, audit, exact_angles, stack, wrap
from precision_audit.trace import audit_rotary_kernel, pair_dims

torch = pytest.importorskip("torch")

DATA = Path(__file__).parent / "data"
READ = 4e-15  # atan2, the oracle, the wrap and a subtraction: a few ulps of 2 pi (rope/pairs.py)


def _neox(inv: Any, positions_dtype: Any = None) -> Any:
    """A NeoX kernel in plain torch: float32 angles (positions cast to ``positions_dtype`` first: Baichuan's bug
    with bfloat16), cos/sin cast to the data's dtype, the rotation in that dtype."""

    def rope(q: Any, k: Any, positions: Any) -> tuple[Any, Any]:
        p = positions if positions_dtype is None else positions.to(positions_dtype)
        a = p[:, None].float() * inv
        emb = torch.cat((a, a), -1)
        cos, sin = emb.cos().to(q.dtype), emb.sin().to(q.dtype)
        h = q.shape[-1] // 2

        def rot(x: Any) -> Any:
            return torch.cat((-x[:, h:], x[:, :h]), -1)

        return q * cos + rot(q) * sin, k * cos + rot(k) * sin

    return rope


def _exact(s: RopeSchedule, layout: str) -> Any:
    """Rotates in float64 with the oracle's angles: closed form, error 0 (up to the reading)."""
    xd, yd = pair_dims(layout, s.rotary)

    def rope(q: np.ndarray, k: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        a = exact_angles(positions, s.inv_freq())
        c, n = np.cos(a), np.sin(a)
        out = []
        for x in (q, k):
            y = x.astype(np.float64).copy()
            y[:, xd], y[:, yd] = x[:, xd] * c - x[:, yd] * n, x[:, xd] * n + x[:, yd] * c
            out.append(y)
        return out[0], out[1]

    return rope


# --------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("layout", ["neox", "gptj"])
def test_exact_kernel_has_zero_error(layout: str) -> None:
    s = RopeSchedule(head_dim=64, base=500000.0)
    rows = audit_rotary_kernel(_exact(s, layout), s, [1000, 70000], "float64", layout=layout, tensors="numpy")
    for r in rows:
        assert r.max_rotation_error <= READ and r.colliding_positions == 0 and r.verdict == "safe"
        assert all(p.max_rotation_error <= 2 * READ for p in r.pair_errors) and r.k_same_as_q
        assert r.first_nonfinite is None and r.layout == layout


def test_bf16_positions_collide_after_256() -> None:
    """Baichuan's bug: positions rounded to bfloat16.  Closed form: a position collides exactly when its bf16
    value equals its predecessor's, first at 257 (predict_positions counts them)."""
    s = RopeSchedule(head_dim=64)
    inv = torch.tensor(s.inv_freq_in("float32"))
    lens = [256, 257, 258, 4096, 32768]
    rows = audit_rotary_kernel(_neox(inv, torch.bfloat16), s, lens, "float32")
    got = {r.length: r.colliding_positions for r in rows}
    assert got[256] == 0 and got[257] == 0 and got[258] == 1  # 257 -> 256: the first collision
    for L in (4096, 32768):
        p = pa.predict_positions(L, "bf16")
        assert got[L] == L - p.distinct_values
    assert [r.verdict for r in rows][-1] == "broken"


def test_kernel_that_raises_names_itself() -> None:
    def broken(q: Any, k: Any, positions: Any) -> Any:
        raise RuntimeError("no CUDA device")

    with pytest.raises(ValueError, match=r"kernel broken raised "
                                         r"RuntimeError at positions 0..63, dtype bfloat16: no CUDA device"):
        audit_rotary_kernel(broken, RopeSchedule(head_dim=8), 128)


def test_wrong_shapes_and_returns() -> None:
    s = RopeSchedule(head_dim=8)
    with pytest.raises(ValueError, match=r"returned q_rot of shape \(64, 1, 8\), not q's \(64, 8\)"):
        audit_rotary_kernel(lambda q, k, p: (q[:, None], k), s, 128)
    with pytest.raises(ValueError, match=r"returned .*, not \(q_rot, k_rot\)"):
        audit_rotary_kernel(lambda q, k, p: q, s, 128)


def test_nan_in_the_probe_refused_and_beyond_it_a_finding() -> None:
    s = RopeSchedule(head_dim=8)
    inv = torch.tensor(s.inv_freq_in("float32"))
    with pytest.raises(ValueError, match="returned inf or nan at position 0"):
        audit_rotary_kernel(lambda q, k, p: (q * math.nan, k), s, 128)
    # float16 positions overflow to inf at 65520: inf * theta_0 -> cos/sin nan from there (a finding)
    (row,) = audit_rotary_kernel(_neox(inv, torch.float16), s, 70000, "float32")
    assert row.first_nonfinite == 65520 and row.verdict == "broken" and row.max_rotation_error == math.pi


def test_layouts_told_apart() -> None:
    s = RopeSchedule(head_dim=64)
    inv = torch.tensor(s.inv_freq_in("float32"))
    with pytest.raises(ValueError, match=r"layout 'gptj': .*looks like layout 'neox'.*pass layout='neox'"):
        audit_rotary_kernel(_neox(inv), s, 1024, layout="gptj")
    with pytest.raises(ValueError, match=r"layout 'neox': .*looks like layout 'gptj'.*pass layout='gptj'"):
        audit_rotary_kernel(_exact(s, "gptj"), s, 1024, "float64", tensors="numpy")
    with pytest.raises(ValueError, match=r"nor the gptj pairs: it is not a rotation"):
        audit_rotary_kernel(lambda q, k, p: (q * 0, k), s, 1024)


def test_k_rotated_differently_is_reported() -> None:
    s = RopeSchedule(head_dim=8)
    inv = torch.tensor(s.inv_freq_in("float32"))
    good = _neox(inv)

    def rope(q: Any, k: Any, p: Any) -> Any:
        return good(q, k, p)[0], good(q.float(), k.float(), p.to(torch.bfloat16))[1].to(q.dtype)

    (rq,) = audit_rotary_kernel(rope, s, 1024)
    (rk,) = audit_rotary_kernel(rope, s, 1024, measure="k")
    assert not rq.k_same_as_q and rq.verdict == "safe" and rk.colliding_positions > 0 and rk.measured == "k"


@pytest.mark.parametrize("bad, match", [
    (dict(apply=3), "apply 3"), (dict(schedule=None), "schedule"), (dict(lengths=0), "length 0"),
    (dict(dtypes="float12"), "float12"), (dict(dtypes=[]), "dtypes is empty"), (dict(layout="rotate"), "layout"),
    (dict(tensors="jax"), "tensors"), (dict(measure="v"), "measure"), (dict(chunk=0), "chunk"),
    (dict(distances=[5000]), "distance 5000"), (dict(cache=1), "cache 1"), (dict(match="yes"), "match"),
    (dict(schedule={"model_type": "llama"}), "schedule .*llama.*no head_dim"),
])
def test_bad_arguments_name_themselves(bad: dict, match: str) -> None:
    s = RopeSchedule(head_dim=8)
    kw: dict[str, Any] = dict(apply=_neox(torch.tensor(s.inv_freq_in("float32"))), schedule=s, lengths=1024)
    kw.update(bad)
    with pytest.raises(ValueError, match=match):
        audit_rotary_kernel(**kw)


# --------------------------------------------------------------------------- the pass's threads


@pytest.mark.parametrize("switch", [False, True])
def test_threaded_pass_gives_the_same_bits_and_restores_torch_threads(monkeypatch: Any, switch: bool) -> None:
    """Where no core is spare beside torch's threads the pass may go threaded after two chunks, torch on one
    thread fewer (hf.rotation._ThreadPlan): the rows are those of the serial pass, bit for bit (a kernel whose
    bf16 positions collide and overflow nothing: collisions, pair errors and means all exercised), the kernel
    ran on the lowered thread count, and torch's threads are restored after the pass, also when it raises."""
    from precision_audit.hf import rotation

    n0 = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        monkeypatch.setattr(rotation, "_spare_core", lambda: False)
        monkeypatch.setattr(rotation.os, "cpu_count", lambda: 2)
        s = RopeSchedule(head_dim=32)
        inv = torch.tensor(s.inv_freq_in("float32"))
        kernel, seen = _neox(inv, torch.bfloat16), []

        def rope(q: Any, k: Any, p: Any) -> Any:
            seen.append(torch.get_num_threads())
            return kernel(q, k, p)

        monkeypatch.setattr(rotation._ThreadPlan, "switches", staticmethod(lambda m, r, c: False))
        serial = audit_rotary_kernel(rope, s, [3000, 20000], chunk=1024)
        assert set(seen) == {2}
        seen.clear()
        monkeypatch.setattr(rotation._ThreadPlan, "switches", staticmethod(lambda m, r, c: switch))
        rows = audit_rotary_kernel(rope, s, [3000, 20000], chunk=1024)
        assert rows == serial and serial[-1].colliding_positions > 0
        assert set(seen[3:]) == ({1} if switch else {2}) and torch.get_num_threads() == 2

        def late(q: Any, k: Any, p: Any) -> Any:
            if int(p.max()) > 9000:
                raise RuntimeError("out of memory")
            return rope(q, k, p)

        with pytest.raises(ValueError, match="kernel late raised RuntimeError at positions"):
            audit_rotary_kernel(late, s, 20000, chunk=1024)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(n0)


@pytest.mark.parametrize("spare", [True, False])
def test_a_kernel_writing_into_its_own_buffers_is_read_before_its_next_call(monkeypatch: Any, spare: bool) -> None:
    """A kernel that returns the same output buffers every call (as a CUDA-graph-friendly kernel does): its
    output is read before the next call overwrites it, so the rows equal those of the same kernel returning
    fresh tensors, with the reductions threaded from the start or after the switch."""
    from precision_audit.hf import rotation

    s = RopeSchedule(head_dim=32)
    inv = torch.tensor(s.inv_freq_in("float32"))
    fresh = _neox(inv, torch.bfloat16)
    out: dict[int, Any] = {}

    def persistent(q: Any, k: Any, p: Any) -> Any:
        a, b = fresh(q, k, p)
        buf = out.setdefault(q.shape[0], (torch.empty_like(a), torch.empty_like(b)))
        return buf[0].copy_(a), buf[1].copy_(b)

    monkeypatch.setattr(rotation, "_spare_core", lambda: spare)
    monkeypatch.setattr(rotation._ThreadPlan, "switches", staticmethod(lambda m, r, c: True))
    n0 = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        want = audit_rotary_kernel(fresh, s, [3000, 20000], chunk=1024)
        got = audit_rotary_kernel(persistent, s, [3000, 20000], chunk=1024)
    finally:
        torch.set_num_threads(n0)
    assert [dataclasses.replace(r, kernel="k") for r in got] == [dataclasses.replace(r, kernel="k") for r in want]
    assert want[-1].colliding_positions > 0


def test_collisions_equal_the_definition() -> None:
    """hf.rotation._collisions (a first-column filter, then whole rows) against the definition: every element
    equal to the row before's, nan equal to nan, -0 equal to 0; rows with few and with most collisions."""
    from precision_audit.hf.rotation import _collisions

    rng = np.random.default_rng(7)
    for share in (0.0, 0.05, 0.5, 0.95):
        rows = rng.integers(-2, 3, size=(600, 6)).astype(np.float32)
        keep = np.flatnonzero(rng.random(599) < share) + 1
        rows[keep] = rows[keep - 1]
        rows[rng.random(rows.shape) < 0.02] = np.nan
        rows[rows == 0] *= np.where(rng.random(np.count_nonzero(rows == 0)) < 0.5, -1, 1)  # -0 and 0
        a, b = rows[1:], rows[:-1]
        want = int(np.count_nonzero(((a == b) | (np.isnan(a) & np.isnan(b))).all(axis=1)))
        assert _collisions(rows) == want
    assert _collisions(np.zeros((5, 0))) == 4 and _collisions(np.zeros((1, 3))) == 0


# --------------------------------------------------------------------------- transformers: apply_rotary_pos_emb


def _llama(cast: bool = False) -> tuple[Any, Any, Any]:
    """transformers' LlamaRotaryEmbedding (built from Llama 3.1's config.json, no weights) and the harness's
    cache and apply adapters for ``apply_rotary_pos_emb`` (q, k as (batch, heads, seq, head_dim))."""
    from precision_audit.trace import load_target

    mm = pytest.importorskip("transformers.models.llama.modeling_llama")
    rotary = load_target(str(DATA / "llama-3.1-8b.json"), "bfloat16" if cast else None).fn

    def cache(q: Any, positions: Any) -> tuple[Any, Any]:
        return rotary(q[None, None], positions[None])

    def apply(q: Any, k: Any, cos: Any, sin: Any) -> tuple[Any, Any]:
        qr, kr = mm.apply_rotary_pos_emb(q[None, None], k[None, None], cos, sin)
        return qr[0, 0], kr[0, 0]

    return rotary, cache, apply


@pytest.mark.parametrize("cast", [False, True], ids=["transformers", "transformers-cast"])
def test_transformers_apply_rotary_pos_emb(cast: bool) -> None:
    """apply_rotary_pos_emb on (1, 0) pairs in bf16 returns the module's bf16 cos/sin (1 * c + 0 * s is exact):
    the harness's rows equal audit_rope_module's rows of the same module (the same angles read), and the
    verdict is the stack row's (transformers: safe; after .to(bf16): broken)."""
    from precision_audit.hf import audit_rope_module

    rotary, cache, apply = _llama(cast)
    s = pa.load_model(DATA / "llama-3.1-8b.json").schedule
    lens = [4096, 32768]
    rows = audit_rotary_kernel(apply, s, lens, "bfloat16", cache=cache)
    mods = audit_rope_module(rotary, s, lens, dtype="bfloat16", match=False)
    name = "transformers-cast" if cast else "transformers"
    stack_rows = audit(s, stack(name, "bfloat16", s), lens)
    for r, m, st in zip(rows, mods, stack_rows):
        assert (r.max_rotation_error, r.colliding_positions) == (m.max_rotation_error, m.colliding_positions)
        assert r.mean_rotation_error == pytest.approx(m.mean_rotation_error, rel=1e-12)
        for a, b in zip(r.pair_errors, m.pair_errors):
            assert a.distance == b.distance and abs(a.max_rotation_error - b.max_rotation_error) <= 2 * READ
        assert r.verdict == m.verdict == st.verdict and r.k_same_as_q


# --------------------------------------------------------------------------- torchtune (GPT-J layout)


def test_torchtune_rotary_positional_embeddings() -> None:
    """torchtune's RotaryPositionalEmbeddings rotates interleaved pairs (GPT-J): the harness's row equals the
    rotation error of its float32 cache rounded once to bf16 (what its forward returns on (1, 0) pairs:
    tests/test_stacks_training.py), read independently here; the verdict is the torchtune stack row's;
    declared as NeoX it is refused, naming gptj."""
    from referees._torchtune import torchtune_module

    L = 32768
    s = RopeSchedule(head_dim=128, base=10000.0)
    mod = torchtune_module("rope").RotaryPositionalEmbeddings(dim=128, max_seq_len=L, base=10000.0)

    def apply(q: Any, k: Any, positions: Any) -> tuple[Any, Any]:
        return mod(q[None, :, None], input_pos=positions[None])[0, :, 0], mod(k[None, :, None],
                                                                               input_pos=positions[None])[0, :, 0]

    (row,) = audit_rotary_kernel(apply, s, L, "bfloat16", layout="gptj")
    cache = mod.cache.to(torch.bfloat16).double().numpy()
    e = np.abs(wrap(np.arctan2(cache[:, :, 1], cache[:, :, 0]) - exact_angles(np.arange(L), s.inv_freq())))
    assert row.max_rotation_error == float(e.max())
    assert row.mean_rotation_error == pytest.approx(float(e.mean()), rel=1e-12)
    (st,) = audit(s, stack("torchtune", "bfloat16", s), [L])
    assert row.verdict == st.verdict == "safe"
    with pytest.raises(ValueError, match="looks like layout 'gptj'"):
        audit_rotary_kernel(apply, s, 1024, "bfloat16", layout="neox")


# --------------------------------------------------------------------------- MLX mx.fast.rope, ggml's rope op


def _mlx_apply(dims: int, base: float, dtype: str) -> Any:
    mx = need("mlx.core")

    def apply(q: np.ndarray, k: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        out = []
        with mx.stream(mx.cpu):
            for x in (q, k):
                a = mx.array(x.astype(np.float32)).astype(getattr(mx, dtype)).reshape(x.shape[0], 1, 1, dims)
                y = mx.fast.rope(a, dims, traditional=False, base=base, scale=1.0,
                                 offset=mx.array(positions.astype(np.int32)))
                out.append(np.array(y.astype(mx.float32)).reshape(x.shape))
        return out[0], out[1]

    return apply


def _helper_row(c: np.ndarray, s_: np.ndarray, theta: np.ndarray) -> tuple[float, float]:
    e = np.abs(wrap(np.arctan2(s_, c) - exact_angles(np.arange(c.shape[0]), theta)))
    return float(e.max()), float(e.mean())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_mlx_fast_rope(dtype: str) -> None:
    """mx.fast.rope through the harness (numpy tensors) against the same kernel read by the referee helper
    (mlx_rope_pairs: the same pairs, so the same max error) and the mlx-cpu stack row (the acceptance of
    tests/test_stacks.py's referee: max within 10 %, mean within 5 %, the same verdict)."""
    from referees._mlx import mlx_rope_pairs

    L = 16384
    s = RopeSchedule(head_dim=128, base=500000.0)
    (row,) = audit_rotary_kernel(_mlx_apply(128, s.base, dtype), s, L, dtype, tensors="numpy")
    kc, ks = mlx_rope_pairs(np.arange(L), 128, s.base, dtype=dtype)
    k_max, k_mean = _helper_row(kc, ks, s.inv_freq())
    assert row.max_rotation_error == k_max and row.mean_rotation_error == pytest.approx(k_mean, rel=1e-12)
    (st,) = audit(s, stack("mlx-cpu", dtype, s), [L])
    assert st.max_rotation_error == pytest.approx(row.max_rotation_error, rel=0.10)
    assert st.mean_rotation_error == pytest.approx(row.mean_rotation_error, rel=0.05)
    assert st.verdict == row.verdict


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("mode, layout", [("neox", "neox"), ("normal", "gptj")])
def test_ggml_rope_op(mode: str, layout: str, dtype: str) -> None:
    """ggml's rope op (llama.cpp's CPU kernel) applied to the harness's rows: the same max error as the referee
    helper's reading of it (ggml_rope_angles), and the llama.cpp-cpu stack row's acceptance and verdict."""
    need("ggml")
    from referees._ggml import ggml_rope_angles, ggml_rope_apply

    L = 16384
    s = RopeSchedule(head_dim=128, base=10000.0)
    g = {"float32": "f32", "float16": "f16"}[dtype]

    def apply(q: np.ndarray, k: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (ggml_rope_apply(q, positions, s.base, mode=mode, dtype=g),
                ggml_rope_apply(k, positions, s.base, mode=mode, dtype=g))

    (row,) = audit_rotary_kernel(apply, s, L, dtype, layout=layout, tensors="numpy")
    kc, ks = ggml_rope_angles(np.arange(L), 128, s.base, mode=mode, dtype=g)
    k_max, k_mean = _helper_row(kc, ks, s.inv_freq())
    assert row.max_rotation_error == k_max and row.mean_rotation_error == pytest.approx(k_mean, rel=1e-12)
    (st,) = audit(s, stack("llama.cpp-cpu", dtype, s), [L])
    assert st.max_rotation_error == pytest.approx(row.max_rotation_error, rel=0.10)
    assert st.mean_rotation_error == pytest.approx(row.mean_rotation_error, rel=0.05)
    assert st.verdict == row.verdict


# --------------------------------------------------------------------------- testing.assert_rotary_kernel


def test_assert_rotary_kernel() -> None:
    s = RopeSchedule(head_dim=64)
    inv = torch.tensor(s.inv_freq_in("float32"))
    assert testing.assert_rotary_kernel(_neox(inv), s, length=8192) is None
    with pytest.raises(AssertionError) as e:
        testing.assert_rotary_kernel(_neox(inv, torch.bfloat16), s, length=8192)
    text = str(e.value)
    assert text.splitlines()[0].startswith("rotary kernel rope (neox) fails at length 8192 in bfloat16")
    assert "broken" in text and "colliding" in text
    with pytest.raises(AssertionError, match="max rotation error <= 0.001 rad"):
        testing.assert_rotary_kernel(_neox(inv), s, length=8192, max_rotation_error=1e-3)


def test_docs_drop_in_example_runs() -> None:
    """docs/kernels.md's drop-in pytest file, as it stands: its test functions pass."""
    import re

    page = (Path(__file__).parent.parent / "docs" / "kernels.md").read_text()
    m = re.search(r"<!-- kernel-example -->\n```python\n(.*?)```", page, re.S)
    assert m is not None, "docs/kernels.md has no kernel-example block"
    namespace: dict[str, Any] = {}
    exec(compile(m.group(1), "docs/kernels.md", "exec"), namespace)
    tests = [f for n, f in namespace.items() if n.startswith("test_") and callable(f)]
    assert len(tests) == 2
    for f in tests:
        assert f() is None
