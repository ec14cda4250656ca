"""torchtune's rotary modules, loaded from the installed package and run (never copied).

``torchtune/__init__.py`` imports torchao, the datasets and the tokenizers before anything else, none of which
the rotary modules use: the two module files (``torchtune/modules/position_embeddings.py``
``RotaryPositionalEmbeddings``, ``torchtune/models/llama3_1/_position_embeddings.py`` ``Llama3ScaledRoPE``;
plain torch, they import only ``math``, ``typing`` and ``torch``) are loaded from the installed distribution by
path, without running the package's ``__init__``.  Read at torchtune 0.6.1 (``pip install --no-deps torchtune``;
the rotary classes are the same at pytorch/torchtune bd2a0fc).

A missing torchtune is the same rule as :func:`referees.need`: skip with the reason, fail with ``CI`` set.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

__all__ = ["torchtune_module"]

PIP = "pip install --no-deps torchtune"
FILES = {"rope": "modules/position_embeddings.py", "llama3_1": "models/llama3_1/_position_embeddings.py"}


def torchtune_module(which: str) -> ModuleType:
    """The module file ``FILES[which]`` of the installed torchtune, executed on its own (skip if missing)."""
    need_torch = importlib.util.find_spec("torch")
    spec = importlib.util.find_spec("torchtune")
    if spec is None or not spec.submodule_search_locations or need_torch is None:
        reason = f"torchtune (or torch) is not installed; install it: {PIP}"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run this referee: {reason}", pytrace=False)
        pytest.skip(reason)
    path = Path(next(iter(spec.submodule_search_locations))) / FILES[which]
    mspec = importlib.util.spec_from_file_location(f"_torchtune_referee_{which}", path)
    assert mspec is not None and mspec.loader is not None, path
    module = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(module)
    return module
