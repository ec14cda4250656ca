"""`precision-audit report` and the report package.

Expected numbers come from the auditors themselves, called here with the
report's settings (the report must show exactly what they compute), from
transformers' MPT code (ALiBi slopes), and from the files on disk (every
reference in report.md/html resolves, every PNG decodes).
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import _thirdparty  # tests/ helper: third-party references, imported and run
import numpy as np
import pytest
from click.testing import CliRunner

from precision_audit.alibi import audit_alibi
from precision_audit.attention import attention_errors
from precision_audit.cli import main
from precision_audit.positions import predict_positions, reproduce_baichuan
from precision_audit.rope import PRESETS, RopeSchedule, audit, preset
from precision_audit.sinusoidal import audit_sinusoidal

SMALL = "1024"  # --max-length of the test reports: seconds, not minutes
HEADLINE_FILES = {
    "positions.png", "rope_error_vs_length.png", "rope_error_per_frequency.png", "rope_attention_logit_error.png",
    "alibi_distinct.png", "alibi_attention.png", "sinusoidal_duplicates.png", "sinusoidal_decay.png",
    "report.md", "report.html", "results.json",
}
LLAMA_LIKE = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8, "rope_theta": 500000.0,
              "max_position_embeddings": 1024, "torch_dtype": "bfloat16"}


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def plain(rows):
    """Rows as results.json holds them: to_dict() through a JSON round trip (tuples -> lists)."""
    return json.loads(json.dumps([r.to_dict() for r in rows]))


@pytest.fixture(scope="module")
def headline(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("h") / "report"
    res = run("report", "--max-length", SMALL, "--out", str(out))
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("m") / "llama-like"  # the folder names the model in the report
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA_LIKE))
    res = run("report", "--config", str(d / "config.json"), "--out", str(d / "report"))
    assert res.exit_code == 0, res.output
    return d / "report"


def check_files(out: Path) -> None:
    from matplotlib.image import imread

    for png in out.glob("*.png"):
        img = imread(png)
        h, w = img.shape[:2]
        assert 300 <= h <= 1200 and 600 <= w <= 2000 and img.shape[2] in (3, 4), (png.name, img.shape)
        assert img.std() > 0.05, f"{png.name} is blank"
    md = (out / "report.md").read_text()
    for ref in re.findall(r"\]\(([^)]+)\)", md):
        assert (out / ref).is_file(), ref
    html = (out / "report.html").read_text()
    srcs = re.findall(r'src="([^"]+)"', html)
    assert len(srcs) == len(list(out.glob("*.png"))) > 0
    on_disk = {p.read_bytes() for p in out.glob("*.png")}
    for s in srcs:  # self-contained: every image is embedded, and is one of the PNGs written
        assert s.startswith("data:image/png;base64,")
        assert base64.b64decode(s.split(",", 1)[1]) in on_disk
    for href in re.findall(r'href="([^"]+)"', html):
        assert (out / href).is_file(), href


def test_headline_writes_every_file(headline: Path) -> None:
    assert {p.name for p in headline.iterdir()} == HEADLINE_FILES
    check_files(headline)


def test_headline_results_are_the_auditors(headline: Path) -> None:
    doc = json.loads((headline / "results.json").read_text())
    res, st = doc["results"], doc["settings"]
    L = st["max_length"]
    assert L == 1024
    pos = res["positions"]
    assert pos == plain([predict_positions(r["length"], r["dtype"]) for r in pos])
    assert {r["dtype"] for r in pos} == {"bfloat16", "float16", "float32", "float8_e4m3fn", "float8_e5m2"}
    assert res["baichuan"] == plain(reproduce_baichuan())
    sched = RopeSchedule(head_dim=st["rope_head_dim"], base=st["rope_base"])
    recs = [preset(n, "bfloat16") for n in PRESETS]
    assert res["rope"] == plain(audit(sched, recs, [256, 512, 1024]))
    assert res["attention"] == plain(attention_errors(sched, recs, L, pairs=st["attention_pairs"],
                                                      shifts=st["attention_shifts"], seed=st["attention_seed"]))
    alibi = [x for d in ("bfloat16", "float16") for r in ("lowp", "cast-output", "relative-cast", "fp32")
             for x in audit_alibi([256, 512, 1024], st["alibi_heads"], r, d)]
    assert res["alibi"] == plain(alibi)
    assert res["sinusoidal"] == plain(audit_sinusoidal([256, 512, 1024], st["sinusoidal_dim"], max_lag=0))


@pytest.mark.slow  # draws all eight figures again; the model report's rerun below runs by default
def test_headline_rerun_is_byte_identical(headline: Path, tmp_path: Path) -> None:
    res = run("report", "--max-length", SMALL, "--out", str(tmp_path / "again"), "--quiet")
    assert res.exit_code == 0, res.output
    for f in sorted(headline.iterdir()):
        assert f.read_bytes() == (tmp_path / "again" / f.name).read_bytes(), f.name


def test_model_report_from_config(model: Path) -> None:
    names = {p.name for p in model.iterdir()}
    assert {"positions.png", "rope_heatmap_bfloat16.png", "rope_error_vs_length_bfloat16.png",
            "rope_attention_logit_error_bfloat16.png", "report.md", "report.html", "results.json"} <= names
    check_files(model)
    md = (model / "report.md").read_text()
    assert md.index("## Verdict") < md.index("## RoPE")
    doc = json.loads((model / "results.json").read_text())
    sched = RopeSchedule(head_dim=32, base=500000.0)  # 256 / 8 heads
    rows = audit(sched, [preset(n, "bfloat16") for n in PRESETS], [256, 512, 1024, 2048, 4096])
    assert doc["results"]["rope"] == plain(rows)
    verdict = {v["code_path"]: v for v in doc["results"]["verdict"]}
    # bf16 position ids collide above 256 (8 significant bits), so they are broken at 1K; fp32 keeps them
    assert verdict["position ids built in bfloat16"]["1024"].startswith("broken")
    # the heatmap's column maxima are the auditor's per-frequency profile at the model's context
    at = {(r.recipe, r.length): r for r in rows}
    for g in doc["results"]["rope_heatmap"]:
        cols = np.max(np.array(g["max_rotation_error"]), axis=0)
        assert cols.tolist() == list(at[g["recipe"], 1024].rotation_error_profile)


def test_model_report_rerun_is_byte_identical(model: Path, tmp_path: Path) -> None:
    (tmp_path / "llama-like").mkdir()
    (tmp_path / "llama-like" / "config.json").write_text(json.dumps(LLAMA_LIKE))
    cfg = str(tmp_path / "llama-like" / "config.json")
    assert run("report", "--config", cfg, "--out", str(tmp_path / "r"), "--quiet").exit_code == 0
    for f in sorted(model.iterdir()):
        assert f.read_bytes() == (tmp_path / "r" / f.name).read_bytes(), f.name


def test_alibi_model_uses_mpt_slopes(tmp_path: Path) -> None:
    # MPT with 12 heads (not a power of two): slopes from transformers' own MPT code, not the reference rule
    mpt = pytest.importorskip("transformers.models.mpt.modeling_mpt")
    cfg = {"model_type": "mpt", "n_heads": 12, "d_model": 768, "max_seq_len": 256,
           "attn_config": {"alibi": True, "alibi_bias_max": 8}}
    from precision_audit.report._config import model_spec

    spec = model_spec(cfg)
    bias = mpt.build_mpt_alibi_tensor(12, 2, 8).double().numpy()  # (heads, 1, 2): slope * (k - 1), k = 0, 1
    assert list(spec.alibi_slopes) == pytest.approx((-bias[:, 0, 0]).tolist(), rel=2**-23)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    res = run("report", "--config", str(tmp_path / "config.json"), "--out", str(tmp_path / "r"))
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    assert doc["results"]["alibi"] == plain(
        [x for r in ("lowp", "cast-output", "relative-cast", "fp32")
         for x in audit_alibi([256, 512, 1024], 12, r, "bfloat16", slopes=spec.alibi_slopes)])
    assert (tmp_path / "r" / "alibi_distinct.png").is_file()


def test_model_type_config_read_as_transformers_reads_it() -> None:
    # the report reads transformers' default config object by attribute: Gemma 4's full-attention layers (the
    # ones it draws) use head_dim 512, which the object's to_dict() keeps only in per_layer_config; referee:
    # the rotary module transformers builds from the same config
    cls = _thirdparty.private("transformers.models.gemma4.modeling_gemma4", "Gemma4TextRotaryEmbedding")
    cfg = _thirdparty.private("transformers", "Gemma4TextConfig")()
    from precision_audit.report._config import spec_for_model_type

    spec = spec_for_model_type("gemma4_text")
    theirs = cls(cfg).full_attention_inv_freq.double().numpy()
    assert spec.rope is not None and spec.rope.head_dim == 512
    np.testing.assert_array_equal(spec.rope.inv_freq_in("float32", engine="torch"), theirs)


def test_model_type_without_download() -> None:
    pytest.importorskip("transformers")
    res = run("report", "--model-type", "gpt2", "--out", "unused")
    assert res.exit_code == 2 and "cannot tell the position encoding" in res.output
    assert not Path("unused").exists()


@pytest.mark.parametrize("args", [
    ["--config", "x.json", "--model-type", "llama"],
    ["--max-length", "100"],
])
def test_bad_options_exit_2(args, tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text(json.dumps(LLAMA_LIKE))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        res = run("report", *args, "--out", "r")
    finally:
        os.chdir(cwd)
    assert res.exit_code == 2, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.json"]


def test_out_is_a_file_exit_2(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("keep")
    res = run("report", "--max-length", "256", "--out", str(f))
    assert res.exit_code == 2 and "is a file" in res.output
    assert f.read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_out_file_checked_by_the_library_too(tmp_path: Path) -> None:
    from precision_audit.report.writer import OutputDirError, output_dir

    (tmp_path / "f").write_text("")
    with pytest.raises(OutputDirError, match="is a file"):
        with output_dir(tmp_path / "f"):
            pass


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root can write anywhere")
def test_unwritable_out_exit_2(tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        res = run("report", "--max-length", "256", "--out", str(ro / "r"))
    finally:
        ro.chmod(0o755)
    assert res.exit_code == 2, res.output
    assert list(ro.iterdir()) == []


def test_failure_leaves_nothing_behind(tmp_path: Path) -> None:
    from precision_audit.report.writer import output_dir

    with pytest.raises(RuntimeError):
        with output_dir(tmp_path / "r") as tmp:
            (tmp / "half.png").write_bytes(b"x")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_existing_out_keeps_other_files(tmp_path: Path) -> None:
    from precision_audit.report.writer import output_dir

    out = tmp_path / "r"
    out.mkdir()
    (out / "other.txt").write_text("mine")
    with output_dir(out) as tmp:
        (tmp / "a.png").write_bytes(b"new")
    assert sorted(p.name for p in out.iterdir()) == ["a.png", "other.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r"]


def test_import_keeps_matplotlib_out() -> None:
    code = "import sys, precision_audit, precision_audit.report, precision_audit.cli; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert out.stdout.strip() == "False"
