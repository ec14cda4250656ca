"""Hub ids: config.json through huggingface_hub's local cache; nothing is downloaded.

The cache is a temporary directory laid out as huggingface_hub lays it out
(models--ORG--NAME/refs/main -> snapshots/<commit>/config.json), and every test
runs with HF_HUB_OFFLINE=1, so a miss can never reach the network.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from precision_audit.config.hub import is_hub_id, resolve_model

pytest.importorskip("huggingface_hub", reason="the [hub] extra (huggingface_hub) is not installed")

DATA = Path(__file__).parent / "data"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _cache(tmp_path: Path, repo: str, config: Path) -> Path:
    root = tmp_path / "hub"
    model = root / ("models--" + repo.replace("/", "--"))
    (model / "refs").mkdir(parents=True)
    (model / "refs" / "main").write_text(COMMIT)
    snap = model / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    shutil.copy(config, snap / "config.json")
    return root


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    root = _cache(tmp_path, "meta-llama/Llama-3.1-8B", DATA / "llama-3.1-8b.json")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    return root


@pytest.mark.parametrize("text, expected", [
    ("meta-llama/Llama-3.1-8B", True), ("Qwen/Qwen2.5-7B-Instruct@main", True), ("org/name@v1.0", True),
    ("config.json", False), ("a/b/c", False), ("./a", False), ("/abs/path", False), ("org/-bad", False),
    ("org/..", False), ("", False), ("org/na me", False),
])
def test_is_hub_id(text, expected):
    assert is_hub_id(text) is expected


def test_existing_path_is_returned_unchanged():
    p = str(DATA / "qwen2-7b.json")
    assert resolve_model(p) == p


def test_cached_config_is_found_offline(offline_cache):
    path = resolve_model("meta-llama/Llama-3.1-8B")
    assert json.loads(Path(path).read_text()) == json.loads((DATA / "llama-3.1-8b.json").read_text())
    assert str(offline_cache) in path


def test_offline_without_cached_copy_is_a_clear_error(offline_cache):
    with pytest.raises(ValueError, match=r"Qwen/Qwen3-8B: .*HF_HUB_OFFLINE is set and the local cache has no copy"):
        resolve_model("Qwen/Qwen3-8B")


def test_unknown_revision_offline_is_a_clear_error(offline_cache):
    with pytest.raises(ValueError, match=r"meta-llama/Llama-3.1-8B@nosuch: .*no copy"):
        resolve_model("meta-llama/Llama-3.1-8B@nosuch")


def test_not_a_string_is_a_type_error():
    with pytest.raises(TypeError, match="model must be a path or a Hub id"):
        resolve_model(None)  # type: ignore[arg-type]
