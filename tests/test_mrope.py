"""M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL): ids per axis against transformers' get_rope_index, sections against
its rotary modules, the per-axis audit, and bad input."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from precision_audit.cli import main
from precision_audit.config import load_model
from precision_audit.rope import RopeSchedule, audit
from precision_audit.rope.axes import (FAMILIES, MRope, audit_axes, axis_maxima, grid, layout, parse_image,
                                       parse_video, position_ids)

QWEN2 = "tests/data/qwen2-vl-7b-instruct.json"
QWEN25 = "tests/data/qwen2.5-vl-7b-instruct.json"
QWEN3 = "tests/data/qwen3-vl-4b-instruct.json"


def _mrope(path: str) -> MRope:
    m = load_model(path)
    return MRope.from_config(dict(m.mrope), m.schedule.n_freq)


@pytest.mark.parametrize("path", [QWEN2, QWEN25, QWEN3])
@pytest.mark.parametrize("image,video,text", [((448, 448), None, 0), (None, (12, 2), 5), ((3840, 2160), (20, 3), 7),
                                              (None, (7, 0.5), 0)])
def test_closed_form_maxima_equal_the_explicit_ids(path, image, video, text):
    segs = layout(_mrope(path), image=image, video=video, text=text)
    assert axis_maxima(segs) == tuple(int(x) for x in position_ids(segs).max(axis=1))


def test_largest_ids_closed_form_for_given_grids():
    m = _mrope(QWEN25)  # tokens_per_second 2, temporal patch 2: at 2 fps the temporal ids step 2 per patch
    segs = [("text", 1, 0, 0, 0.0), ("video", 3600, 13, 23, 2.0), ("text", 1, 0, 0, 0.0)]
    assert axis_maxima(segs) == (1 + 2 * 3599, 1 + 23, 1 + 23)  # vision_end at start + max(h, w) tops h and w
    assert layout(m, video=(3600, 2))[1] == ("video", 3600, 13, 23, 2.0)
    assert layout(_mrope(QWEN2), video=(3600, 2))[1][-1] == 1.0  # Qwen2-VL: one id per temporal patch


@pytest.mark.parametrize("size", [(3840, 2160), (100, 50), (1000, 1000), (30, 4000), (1920, 1080)])
@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_grid_follows_transformers_smart_resize(size, family):
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    m = MRope(section=(16, 24, 24), family=family, patch_size=FAMILIES[family]["patch"])
    lo, hi = FAMILIES[family]["image_pixels"]
    h, w = smart_resize(size[1], size[0], factor=m.factor, min_pixels=lo, max_pixels=hi)
    assert grid(size[0], size[1], m, (lo, hi)) == (h // m.patch_size, w // m.patch_size)


def _hf_rope_index(cls, config, segs, merge, seconds_per_grid=None):
    """transformers' own get_rope_index on processor-free inputs built from a layout."""
    import torch

    types, images, videos = [], [], []
    for kind, t, h, w, _ in segs:
        if kind == "text":
            types += [0] * t
        else:
            types += [1 if kind == "image" else 2] * (t * h * w)
            (images if kind == "image" else videos).append([t, h * merge, w * merge])
    if videos and seconds_per_grid is None and cls.__name__.startswith("Qwen3"):
        videos = [[len(videos), videos[0][1], videos[0][2]]]  # one video of T frames: get_rope_index splits it
    n = len(types)
    me = SimpleNamespace(config=config)
    me.get_vision_position_ids = lambda *a, **k: cls.get_vision_position_ids(me, *a, **k)
    kw = {} if seconds_per_grid is None else {"second_per_grid_ts": torch.tensor([seconds_per_grid])}
    ids, _ = cls.get_rope_index(me, torch.zeros(1, n, dtype=torch.long), torch.tensor([types]),
                                image_grid_thw=torch.tensor(images) if images else None,
                                video_grid_thw=torch.tensor(videos) if videos else None, **kw)
    return ids[:, 0].numpy()


