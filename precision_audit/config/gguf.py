"""Read a GGUF file's RoPE metadata (llama.cpp's model format) as a Hugging Face ``config.json``-like dict.

:func:`read_gguf_metadata` opens the file with the ``gguf`` package's reader
(a memory map: only the header, the key/value metadata, the tensor index and
the few bytes of the small RoPE factor tensors are touched, never a weight)
and returns a plain dict in ``config.json`` form (``model_type``,
``rope_theta``, ``head_dim``, ``max_position_embeddings``, ``rope_scaling``,
...) that :func:`precision_audit.config.load_config_dict` understands, plus a
``"gguf"`` sub-dict with what llama.cpp itself does with the file:

* ``freq_factors``: the ``rope_freqs`` tensor (float32 values, one per
  rotated pair) that llama.cpp's kernel divides each angle by (Llama 3's
  frequency bands are stored this way, computed at conversion);
* ``pair_layout``: ``"normal"`` (pairs ``2i, 2i+1``) or ``"neox"`` (pairs
  ``i, i + n_rot/2``), as ``llama_model_rope_type`` decides it per
  architecture (``"mrope"``/``"imrope"``: NEOX layout with multimodal
  sections; ``"none"``: no RoPE; ``None``: an architecture this table does
  not know);
* ``ggml_rope_ext``: the arguments llama.cpp passes to ``ggml_rope_ext`` for
  this file with default context parameters (``n_dims``, ``mode``,
  ``n_ctx_orig``, ``freq_base``, ``freq_scale``, ``ext_factor``,
  ``attn_factor``, ``beta_fast``, ``beta_slow``), each as llama.cpp computes
  it in float32 (``src/llama-model.cpp`` ``load_hparams``,
  ``src/llama-context.cpp`` ``llama_context::llama_context``).

Written from llama.cpp@0c1e57098 (the source llama-cpp-python 0.3.36
vendors) and gguf-py; see ``/work/notes/stacks-llamacpp.md``.

``rope_scaling`` maps llama.cpp's ``rope.scaling.type``: ``linear`` ->
``{"rope_type": "linear", "factor"}``; ``yarn`` -> ``{"rope_type": "yarn",
"factor", "original_max_position_embeddings", "beta_fast", "beta_slow"}``;
``longrope`` -> ``{"rope_type": "longrope", "long_factor", "short_factor",
"original_max_position_embeddings"}`` from the ``rope_factors_long`` /
``rope_factors_short`` tensors.  A file with a ``rope_freqs`` tensor and no
scaling type (Llama 3.x) gets ``{"rope_type": "llama3", ...}`` when the
factors are those llama.cpp's converter computes for some ``factor``,
``low_freq_factor``, ``high_freq_factor`` (with its default
``original_max_position_embeddings`` 8192): the parameters are solved from
the factors and checked by recomputing them; otherwise ``rope_scaling`` is
None and a note says llama.cpp divides by the stored factors.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["PAIR_LAYOUTS", "pair_layout", "read_gguf_metadata"]

# llama_model_rope_type (src/llama-model.cpp, llama.cpp@0c1e57098), by the architecture names of
# src/llama-arch.cpp.  NORM: pairs of neighbours; NEOX: pairs i, i + n_rot/2; MROPE/IMROPE: NEOX with sections.
_NORMAL = frozenset("""llama llada llama4 deci baichuan starcoder internlm2 minicpm xverse command-r cohere2
cohere2moe olmo arctic deepseek deepseek2 deepseek2-ocr deepseek32 deepseek4 muse-glimmer plm chatglm granite
granitemoe granitehybrid graniteswitch granite_swa chameleon bailingmoe neo-bert smollm3 arcee ernie4_5
ernie4_5-moe mistral3 eagle3 mistral4 llama-embed maincoder glm-dsa dots3note nanbeige pockettts hy_v4
bailingmoe3 glm4""".split())
_NEOX = frozenset("""falcon falcon-h1 grok dbrx bert jina-bert-v3 modern-bert nomic-bert nomic-bert-moe eurobert
stablelm bitnet qwen qwen2 dream qwen2moe qwen3 qwen3moe llada-moe rnd1 olmo2 olmoe phi2 phi3 phimoe plamo plamo2
plamo3 gemma gemma2 gemma3 gemma3n gemma4 gemma4-assistant gemma-embedding starcoder2 openelm gptneox codeshell
orion nemotron exaone exaone4 exaone-moe minicpm3 bailingmoe2 dots1 hunyuan-moe jais2 gpt-oss hunyuan-dense hy_v3
lfm2 lfm2moe smallthinker seed_oss grovemoe apertus minimax-01 minimax-m2 minimax-m3 cogvlm pangu-embedded afmoe
laguna qwen3next mimo2 step35 spark2_5 talkie mellum maple hrm_text glm4moe hunyuan_vl dflash""".split())
_MROPE = frozenset({"qwen2vl", "paddleocr"})
_IMROPE = frozenset({"qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "qwen4exp", "qwen3tts"})
_NONE = frozenset("""clip gpt2 gptj mpt refact bloom mamba mamba2 jamba jina-bert-v2 t5 t5encoder jais rwkv6
rwkv6qwen2 rwkv7 arwkv7 wavtokenizer-dec nemotron_h nemotron_h_moe kimi-linear kimi-k3 glm5-next""".split())
PAIR_LAYOUTS: dict[str, frozenset[str]] = {
    "normal": _NORMAL, "neox": _NEOX, "mrope": _MROPE, "imrope": _IMROPE, "none": _NONE,
}
_GGML_MODE = {"normal": 0, "neox": 2, "mrope": 8, "imrope": 40}  # GGML_ROPE_TYPE_* (ggml.h)
_SCALING_TYPES = ("none", "linear", "yarn", "longrope")  # llama_rope_scaling_type_from_string
_F32 = np.float32


def pair_layout(architecture: str) -> str | None:
    """llama.cpp's pair layout for a GGUF ``general.architecture`` (None when not in the table).

    >>> pair_layout("llama"), pair_layout("qwen2"), pair_layout("bloom"), pair_layout("nope")
    ('normal', 'neox', 'none', None)
    """
    for layout, names in PAIR_LAYOUTS.items():
        if architecture in names:
            return layout
    return None


def _logf(x: Any) -> np.float32:
    """``logf`` modelled correctly rounded (float64 log of the float32 value, rounded to float32)."""
    return _F32(math.log(float(_F32(x))))


class _Fields:
    """The metadata of an open GGUF file, looked up by key (``{arch}`` filled in)."""

    def __init__(self, reader: Any, path: str, arch: str) -> None:
        self.reader, self.path, self.arch = reader, path, arch

    def get(self, key: str, default: Any = None) -> Any:
        field = self.reader.fields.get(key.format(arch=self.arch))
        if field is None:
            return default
        value = field.contents()
        return default if value is None else value

    def need(self, key: str) -> Any:
        value = self.get(key)
        if value is None:
            raise ValueError(f"{self.path}: GGUF metadata has no {key.format(arch=self.arch)!r}")
        return value

    def integer(self, key: str, value: Any) -> int:
        if isinstance(value, list):  # per-layer arrays (head counts): llama.cpp uses the value of layer 0
            value = value[0] if value else None
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not float(value).is_integer() \
                or value < 1:
            raise ValueError(f"{self.path}: {key.format(arch=self.arch)} {value!r} must be an integer >= 1")
        return int(value)

    def tensor(self, name: str) -> list[float] | None:
        for t in self.reader.tensors:
            if t.name == name:
                data = np.asarray(t.data)
                if data.dtype not in (np.float32, np.float16):
                    raise ValueError(f"{self.path}: tensor {name!r} has type {t.tensor_type.name}, expected F32")
                return [float(v) for v in data.astype(np.float32).ravel()]
        return None


def _open(path: str) -> Any:
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ImportError("reading GGUF files needs the 'gguf' package: pip install gguf "
                          "(or pip install 'precision-audit[gguf]')") from None
    if not os.path.isfile(path):
        raise ValueError(f"{path}: no such file")
    try:
        return GGUFReader(path, "r")
    except (ValueError, OSError, IndexError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a readable GGUF file ({e})") from None


def _dims(f: _Fields) -> dict[str, Any]:
    """Head and rotary dims as llama.cpp derives them (``load_hparams``)."""
    out: dict[str, Any] = {}
    n_embd = f.get("{arch}.embedding_length")
    n_head = f.get("{arch}.attention.head_count")
    if n_embd is not None:
        out["hidden_size"] = f.integer("{arch}.embedding_length", n_embd)
    if n_head is not None:
        out["num_attention_heads"] = f.integer("{arch}.attention.head_count", n_head)
    kv = f.get("{arch}.attention.head_count_kv")
    if kv is not None:
        out["num_key_value_heads"] = f.integer("{arch}.attention.head_count_kv", kv)
    key_len = f.get("{arch}.attention.key_length")
    if key_len is not None:
        head_dim = f.integer("{arch}.attention.key_length", key_len)
    elif "hidden_size" in out and "num_attention_heads" in out:
        head_dim = out["hidden_size"] // out["num_attention_heads"]
    else:
        head_dim = None
    n_rot = f.get("{arch}.rope.dimension_count")
    n_rot = f.integer("{arch}.rope.dimension_count", n_rot) if n_rot is not None else head_dim
    if n_rot is None:
        raise ValueError(f"{f.path}: GGUF metadata has no {f.arch}.rope.dimension_count, and no "
                         f"{f.arch}.embedding_length with {f.arch}.attention.head_count to derive it from")
    if n_rot % 2:
        raise ValueError(f"{f.path}: {f.arch}.rope.dimension_count {n_rot} must be even")
    out["head_dim"] = head_dim if head_dim is not None else n_rot
    if n_rot != out["head_dim"]:
        out["partial_rotary_factor"] = n_rot / out["head_dim"]
    out["_n_rot"] = n_rot
    return out


def _converter_llama3(base: float, dim: int, factor: float, low: float, high: float,
                      old_len: int) -> np.ndarray:
    """llama.cpp's converter formula for ``rope_freqs`` (``LlamaModel.generate_extra_tensors``), in float64.

    ``1`` where the wavelength ``2 pi / freq`` is below ``old_len / high``,
    ``factor`` above ``old_len / low``, else ``1 / ((1 - s) / factor + s)``
    with ``s = (old_len / wavelength - low) / (high - low)``.
    """
    freqs = 1.0 / base ** (np.arange(0, dim, 2, dtype=np.float64) / dim)
    wavelen = 2 * math.pi / freqs
    with np.errstate(divide="ignore", invalid="ignore"):
        s = (old_len / wavelen - low) / (high - low)
        mid = 1.0 / ((1 - s) / factor + s)
    return np.where(wavelen < old_len / high, 1.0, np.where(wavelen > old_len / low, factor, mid))


def _llama3_params(ff: Sequence[float], base: float, dim: int) -> dict[str, Any] | None:
    """The llama3 ``rope_scaling`` whose converter factors equal ``ff`` (float32 values), or None.

    With the converter's default ``original_max_position_embeddings`` 8192,
    ``factor`` is the largest factor and ``s_i = (1/ff_i - 1/factor) / (1 - 1/factor)``
    is affine in ``1 / wavelength``, which gives ``low_freq_factor`` and
    ``high_freq_factor`` from two banded pairs; the result is accepted when
    recomputing all factors agrees within float32 rounding (relative 1e-5).
    """
    v = np.asarray(ff, dtype=np.float64)
    factor, old_len = float(v.max()), 8192
    if len(v) != dim // 2 or factor <= 1.0 or v.min() != 1.0:
        return None
    x = old_len / (2 * math.pi * base ** (np.arange(0, dim, 2) / dim))  # old_len / wavelength
    band = (v > 1.0) & (v < factor)
    candidates = [(1.0, 4.0), (1.0, 1.0)]
    if band.sum() >= 2:
        s = (1 / v[band] - 1 / factor) / (1 - 1 / factor)
        slope, icept = np.polyfit(x[band], s, 1)  # s = x / (high - low) - low / (high - low)
        width = 1 / slope
        candidates.insert(0, (float(np.round(-icept * width, 6)), float(np.round(-icept * width + width, 6))))
    for low, high in candidates:
        if low <= 0 or high < low:
            continue
        want = _converter_llama3(base, dim, factor, low, high, old_len)
        if np.allclose(want, v, rtol=1e-5, atol=0):
            return {"rope_type": "llama3", "factor": factor, "low_freq_factor": low,
                    "high_freq_factor": high, "original_max_position_embeddings": old_len}
    return None


def _yarn_hparams(f: _Fields) -> tuple[float | None, float, float, float]:
    """(ext_factor or None, beta_fast, beta_slow, log_mul) as llama.cpp's per-architecture loaders read them.

    Only grok (ext_factor, betas; beta_fast default 8), mistral3 (betas, log multiplier) and deepseek2 /
    deepseek32 (log multiplier, stored times 0.1 by the converter, divided back) read these keys; other
    architectures keep the defaults (ext_factor unset, betas 32 / 1, no log multiplier).
    """
    ext, fast, slow, log_mul = None, 32.0, 1.0, 0.0
    if f.arch in ("grok", "mistral3"):
        ext = f.get("{arch}.rope.scaling.yarn_ext_factor") if f.arch == "grok" else None
        fast = float(_F32(f.get("{arch}.rope.scaling.yarn_beta_fast", 8.0 if f.arch == "grok" else 32.0)))
        slow = float(_F32(f.get("{arch}.rope.scaling.yarn_beta_slow", 1.0)))
    if f.arch == "mistral3":
        log_mul = float(_F32(f.get("{arch}.rope.scaling.yarn_log_multiplier", 0.0)))
    elif f.arch in ("deepseek2", "deepseek32"):
        log_mul = float(_F32(_F32(f.get("{arch}.rope.scaling.yarn_log_multiplier", 0.0)) / _F32(0.1)))
    return ext, fast, slow, log_mul


def _get_mscale(scale: np.float32, mscale: np.float32) -> np.float32:
    """llama_context's ``get_mscale``: ``scale <= 1 ? 1 : 0.1f * mscale * logf(scale) + 1``, float32."""
    if scale <= 1:
        return _F32(1)
    return _F32(_F32(_F32(_F32(0.1) * mscale) * _logf(scale)) + _F32(1))


