"""`precision-audit report` and the report package.

Expected numbers come from the auditors themselves, called here with the
report's settings (the report must show exactly what they compute), from
transformers' MPT code (ALiBi slopes), and from the files on disk (every
reference in report.md/html resolves, every PNG decodes).  Verdict rules in
the text and on the figures come from precision_audit.config's constants.
"""

from __future__ import annotations

import base64
import json
import math
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
from precision_audit.rope.attention import attention_errors
from precision_audit.cli import main
from precision_audit.verdicts import NOTICED, PHASE_LOST
from precision_audit.positions import predict_positions, reproduce_baichuan
from precision_audit.config import load_config, load_config_dict
from precision_audit.report._config import drawn
from precision_audit.report._plotting import fmt, length_label, pyplot
from precision_audit.rope import PRESETS, RopeSchedule, audit, preset
from precision_audit.sinusoidal import audit_sinusoidal

SMALL = "1024"  # --max-length of the test reports: seconds, not minutes
HEADLINE_FILES = {
    "positions.png", "rope_error_vs_length.png", "rope_error_per_frequency.png", "rope_attention_logit_error.png",
    "alibi_distinct.png", "alibi_attention.png", "sinusoidal_duplicates.png", "sinusoidal_decay.png", "relative.png",
    "effect.png", "report.md", "report.html", "results.json",
}
LLAMA31 = Path(__file__).parent / "data" / "llama-3.1-8b.json"
LLAMA31_CTX = 8192  # --max-length of its report: 8K is enough to tell the fp32 recipe from inv_freq rounded once
LLAMA_LIKE = {"model_type": "llama", "hidden_size": 256, "num_attention_heads": 8, "rope_theta": 500000.0,
              "max_position_embeddings": 1024, "torch_dtype": "bfloat16"}


def run(*args: str):
    return CliRunner().invoke(main, list(args))


def plain(rows):
    """Rows as results.json holds them: to_dict() through a JSON round trip (tuples -> lists)."""
    return json.loads(json.dumps([r.to_dict() for r in rows]))


@pytest.fixture(scope="module")
def headline(tmp_path_factory, shared_reproduce_all) -> Path:
    """The headline report at 1K, its incident section from the session's catalog run (conftest: the rows
    ``reproduce_all`` gives, measured once; test_headline_rerun_is_byte_identical_on_the_real_catalog, in the slow
    pass, reruns it on the real one)."""
    import precision_audit.incidents as incidents

    out = tmp_path_factory.mktemp("h") / "report"
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(incidents, "reproduce_all", shared_reproduce_all)
        res = run("report", "--max-length", SMALL, "--out", str(out))
    assert res.exit_code == 0, res.output
    return out


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("m") / "llama-like"  # the folder names the model in the report
    d.mkdir()
    (d / "config.json").write_text(json.dumps(LLAMA_LIKE))
    res = run("report", str(d / "config.json"), "-o", str(d / "report"))
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
             for x in audit_alibi(st["alibi_heads"], r, [256, 512, 1024], d)]
    assert res["alibi"] == plain(alibi)
    assert res["sinusoidal"] == plain(audit_sinusoidal(st["sinusoidal_dim"], ("lowp", "fp32"), [256, 512, 1024],
                                                       max_lag=0))


@pytest.mark.slow  # draws all eight figures again; the model report's rerun below runs by default
def test_headline_rerun_is_byte_identical(headline: Path, tmp_path: Path, shared_reproduce_all, monkeypatch) -> None:
    import precision_audit.incidents as incidents

    monkeypatch.setattr(incidents, "reproduce_all", shared_reproduce_all)  # the catalog: the session's run
    res = run("report", "--max-length", SMALL, "--out", str(tmp_path / "again"), "--quiet")
    assert res.exit_code == 0, res.output
    for f in sorted(headline.iterdir()):
        assert f.read_bytes() == (tmp_path / "again" / f.name).read_bytes(), f.name


@pytest.mark.slow
def test_headline_rerun_is_byte_identical_on_the_real_catalog(headline: Path, tmp_path: Path) -> None:
    """The rerun with the real reproduce_all (one more run of the catalog): the same bytes as the headline
    fixture, whose catalog rows were the session's."""
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
    assert run("report", cfg, "-o", str(tmp_path / "r"), "--quiet").exit_code == 0
    for f in sorted(model.iterdir()):
        assert f.read_bytes() == (tmp_path / "r" / f.name).read_bytes(), f.name