@pytest.mark.parametrize("fps", [2.0, 3.0, 0.5])
def test_ids_equal_transformers_get_rope_index(fps):
    from transformers import Qwen2_5_VLConfig, Qwen2VLConfig, Qwen3VLConfig
    from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel
    from transformers.models.qwen2_vl.modeling_qwen2_vl import Qwen2VLModel
    from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLModel

    cases = [(QWEN2, Qwen2VLConfig, Qwen2VLModel, None), (QWEN25, Qwen2_5_VLConfig, Qwen2_5_VLModel, 2 / fps),
             (QWEN3, Qwen3VLConfig, Qwen3VLModel, None)]
    for path, cfg_cls, model_cls, spg in cases:
        with open(path) as f:
            config = cfg_cls(**json.load(f))
        m = _mrope(path)
        segs = layout(m, image=(120, 90), video=(5, fps), text=3, frame=(80, 64))
        mine = position_ids(segs)
        theirs = _hf_rope_index(model_cls, config, segs, m.spatial_merge_size, spg)
        np.testing.assert_array_equal(mine, theirs, err_msg=path)


@pytest.mark.parametrize("path,module", [
    (QWEN25, "transformers.models.qwen2_vl.modeling_qwen2_vl:Qwen2VLRotaryEmbedding"),
    (QWEN3, "transformers.models.qwen3_vl.modeling_qwen3_vl:Qwen3VLTextRotaryEmbedding")])
def test_sections_equal_transformers_rotary_module(path, module):
    import importlib

    import torch
    from transformers import Qwen2_5_VLConfig, Qwen3VLConfig

    with open(path) as f:
        raw = json.load(f)
    config = (Qwen3VLConfig if "qwen3" in path else Qwen2_5_VLConfig)(**raw)
    mod_name, cls_name = module.split(":")
    rotary = getattr(importlib.import_module(mod_name), cls_name)(config.text_config)
    m = _mrope(path)
    n = 50
    ids = torch.stack([torch.arange(n) * 7, torch.arange(n) + 3, torch.arange(n) * 2 + 1])[:, None, :]
    x = torch.zeros(1, dtype=torch.float32)
    cos, sin = rotary(x, ids)
    half = cos.shape[-1] // 2
    for k, idx in enumerate(m.section_indices()):
        one_cos, one_sin = rotary(x, ids[k : k + 1].expand(3, -1, -1))  # every axis at axis k's ids: 1-D RoPE
        cols = list(idx)
        assert torch.equal(cos[0, :, cols], one_cos[0, :, cols]) and torch.equal(sin[0, :, cols], one_sin[0, :, cols])
        assert torch.equal(cos[0, :, [c + half for c in cols]], one_cos[0, :, cols])
    assert sorted(i for ix in m.section_indices() for i in ix) == list(range(half))


def test_frequency_subset_audit_equals_the_full_audit_there():
    s = RopeSchedule(head_dim=16, base=1e6)
    full = audit(s, "transformers-cast", [3000], "bf16", distances=[1])[0]
    sub = audit(s, "transformers-cast", [3000], "bf16", distances=[1], frequencies=[5, 6, 7])[0]
    assert sub.rotation_error_profile[5:] == full.rotation_error_profile[5:]
    assert sub.max_rotation_error == max(full.rotation_error_profile[5:])
    assert sub.colliding_positions >= full.colliding_positions  # fewer columns tell fewer rows apart
    with pytest.raises(ValueError, match="frequency index 8"):
        audit(s, "transformers", [100], "bf16", frequencies=[8])


def test_axis_audit_rows_and_verdicts():
    m = _mrope(QWEN25)
    s = load_model(QWEN25).schedule
    rows = audit_axes(s, m, (7199, 100, 100), ["transformers", "transformers-cast"], ["bfloat16"])
    got = {(r.axis, r.stack): r for r in rows}
    assert got[("temporal", "transformers")].frequencies == 16 and got[("temporal", "transformers")].largest_id == 7199
    # a bf16 inv_freq buffer, as in 1-D RoPE: fast pairs radians off far apart, those that resolve it not
    assert got[("temporal", "transformers-cast")].verdict == "degraded"


@pytest.mark.parametrize("text,msg", [("0x0", "both >= 1"), ("abc", "WIDTHxHEIGHT"), ("10x3000", "aspect")])
def test_bad_image(text, msg):
    with pytest.raises(ValueError, match=msg):
        parse_image(text)


@pytest.mark.parametrize("text", ["-5@2", "10", "10@0", "inf@2", "10@2:0x5", "nan@1"])
def test_bad_video(text):
    with pytest.raises(ValueError, match="video|image"):
        parse_video(text)


def test_mrope_section_must_sum_to_half_the_head_dim():
    with pytest.raises(ValueError, match=r"sums to 60, not head_dim / 2 = 64"):
        MRope.from_config({"model_type": "qwen2_vl", "mrope_section": [16, 24, 20]}, 64)
    with pytest.raises(ValueError, match="not modelled|modelled for"):
        MRope.from_config({"model_type": "glm4v", "mrope_section": [8, 12, 12]}, 32)