def _kernel_args(f: _Fields, stype: str, factor: float | None, n_ctx: int, n_rot: int,
                 layout: str | None, notes: list[str]) -> dict[str, Any]:
    """The ``ggml_rope_ext`` arguments llama.cpp derives for this file with default context parameters.

    ``llama_context::llama_context``: ``freq_scale = 1/factor`` (1 for type none); ``ext_factor`` 1 for
    YaRN, else 0; with ``ext_factor != 0``, ``attn_factor = get_mscale(s, m) / get_mscale(s, log_mul)``
    (or ``get_mscale(s, 1)`` without a log multiplier), divided by ``1 + 0.1 logf(s)`` (the kernel
    multiplies that back); times ``rope.scaling.attn_factor``.  Every step in float32, ``logf`` modelled
    correctly rounded.
    """
    base = _F32(f.get("{arch}.rope.freq_base", 10000.0))
    freq_scale = _F32(1) if not factor or stype == "none" else _F32(_F32(1) / _F32(factor))
    ext, beta_fast, beta_slow, log_mul = _yarn_hparams(f)
    ext = _F32(ext) if ext is not None and ext >= 0 else _F32(1 if stype == "yarn" else 0)
    attn = _F32(f.get("{arch}.rope.scaling.yarn_attn_factor", 1.0)) if f.arch == "grok" else _F32(1)
    if ext != 0:
        scale = _F32(_F32(1) / freq_scale)
        if log_mul:
            m = _F32(log_mul) if f.arch == "deepseek2" and log_mul != 1 else _F32(1)
            attn = _F32(_get_mscale(scale, m) / _get_mscale(scale, _F32(log_mul)))
        else:
            attn = _get_mscale(scale, _F32(1))
        attn = _F32(attn * _F32(_F32(1) / _F32(_F32(1) + _F32(_F32(0.1) * _logf(scale)))))
    attn = _F32(attn * _F32(f.get("{arch}.rope.scaling.attn_factor", 1.0)))
    if f.arch.startswith("deepseek"):
        notes.append(f"{f.arch}: llama.cpp's model graph rescales attn_factor and kq_scale for YaRN itself; "
                     "gguf.ggml_rope_ext.attn_factor is the context's value")
    return {"n_dims": n_rot, "mode": _GGML_MODE.get(layout or "", None), "n_ctx_orig": n_ctx,
            "freq_base": float(base), "freq_scale": float(freq_scale), "ext_factor": float(ext),
            "attn_factor": float(attn), "beta_fast": beta_fast, "beta_slow": beta_slow}