def test_alibi_model_uses_mpt_slopes(tmp_path: Path) -> None:
    # MPT with 12 heads (not a power of two): slopes from transformers' own MPT code, not the reference rule
    mpt = pytest.importorskip("transformers.models.mpt.modeling_mpt")
    cfg = {"model_type": "mpt", "n_heads": 12, "d_model": 768, "max_seq_len": 256,
           "attn_config": {"alibi": True, "alibi_bias_max": 8}}
    spec = drawn(load_config_dict(cfg))
    bias = mpt.build_mpt_alibi_tensor(12, 2, 8).double().numpy()  # (heads, 1, 2): slope * (k - 1), k = 0, 1
    assert list(spec.alibi_slopes) == pytest.approx((-bias[:, 0, 0]).tolist(), rel=2**-23)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    res = run("report", str(tmp_path / "config.json"), "-o", str(tmp_path / "r"))
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    assert doc["results"]["alibi"] == plain(
        [x for r in ("lowp", "cast-output", "relative-cast", "fp32")
         for x in audit_alibi(12, r, [256, 512, 1024], "bfloat16", slopes=spec.alibi_slopes)])
    assert (tmp_path / "r" / "alibi_distinct.png").is_file()


def test_model_type_config_read_as_transformers_reads_it() -> None:
    # the report reads transformers' default config object by attribute: Gemma 4's full-attention layers (the
    # ones it draws) use head_dim 512, which the object's to_dict() keeps only in per_layer_config; referee:
    # the rotary module transformers builds from the same config
    cls = _thirdparty.private("transformers.models.gemma4.modeling_gemma4", "Gemma4TextRotaryEmbedding")
    cfg = _thirdparty.private("transformers", "Gemma4TextConfig")()
    from precision_audit.hf import default_model_config

    spec = drawn(default_model_config("gemma4_text"))
    theirs = cls(cfg).full_attention_inv_freq.double().numpy()
    assert spec.rope is not None and spec.rope.head_dim == 512
    np.testing.assert_array_equal(spec.rope.inv_freq_in("float32", engine="torch"), theirs)


def test_model_type_without_download(tmp_path: Path) -> None:
    pytest.importorskip("transformers")
    res = run("report", "--model-type", "mamba", "--out", str(tmp_path / "unused"))  # no attention positions
    assert res.exit_code == 2 and "cannot tell the position encoding" in res.output
    assert not (tmp_path / "unused").exists()
    res = run("report", "--model-type", "gpt2", "--out", str(tmp_path / "gpt2"), "-q")  # learned positions
    assert res.exit_code == 0, res.output
    assert "position ids from arange (int64), bfloat16: safe to 1K" in (tmp_path / "gpt2" / "report.md").read_text()


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


# ------------------------------------------------------------------ the text and the figures agree (issue 19)

@pytest.fixture(scope="module")
def llama31(tmp_path_factory) -> tuple[Path, dict[str, list[str]]]:
    """Llama-3.1's report at 8K, and the axes titles of every figure as drawn (file name -> titles)."""
    import precision_audit.report._plotting as plotting
    from precision_audit.report import attention as att_mod
    from precision_audit.report import rope as rope_mod

    titles: dict[str, list[str]] = {}
    real = plotting.save_figure

    def grab(fig, path, *a, **k):
        titles[Path(path).name] = [ax.get_title() for ax in fig.axes]
        return real(fig, path, *a, **k)

    out = tmp_path_factory.mktemp("l31") / "report"
    with pytest.MonkeyPatch.context() as mp:
        for mod in (rope_mod, att_mod):
            mp.setattr(mod, "save_figure", grab)
        res = run("report", "--config", str(LLAMA31), "--max-length", str(LLAMA31_CTX), "--out", str(out), "-q")
    assert res.exit_code == 0, res.output
    return out, titles


def test_heatmap_shows_the_recipe_of_the_table(llama31) -> None:
    # the "fp32 (the fix)" panel once showed inv_freq rounded once from the exact value (0.00285 rad at 8K, 0.00842
    # at 128K) while the table showed the fp32 recipe (inv_freq evaluated in float32: 0.003099, 0.01121)
    out, titles = llama31
    spec = drawn(load_config(LLAMA31))
    rows = {r.recipe: r for r in audit(spec.rope, [preset(n, "bfloat16") for n in ("fp32", "lowp")], LLAMA31_CTX)}
    doc = json.loads((out / "results.json").read_text())
    grids = {g["recipe"]: g for g in doc["results"]["rope_heatmap"]}
    assert set(grids) == {"lowp", "fp32"}
    md = (out / "report.md").read_text()
    panels = titles["rope_heatmap_bfloat16.png"]
    for name, row in rows.items():
        worst = float(np.max(grids[name]["max_rotation_error"]))
        assert worst == row.max_rotation_error  # the grid is the audit's recipe: the same number, to the bit
        assert np.max(np.array(grids[name]["max_rotation_error"]), axis=0).tolist() == list(row.rotation_error_profile)
        assert f"| bfloat16 | 8K | {name} | {fmt(row.max_rotation_error)} |" in md  # the table's cell
        (panel,) = [t for t in panels if t.startswith(name + " (")]
        assert panel.endswith(f"worst: {fmt(row.max_rotation_error)} rad")  # the panel prints the same
    assert fmt(rows["fp32"].max_rotation_error) == "0.003099"