@pytest.mark.parametrize("args,msg", [
    ([QWEN25, "--image", "0x0"], "both >= 1"), ([QWEN25, "--video", "-5@2"], "SECONDS > 0"),
    (["tests/data/llama-3.1-8b.json", "--image", "64x64"], "no mrope_section")])
def test_cli_bad_input_exits_2(args, msg):
    r = CliRunner().invoke(main, ["config", *args])
    assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output


def test_cli_bad_section_exits_2(tmp_path):
    with open(QWEN2) as f:
        d = json.load(f)
    d["rope_scaling"]["mrope_section"] = [16, 24, 20]
    p = tmp_path / "config.json"
    p.write_text(json.dumps(d))
    r = CliRunner().invoke(main, ["config", str(p), "--video", "60@2"])
    assert r.exit_code == 2 and "sums to 60" in r.output


def test_cli_video_and_image(tmp_path):
    r = CliRunner().invoke(main, ["config", QWEN25, "--video", "600@2", "--image", "1920x1080", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["largest_ids"]["temporal"] == max(x["largest_id"] for x in out["results"])
    assert {x["stack"] for x in out["results"]} == {"transformers", "transformers-cast", "vllm", "sglang",
                                                    "llama.cpp-cpu", "llama.cpp-cuda"}
    assert all(math.isfinite(x["max_rotation_error"]) for x in out["results"])


def _wrap(x):
    return (x + math.pi) % (2 * math.pi) - math.pi


def test_llamacpp_mrope_is_the_1d_kernel_per_section_real_ggml():
    """ggml's real multi-section rope op (``ggml_rope_multi``, llama.cpp's Qwen2-VL path) gives each section's
    pairs exactly the 1-D rope op's values at that axis' ids (bit for bit): the tool audits llama.cpp's M-RoPE as
    its 1-D stack per section.  Then the tool's per-section rows (float32 cache: the kernel's own output) against
    the errors measured on the kernel's output: the model's cos/sin are correctly rounded, cosf / sinf faithful,
    so the rotation errors agree within 2 float32 ulps of 1 (2**-22 rad)."""
    from referees import need
    need("ggml")
    from referees._ggml import ggml_mrope_angles, ggml_rope_angles

    m, s = _mrope(QWEN25), load_model(QWEN25).schedule
    n = 4096
    rng = np.random.default_rng(7)
    ids = np.stack([np.arange(n) * 3, np.sort(rng.integers(0, 2048, n)), np.arange(n) % 97, np.zeros(n, int)])
    c, si = ggml_mrope_angles(ids, s.rotary_dim, s.base, m.section)
    for axis, idx in enumerate(m.section_indices()):
        c1, s1 = ggml_rope_angles(ids[axis], s.rotary_dim, s.base)
        assert np.array_equal(c[:, idx], c1[:, idx]) and np.array_equal(si[:, idx], s1[:, idx])
    # the tool's row for the temporal section over ids 0..L-1, against the kernel run on those ids
    L = 8192
    t = np.arange(L)
    c, si = ggml_mrope_angles(np.stack([t, t % 5, t % 7, 0 * t]), s.rotary_dim, s.base, m.section)
    idx = list(m.section_indices()[0])
    exact = t[:, None].astype(np.float64) * s.inv_freq()[idx][None, :]
    measured = float(np.abs(_wrap(np.arctan2(si[:, idx], c[:, idx]) - exact)).max())
    row = audit(s, ["llama.cpp-cpu"], [L], ["float32"], frequencies=idx)[0]
    assert abs(row.max_rotation_error - measured) <= 2.0**-22


def test_llamacpp_interleaved_mrope_axes_are_ggml_s_real_op():
    """Qwen3-VL's interleaved sections 24/20/20 of 64 on llama.cpp (IMROPE): which position id turns each pair, read
    off ggml's real op (each pair equals the 1-D op at exactly one of four distinct ids), is
    MRope.ggml_section_indices: pairs 61 and 62 (past 3 x 20, not a multiple of 3) on the 4th id, where
    transformers turns them temporally (``apply_interleaved_mrope``).  llama.cpp sets that id to 0: the tool
    audits the pairs that turn and states the rest in closed form; its temporal row agrees with the errors of the
    real op's output over ids 0..L-1 (within 2 float32 ulps of 1, as for contiguous sections)."""
    from referees import need
    need("ggml")
    from referees._ggml import ggml_mrope_angles, ggml_rope_angles

    n = 64
    ids = np.stack([np.arange(n) + 100, np.arange(n) + 200, np.arange(n) + 300, np.arange(n) + 400])
    c, si = ggml_mrope_angles(ids, 128, 5e6, (24, 20, 20), interleaved=True)
    one_d = [ggml_rope_angles(ids[k], 128, 5e6) for k in range(4)]
    on = [[i for i in range(64) if np.array_equal(c[:, i], one_d[k][0][:, i])
           and np.array_equal(si[:, i], one_d[k][1][:, i])] for k in range(4)]
    m = _mrope(QWEN3)
    assert m.interleaved and m.section == (24, 20, 20)
    assert tuple(tuple(x) for x in on) == m.ggml_section_indices()
    assert m.ggml_section_indices()[3] == (61, 62) and 61 in m.section_indices()[0]
    s = load_model(QWEN3).schedule
    L = 8192
    t = np.arange(L)
    c, si = ggml_mrope_angles(np.stack([t, t % 5, t % 7, 0 * t]), s.rotary_dim, s.base, m.section, interleaved=True)
    idx = list(m.ggml_section_indices()[0])
    exact = t[:, None].astype(np.float64) * s.inv_freq()[idx][None, :]
    measured = float(np.abs(_wrap(np.arctan2(si[:, idx], c[:, idx]) - exact)).max())
    row = audit(s, ["llama.cpp-cpu"], [L], ["float32"], frequencies=idx)[0]
    assert abs(row.max_rotation_error - measured) <= 2.0**-22
    assert np.all(si[:, [61, 62]] == 0) and np.all(c[:, [61, 62]] == 1)  # the 4th id 0: never turned
    out = CliRunner().invoke(main, ["config", QWEN3, "--video", "600@2", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    rows = {(r["axis"], r["stack"]): r for r in data["results"]}
    assert rows[("temporal", "llama.cpp-cpu")]["frequencies"] == 22 and rows[("text", "llama.cpp-cuda")]["frequencies"] == 62
    top = max(data["largest_ids"].values())
    expected = top * float(s.inv_freq()[61])  # closed form: the unturned pair 61 at the largest id
    assert f"differs by up to {expected:.4g} rad" in data["notes"][0]


@pytest.mark.parametrize("path", [QWEN2, QWEN25, QWEN3])
@pytest.mark.parametrize("image,video,text", [((448, 448), None, 2000), (None, (12, 2), 5), ((3840, 2160), (20, 3), 7)])
def test_vision_and_text_maxima_equal_the_explicit_ids(path, image, video, text):
    """The per-axis ids the audit judges are those image / video tokens carry (their neighbours differ in one
    axis only); text tokens (three equal ids) are judged on every frequency up to the largest text id."""
    from precision_audit.rope.axes import text_maximum

    segs = layout(_mrope(path), image=image, video=video, text=text)
    ids = position_ids(segs)
    kinds = np.concatenate([np.full(t if k == "text" else t * h * w, k != "text") for k, t, h, w, _ in segs])
    assert axis_maxima(segs, vision=True) == tuple(int(x) for x in ids[:, kinds].max(axis=1))
    assert text_maximum(segs) == int(ids[:, ~kinds].max())
    assert (ids[0, ~kinds] == ids[1, ~kinds]).all() and (ids[0, ~kinds] == ids[2, ~kinds]).all()


def test_text_after_an_image_is_judged_as_1d_rope_not_on_one_section():
    """2000 text tokens after an image: the width section alone collides in bf16 above 1024 ids, but the text
    tokens' rows hold every frequency; their row is the 1-D audit of the schedule (an independent call)."""
    r = CliRunner().invoke(main, ["config", QWEN25, "--image", "1920x1080", "--text", "2000", "--json",
                                  "--stack", "transformers"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    rows = {x["axis"]: x for x in out["results"] if x["stack"] == "transformers"}
    assert rows["width"]["largest_id"] == out["largest_vision_ids"]["width"] == 47 and rows["width"]["verdict"] == "safe"
    s = load_model(QWEN25).schedule
    ref = audit(s, ["transformers"], [out["largest_text_id"] + 1], ["bfloat16"])[0]
    assert rows["text"]["frequencies"] == s.n_freq and rows["text"]["verdict"] == ref.verdict
    assert rows["text"]["max_rotation_error"] == ref.max_rotation_error