def _scaling(f: _Fields, stype: str, factor: float | None, orig: int | None, hf: dict[str, Any],
             gg: dict[str, Any], notes: list[str]) -> dict[str, Any] | None:
    """HF ``rope_scaling`` for llama.cpp's scaling type and factor tensors."""
    if stype == "linear" and factor:
        return {"rope_type": "linear", "factor": factor}
    if stype == "yarn":
        if not factor or orig is None:
            raise ValueError(f"{f.path}: rope.scaling.type yarn needs {f.arch}.rope.scaling.factor and "
                             f"{f.arch}.rope.scaling.original_context_length")
        k = gg["ggml_rope_ext"]
        out = {"rope_type": "yarn", "factor": factor, "original_max_position_embeddings": orig,
               "beta_fast": k["beta_fast"], "beta_slow": k["beta_slow"]}
        if gg["yarn_log_multiplier"]:
            notes.append("yarn_log_multiplier set: llama.cpp's YaRN attention factor is a ratio of mscales "
                         "(see gguf.ggml_rope_ext.attn_factor), not 0.1 ln(factor) + 1")
        return out
    if stype == "longrope":
        long_f, short_f = f.tensor("rope_factors_long.weight"), f.tensor("rope_factors_short.weight")
        if long_f is None or short_f is None:
            raise ValueError(f"{f.path}: rope.scaling.type longrope without rope_factors_long/short tensors")
        gg["long_factors"], gg["short_factors"] = long_f, short_f
        return {"rope_type": "longrope", "long_factor": long_f, "short_factor": short_f,
                "original_max_position_embeddings": orig if orig is not None else hf["max_position_embeddings"]}
    ff = gg["freq_factors"]
    if ff is None:
        return None
    params = _llama3_params(ff, hf["rope_theta"], gg["n_rot"])
    if params is None:
        notes.append("rope_freqs are not llama.cpp's llama3 factors: rope_scaling left out; llama.cpp divides "
                     "each pair's angle by gguf.freq_factors")
    else:
        notes.append("rope_scaling llama3 recovered from the rope_freqs tensor (converter formula)")
    return params


