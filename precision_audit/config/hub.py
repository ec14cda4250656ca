"""Model descriptions by Hugging Face Hub id: fetch ``config.json`` and nothing else.

A user names a model as ``ORG/NAME`` (optionally ``ORG/NAME@REVISION``).
:func:`resolve_model` turns that into the path of a local ``config.json``
through ``huggingface_hub`` (the ``[hub]`` extra): the local cache first, the
Hub only when asked (``online=True``, the CLI's ``--online``), and that one
file only, never weights.  It honours
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

import contextlib
import logging
import os
import re
from collections.abc import Iterator
from typing import Any

__all__ = ["CONFIG_FILES", "HUB_INSTALL", "is_hub_id", "resolve_model"]

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


@contextlib.contextmanager
def _quiet_hub() -> Iterator[None]:
    """huggingface_hub's own warnings and progress bars off: a failure is reported in one line, by the caller."""
    logger = logging.getLogger("huggingface_hub")
    level, bars = logger.level, os.environ.get("HF_HUB_DISABLE_PROGRESS_BARS")
    logger.setLevel(logging.ERROR)
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    try:
        yield
    finally:
        logger.setLevel(level)
        if bars is None:
            os.environ.pop("HF_HUB_DISABLE_PROGRESS_BARS", None)
        else:
            os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = bars


CONFIG_FILES: tuple[str, ...] = ("config.json", "transformer/config.json")
"""The files a Hub id is read from, in order: a transformers model's ``config.json``, else a diffusers pipeline's
transformer (its repository has ``model_index.json`` and one folder per component)."""


def _cached(hub: Any, repo: str, revision: str | None) -> str | None:
    """The cached description of ``repo`` at ``revision`` (the first of :data:`CONFIG_FILES` the cache holds; None
    when it holds none); no network."""
    for name in CONFIG_FILES:
        try:
            with _quiet_hub():
                return str(hub.hf_hub_download(repo, name, revision=revision, cache_dir=_cache_dir(),
                                               local_files_only=True))
        except (hub.errors.LocalEntryNotFoundError, hub.errors.EntryNotFoundError, OSError):
            continue
    return None


def _download(hub: Any, text: str, repo: str, revision: str | None, timeout: float) -> str:
    """Fetch ``config.json`` from the Hub (a diffusers pipeline's ``transformer/config.json`` when the repository
    has no ``config.json``): one metadata request per file without retries (a Hub that cannot be reached fails at
    once, in one line), then the download."""
    from huggingface_hub.utils import HfHubHTTPError

    endpoint = os.environ.get("HF_ENDPOINT") or None

    def fetch(name: str) -> str:
        url = hub.hf_hub_url(repo, name, revision=revision, endpoint=endpoint)
        hub.get_hf_file_metadata(url, timeout=timeout, endpoint=endpoint, retry_on_errors=False)
        return str(hub.hf_hub_download(repo, name, revision=revision, cache_dir=_cache_dir(),
                                       endpoint=endpoint, etag_timeout=timeout))

    try:
        with _quiet_hub():
            try:
                return fetch(CONFIG_FILES[0])
            except hub.errors.EntryNotFoundError:
                return fetch(CONFIG_FILES[1])
    except hub.errors.RepositoryNotFoundError:
        raise ValueError(f"{text}: no such file, and no such Hub repository (or it is private/gated: "
                         "log in with `hf auth login`)") from None
    except hub.errors.RevisionNotFoundError:
        raise ValueError(f"{text}: the Hub repository has no revision {revision!r}") from None
    except hub.errors.EntryNotFoundError:
        raise ValueError(f"{text}: the Hub repository has no config.json (nor a diffusers "
                         "transformer/config.json)") from None
    except (HfHubHTTPError, OSError) as e:
        first = str(e).splitlines()[0] if str(e) else ""
        raise ValueError(f"{text}: not in the local cache, and the Hub ({endpoint or hub.constants.ENDPOINT}) "
                         f"cannot be reached: {type(e).__name__}: {first}") from None
    except Exception as e:  # httpx's connection and timeout errors are not OSErrors
        if type(e).__module__.split(".")[0] not in ("httpx", "httpcore", "httpx2", "requests", "urllib3"):
            raise
        first = str(e).splitlines()[0] if str(e) else ""
        raise ValueError(f"{text}: not in the local cache, and the Hub ({endpoint or hub.constants.ENDPOINT}) "
                         f"cannot be reached: {type(e).__name__}: {first}") from None


def resolve_model(model: str, *, online: bool = False, timeout: float = 10.0) -> str:
    """The local path of ``model``'s description: the path itself, or a Hub id's cached/downloaded ``config.json``
    (a diffusers pipeline's ``transformer/config.json`` when the repository has no ``config.json``).

    A Hub id is looked up in the local cache first (no network).  Without a cached copy it is fetched only when
    ``online`` is true (the CLI's ``--online``) and ``HF_HUB_OFFLINE`` is not set: one metadata request without
    retries, waiting at most ``timeout`` seconds, so a Hub that cannot be reached fails at once.

    Raises ValueError naming the model when it is neither an existing path nor a
    Hub id, when ``huggingface_hub`` is missing, or when the file cannot be had
    (not cached and not online, unknown or gated repository, no network).

    >>> resolve_model("no-such-org/no-such-model", online=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: no-such-org/no-such-model: no such file, and as a Hub id: ...
    """
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"model must be a path or a Hub id (str), not {type(model).__name__}")
    if not isinstance(online, bool):
        raise ValueError(f"online {online!r} must be True or False")
    if not (isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and 0 < timeout <= 600):
        raise ValueError(f"timeout {timeout!r} must be a number of seconds in (0, 600]")
    text = os.fspath(model)
    if os.path.exists(text) or not is_hub_id(text):
        return text
    m = _HUB_ID.match(text)
    assert m is not None  # is_hub_id said so
    repo, revision = m["repo"], m["revision"]
    try:
        import huggingface_hub
    except ImportError:
        raise ValueError(f"{text}: no such file; to read it as a Hub id install huggingface_hub "
                         f"({HUB_INSTALL})") from None
    found = _cached(huggingface_hub, repo, revision)
    if found is not None:
        return found
    cache = _cache_dir() or "huggingface_hub default"
    if _offline():
        raise ValueError(f"{text}: no such file, and as a Hub id: HF_HUB_OFFLINE is set and the local cache "
                         f"({cache}) has no copy of its config.json (nor of a diffusers transformer/config.json)") from None
    if not online:
        raise ValueError(f"{text}: no such file, and as a Hub id: not in the local cache ({cache}); add --online "
                         "(API: online=True) to fetch its config.json from the Hub") from None
    return _download(huggingface_hub, text, repo, revision, float(timeout))
