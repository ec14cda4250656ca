"""Referees for the stack presets (tests only, not shipped): the real third-party kernels run on (1, 0) pairs
(:mod:`._ggml`: ggml's rope op through ``ggml-python``; :mod:`._mlx`: ``mx.fast.rope``) and numpy models of
exactly what they compute (:mod:`._ggml_model`, :mod:`._mlx_model`), the second opinion next to the package's
own hows.  Imported by the tests as ``referees`` (``tests/`` is on ``sys.path`` as for ``_thirdparty``).

:func:`need` is the one rule for a missing third-party package: skip with the reason on a developer's
machine, fail when the environment variable ``CI`` is set (CI installs every referee).
"""

from __future__ import annotations

import importlib
import os
import warnings
from types import ModuleType

import pytest

__all__ = ["PIP", "need"]

# what to install for each referee module (mlx: the Linux wheel needs the CPU backend extra)
PIP: dict[str, str] = {
    "ggml": "pip install ggml-python",
    "mlx.core": "pip install 'mlx[cpu]'",
    "gguf": "pip install gguf",
    "torch": "pip install torch",
    "diffusers": "pip install 'diffusers>=0.35' (the [diffusion] extra)",
}


def need(module: str) -> ModuleType:
    """Import ``module`` (a key of :data:`PIP`), or skip the caller with the reason; with ``CI`` set, fail.

    Usable at module level and inside a test.  A package that is installed but does not load (a missing
    shared library: the bare ``mlx`` wheel on Linux, a ggml build for another CPU) counts as missing.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return importlib.import_module(module)
    except (ImportError, OSError) as e:
        reason = f"{module} does not import ({type(e).__name__}: {e}); install it: {PIP.get(module, module)}"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run this referee: {reason}", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