# llama.cpp@0c1e57098 load_hparams: architectures whose sliding layers rotate with their own fixed base (and
# freq_scale 1) when the file has no {arch}.rope.freq_base_swa: Gemma 3 (set_swa_pattern(6), base 10000)
_SWA_BASE = {"gemma3": 10000.0}


def _layers(f: _Fields, notes: list[str]) -> dict[str, Any]:
    """Layer count and sliding window in ``config.json`` form: ``num_hidden_layers`` (``block_count``),
    ``sliding_window``, ``sliding_window_pattern`` (an integer k: one full layer at the end of every k, as
    llama.cpp's ``set_swa_pattern``) or ``layer_types`` (a per-layer array: true = sliding), and
    ``rope_local_base_freq`` (``rope.freq_base_swa``, or the architecture's fixed base)."""
    out: dict[str, Any] = {}
    n_layer = f.get("{arch}.block_count")
    if n_layer is not None:
        out["num_hidden_layers"] = f.integer("{arch}.block_count", n_layer)
    swa = f.get("{arch}.attention.sliding_window")
    if swa is None or swa == 0:  # 0: no sliding window (llama.cpp's n_swa 0)
        return out
    out["sliding_window"] = f.integer("{arch}.attention.sliding_window", swa)
    pattern = f.get("{arch}.attention.sliding_window_pattern")
    if isinstance(pattern, list):
        out["layer_types"] = ["sliding_attention" if p else "full_attention" for p in pattern]
    elif isinstance(pattern, int) and not isinstance(pattern, bool) and pattern > 0:
        out["sliding_window_pattern"] = pattern
    local = f.get("{arch}.rope.freq_base_swa")
    if local is None and f.arch in _SWA_BASE:
        local = _SWA_BASE[f.arch]
        notes.append(f"sliding layers: llama.cpp's fixed base {local:g} for {f.arch} (no rope.freq_base_swa)")
    if local is not None:
        out["rope_local_base_freq"] = float(_F32(local))
    return out


