"""Diffusers transformer configs (``transformer/config.json`` with a ``_class_name``): their axial RoPE.

A diffusers config names its model class (``_class_name``, e.g. ``FluxTransformer2DModel``) and the fields its
``__init__`` takes.  :func:`diffusion_config_dict` reads the RoPE fields of the classes
:data:`precision_audit.rope.axial.FAMILIES` models (Flux: ``axes_dims_rope``, ``attention_head_dim``; theta is
fixed at 10000 by ``FluxPosEmbed(theta=10000, ...)``; HunyuanVideo: ``rope_axes_dim``, ``rope_theta``,
``patch_size``, ``patch_size_t``; Wan 2.x: ``attention_head_dim`` split as ``WanRotaryPosEmbed`` splits it,
``patch_size``, ``rope_max_seq_len``; CogVideoX and LTX-Video, whose positions are fractional: :func:`_video`),
with the class defaults of diffusers 0.42.1 for keys a config leaves out,
and checks that the axes' blocks add up to the head dim.  Nothing is imported or executed.

>>> cfg = diffusion_config_dict({"_class_name": "FluxTransformer2DModel", "attention_head_dim": 128,
...                              "axes_dims_rope": [16, 56, 56]}, name="flux")
>>> cfg.rope.axes_dim, cfg.rope.theta, cfg.rope.pixels_per_id
((16, 56, 56), 10000.0, 16)
>>> diffusion_config_dict({"_class_name": "FluxTransformer2DModel", "attention_head_dim": 128,
...                        "axes_dims_rope": [16, 56, 48]}, source="t.json")
Traceback (most recent call last):
...
ValueError: t.json: axes_dims_rope [16, 56, 48] sums to 120, not attention_head_dim 128
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..rope.axial import FAMILIES, AxialRope
from ..rope.axial_video import COGVIDEOX_1_5, VIDEO_FAMILIES, VideoRope
from ..rope.axial_centred import QWEN_IMAGE
from ..sinusoidal.grid2d import SincosGrid

__all__ = ["DiffusionConfig", "diffusion_config_dict", "is_diffusers_config", "load_diffusion_config"]

# Per class: (config key of the axes' widths, of theta (None: fixed by the class), the class default head dim).
_KEYS: dict[str, tuple[str, str | None, int]] = {
    "FluxTransformer2DModel": ("axes_dims_rope", None, 128),
    "HunyuanVideoTransformer3DModel": ("rope_axes_dim", "rope_theta", 128),
    "WanTransformer3DModel": ("", None, 128),  # the axes follow from the head dim (WanRotaryPosEmbed)
    # fractional positions (precision_audit.rope.axial_video): the axes follow from the head dim / inner dim
    "CogVideoXTransformer3DModel": ("", None, 64),
    "LTXVideoTransformer3DModel": ("", None, 64),
    # issue 44 item 3, image families: read by _qwen_image / _sd3 below (rope.axial_centred, sinusoidal.grid2d)
    "QwenImageTransformer2DModel": ("axes_dims_rope", None, 128),  # theta fixed: QwenEmbedRope(theta=10000, ...)
    "SD3Transformer2DModel": ("", None, 64),  # no RoPE: PatchEmbed's 2-D sincos table
    "Flux2Transformer2DModel": ("axes_dims_rope", "rope_theta", 128),  # 4 axes (reference, height, width, text)
}


@dataclass(frozen=True)
class DiffusionConfig:
    """A diffusion transformer's config as the audit needs it: its class, its axial RoPE, where it came from."""

    name: str
    class_name: str
    rope: Any  # AxialRope; VideoRope (CogVideoX, LTX-Video); CentredRope (Qwen-Image); SincosGrid (SD3)
    head_dim: int
    source: str = ""
    notes: tuple[str, ...] = field(default=())

    def describe(self) -> str:
        """One line: the class and its axial RoPE.

        >>> diffusion_config_dict({"_class_name": "FluxTransformer2DModel"}, name="flux").describe()
        'flux (FluxTransformer2DModel): axial RoPE, theta 10000, axes index 16 + height 56 + width 56 = head dim 128'
        """
        if not hasattr(self.rope, "axes_dim"):  # SD3's 2-D sincos table
            g = self.rope
            return (f"{self.name} ({self.class_name}): 2-D sincos position table (absolute, not RoPE), "
                    f"{g.max_size} x {g.max_size} patch positions at k / {g.max_size / g.base_size:g}, width "
                    f"{g.embed_dim} (half per axis)")
        axes = " + ".join(f"{a} {d}" for a, d in zip(self.rope.axes, self.rope.axes_dim))
        rest = self.head_dim - sum(self.rope.axes_dim)
        what = "head dim" if not isinstance(self.rope, VideoRope) or self.rope.kind != "ltx" else \
            "inner dim (all heads: LTXVideoRotaryPosEmbed rotates heads x head_dim)"
        centred = "" if isinstance(self.rope, (AxialRope, VideoRope)) else " (image ids centred on zero, text after them)"
        return (f"{self.name} ({self.class_name}): axial RoPE{centred}, theta {self.rope.theta:g}, axes {axes}"
                + (f" + {rest} unrotated" if rest else "") + f" = {what} {self.head_dim}")


