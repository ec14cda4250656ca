"""What a vision-language config says about its M-RoPE: sections, layout and the vision tower's grid facts.

Read from the text config's rope parameters (``mrope_section``, ``mrope_interleaved``) and the top level's
``vision_config`` (``patch_size``, ``spatial_merge_size``, ``temporal_patch_size``, ``tokens_per_second``), for
:class:`precision_audit.rope.axes.MRope` (which checks them).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["mrope_facts"]

_VISION_KEYS = ("patch_size", "spatial_merge_size", "temporal_patch_size", "tokens_per_second")


def _get(obj: Any, key: str) -> Any:
    return obj.get(key) if isinstance(obj, Mapping) else getattr(obj, key, None)


def mrope_facts(top: Callable[[str], Any], text: Callable[[str], Any]) -> tuple[tuple[str, Any], ...]:
    """The M-RoPE facts of a config, ``()`` when it declares no ``mrope_section``.  ``top`` / ``text`` read a
    key from the top level / the text config.

    >>> cfg = {"model_type": "qwen2_5_vl", "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    ...        "vision_config": {"patch_size": 14, "tokens_per_second": 2}}
    >>> dict(mrope_facts(cfg.get, cfg.get))["mrope_section"], dict(mrope_facts(cfg.get, cfg.get))["tokens_per_second"]
    ([16, 24, 24], 2)
    >>> mrope_facts({}.get, {}.get)
    ()
    """
    params = text("rope_parameters") or text("rope_scaling") or {}
    section = _get(params, "mrope_section")
    if section is None:
        return ()
    out: dict[str, Any] = {"model_type": top("model_type") or text("model_type"),
                           "mrope_section": list(section) if isinstance(section, (list, tuple)) else section,
                           "mrope_interleaved": bool(_get(params, "mrope_interleaved"))}
    vision = top("vision_config")
    for k in _VISION_KEYS:
        v = _get(vision, k) if vision is not None else None
        if v is not None:
            out[k] = v
    return tuple(out.items())