def read_gguf_metadata(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A GGUF file's RoPE facts as a ``config.json``-like dict plus a ``"gguf"`` sub-dict (see the module doc).

    Raises ValueError naming the file for a file that is not GGUF, and for
    missing ``general.architecture`` / ``{arch}.context_length`` or rotary
    dims that cannot be derived; ImportError when ``gguf`` is not installed.
    """
    p = os.fspath(path)
    reader = _open(p)
    arch_field = reader.fields.get("general.architecture")
    if arch_field is None:
        raise ValueError(f"{p}: GGUF metadata has no 'general.architecture'")
    f = _Fields(reader, p, str(arch_field.contents()))
    n_ctx = f.integer("{arch}.context_length", f.need("{arch}.context_length"))
    dims = _dims(f)
    n_rot = dims.pop("_n_rot")
    notes: list[str] = []
    base = f.get("{arch}.rope.freq_base")
    if base is None:
        notes.append("no rope.freq_base: llama.cpp's default 10000")
    hf: dict[str, Any] = {"model_type": f.arch, "_name_or_path": f.get("general.name") or
                          os.path.splitext(os.path.basename(p))[0], "max_position_embeddings": n_ctx,
                          "rope_theta": float(_F32(base if base is not None else 10000.0)), **dims}
    stype = f.get("{arch}.rope.scaling.type")
    if stype is not None and stype not in _SCALING_TYPES:
        raise ValueError(f"{p}: {f.arch}.rope.scaling.type {stype!r} is not one of {', '.join(_SCALING_TYPES)}")
    factor = f.get("{arch}.rope.scaling.factor") or f.get("{arch}.rope.scale_linear")
    factor = float(_F32(factor)) if factor else None
    orig = f.get("{arch}.rope.scaling.original_context_length")
    orig = f.integer("{arch}.rope.scaling.original_context_length", orig) if orig is not None else None
    layout = pair_layout(f.arch)
    if layout is None:
        notes.append(f"architecture {f.arch!r} is not in llama.cpp@0c1e57098's rope-type table")
    gg: dict[str, Any] = {
        "architecture": f.arch, "pair_layout": layout, "n_rot": n_rot, "n_ctx_train": n_ctx,
        "n_ctx_orig": orig if orig is not None else n_ctx,
        "rope_scaling_type": stype, "rope_scaling_factor": factor,
        "yarn_log_multiplier": f.get("{arch}.rope.scaling.yarn_log_multiplier"),
        "freq_factors": f.tensor("rope_freqs.weight"),
    }
    # llama.cpp: a missing type means "linear" (with no factor: freq_scale 1, i.e. no scaling)
    gg["ggml_rope_ext"] = _kernel_args(f, stype or "linear", factor, gg["n_ctx_orig"], n_rot, layout, notes)
    if gg["freq_factors"] is not None and len(gg["freq_factors"]) < n_rot // 2:
        raise ValueError(f"{p}: rope_freqs has {len(gg['freq_factors'])} values, n_rot {n_rot} needs {n_rot // 2}")
    hf["rope_scaling"] = _scaling(f, stype or "linear", factor, orig, hf, gg, notes)
    hf.update(_layers(f, notes))
    gg["notes"] = notes
    hf["gguf"] = gg
    return hf