def test_attention_text_quotes_what_the_figure_shows(llama31, headline: Path) -> None:
    out, _ = llama31
    for folder, png in ((out, "rope_attention_logit_error_bfloat16.png"), (headline, "rope_attention_logit_error.png")):
        doc = json.loads((folder / "results.json").read_text())
        rows = doc["results"]["attention"]
        # the figure draws offsets > 0 with at least two shifts; the farthest offset, length - 1, has one
        drawn = [r for r in rows if r["distance"] > 0 and r["shifts"] > 1]
        far = max(r["distance"] for r in drawn)
        assert far < max(r["distance"] for r in rows)
        rms = sum(r["logit_rms"] for r in drawn) / len(drawn)
        md = (folder / "report.md").read_text()
        (para,) = [ln for ln in md.splitlines() if "the farthest the figure shows" in ln]
        assert f"at offset {length_label(far)}, the farthest the figure shows" in para
        for r in drawn:
            if r["distance"] == far:
                assert f"{fmt(r['max_logit_error'])} ({r['recipe']})" in para
        assert para.endswith(f"typical |logit| of {fmt(rms)}.")
        assert str(max(r["distance"] for r in rows)) not in md  # 8191 / 1023: not drawn, not quoted
        assert png in md


def test_rope_plots_draw_the_verdict_thresholds(tmp_path: Path) -> None:
    # the lines are half the verdict's pairwise thresholds (a pair's error is at most twice the larger absolute
    # error of its two positions): NOTICED / 2 and PHASE_LOST / 2, with the cache bound, named
    from precision_audit.report import rope as rope_mod

    sched = RopeSchedule(head_dim=16)
    rows = audit(sched, [preset(n, "bfloat16") for n in PRESETS], [256, 512])
    bound = rows[0].cache_bound
    drawn: dict[str, tuple[list[float], set[str]]] = {}

    def grab(fig, path, *a, **k):
        fig.canvas.draw()
        axes = [*fig.axes, *(c for ax in fig.axes for c in ax.child_axes)]
        ys = [float(ln.get_ydata()[0]) for ax in axes for ln in ax.get_lines() if list(ln.get_xdata()) == [0, 1]]
        names = {t.get_text() for ax in axes for t in ax.yaxis.get_ticklabels()}
        drawn[Path(path).name] = (ys, names)
        pyplot().close(fig)
        return Path(path)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(rope_mod, "save_figure", grab)
        rope_mod.plot_error_vs_length(rows, tmp_path / "a.png")
        rope_mod.plot_error_per_frequency(rows, [512], tmp_path / "b.png")
        rope_mod.plot_error_heatmap([rope_mod.error_grid(sched, preset("fp32", "bfloat16"), 512)], sched,
                                    tmp_path / "c.png")
    for name, (ys, names) in drawn.items():
        for want in (bound, NOTICED / 2, PHASE_LOST / 2):
            assert any(y == pytest.approx(want, rel=1e-12) for y in ys), (name, want, ys)
        assert not any(y == pytest.approx(math.pi) for y in ys), name  # pi was never the verdict's rule
        assert {"pi/16: pairs may reach pi/8", "pi/4: pairs may reach pi/2", "cache bound 0.00277"} <= names, \
            (name, names)


def test_report_md_states_each_caption_once(llama31, headline: Path) -> None:
    out, _ = llama31
    for folder in (out, headline):
        md = (folder / "report.md").read_text()
        captions = re.findall(r"^\*([^*].*)\*$", md, flags=re.M)
        assert len(captions) == len(list(folder.glob("*.png"))) > 0
        for c in captions:
            assert md.count(c) == 1, c
        html = (folder / "report.html").read_text()
        assert html.count("<figcaption>") == len(captions)


def test_model_settings_read_as_prose(llama31) -> None:
    out, _ = llama31
    md = (out / "report.md").read_text()
    assert "| dtype | bfloat16 |" in md and "[" not in md.split("## Model")[1].split("##")[0]
    res = run("report", "--config", str(LLAMA31), "--max-length", "256", "-d", "bf16", "-d", "fp16",
              "--out", str(out.parent / "two"), "-q")
    assert res.exit_code == 0, res.output
    two = (out.parent / "two" / "report.md").read_text()
    assert "| dtypes | bfloat16, float16 |" in two
    assert json.loads((out.parent / "two" / "results.json").read_text())["settings"]["dtypes"] == [
        "bfloat16", "float16"]  # the data stays a list


def test_verdict_rules_in_the_text_are_the_code_s(llama31, headline: Path) -> None:
    out, _ = llama31
    assert PHASE_LOST == math.pi / 2 and NOTICED == math.pi / 8  # the text names them pi/2 and pi/8
    for folder in (out, headline):
        for name in ("report.md", "report.html"):
            text = (folder / name).read_text()
            assert "pi means the phase is lost" not in text and "0.5 rad" not in text
            assert "pairwise" in text and "pi/2" in text and "pi/8" in text, (folder, name)
            for other in ("8x the cache", "2x the cache", "4x the cache", "16x the cache"):
                assert other not in text
