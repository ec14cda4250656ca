"""A module file of an installed package, executed as that package's module without running the package's
``__init__`` (litgpt's imports lightning, timm's layers import torchvision: neither is installed here, and the
rotary code uses neither).  The real file runs; nothing is copied.

The parent packages are stand-ins (their ``__path__`` the installed folders, so the file's own imports, relative
or absolute, load the real sibling files) put in ``sys.modules`` only while the file loads; ``stubs`` names
modules the file imports for code it does not need here (litgpt's checkpoint converter), each an empty module
holding the names given (:func:`stubbed`, also around a ``scan`` of the file; :data:`LITGPT_STUBS`).  A missing
package skips the test with the reason and the pip line (fails under CI).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

__all__ = ["LITGPT_STUBS", "package_file", "package_folder", "stubbed"]

LITGPT_STUBS: dict[str, dict[str, Any]] = {"litgpt.scripts": {},
                                           "litgpt.scripts.convert_hf_checkpoint": {"qkv_reassemble": None}}
"""What ``litgpt/model.py`` imports for its checkpoint converter (which needs lightning), not for its RoPE."""


def package_folder(package: str) -> Path:
    """The installed package's folder, found without importing it (skip if missing; fail with ``CI`` set)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        reason = f"{package} is not installed; install it: pip install --no-deps {package}"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run this referee: {reason}", pytrace=False)
        pytest.skip(reason)
    return Path(next(iter(spec.submodule_search_locations)))


@contextlib.contextmanager
def stubbed(stubs: dict[str, dict[str, Any]] | None) -> Iterator[None]:
    """``stubs`` in ``sys.modules`` while the block runs (each an empty module holding the names given)."""
    saved = {name: sys.modules.get(name) for name in stubs or {}}
    for name, attrs in (stubs or {}).items():
        stub = ModuleType(name)
        stub.__path__ = []
        stub.__dict__.update(attrs)
        sys.modules[name] = stub
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old


def package_file(package: str, module: str, stubs: dict[str, dict[str, Any]] | None = None) -> ModuleType:
    """``package.module`` (dotted, e.g. ``layers.pos_embed_sincos``) loaded from the installed package's files."""
    root = package_folder(package)
    saved = {k: v for k, v in sys.modules.items() if k == package or k.startswith(package + ".")}
    parts = module.split(".")
    try:
        for i in range(len(parts)):  # the package and each parent package of the file: stand-ins
            name = ".".join([package, *parts[:i]])
            stand_in = ModuleType(name)
            stand_in.__path__ = [str(root.joinpath(*parts[:i]))]
            sys.modules[name] = stand_in
        with stubbed(stubs):
            return importlib.import_module(f"{package}.{module}")
    finally:
        for k in [k for k in sys.modules if k == package or k.startswith(package + ".")]:
            if k not in saved:
                del sys.modules[k]
        sys.modules.update(saved)
