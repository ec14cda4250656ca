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

timm's 2-D RoPE modules and litgpt's ``build_rope_cache`` are not refereed: timm imports torchvision at
``import timm`` and litgpt imports lightning, neither installable here beside torch 2.13 (docs/scan.md).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from referees import need
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
