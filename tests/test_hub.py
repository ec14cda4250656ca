"""Hub ids: config.json through huggingface_hub's local cache; nothing is downloaded.

The cache is a temporary directory laid out as huggingface_hub lays it out
(models--ORG--NAME/refs/main -> snapshots/<commit>/config.json).  The tests run
with HF_HUB_OFFLINE=1, or with the Hub endpoint on a closed local port
(HF_ENDPOINT), so a miss can never reach the network; the second kind checks
that a Hub that cannot be reached fails in under a second, in one line.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from precision_audit.config.hub import is_hub_id, resolve_model

pytest.importorskip("huggingface_hub", reason="the [hub] extra (huggingface_hub) is not installed")

DATA = Path(__file__).parent / "data"
ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from precision_audit.cli import main; sys.exit(main(prog_name='precision-audit'))"
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
    with pytest.raises(ValueError, match=r"Qwen/Qwen3-8B: .*HF_HUB_OFFLINE is set and the local cache .*has no copy"):
        resolve_model("Qwen/Qwen3-8B")


def test_unknown_revision_offline_is_a_clear_error(offline_cache):
    with pytest.raises(ValueError, match=r"meta-llama/Llama-3.1-8B@nosuch: .*no copy"):
        resolve_model("meta-llama/Llama-3.1-8B@nosuch")


def test_not_a_string_is_a_type_error():
    with pytest.raises(TypeError, match="model must be a path or a Hub id"):
        resolve_model(None)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- no network unless asked (issue 41)

def _closed_port() -> int:
    """A local port nothing listens on (bound, then released): a Hub there refuses at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def unreachable_hub(tmp_path, monkeypatch):
    """An empty cache, HF_HUB_OFFLINE unset and the Hub endpoint on a closed local port: nothing can be fetched."""
    root = _cache(tmp_path, "meta-llama/Llama-3.1-8B", DATA / "llama-3.1-8b.json")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    return root


def test_cached_copy_is_read_without_the_hub(unreachable_hub):
    # the cache is looked up first: a cached model resolves even with the Hub unreachable and --online given
    for online in (False, True):
        assert str(unreachable_hub) in resolve_model("meta-llama/Llama-3.1-8B", online=online)


def test_not_cached_and_not_online_fails_at_once_naming_online(unreachable_hub):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"^Qwen/Qwen3-8B: .*not in the local cache .*add --online"):
        resolve_model("Qwen/Qwen3-8B")
    assert time.perf_counter() - start < 1.0


def test_unreachable_hub_online_fails_fast_in_one_line(unreachable_hub, capfd):
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"^Qwen/Qwen3-8B: not in the local cache, and the Hub "
                                         r"\(http://127\.0\.0\.1:\d+\) cannot be reached: ") as info:
        resolve_model("Qwen/Qwen3-8B", online=True)
    assert time.perf_counter() - start < 1.0
    assert "\n" not in str(info.value)
    out, err = capfd.readouterr()
    assert out == err == ""  # no retry warnings, no progress bar


@pytest.mark.parametrize("command", [["config", "Qwen/Qwen3-8B", "--online"],
                                     ["report", "Qwen/Qwen3-8B", "-o", "OUT", "--online"],
                                     ["config", "Qwen/Qwen3-8B"]])
def test_cli_unreachable_hub_is_one_line_in_a_fresh_process(unreachable_hub, tmp_path, command):
    # a user's shell: a fresh interpreter, so nothing imported earlier (huggingface_hub's constants) helps
    argv = [a.replace("OUT", str(tmp_path / "out")) for a in command]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", CLI, *argv], env=env, capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - start
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "Qwen/Qwen3-8B" in errors[0], proc.stderr
    assert "Retry" not in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.splitlines()) <= 4  # click's usage line, its hint, a blank line and the error
    assert elapsed < 5.0  # the interpreter's start included; the Hub part is under a second (tests above)


def test_online_must_be_a_flag():
    with pytest.raises(ValueError, match="online 'yes' must be True or False"):
        resolve_model("meta-llama/Llama-3.1-8B", online="yes")  # type: ignore[arg-type]


def _pipeline_cache(tmp_path: Path, repo: str, transformer: Path) -> Path:
    """A diffusers pipeline repository as the cache holds it: model_index.json and transformer/config.json, no
    config.json at the top."""
    root = tmp_path / "hub"
    model = root / ("models--" + repo.replace("/", "--"))
    (model / "refs").mkdir(parents=True)
    (model / "refs" / "main").write_text(COMMIT)
    snap = model / "snapshots" / COMMIT
    (snap / "transformer").mkdir(parents=True)
    (snap / "model_index.json").write_text(json.dumps({"_class_name": "FluxPipeline"}))
    shutil.copy(transformer, snap / "transformer" / "config.json")
    return root


def test_diffusers_pipeline_id_reads_its_transformer_config(tmp_path, monkeypatch):
    from precision_audit.config import load_diffusion_config

    src = DATA / "diffusers" / "flux.1-dev-transformer.json"
    root = _pipeline_cache(tmp_path, "black-forest-labs/FLUX.1-dev", src)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(root))
    path = resolve_model("black-forest-labs/FLUX.1-dev")
    assert path.endswith(os.path.join("transformer", "config.json"))
    cfg = load_diffusion_config("black-forest-labs/FLUX.1-dev")
    assert cfg is not None and cfg.name == "black-forest-labs/FLUX.1-dev" and cfg.rope.axes_dim == (16, 56, 56)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(root)}
    r = subprocess.run([sys.executable, "-c", CLI, "config", "black-forest-labs/FLUX.1-dev", "--image", "2048x2048"],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("black-forest-labs/FLUX.1-dev (FluxTransformer2DModel)")


def test_local_pipeline_folder_reads_its_transformer_config(tmp_path):
    from precision_audit.config import load_diffusion_config

    (tmp_path / "FLUX.1-dev" / "transformer").mkdir(parents=True)
    shutil.copy(DATA / "diffusers" / "flux.1-dev-transformer.json", tmp_path / "FLUX.1-dev" / "transformer" / "config.json")
    cfg = load_diffusion_config(tmp_path / "FLUX.1-dev")
    assert cfg is not None and cfg.name == "FLUX.1-dev"


def test_uncached_pipeline_id_offline_names_both_files(offline_cache):
    with pytest.raises(ValueError, match=r"black-forest-labs/FLUX.1-dev: .*no copy of its config.json \(nor of a "
                                         r"diffusers transformer/config.json\)"):
        resolve_model("black-forest-labs/FLUX.1-dev")