def is_diffusers_config(data: Any) -> bool:
    """Whether a parsed JSON object is a diffusers config (it names its ``_class_name``).

    >>> is_diffusers_config({"_class_name": "FluxTransformer2DModel"}), is_diffusers_config({"model_type": "llama"})
    (True, False)
    """
    return isinstance(data, Mapping) and "_class_name" in data


def _int(source: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{source}: {key} {value!r} must be a positive integer")
    return value


def diffusion_config_dict(data: Mapping[str, Any], *, name: str = "model", source: str = "config") -> DiffusionConfig:
    """A diffusers transformer config (a dict) read into a :class:`DiffusionConfig`; ValueError naming the bad
    value for an unknown ``_class_name``, axes that are not positive even integers or do not sum to
    ``attention_head_dim``.

    >>> diffusion_config_dict({"_class_name": "SanaTransformer2DModel"}, source="s.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: s.json: _class_name 'SanaTransformer2DModel': position encodings are modelled for FluxTransformer2DModel, ...
    """
    if not is_diffusers_config(data):
        raise ValueError(f"{source}: not a diffusers config (no _class_name)")
    cls = data["_class_name"]
    if cls not in _KEYS:
        raise ValueError(f"{source}: _class_name {cls!r}: position encodings are modelled for {', '.join(_KEYS)}")
    axes_key, theta_key, head_default = _KEYS[cls]
    if cls in VIDEO_FAMILIES:
        return _video(data, str(cls), name, source)
    head = _int(source, "attention_head_dim", data.get("attention_head_dim", head_default))
    if cls == "QwenImageTransformer2DModel":
        return _qwen_image(data, head, name, source)
    if cls == "SD3Transformer2DModel":
        return _sd3(data, head, name, source)
    base = FAMILIES[cls]
    if cls == "WanTransformer3DModel":
        return _wan(data, base, head, name, source)
    axes = data.get(axes_key, list(base.axes_dim))
    if not isinstance(axes, (list, tuple)) or len(axes) != len(base.axes) or not all(
            isinstance(x, int) and not isinstance(x, bool) and x > 0 and x % 2 == 0 for x in axes):
        raise ValueError(f"{source}: {axes_key} {axes!r} must be {len(base.axes)} positive even integers "
                         f"({', '.join(base.axes)})")
    if sum(axes) != head:
        raise ValueError(f"{source}: {axes_key} {list(axes)} sums to {sum(axes)}, not attention_head_dim {head}")
    theta = base.theta if theta_key is None else data.get(theta_key, base.theta)
    if isinstance(theta, bool) or not isinstance(theta, (int, float)):
        raise ValueError(f"{source}: {theta_key} {theta!r} must be a number")
    changes: dict[str, Any] = {"axes_dim": tuple(axes), "theta": float(theta)}
    if cls == "HunyuanVideoTransformer3DModel":  # rope sizes: latent // patch_size (VAE 8 x 8 spatial, 4 temporal)
        changes["pixels_per_id"] = 8 * _int(source, "patch_size", data.get("patch_size", 2))
        changes["frames_per_id"] = 4 * _int(source, "patch_size_t", data.get("patch_size_t", 1))
    try:
        rope = replace(base, **changes)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
    return DiffusionConfig(name=name, class_name=str(cls), rope=rope, head_dim=head, source=source)


def load_diffusion_config(path: str | os.PathLike[str], *, online: bool = False) -> DiffusionConfig | None:
    """Read ``path`` as a diffusers config: a JSON file, a directory holding ``config.json`` (or a pipeline folder
    holding ``transformer/config.json``), or a Hub id ``ORG/NAME[@REVISION]`` of a diffusers pipeline (its
    ``transformer/config.json`` from the local cache; ``online`` fetches it: :func:`.hub.resolve_model`).  None when
    it is not one (no ``_class_name``, or not readable JSON: the general reader says why); a Hub id that cannot be
    had raises ValueError naming it.

    >>> load_diffusion_config("tests/data/llama-2-7b-hf.json") is None
    True
    >>> load_diffusion_config("tests/data/diffusers/flux.1-dev-transformer.json").name
    'flux.1-dev-transformer'
    """
    from .hub import resolve_model

    text = os.fspath(path)
    if not isinstance(text, str):
        return None
    p = resolve_model(text, online=online)
    hub = p != text
    if os.path.isdir(p):
        inner = os.path.join(p, "config.json")
        p = inner if os.path.exists(inner) else os.path.join(p, "transformer", "config.json")
    try:
        with open(p, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not is_diffusers_config(data):
        return None
    if hub:
        inner = "transformer/config.json" if os.path.basename(os.path.dirname(p)) == "transformer" else "config.json"
        return diffusion_config_dict(data, name=text, source=f"{text} (Hub {inner}: {p})")
    if os.path.basename(p) == "config.json":
        folder = os.path.dirname(os.path.abspath(p))
        if os.path.basename(folder) == "transformer":  # a pipeline folder: name it by the pipeline
            folder = os.path.dirname(folder)
        name = os.path.basename(folder)
    else:
        name = os.path.splitext(os.path.basename(p))[0]
    return diffusion_config_dict(data, name=name, source=p)


def _wan(data: Mapping[str, Any], base: AxialRope, head: int, name: str, source: str) -> DiffusionConfig:
    """Wan 2.x: h = w = 2 * (head_dim // 6), t = head_dim - h - w (WanRotaryPosEmbed), ids per ``patch_size``
    (t, h, w) latent units of the VAE's 4 frames and 8 px (Wan 2.1 / 2.2 A14B's VAE), a table of
    ``rope_max_seq_len`` rows.

    >>> wan = FAMILIES["WanTransformer3DModel"]
    >>> _wan({"patch_size": [1, 2, 2], "rope_max_seq_len": 1024}, wan, 128, "w", "c").rope.axes_dim
    (44, 42, 42)
    """
    hw = 2 * (head // 6)
    patch = data.get("patch_size", [1, 2, 2])
    if not isinstance(patch, (list, tuple)) or len(patch) != 3 or not all(
            isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in patch) or patch[1] != patch[2]:
        raise ValueError(f"{source}: patch_size {patch!r} must be three positive integers (t, h, w) with h = w")
    table = _int(source, "rope_max_seq_len", data.get("rope_max_seq_len", 1024))
    try:
        rope = replace(base, axes_dim=(head - 2 * hw, hw, hw), pixels_per_id=8 * patch[1], frames_per_id=4 * patch[0],
                       table=table)
    except ValueError as e:
        raise ValueError(f"{source}: attention_head_dim {head}: {e}") from None
    return DiffusionConfig(name=name, class_name="WanTransformer3DModel", rope=rope, head_dim=head, source=source)


def _video(data: Mapping[str, Any], cls: str, name: str, source: str) -> DiffusionConfig:
    """CogVideoX and LTX-Video (:mod:`precision_audit.rope.axial_video`).  CogVideoX: RoPE only with
    ``use_rotary_positional_embeddings`` (the 5B models; the 2B adds a sincos table: ValueError saying so), axes
    head_dim // 4 + 2 x head_dim // 8 * 3 (``get_3d_rotary_pos_embed``), the base grid ``sample_height // p``,
    ``sample_width // p``; a ``patch_size_t`` (1.5) slices integer positions from that table.  LTX-Video: the
    inner dim (heads x head_dim) split in 3 x (dim // 6) frequencies, ``patch_size``, ``patch_size_t``.

    >>> _video({"attention_head_dim": 64, "use_rotary_positional_embeddings": True}, "CogVideoXTransformer3DModel",
    ...        "c", "c.json").rope.axes_dim
    (16, 24, 24)
    >>> _video({"attention_head_dim": 68, "use_rotary_positional_embeddings": True}, "CogVideoXTransformer3DModel",
    ...        "c", "c.json")
    Traceback (most recent call last):
    ...
    ValueError: c.json: attention_head_dim 68: get_3d_rotary_pos_embed splits it into frame 17 + height 24 + width 24 = 65; the axes must be even and add up to the head dim
    """
    base = VIDEO_FAMILIES[cls]
    head = _int(source, "attention_head_dim", data.get("attention_head_dim", 64))
    if cls == "CogVideoXTransformer3DModel":
        if data.get("use_rotary_positional_embeddings", False) is not True:
            raise ValueError(f"{source}: use_rotary_positional_embeddings is not true (CogVideoX-2B): its positions "
                             "are a fixed 3-D sincos table added to the patch embeddings (get_3d_sincos_pos_embed), "
                             "not RoPE; nothing for the axial RoPE audit (`precision-audit sinusoidal` audits "
                             "sinusoidal tables)")
        t, hw = head // 4, head // 8 * 3
        if t + 2 * hw != head or t % 2 or hw % 2 or t < 2:
            raise ValueError(f"{source}: attention_head_dim {head}: get_3d_rotary_pos_embed splits it into frame {t} "
                             f"+ height {hw} + width {hw} = {t + 2 * hw}; the axes must be even and add up to the "
                             "head dim")
        p = _int(source, "patch_size", data.get("patch_size", 2))
        sh = _int(source, "sample_height", data.get("sample_height", 60))
        sw = _int(source, "sample_width", data.get("sample_width", 90))
        if sh < p or sw < p:
            raise ValueError(f"{source}: sample_height {sh} / sample_width {sw} must be at least patch_size {p}")
        pt = data.get("patch_size_t")
        changes: dict[str, Any] = {"axes_dim": (t, hw, hw), "pixels_per_id": 8 * p, "base": (sh // p, sw // p)}
        if pt is not None:
            base = COGVIDEOX_1_5
            changes["frames_per_id"] = 4 * _int(source, "patch_size_t", pt)
    else:
        heads = _int(source, "num_attention_heads", data.get("num_attention_heads", 32))
        dim = heads * head
        if dim // 6 < 1:
            raise ValueError(f"{source}: inner dim {dim} (num_attention_heads x attention_head_dim) must be at least 6")
        p = _int(source, "patch_size", data.get("patch_size", 1))
        pt = _int(source, "patch_size_t", data.get("patch_size_t", 1))
        m = 2 * (dim // 6)
        changes = {"axes_dim": (m, m, m), "unrotated": dim % 6, "pixels_per_id": 32 * p, "frames_per_id": 8 * pt,
                   "patch": (pt, p, p)}
        head = dim
    try:
        rope = replace(base, **changes)
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
    return DiffusionConfig(name=name, class_name=cls, rope=rope, head_dim=head, source=source)


def _axes(data: Mapping[str, Any], key: str, n: int, default: tuple[int, ...], head: int,
          source: str) -> tuple[int, ...]:
    """``n`` positive even axis widths under ``key`` that add up to the head dim, or ValueError naming them."""
    axes = data.get(key, list(default))
    if not isinstance(axes, (list, tuple)) or len(axes) != n or not all(
            isinstance(x, int) and not isinstance(x, bool) and x > 0 and x % 2 == 0 for x in axes):
        raise ValueError(f"{source}: {key} {axes!r} must be {n} positive even integers")
    if sum(axes) != head:
        raise ValueError(f"{source}: {key} {list(axes)} sums to {sum(axes)}, not attention_head_dim {head}")
    return tuple(axes)


def _qwen_image(data: Mapping[str, Any], head: int, name: str, source: str) -> DiffusionConfig:
    """Qwen-Image: ``axes_dims_rope`` (frame, height, width) over the head, theta 10000 (fixed by the class),
    one id per ``8 x patch_size`` px; ``use_layer3d_rope`` (the layered model's QwenEmbedLayer3DRope) is refused.

    >>> _qwen_image({"axes_dims_rope": [16, 56, 56]}, 128, "q", "c").rope.axes_dim
    (16, 56, 56)
    """
    if data.get("use_layer3d_rope", False):
        raise ValueError(f"{source}: use_layer3d_rope true (QwenEmbedLayer3DRope, the layered model) is not modelled")
    axes = _axes(data, "axes_dims_rope", 3, QWEN_IMAGE.axes_dim, head, source)
    rope = replace(QWEN_IMAGE, axes_dim=axes, pixels_per_id=8 * _int(source, "patch_size", data.get("patch_size", 2)))
    return DiffusionConfig(name=name, class_name="QwenImageTransformer2DModel", rope=rope, head_dim=head, source=source)


def _sd3(data: Mapping[str, Any], head: int, name: str, source: str) -> DiffusionConfig:
    """SD3 / SD3.5: a ``pos_embed_max_size``-square sincos table of width ``num_attention_heads x
    attention_head_dim``, positions ``k / (pos_embed_max_size / (sample_size // patch_size))``.

    >>> _sd3({"num_attention_heads": 38, "pos_embed_max_size": 192, "sample_size": 128}, 64, "s", "c").rope.embed_dim
    2432
    """
    heads = _int(source, "num_attention_heads", data.get("num_attention_heads", 18))
    patch = _int(source, "patch_size", data.get("patch_size", 2))
    sample = _int(source, "sample_size", data.get("sample_size", 128))
    size = data.get("pos_embed_max_size", 96)
    if size is None:
        raise ValueError(f"{source}: pos_embed_max_size null (a table of the sample size, interpolated) is not "
                         "modelled")
    size = _int(source, "pos_embed_max_size", size)
    if sample // patch < 1:
        raise ValueError(f"{source}: sample_size {sample} is smaller than patch_size {patch}")
    try:
        grid = SincosGrid(family="sd3", embed_dim=heads * head, max_size=size, base_size=sample // patch,
                          pixels_per_patch=8 * patch,
                          source="diffusers 0.42.1 embeddings.PatchEmbed (get_2d_sincos_pos_embed, cropped_pos_embed)")
    except ValueError as e:
        raise ValueError(f"{source}: {e}") from None
    return DiffusionConfig(name=name, class_name="SD3Transformer2DModel", rope=grid, head_dim=head, source=source)
