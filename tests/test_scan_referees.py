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


@pytest.mark.parametrize("which, cls", [("rope", "RotaryPositionalEmbeddings"), ("llama3_1", "Llama3ScaledRoPE")])
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


def test_transformers_llama_as_hf_scan() -> None:
    """``scan`` of transformers' Llama modelling file gives ``hf-scan``'s verdict for its rotary class (built the
    same way, from the default config): hf-scan says damaged by the cast (the bf16 ``inv_freq``); scan finds the
    as-built modes safe and the cast mode broken, at the line of the forward that multiplies ``inv_freq``."""
    from _thirdparty import private
    from precision_audit.hf import scan as hf_scan
    from precision_audit.scan import scan

    private("transformers.models.llama.modeling_llama", "LlamaRotaryEmbedding")
    (hf,) = [r for r in hf_scan(length=L, families=["llama"]) if r.module_class == "LlamaRotaryEmbedding"]
    rows = {r.mode: r for r in scan("transformers.models.llama.modeling_llama", length=L)
            if r.callable == "LlamaRotaryEmbedding.forward"}
    as_built = {rows[m].verdict for m in ("float32", "bfloat16-inputs", "float16-inputs")}
    cast = rows["cast-bfloat16"]
    assert hf.verdict == "damaged by the cast"
    assert as_built == {"safe"} and cast.verdict == "broken"
    assert cast.op.startswith("operand inv_freq") and cast.where.startswith("modeling_llama.py:")
