"""The report's "Images and video" section (M-RoPE models): the same audit `config --image / --video` prints,
its figure, and bad input."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from precision_audit.cli import main

QWEN25 = "tests/data/qwen2.5-vl-7b-instruct.json"


def test_report_section_is_the_config_audit(tmp_path):
    """The section's bottom line and rows are those `config MODEL --video ... --image ... --json` gives for the
    same input (one audit behind both: precision_audit.config.mrope.mrope_audit)."""
    args = ["--video", "600@2", "--image", "1280x720"]
    r = CliRunner().invoke(main, ["report", QWEN25, "-o", str(tmp_path), "--max-length", "2048", "-q", *args])
    assert r.exit_code == 0, r.output
    section = json.loads((tmp_path / "results.json").read_text())
    found = section["results"]["mrope"]
    c = CliRunner().invoke(main, ["config", QWEN25, *args, "--json"])
    assert c.exit_code == 0, c.output
    cfg = json.loads(c.output)
    assert found["rows"] == cfg["results"]
    assert [{k: v for k, v in e.items() if k not in ("at_least", "audited")} for e in found["summary"]] \
        == cfg["summary"]
    assert found["largest_vision_ids"] == cfg["largest_vision_ids"]
    assert (tmp_path / "mrope_safe_video.png").stat().st_size > 0
    md = (tmp_path / "report.md").read_text()
    assert "## Images and video" in md and "mrope_safe_video.png" in md
    # the cast path loses the temporal section within minutes of video; the built one holds past the input
    cast = next(e for e in found["summary"] if e["stack"] == "transformers-cast")
    built = next(e for e in found["summary"] if e["stack"] == "transformers")
    assert cast["safe_seconds"] < 600 <= built["safe_seconds"]


def test_report_without_vision_input_uses_the_default(tmp_path):
    r = CliRunner().invoke(main, ["report", "tests/data/qwen2-vl-7b-instruct.json", "-o", str(tmp_path),
                                  "--max-length", "2048", "-q", "--stack", "transformers"])
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "results.json").read_text())
    mrope = data["results"]["mrope"]
    assert mrope["input"]["image"] == [1920, 1080] and mrope["input"]["video"]["seconds"] == 3600
    assert [e["stack"] for e in mrope["summary"]] == ["transformers"]


@pytest.mark.parametrize("args,msg", [
    (["tests/data/llama-3.1-8b.json", "--image", "64x64"], "no mrope_section"),
    (["--video", "60@2"], "give a vision-language MODEL"),
    ([QWEN25, "--image", "0x0"], "both >= 1"),
    ([QWEN25, "--video", "-1@2"], "SECONDS > 0")])
def test_report_bad_vision_input_exits_2(tmp_path, args, msg):
    r = CliRunner().invoke(main, ["report", *args, "-o", str(tmp_path)])
    assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output, r.output


DIFFUSERS = "tests/data/diffusers"


@pytest.mark.parametrize("name,args", [("flux.1-dev-transformer", ["--image", "8192x4096"]),
                                       ("hunyuanvideo-transformer", ["--video", "30@24"]),
                                       ("qwen-image-transformer", ["--image", "2048x2048", "--text", "100"]),
                                       ("sd3.5-large-transformer", [])])
def test_diffusion_report_is_the_config_audit(tmp_path, name, args):
    """A diffusers config's report: the bottom line and rows are those `config FILE --json` gives for the same
    input (one audit behind both: precision_audit.config.diffusion_audit), with its figure."""
    path = f"{DIFFUSERS}/{name}.json"
    r = CliRunner().invoke(main, ["report", path, "-o", str(tmp_path), "-q", *args])
    assert r.exit_code == 0, r.output
    found = json.loads((tmp_path / "results.json").read_text())
    c = CliRunner().invoke(main, ["config", path, *args, "--json"])
    assert c.exit_code == 0, c.output
    assert found["results"]["diffusion"] == json.loads(c.output)
    assert found["results"]["summary"] == json.loads(c.output)["summary"]
    assert (tmp_path / "diffusion_largest_safe.png").stat().st_size > 0
    md = (tmp_path / "report.md").read_text()
    assert "## Bottom line" in md and "## Images and video" in md


@pytest.mark.parametrize("args,msg", [
    (["--stack", "vllm"], "is a diffusion transformer"), (["--max-length", "4096"], "is a diffusion transformer"),
    (["--image", "4096x4096"], "more than the table's pos_embed_max_size 192"),
    (["--video", "5@2"], "makes images, not video")])
def test_diffusion_report_bad_input_exits_2(tmp_path, args, msg):
    r = CliRunner().invoke(main, ["report", f"{DIFFUSERS}/sd3.5-large-transformer.json", "-o", str(tmp_path), *args])
    assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output, r.output
