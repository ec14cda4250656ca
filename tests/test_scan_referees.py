"""``scan`` on real third-party code (issue 51, item 4): torchtune's rotary module files and diffusers' axial RoPE,
each imported and run here (never copied).

* torchtune 0.6.1 (``tests/referees/_torchtune.py``: the two module files, loaded by path without the package's
  ``__init__``): ``forward`` indexes a cache built in float32 at construction, so every mode is safe; but
  ``build_rope_cache`` builds its positions with ``torch.arange(max_seq_len, dtype=self.theta.dtype)``, so after
  ``.to(torch.bfloat16)`` (``theta`` a bf16 buffer) the positions are bfloat16: broken, found at that line (the
  line is read from the installed source, not written here), with 8192 - 897 colliding rows (ml_dtypes: 0..8191
  take 897 distinct bfloat16 values).
* diffusers 0.42.1: ``FluxPosEmbed`` (float64 frequencies on a CPU, int ids made float32 inside) is safe as built
  and after the cast, the verdict ``config``'s axial audit gives the same ids on its ids-fp32 path
  (:func:`precision_audit.rope.axial.audit_axial`); ``get_1d_rotary_pos_embed`` is safe in float32.

* timm 1.0.31 (``timm/layers/pos_embed_sincos.py``) and litgpt 0.5.13 (``litgpt/model.py``), scanned by path:
  ``import timm`` needs torchvision and ``import litgpt`` lightning (neither installable here beside torch 2.13),
  so scan loads each file with its packages as namespace stand-ins (their ``__init__`` not run) and every row
  carries that note; litgpt's file also imports its checkpoint converter (lightning), stubbed around the scan
  (:data:`referees._pkgfile.LITGPT_STUBS`).  Both are float32 code: ``RotaryEmbedding`` /
  ``RotaryEmbeddingCat.get_embed`` safe as built and after ``.to(bfloat16)`` (bands rebuilt in float32 after a
  cast; a cache built at construction rounded to bf16 only as the finished cos/sin), ``build_rope_cache`` safe
  in float32, its only mode; each test says why and checks the dtypes on the real module.  The packages are
  installed with ``--no-deps`` (.ci/run); a missing one skips (fails under CI).  By NAME the same:
  ``scan timm.layers.pos_embed_sincos`` gives the file's rows, and ``scan timm`` finds ``timm/layers``'
  position code, listing the modules that still do not import with why.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from referees import need
from referees._pkgfile import LITGPT_STUBS, package_file, package_folder, stubbed
from referees._torchtune import FILES, torchtune_module

torch = pytest.importorskip("torch")
L = 8192


def _torchtune_file(which: str) -> Path:
    torchtune_module(which)  # skips (or fails under CI) when torchtune is missing
    spec = importlib.util.find_spec("torchtune")
    return Path(next(iter(spec.submodule_search_locations))) / FILES[which]


def _line(path: Path, text: str) -> int:
    (n,) = [i for i, s in enumerate(path.read_text().splitlines(), 1) if text in s]
    return n


@pytest.mark.parametrize("which, cls", [("rope", "RotaryPositionalEmbeddings"),
                                        pytest.param("llama3_1", "Llama3ScaledRoPE", marks=pytest.mark.slow)])
def test_torchtune_rotary_files(which: str, cls: str) -> None:
    from precision_audit.scan import scan

    path = _torchtune_file(which)
    rows = [r for r in scan(str(path), length=L) if r.callable.startswith(cls)]
    forward = {r.mode: r.verdict for r in rows if r.callable == f"{cls}.forward" and r.status == "scanned"}
    assert forward == dict.fromkeys(["float32", "bfloat16-inputs", "float16-inputs", "cast-bfloat16"], "safe")
    cache = {r.mode: r for r in rows if r.callable == f"{cls}.build_rope_cache"}
    assert cache["float32"].verdict == "safe"
    bad = cache["cast-bfloat16"]
    distinct = np.unique(np.arange(L).astype(ml_dtypes.bfloat16)).size
    assert bad.verdict == "broken"
    assert bad.why == f"local order lost: {L - distinct} positions share the previous one's rotation"
    assert (bad.op, bad.where) == ("aten.arange.default", f"{path.name}:{_line(path, 'seq_idx = torch.arange(')}")


def test_diffusers_flux_pos_embed_matches_config_audit() -> None:
    need("diffusers")
    from precision_audit.rope.axial import FAMILIES, audit_axial
    from precision_audit.scan import scan

    flux = FAMILIES["FluxTransformer2DModel"]
    rows = scan("diffusers.models.transformers.transformer_flux", length=L,
                args={"axes_dim": tuple(flux.axes_dim), "theta": 10000})
    got = {r.mode: r.verdict for r in rows if r.callable == "FluxPosEmbed.forward"}
    axial = audit_axial(flux, (L - 1,) * 3, ["ids-fp32"], ["bfloat16"], cap=L)
    expected = max((r.verdict for r in axial), key=("safe", "degraded", "broken").index)
    assert got == {"float32": expected, "cast-bfloat16": expected} == {"float32": "safe", "cast-bfloat16": "safe"}


@pytest.mark.slow  # every function of diffusers.models.embeddings in every mode (13 s): FluxPosEmbed stays default
def test_diffusers_get_1d_rotary_pos_embed() -> None:
    need("diffusers")
    from precision_audit.scan import scan

    rows = [r for r in scan("diffusers.models.embeddings", length=L, modes=["float32"])
            if r.callable == "get_1d_rotary_pos_embed"]
    assert [(r.status, r.kind, r.verdict) for r in rows] == [("scanned", "rotation", "safe")]
    assert os.path.basename(rows[0].defined).startswith("embeddings.py:")


def _as_hf_scan(rows: list) -> str:
    """hf-scan's question asked of scan's rows: damaged as built (a float32 / vector mode not safe), damaged by
    the cast (only the cast mode not safe), or safe."""
    modes = {r.mode: r.verdict for r in rows}
    if any(modes[m] != "safe" for m in ("float32", "bfloat16-inputs", "float16-inputs")):
        return "damaged as built"
    return "damaged by the cast" if modes["cast-bfloat16"] != "safe" else "safe"


@pytest.mark.parametrize("family, cls", [("llama", "LlamaRotaryEmbedding"),
                                         # two layer types, each a scan of four modes: 15 s; in the slow pass
                                         pytest.param("gemma3", "Gemma3RotaryEmbedding", marks=pytest.mark.slow)])
def test_transformers_class_as_hf_scan(family: str, cls: str) -> None:
    """``scan`` of a transformers modelling file gives ``hf-scan``'s verdict for its rotary class, per layer type
    (built the same way, from the default config): damaged by the cast (the bf16 ``inv_freq``) = the as-built
    modes safe and the cast mode degraded (fast pairs radians off, those that resolve a distance not:
    precision_audit.verdicts), at the line of the forward that multiplies the frequencies."""
    from _thirdparty import private
    from precision_audit.hf import scan as hf_scan
    from precision_audit.scan import scan

    private(f"transformers.models.{family}.modeling_{family}", cls)
    hf = {r.layer_type: r.verdict for r in hf_scan(length=L, families=[family]) if r.module_class == cls}
    rows = [r for r in scan(f"transformers.models.{family}.modeling_{family}", length=L)
            if r.callable == f"{cls}.forward"]
    by_type: dict = {}
    for r in rows:
        lt = r.call.split("layer_type=")[1].strip("')") if "layer_type=" in r.call else None
        by_type.setdefault(lt, []).append(r)
    assert {lt: _as_hf_scan(rs) for lt, rs in by_type.items()} == hf
    assert set(hf.values()) == {"damaged by the cast"}
    for rs in by_type.values():
        (cast,) = [r for r in rs if r.mode == "cast-bfloat16"]
        assert cast.verdict == "degraded" and "inv_freq" in cast.op and cast.where.startswith(f"modeling_{family}.py:")


def test_transformers_model_classes_are_not_built() -> None:
    """A ``PreTrainedModel`` is a model, however its ``__init__`` makes its layers: Qwen2-VL's ``Qwen2VLModel``
    makes them by ``_from_config`` (no ``nn.Linear(`` in its text), and built from its default config it is the
    8B model (a scan of the file at 8K ran out of 23 GB): listed as holding layers, never built; its rotary
    class is built and judged."""
    from _thirdparty import private
    from precision_audit.scan import candidates

    private("transformers.models.qwen2_vl.modeling_qwen2_vl", "Qwen2VLModel")
    import transformers.models.qwen2_vl.modeling_qwen2_vl as qwen2_vl

    layers = {c.name: c.layers for c in candidates(qwen2_vl)}
    assert layers["Qwen2VLModel"] and not layers["Qwen2VLRotaryEmbedding"]


def _hf_verdict(rows: list) -> str:
    """:func:`_as_hf_scan` where all four modes were judged, else why not (the first skipped row's reason)."""
    modes = {r.mode: r for r in rows if r.status == "scanned"}
    if set(modes) != {"float32", "bfloat16-inputs", "float16-inputs", "cast-bfloat16"}:
        return "not judged: " + next((r.reason for r in rows if r.status == "skipped"), f"modes {sorted(modes)}")
    return _as_hf_scan(list(modes.values()))


def _hf_modules(classes: list) -> list[str]:
    """Every fourth module (sorted) of those holding one of ``classes`` (``hf-scan``'s), plus Llama's and
    Gemma 3's: a sample spread over the package (the whole package, 227 classes, takes 34 minutes on 2 cores; it
    agreed on 187 of 187 when run once, issue 51's closing note)."""
    mods = sorted({f.module for f in classes if f.cls is not None})
    return sorted(set(mods[::4]) | {m for m in mods if m.endswith((".modeling_llama", ".modeling_gemma3"))})


@pytest.mark.slow
def test_scan_transformers_is_hf_scan_class_by_class() -> None:
    """Issue 51 item 1: ``scan transformers.models.X.modeling_X`` (as the CLI runs it by name, less naming the
    op of a non-safe row, which does not change its verdict), for each module of :func:`_hf_modules`, finds every
    class ``hf-scan`` lists in that module and gives ``hf-scan``'s verdict (bfloat16, 8K) for each class and
    layer type that ``hf-scan`` audits, read from its four modes as :func:`_as_hf_scan` reads them.  ``hf-scan``
    is its own implementation (``precision_audit.hf.scan``: the ``*RotaryEmbedding`` classes of the
    ``modeling_*.py`` files, audited against their config's schedule), not an alias: this is the check that the
    two agree.  The classes ``hf-scan`` skips (vision 2-D rotary, M-RoPE, another forward) are not compared:
    scan calls them in the ways they take, where ``hf-scan`` does not."""
    pytest.importorskip("transformers")
    from precision_audit.hf import rotary_classes
    from precision_audit.hf import scan as hf_scan
    from precision_audit.scan import scan

    every = rotary_classes()
    modules = _hf_modules(every)
    assert len(modules) >= 45
    missing, differ, compared = set(), {}, 0
    for module in modules:
        classes = [f for f in every if f.module == module]
        want = {(f.module, f.name, r.layer_type): r.verdict for f in classes
                for r in hf_scan(length=L, classes=[f]) if r.status == "audited"}
        found: set = set()
        by_key: dict = {}
        for r in scan(module, length=L, locate=False):  # the verdicts only: no second trace naming the op
            cls = r.callable.split(".")[0]
            found.add((r.module, cls))
            if r.callable == f"{cls}.forward":
                lt = r.call.split("layer_type=")[1].strip("')") if "layer_type=" in r.call else None
                by_key.setdefault((r.module, cls, lt), []).append(r)
        missing |= {(f.module, f.name) for f in classes if f.cls is not None} - found
        got = {k: _hf_verdict(by_key.get(k, [])) for k in want}
        differ |= {k: (v, got[k]) for k, v in want.items() if got[k] != v}
        compared += len(want)
    assert compared >= 40
    assert missing == set() and differ == {}


# --------------------------------------------------------------------------- timm's 2-D RoPE, litgpt's cache
# Both files are scanned by path: their packages' __init__ need torchvision / lightning (not installed here), so
# scan loads each file with its packages as namespace stand-ins and says so in every row's note.

TIMM_GRID = (32, 32)  # a 32 x 32 patch grid (a 512-pixel image, patch 16) ...
TIMM_L = TIMM_GRID[0] * TIMM_GRID[1]  # ... whose H * W rows are the scan's positions
# (a fixed --arg grid does not shrink for scan's 16-position probe, so the grid is kept small: at 8K positions
# the probe would estimate 8192 / 16 times the values and skip the call)


def _timm_file() -> Path:
    return package_folder("timm") / "layers" / "pos_embed_sincos.py"


def _by_mode(rows: list, name: str) -> dict:
    return {r.mode: r for r in rows if r.callable == name and r.status == "scanned"}


def _assert_note(rows: list, package: str, missing: str) -> None:
    """One note on every row of the file: its packages' __init__ not run, and why (when it does not import here:
    ``missing`` not installed; where it is, the file is imported as Python imports it, with no note)."""
    (note,) = {r.note for r in rows}
    if importlib.util.find_spec(missing) is None:
        assert note.startswith(f"loaded without running the __init__ of {package}")
        assert f"No module named '{missing}'" in note and "namespace stand-ins" in note


@pytest.mark.parametrize("layout", ["per-call", "cached"])
def test_timm_rotary_embeddings_are_fp32_code(layout: str) -> None:
    """timm 1.0.31 ``RotaryEmbedding`` / ``RotaryEmbeddingCat`` as EVA builds them (``in_pixels=False``: an index
    grid), the table built by ``get_embed(shape)`` at each call (``feat_shape=None``: EVA's dynamic image size)
    or once at construction (``feat_shape`` given: a fixed image size).

    Why float32 is safe with no culprit: the grid is ``torch.arange(s, dtype=int64).to(float32)`` (integers
    below 2**24 are exact in float32), the bands ``1 / 10000 ** (arange(0, 16) / 16)`` in float32, their
    product and sin/cos in float32: angles below 32 rad off by their rounding (2**-20) plus 31 times the bands'
    (a few 2**-24 relative): below 1e-5 rad, far below pi/8.

    After ``.to(bfloat16)``: timm's ``_apply`` rebuilds ``bands`` in float32 once the cast rounded them
    (``_freq_buffer_dtype``), and ``get_embed(shape)`` without a dtype builds in float32: the cast run computes
    the float32 run's bits (the same error).  A cache built at construction is a buffer, so the cast rounds the
    finished cos/sin table to bf16 (the fix's own recipe: only the final cos/sin in the low dtype): at most 2**-9
    per value, so an angle read back by atan2 is off by under sqrt(2) * 2**-9 / (1 - sqrt(2) * 2**-9) < 2**-8:
    safe, and bf16's error, not float32's.

    The vector modes are not run: ``get_embed`` takes no vectors and ``forward(x)`` takes channels-first images
    ``(B, dim, H, W)``, a layout scan does not try (it is listed as not callable).  What the real ``forward`` does
    with bf16 vectors is asserted below: it rotates them with the float32 table (type promotion) and rounds the
    finished rotation once (``apply_rot_embed``'s ``.to(dtype=x.dtype)``), as a float32 run rounded at the end.
    """
    from precision_audit.scan import scan

    path = _timm_file()
    cached = layout == "cached"
    grid = {"feat_shape": TIMM_GRID} if cached else {"shape": TIMM_GRID}
    rows = scan(str(path), length=TIMM_L, args={**grid, "in_pixels": False})
    _assert_note(rows, "timm, timm.layers", "torchvision")
    for cls in ("RotaryEmbedding", "RotaryEmbeddingCat"):
        judged = _by_mode(rows, f"{cls}.__init__" if cached else f"{cls}.get_embed")
        assert {m: (r.kind, r.verdict, r.op) for m, r in judged.items()} == {
            "float32": ("cos/sin", "safe", None), "cast-bfloat16": ("cos/sin", "safe", None)}
        assert judged["float32"].error < 1e-5  # float32 rounding of angles below 32 rad
        if cached:  # the cast rounded the finished table to bf16: bf16's error, not float32's
            assert 2**-11 < judged["cast-bfloat16"].error < 2**-8
            (get,) = [r for r in rows if r.callable == f"{cls}.get_embed"]
            assert get.reason.startswith("nothing to judge")  # it returns the cache: no op makes positions
        else:  # the cast changed nothing: the same bits
            assert judged["cast-bfloat16"].error == judged["float32"].error
        (fwd,) = [r for r in rows if r.callable == f"{cls}.forward"]
        assert fwd.status == "skipped" and fwd.reason.startswith("cannot call")
        assert not [r for r in rows if r.callable.startswith(cls + ".") and r.mode.endswith("-inputs")]
    functions = {r.callable: r.verdict for r in rows if r.callable.startswith("build_") and r.status == "scanned"}
    assert functions == {"build_sincos2d_pos_embed": "safe", "build_rotary_pos_embed": "safe"}

    # the reasoning, on the real module: which dtype each mode computes in
    timm_rope = package_file("timm", "layers.pos_embed_sincos")
    kw = {"in_pixels": False, "feat_shape": list(TIMM_GRID) if cached else None}
    ref = timm_rope.RotaryEmbeddingCat(64, **kw)
    cast = timm_rope.RotaryEmbeddingCat(64, **kw).to(torch.bfloat16)
    assert ref.bands.dtype == cast.bands.dtype == torch.float32
    table = ref.get_embed(list(TIMM_GRID))
    assert table.dtype == torch.float32
    if cached:
        assert torch.equal(cast.get_embed(), table.to(torch.bfloat16))
    else:
        assert torch.equal(cast.get_embed(list(TIMM_GRID)), table)
    x = torch.randn(1, 64, *TIMM_GRID, generator=torch.Generator().manual_seed(0)).to(torch.bfloat16)
    assert torch.equal(ref(x), ref(x.float()).to(torch.bfloat16))


def test_timm_by_name_as_by_file() -> None:
    """``scan timm.layers.pos_embed_sincos`` by NAME: ``import timm`` needs torchvision, so the module is found by
    ``find_spec("timm")`` (nothing run) and loaded as the file target is, with the same namespace stand-ins: the
    same rows as :func:`test_timm_rotary_embeddings_are_fp32_code`'s file target, field by field (the note says
    the module's import raised, as the file's does)."""
    from precision_audit.scan import scan

    path = _timm_file()
    kw = dict(length=TIMM_L, args={"shape": TIMM_GRID, "in_pixels": False})
    by_file = [r.to_dict() for r in scan(str(path), **kw)]
    by_name = [r.to_dict() for r in scan("timm.layers.pos_embed_sincos", **kw)]
    assert by_name == by_file
    assert {r["status"] for r in by_name} == {"scanned", "skipped"}


def test_timm_package_by_name() -> None:
    """``scan timm`` (issue 51 items 1 and 5): its position code in ``timm/layers`` is found without running
    ``timm``'s ``__init__`` (torchvision), each module with the note naming the packages stood in, and judged;
    a module that still does not import (a model file that needs ``timm.data``'s names, which only that
    ``__init__`` provides) is listed with why, never dropped."""
    from precision_audit.scan import scan

    package_folder("timm")
    rows = scan("timm", length=TIMM_L, modes=["float32"], args={"shape": TIMM_GRID, "in_pixels": False})
    modules = {r.module for r in rows}
    assert {"timm.layers.pos_embed", "timm.layers.pos_embed_rel", "timm.layers.pos_embed_sincos"} <= modules
    sincos = [r for r in rows if r.module == "timm.layers.pos_embed_sincos"]
    _assert_note(sincos, "timm, timm.layers", "torchvision")
    if importlib.util.find_spec("torchvision") is None:
        assert "(importing timm raised ModuleNotFoundError: No module named 'torchvision')" in sincos[0].note
        failed = [r for r in rows if r.reason.startswith("import failed")]
        assert failed and all("loaded without running the __init__ of timm" in r.reason for r in failed)
    judged = {r.callable: r.verdict for r in sincos if r.status == "scanned"}
    assert judged["RotaryEmbeddingCat.get_embed"] == judged["build_rotary_pos_embed"] == "safe"


def test_litgpt_build_rope_cache_is_fp32_code() -> None:
    """litgpt 0.5.13 ``build_rope_cache(seq_len, n_elem)`` (``litgpt/model.py``, its checkpoint converter stubbed:
    it needs lightning, the RoPE does not; :data:`referees._pkgfile.LITGPT_STUBS`).

    Why float32 is safe with no culprit: positions ``torch.arange(seq_len).float()`` (int64 made float32: exact
    below 2**24), ``theta = 1 / base ** (arange(0, n_elem, 2).float() / n_elem)`` in float32, ``outer`` and
    cos/sin in float32: an angle up to 8191 rad is off by its own rounding (at most 2**-12) plus m times theta's
    (pow within an ulp, the reciprocal half an ulp: 1.5 * 2**-23 relative, theta <= 1): below 2**-9 in all, far
    below pi/8.

    Only the float32 mode runs, rightly: a function has no ``.to`` (no cast mode) and this one takes no vectors
    (no vector modes); nothing it computes takes its dtype from an input or from the default dtype (every tensor
    is made float32 by ``.float()``), so those modes would compute the same bits.  Asserted below on the real
    function: under ``torch.set_default_dtype(torch.bfloat16)`` (a model built in bf16, as Lightning Fabric's
    bf16-true ``init_module`` builds it) the cache is float32 and bit-identical.  The model classes hold layers
    (listed, not built); ``apply_rope`` needs the cos/sin tables (listed: give them with --arg).
    """
    from precision_audit.scan import scan

    path = package_folder("litgpt") / "model.py"
    with stubbed(LITGPT_STUBS):
        rows = scan(str(path), length=L)
    _assert_note(rows, "litgpt", "lightning")
    cache = [r for r in rows if r.callable == "build_rope_cache"]
    assert [(r.call, r.mode, r.status, r.kind, r.verdict, r.op) for r in cache] == [
        ("build_rope_cache(seq_len, n_elem)", "float32", "scanned", "cos/sin", "safe", None)]
    assert cache[0].error < 2**-9
    skipped = {r.callable: r.reason for r in rows if r.status == "skipped"}
    assert skipped["apply_rope"].startswith("cannot infer arguments cos, sin")
    assert skipped["GPT"].startswith("holds layers")

    litgpt_model = package_file("litgpt", "model", stubs=LITGPT_STUBS)
    fp32 = litgpt_model.build_rope_cache(L, 64)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        bf16_default = litgpt_model.build_rope_cache(L, 64)
    finally:
        torch.set_default_dtype(before)
    assert all(t.dtype == torch.float32 for t in (*fp32, *bf16_default))
    assert all(torch.equal(a, b) for a, b in zip(fp32, bf16_default))
