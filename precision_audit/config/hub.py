"""Model descriptions by Hugging Face Hub id: fetch ``config.json`` and nothing else.

A user names a model as ``ORG/NAME`` (optionally ``ORG/NAME@REVISION``).
:func:`resolve_model` turns that into the path of a local ``config.json``
through ``huggingface_hub`` (the ``[hub]`` extra): the local cache first, the
Hub only when online, and that one file only, never weights.  It honours
``HF_HUB_OFFLINE`` and the cache variables (``HF_HUB_CACHE``, ``HF_HOME``) as
they are when it is called, and fails with one clear ``ValueError`` when the
file cannot be had.

A path that exists is returned as it is, so callers pass every argument
through here:

>>> resolve_model("tests/data/llama-2-7b-hf.json")
'tests/data/llama-2-7b-hf.json'
>>> is_hub_id("meta-llama/Llama-3.1-8B"), is_hub_id("./config.json"), is_hub_id("a/b/c")
(True, False, False)
"""

from __future__ import annotations

import os
import re

__all__ = ["HUB_INSTALL", "is_hub_id", "resolve_model"]

HUB_INSTALL = "pip install 'precision-audit[hub]'"

# The Hub's repo id rule: ORG/NAME of letters, digits, '-', '_', '.'; neither part starts or ends with '.' or '-'.
_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_HUB_ID = re.compile(rf"^(?P<repo>{_PART}/{_PART})(?:@(?P<revision>[A-Za-z0-9._/-]{{1,255}}))?$")
_TRUE = {"1", "on", "yes", "true"}


def is_hub_id(text: str) -> bool:
    """Whether ``text`` reads as a Hub model id ``ORG/NAME[@REVISION]`` (it may still name a local path)."""
    return isinstance(text, str) and bool(_HUB_ID.match(text)) and ".." not in text


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def _cache_dir() -> str | None:
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return None  # huggingface_hub's default (~/.cache/huggingface/hub)


def resolve_model(model: str) -> str:
    """The local path of ``model``'s description: the path itself, or a Hub id's cached/downloaded ``config.json``.

    Raises ValueError naming the model when it is neither an existing path nor a
    Hub id, when ``huggingface_hub`` is missing, or when the file cannot be had
    (offline with no cached copy, unknown or gated repository, no network).
    """
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be a path or a Hub id (str), not {type(model).__name__}")
    text = os.fspath(model)
    if os.path.exists(text) or not is_hub_id(text):
        return text
    m = _HUB_ID.match(text)
    assert m is not None  # is_hub_id said so
    repo, revision = m["repo"], m["revision"]
    try:
        import huggingface_hub
        from huggingface_hub.utils import HfHubHTTPError
    except ImportError:
        raise ValueError(f"{text}: no such file; to read it as a Hub id install huggingface_hub "
                         f"({HUB_INSTALL})") from None
    offline = _offline()
    try:
        return str(huggingface_hub.hf_hub_download(repo, "config.json", revision=revision, cache_dir=_cache_dir(),
                                                   local_files_only=offline))
    except huggingface_hub.errors.LocalEntryNotFoundError:
        why = ("HF_HUB_OFFLINE is set and the local cache has no copy" if offline
               else "the Hub could not be reached and the local cache has no copy")
        raise ValueError(f"{text}: no such file, and as a Hub id: {why} of its config.json "
                         f"(cache: {_cache_dir() or 'huggingface_hub default'})") from None
    except huggingface_hub.errors.RepositoryNotFoundError:
        raise ValueError(f"{text}: no such file, and no such Hub repository (or it is private/gated: "
                         "log in with `hf auth login`)") from None
    except huggingface_hub.errors.RevisionNotFoundError:
        raise ValueError(f"{text}: the Hub repository has no revision {revision!r}") from None
    except huggingface_hub.errors.EntryNotFoundError:
        raise ValueError(f"{text}: the Hub repository has no config.json") from None
    except (HfHubHTTPError, OSError) as e:
        raise ValueError(f"{text}: cannot fetch config.json from the Hub: {type(e).__name__}: "
                         f"{str(e).splitlines()[0] if str(e) else ''}") from None
