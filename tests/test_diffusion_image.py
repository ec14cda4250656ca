"""Image families of issue 44 item 3: Qwen-Image's centred axial RoPE and SD3's 2-D sincos table.  Referees run live
(diffusers 0.42.1, no weights): ``QwenEmbedRope`` forward and ``apply_rotary_emb_qwen`` (ids recovered bit for bit
by matching each token's table row; cos/sin within the float32 bound of faithful pow / cos / sin), a tiny
``QwenImageTransformer2DModel`` cast with ``.to(bfloat16)``, ``PatchEmbed.cropped_pos_embed`` and a tiny
``SD3Transformer2DModel`` (the buffer's dtype after ``.to`` and ``from_pretrained(torch_dtype=...)``)."""

from __future__ import annotations

import importlib.util

import json
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

from precision_audit.cli import main
from precision_audit.config import diffusion_config_dict, load_diffusion_config
from precision_audit.rope import audit, run_recipe
from precision_audit.rope.axial_centred import (QWEN_IMAGE, audit_centred, audit_ids, axis_ids, centred_grid,
                                                centred_range, centred_recipe, check_table, table_limit)
from precision_audit.sinusoidal.grid2d import SincosGrid, audit_grid, crop_positions, grid_patches, grid_table
from referees import need

DATA = Path(__file__).parent / "data" / "diffusers"
QWEN = DATA / "qwen-image-transformer.json"
SD3 = DATA / "sd3.5-large-transformer.json"


def _torch():
    need("diffusers")
    import torch

    return torch


def _ulp32(x: np.ndarray) -> np.ndarray:
    return np.spacing(np.abs(x).astype(np.float32)).astype(np.float64)


# --------------------------------------------------------------------------- Qwen-Image: ids


@pytest.mark.parametrize("side", [1, 2, 7, 64, 65, 8192])
def test_centred_range_closed_form(side):
    lo, hi = centred_range(side)
    assert hi - lo + 1 == side and lo == -((side + 1) // 2) and hi == side // 2 - 1


@pytest.mark.parametrize("text", [0, 1, 2, 512, 1024, 4095, 4096])
def test_table_limit_closed_form(text):
    """table_limit is the largest square side check_table accepts: min(8192, 2 (4096 - text) + 1) with text."""
    top = table_limit(QWEN_IMAGE, text)
    assert top == (8192 if text == 0 else max(0, min(8192, 2 * (4096 - text) + 1)))
    for side in range(max(1, top - 3), top + 4):
        try:
            check_table(QWEN_IMAGE, (side, side), text)
            fits = True
        except ValueError:
            fits = False
        assert fits == (side <= top), side


def test_cli_bad_axes_exit_2(tmp_path):
    bad = tmp_path / "q.json"
    for cls, axes, msg in (("QwenImageTransformer2DModel", [16, 56, 48], "[16, 56, 48] sums to 120"),
                           ("Flux2Transformer2DModel", [32, 32, 32, 30], "[32, 32, 32, 30] sums to 126, not "
                            "attention_head_dim 128")):
        bad.write_text(json.dumps({"_class_name": cls, "axes_dims_rope": axes}))
        r = _run(str(bad))
        assert r.exit_code == 2 and "Traceback" not in r.output and msg in r.output, r.output


def _qwen_module(axes=(16, 56, 56)):
    _torch()
    from diffusers.models.transformers.transformer_qwenimage import QwenEmbedRope

    return QwenEmbedRope(theta=10000, axes_dim=list(axes), scale_rope=True)


def _ids_of(mod, freqs, block):
    """Each token's id on axis ``block``: the table row its cos/sin are (bit for bit) a copy of."""
    import torch

    axes = mod.axes_dim
    start = sum(axes[:block]) // 2
    width = axes[block] // 2
    table = torch.cat([mod.neg_freqs, mod.pos_freqs])[:, start:start + width]
    ids = {table[i].numpy().tobytes(): i - mod.neg_freqs.shape[0] for i in range(table.shape[0])}
    assert len(ids) == table.shape[0]  # every row distinct in float32
    return np.array([ids[r.numpy().tobytes()] for r in freqs[:, start:start + width]])


@pytest.mark.parametrize("h, w, text", [(64, 64, 512), (7, 12, 5), (58, 104, 30), (1, 1, 3)])
def test_qwen_ids_are_qwen_embed_ropes(h, w, text):
    """The ids each axis carries, image (centred) and text (after max(h // 2, w // 2)), are the rows
    QwenEmbedRope.forward picks, token by token."""
    torch = _torch()
    mod = _qwen_module()
    vid, txt = mod([(1, h, w)], device=torch.device("cpu"), max_txt_seq_len=text)
    ids = axis_ids(QWEN_IMAGE, (h, w), text)
    m = max(h // 2, w // 2)
    for k in range(3):
        img = _ids_of(mod, vid, k)
        t = _ids_of(mod, txt, k)
        assert np.array_equal(t, np.arange(m, m + text))
        assert np.array_equal(np.union1d(img, t), ids[k])
    rows = _ids_of(mod, vid, 1).reshape(h, w)[:, 0]
    assert rows.tolist() == list(range(centred_range(h)[0], centred_range(h)[1] + 1))


@pytest.mark.parametrize("size", [(1024, 1024), (1664, 928), (1000, 24)])
def test_qwen_grid_is_the_pipelines(size):
    """QwenImagePipeline.prepare_latents (run on a stand-in holding what it reads of self) packs H // 16 x W // 16
    tokens: the tool's grid, whose image ids QwenEmbedRope then gives one per token."""
    torch = _torch()
    from types import SimpleNamespace

    from diffusers.pipelines.qwenimage.pipeline_qwenimage import QwenImagePipeline

    w, h = size
    fake = SimpleNamespace(vae_scale_factor=8, _pack_latents=QwenImagePipeline._pack_latents)
    lat = QwenImagePipeline.prepare_latents(fake, 1, 1, h, w, torch.float32, torch.device("cpu"), None)
    rows, cols = centred_grid(QWEN_IMAGE, (w, h))
    assert (rows, cols) == (h // 16, w // 16) and lat.shape[1] == rows * cols


def test_qwen_cos_sin_within_the_float32_bound():
    """The tool's table-fp32 cos/sin at the ids carried (negative included) against QwenEmbedRope's complex64 table:
    within position x 2 ulps of the frequency + an ulp of the angle + 2 ulps of the value (torch's pow, cos and sin
    are faithful, the tool's correctly rounded); and freqs-fp64 within the float64 angle path + the same slack."""
    torch = _torch()
    mod = _qwen_module()
    h, w, text = 300, 20, 40
    vid, txt = mod([(1, h, w)], device=torch.device("cpu"), max_txt_seq_len=text)
    ids = axis_ids(QWEN_IMAGE, (h, w), text)
    start = 0
    for k, d in enumerate(QWEN_IMAGE.axes_dim):
        got = torch.cat([vid, txt])[:, start // 2:(start + d) // 2]
        tok = np.concatenate([_ids_of(mod, vid, k), _ids_of(mod, txt, k)])
        order = np.unique(tok, return_index=True)[1]
        ref_c = got.real.numpy().astype(np.float64)[order]
        ref_s = got.imag.numpy().astype(np.float64)[order]
        start += d
        st = run_recipe(centred_recipe("table-fp32", "bfloat16"), QWEN_IMAGE.schedule(k), ids[k])
        assert np.array_equal(st["positions"], ids[k].astype(np.float64))  # int64 -> float32: exact
        m = np.abs(st["positions"])[:, None]
        inv = st["inv_freq"][None, :]
        bound = m * 2 * _ulp32(inv) + _ulp32(m * inv) + 2 * _ulp32(np.ones(1))
        assert np.all(np.abs(st["cos"] - ref_c) <= bound) and np.all(np.abs(st["sin"] - ref_s) <= bound)


def test_audit_ids_matches_the_rope_audit():
    """On ids 0..L-1 the centred audit measures what rope.audit measures (same errors, collisions, pairs)."""
    s = QWEN_IMAGE.schedule(1)
    for path in ("table-fp32", "cos-sin-dtype"):
        row = audit(s, [centred_recipe(path, "bfloat16")], [1000])[0]
        mine = audit_ids(s, np.arange(1000), path, "bfloat16")
        assert mine["max"] == row.max_rotation_error and mine["colliding"] == row.colliding_positions
        assert mine["pairs"] == [(p.distance, p.max_rotation_error, p.resolved_max_rotation_error)
                                 for p in row.pair_errors]


# --------------------------------------------------------------------------- Qwen-Image: the table's limits


def test_qwen_table_limits_as_diffusers_behaves():
    """Measured live with a tiny QwenEmbedRope (its table is always 4096 + 4096 rows): text past row 4095 is sliced
    short and apply_rotary_emb_qwen raises, except one row left, which broadcasts silently; a side of 8193 raises
    in forward.  The tool refuses exactly those inputs and accepts the largest that fit.  The text rows depend on
    max(h // 2, w // 2) only, so diffusers runs on one column (h x 1 tokens, not h x h: 9 GB at 8192)."""
    torch = _torch()
    from diffusers.models.transformers.transformer_qwenimage import apply_rotary_emb_qwen

    mod = _qwen_module((2, 2, 2))
    cpu = torch.device("cpu")

    def text_rows(side, text):
        return mod([(1, side, 1)], device=cpu, max_txt_seq_len=text)[1].shape[0]

    top = table_limit(QWEN_IMAGE, 512)
    assert top == 7169 and text_rows(top, 512) == 512
    check_table(QWEN_IMAGE, (top, top), 512)
    assert text_rows(top + 1, 512) == 511  # 7170 // 2 + 512 = 4097: the slice is one row short, silently
    x = torch.zeros(1, 512, 1, 6)
    _, txt = mod([(1, top + 1, 1)], device=cpu, max_txt_seq_len=512)
    with pytest.raises(RuntimeError):
        apply_rotary_emb_qwen(x, txt, use_real=False)
    with pytest.raises(ValueError, match="512 text tokens at ids 3585..4096 pass the rope table's 4096 rows"):
        check_table(QWEN_IMAGE, (top + 1, top + 1), 512)
    _, txt = mod([(1, 8190, 1)], device=cpu, max_txt_seq_len=3)  # max_vid_index 4095: one row
    assert txt.shape[0] == 1 and apply_rotary_emb_qwen(torch.ones(1, 3, 1, 6), txt, use_real=False).shape[1] == 3
    with pytest.raises(ValueError, match="one row broadcasts over every text token without error"):
        check_table(QWEN_IMAGE, (8190, 8190), 3)
    _, txt = mod([(1, 8192, 1)], device=cpu, max_txt_seq_len=1)  # max_vid_index 4096: no row for one token
    assert txt.shape[0] == 0 and apply_rotary_emb_qwen(torch.ones(1, 1, 1, 6), txt, use_real=False).shape[1] == 0
    with pytest.raises(ValueError, match="returns an empty text query without error"):
        check_table(QWEN_IMAGE, (8192, 8192), 1)
    check_table(QWEN_IMAGE, (8190, 8190), 1)  # one token at id 4095: fits
    mod([(1, 8192, 1)], device=cpu, max_txt_seq_len=0)
    check_table(QWEN_IMAGE, (8192, 8192), 0)
    with pytest.raises(RuntimeError):
        mod([(1, 8193, 1)], device=cpu, max_txt_seq_len=0)
    with pytest.raises(ValueError, match="8193 latent ids on the height axis"):
        check_table(QWEN_IMAGE, (8193, 1), 0)


def test_qwen_table_stays_complex64_after_a_cast():
    """model.to(bfloat16) leaves QwenEmbedRope's table alone (a plain attribute); the same table made a buffer loses
    its imaginary part (torch warns), which is the table-as-buffer path: sin gone, cos rounded."""
    torch = _torch()
    from diffusers import QwenImageTransformer2DModel

    tiny = dict(patch_size=2, in_channels=4, out_channels=4, num_layers=1, attention_head_dim=8, num_attention_heads=1,
                joint_attention_dim=8, axes_dims_rope=[2, 2, 4])
    model = QwenImageTransformer2DModel(**tiny).to(torch.bfloat16)
    read = diffusion_config_dict({"_class_name": "QwenImageTransformer2DModel", **tiny}, source="t.json").rope
    assert (list(read.axes_dim), read.theta, read.pixels_per_id) == (list(model.pos_embed.axes_dim),
                                                                     model.pos_embed.theta, 8 * tiny["patch_size"])
    assert model.pos_embed.pos_freqs.dtype == torch.complex64 and model.img_in.weight.dtype == torch.bfloat16
    holder = torch.nn.Module()
    holder.register_buffer("t", _qwen_module().pos_freqs[:300].clone())
    with pytest.warns(UserWarning, match="imaginary"):
        holder.to(torch.bfloat16)
    st = run_recipe(centred_recipe("table-as-buffer", "bfloat16"), QWEN_IMAGE.schedule(0), np.arange(300))
    got = holder.t.float().numpy().astype(np.float64)[:, :8]
    ref = _qwen_module().pos_freqs[:300, :8].real.numpy().astype(ml_dtypes.bfloat16).astype(np.float64)
    assert np.array_equal(got, ref)  # the cast: bit for bit
    assert np.all(np.abs(st["cos"] - got) <= np.spacing(np.abs(got).astype(ml_dtypes.bfloat16)).astype(np.float64))
    row = audit_centred(QWEN_IMAGE, (64, 64), 512, ["table-as-buffer"])[1]
    assert row.verdict == "broken" and row.safe_to is None


def test_qwen_bottom_lines():
    """Every real path is safe to the table's limit (7169 latent ids with 512 text tokens: 114704 px); bf16 cos/sin
    cost about 2**-9 rad; the buffer cast breaks every size."""
    rows = audit_centred(QWEN_IMAGE, (256, 256), 512, dtypes=["bfloat16"])
    by = {(r.stack, r.axis): r for r in rows}
    for p in ("table-fp32", "freqs-fp64", "cos-sin-dtype"):
        assert all(by[(p, a)].verdict == "safe" and by[(p, a)].safe_to == 7169 for a in QWEN_IMAGE.axes)
    assert by[("cos-sin-dtype", "height")].max_rotation_error < 2.0**-8
    assert by[("table-fp32", "height")].max_rotation_error < 1e-3  # float32 angles at ids up to 639
    assert by[("table-fp32", "height")].smallest_id == -128
    assert centred_grid(QWEN_IMAGE, (4096, 2048)) == (128, 256)


# --------------------------------------------------------------------------- SD3: the 2-D sincos table


def _patch_embed(embed_dim=16, max_size=24, sample=16, patch=2):
    _torch()
    from diffusers.models.embeddings import PatchEmbed

    return PatchEmbed(height=sample, width=sample, patch_size=patch, in_channels=1, embed_dim=embed_dim,
                      pos_embed_max_size=max_size)


@pytest.mark.parametrize("rows, cols", [(4, 4), (5, 8), (24, 24), (1, 23)])
def test_sd3_crop_is_patch_embeds(rows, cols):
    """The tool's table-fp32 crop (columns half, rows half) against PatchEmbed.cropped_pos_embed: within one
    float32 ulp (float64 sin / cos then .float(); torch's pow and sin / cos faithful); positions k / 3 exactly where
    the first column pins them (a position an ulp off moves sin(p) by far more than an ulp of the value)."""
    pe = _patch_embed()
    grid = SincosGrid(family="sd3", embed_dim=16, max_size=24, base_size=8)
    got = pe.cropped_pos_embed(rows * 2, cols * 2)[0].numpy().astype(np.float64).reshape(rows, cols, 16)
    col_t, _ = grid_table(grid, cols, "table-fp32", "float32")
    row_t, _ = grid_table(grid, rows, "table-fp32", "float32")
    for mine, ref in ((col_t, got[0, :, :8]), (row_t, got[:, 0, 8:])):
        assert np.all(np.abs(mine - ref) <= _ulp32(ref))
    assert crop_positions(grid, 24).tolist() == np.arange(24, dtype=np.float32).__truediv__(np.float32(3)).tolist()


def test_sd3_beyond_the_table_raises_in_both():
    pe = _patch_embed()
    with pytest.raises(ValueError, match="cannot be greater than `pos_embed_max_size`"):
        pe.cropped_pos_embed(2 * 25, 2)
    grid = SincosGrid(family="sd3", embed_dim=16, max_size=24, base_size=8)
    assert grid_patches(grid, (16 * 24, 16)) == (1, 24)
    with pytest.raises(ValueError, match="25 patches per row, more than the table's pos_embed_max_size 24 "
                                         r"\(384 px\)"):
        grid_patches(grid, (16 * 25, 16))


def test_sd3_buffer_is_cast(tmp_path):
    """The table is a persistent buffer: model.to(bfloat16) makes it bf16, the bits of the float32 table cast once,
    which the tool's table-dtype path reproduces within an ulp of bf16 (and exactly where its float32 values
    agree); from_pretrained(torch_dtype=bfloat16) does the same with accelerate installed (diffusers' low-memory
    loading sets every tensor to the dtype) and leaves the buffer float32 without it (measured in a venv with the
    [test] extra only)."""
    torch = _torch()
    from diffusers import SD3Transformer2DModel

    cfg = dict(sample_size=16, patch_size=2, in_channels=4, num_layers=1, attention_head_dim=8, num_attention_heads=2,
               joint_attention_dim=8, caption_projection_dim=16, pooled_projection_dim=8, out_channels=4,
               pos_embed_max_size=24)
    model = SD3Transformer2DModel(**cfg)
    f32 = model.pos_embed.pos_embed.clone()
    assert "pos_embed.pos_embed" in model.state_dict() and f32.dtype == torch.float32
    model.save_pretrained(tmp_path)
    loaded = SD3Transformer2DModel.from_pretrained(tmp_path, torch_dtype=torch.bfloat16)
    cast = model.to(torch.bfloat16).pos_embed.pos_embed
    assert cast.dtype == torch.bfloat16 and torch.equal(cast, f32.to(torch.bfloat16))
    if importlib.util.find_spec("accelerate") is not None:
        assert loaded.pos_embed.pos_embed.dtype == torch.bfloat16 and torch.equal(loaded.pos_embed.pos_embed, cast)
    else:
        assert loaded.pos_embed.pos_embed.dtype == torch.float32 and torch.equal(loaded.pos_embed.pos_embed, f32)
    grid = load_diffusion_config_from(cfg).rope
    assert (grid.embed_dim, grid.max_size, grid.base_size) == (f32.shape[-1], model.pos_embed.pos_embed_max_size,
                                                               model.pos_embed.base_size)
    mine32, _ = grid_table(grid, 24, "table-fp32", "bfloat16")
    mine, _ = grid_table(grid, 24, "table-dtype", "bfloat16")
    ref32 = f32[0].numpy().astype(np.float64).reshape(24, 24, 16)[0, :, :8]
    ref = cast[0].float().numpy().astype(np.float64).reshape(24, 24, 16)[0, :, :8]
    same = mine32 == ref32
    assert np.array_equal(mine[same], ref[same])
    assert np.all(np.abs(mine - ref) <= np.spacing(np.abs(ref).astype(ml_dtypes.bfloat16)).astype(np.float64))


def load_diffusion_config_from(cfg):
    return diffusion_config_dict({"_class_name": "SD3Transformer2DModel", **cfg}, source="t.json")


def test_sd3_bottom_line_is_the_table():
    """SD3.5 Large: no two patches share an embedding on any path in bf16 or fp8, up to the whole table; the limit
    is the crop, 192 patches (3072 px)."""
    cfg = load_diffusion_config(SD3)
    assert cfg.rope.embed_dim == 2432 and cfg.rope.max_size == 192 and cfg.rope.base_size == 64
    rows = audit_grid(cfg.rope, (192, 192), dtypes=["bfloat16", "float8_e5m2"])
    assert all(r.duplicate_rows == 0 and r.verdict == "safe" and r.safe_to == 192 for r in rows)
    bf = [r for r in rows if r.stack == "table-dtype" and r.dtype == "bfloat16"][0]
    # half a bf16 ulp of values below 1, plus the float32 position's rounding (half an ulp of 63.67: 2**-19) x omega 1
    assert 2.0**-9 < bf.max_abs_error <= 2.0**-9 + 2.0**-19 + 2.0**-24


# --------------------------------------------------------------------------- config reader and CLI


@pytest.mark.parametrize("data, msg", [
    ({"_class_name": "QwenImageTransformer2DModel", "axes_dims_rope": [16, 56, 48]},
     "axes_dims_rope [16, 56, 48] sums to 120, not attention_head_dim 128"),
    ({"_class_name": "QwenImageTransformer2DModel", "axes_dims_rope": [16, 56]}, "must be 3 positive even"),
    ({"_class_name": "QwenImageTransformer2DModel", "use_layer3d_rope": True}, "use_layer3d_rope true"),
    ({"_class_name": "SD3Transformer2DModel", "pos_embed_max_size": 0}, "pos_embed_max_size 0 must be a positive"),
    ({"_class_name": "SD3Transformer2DModel", "pos_embed_max_size": None}, "pos_embed_max_size null"),
    ({"_class_name": "SD3Transformer2DModel", "num_attention_heads": 3, "attention_head_dim": 2},
     "embed_dim 6 must be a positive multiple of 4"),
])
def test_bad_configs_name_the_value(data, msg):
    with pytest.raises(ValueError) as e:
        diffusion_config_dict(data, source="c.json")
    assert str(e.value).startswith("c.json: ") and msg in str(e.value)


def _run(*args: str):
    return CliRunner().invoke(main, ["config", *args])


@pytest.mark.parametrize("path", [QWEN, SD3])
def test_cli_default_input_has_a_bottom_line(path):
    r = _run(str(path))
    assert r.exit_code == 0, r.output
    assert "Bottom line" in r.output and "(the default input)" in r.output and "1024x1024" in r.output


def test_cli_qwen_json_and_text():
    r = _run(str(QWEN), "--image", "4096x2048", "--text", "100", "-r", "table-fp32", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    (s,) = out["summary"]
    assert s["largest_safe"] == {"side_ids": 2 * (4096 - 100) + 1, "side_px": 16 * 7993, "table_limit_ids": 7993,
                                 "text": 100}
    assert [(x["smallest_id"], x["largest_id"]) for x in out["results"]] == [(0, 227), (-64, 227), (-128, 227)]


@pytest.mark.parametrize("path, args, msg", [
    (QWEN, ["--image", "0x0"], "image '0x0' must be WIDTHxHEIGHT"),
    (QWEN, ["--image", "8x8"], "image 8x8: qwen_image makes one id per 16 px"),
    (QWEN, ["--image", "115000x115000"], "512 text tokens at ids 3593..4104 pass the rope table's 4096 rows"),
    (QWEN, ["--video", "5@24"], "makes images, not video"),
    (QWEN, ["-r", "ids-dtype"], "--recipe ids-dtype: not a code path QwenImageTransformer2DModel runs"),
    (SD3, ["--image", "4096x4096"], "256 patches per column, more than the table's pos_embed_max_size 192 (3072 px)"),
    (SD3, ["--image", "1000x1000"], "sd3 needs sides that are positive multiples of 16 px"),
    (SD3, ["-r", "nope"], "--recipe nope: not a code path SD3Transformer2DModel runs"),
])
def test_cli_bad_input_exits_2_with_one_line(path, args, msg):
    r = _run(str(path), *args)
    assert r.exit_code == 2 and "Traceback" not in r.output
    errors = [l for l in r.output.splitlines() if l.startswith("Error:")]
    assert len(errors) == 1 and msg in errors[0], r.output


# --------------------------------------------------------------------------- Flux.2: four axes


FLUX2 = DATA / "flux.2-dev-transformer.json"


def _flux2():
    torch = _torch()
    from diffusers.models.transformers.transformer_flux2 import Flux2PosEmbed
    from diffusers.pipelines.flux2.pipeline_flux2 import Flux2Pipeline

    return torch, Flux2PosEmbed, Flux2Pipeline


@pytest.mark.parametrize("size, text", [((1024, 1024), 512), ((1360, 768), 7), ((16, 4128), 300)])
def test_flux2_ids_are_the_pipelines(size, text):
    """Flux2Pipeline's static id builders run live: the image's ids (0, row, column, 0) are the tool's, the text's
    (0, 0, 0, l) fill the text axis to the tool's maximum; every id stays int64 (the pipeline never casts them)."""
    torch, _, Flux2Pipeline = _flux2()
    from precision_audit.rope.axial import FAMILIES, axial_ids, axial_maxima, latent_grid

    rope = FAMILIES["Flux2Transformer2DModel"]
    w, h = size
    grid = latent_grid(rope, (w, h), text=text)
    assert grid == (None, h // 16, w // 16, text)
    from types import SimpleNamespace

    fake = SimpleNamespace(vae_scale_factor=8, _prepare_latent_ids=Flux2Pipeline._prepare_latent_ids,
                           _pack_latents=Flux2Pipeline._pack_latents)  # what prepare_latents reads of self
    _, lat = Flux2Pipeline.prepare_latents(fake, 1, 1, h, w, torch.float32, torch.device("cpu"), None)
    txt = Flux2Pipeline._prepare_text_ids(torch.zeros(1, text, 2))
    assert lat.dtype == txt.dtype == torch.int64
    assert np.array_equal(lat[0].numpy(), axial_ids(rope, grid))
    both = np.concatenate([lat[0].numpy(), txt[0].numpy()])
    assert axial_maxima(rope, grid) == tuple(int(x) for x in both.max(axis=0))
    assert txt[0, :, 3].tolist() == list(range(text)) and not txt[0, :, :3].any()
    ref = Flux2Pipeline._prepare_image_ids([torch.zeros(1, 1, 2, 2), torch.zeros(1, 1, 2, 2)])
    assert sorted(set(ref[0, :, 0].tolist())) == [10, 20]  # reference images: index 10, 20 on the first axis


@pytest.mark.parametrize("path", ["ids-fp32", "freqs-fp32", "cos-sin-dtype"])
def test_flux2_cos_sin_against_flux2_pos_embed(path):
    """Flux2PosEmbed built from the shipped config (theta 2000, four 32-wide axes), run live on the pipeline's ids:
    the tool's cos/sin per axis within one float32 ulp (float64 frequencies), the float32-frequency spread
    (freqs-fp32, get_1d_rotary_pos_embed as on MPS), or a bf16 ulp of diffusers' values cast (cos-sin-dtype)."""
    torch, Flux2PosEmbed, Flux2Pipeline = _flux2()
    from precision_audit.rope.axial import axial_recipe

    cfg = load_diffusion_config(FLUX2)
    rope = cfg.rope
    raw = json.loads(FLUX2.read_text())
    assert (rope.theta, list(rope.axes_dim)) == (raw["rope_theta"], raw["axes_dims_rope"]) and rope.text == 512
    lat = Flux2Pipeline._prepare_latent_ids(torch.zeros(1, 1, 300, 3))[0]
    txt = Flux2Pipeline._prepare_text_ids(torch.zeros(1, 600, 2))[0]
    ids = torch.cat([lat, txt])
    if path == "freqs-fp32":
        from diffusers.models.embeddings import get_1d_rotary_pos_embed

        outs = [get_1d_rotary_pos_embed(d, ids.float()[:, i], theta=rope.theta, use_real=True,
                                        repeat_interleave_real=True, freqs_dtype=torch.float32)
                for i, d in enumerate(rope.axes_dim)]
        cos, sin = torch.cat([c for c, _ in outs], -1), torch.cat([s for _, s in outs], -1)
    else:
        cos, sin = Flux2PosEmbed(theta=raw["rope_theta"], axes_dim=raw["axes_dims_rope"])(ids)
    cos, sin = cos.numpy().astype(np.float64)[:, ::2], sin.numpy().astype(np.float64)[:, ::2]
    start = 0
    for k, d in enumerate(rope.axes_dim):
        st = run_recipe(axial_recipe(rope, path, "bfloat16"), rope.schedule(k), ids[:, k].numpy())
        ref_c, ref_s = cos[:, start:start + d // 2], sin[:, start:start + d // 2]
        start += d // 2
        if path == "cos-sin-dtype":
            for mine, ref in ((st["cos"], ref_c), (st["sin"], ref_s)):
                low = ref.astype(ml_dtypes.bfloat16).astype(np.float64)
                assert np.all(np.abs(mine - low) <= np.spacing(np.abs(low).astype(ml_dtypes.bfloat16)))
            continue
        bound = _ulp32(np.ones(1)) * np.ones_like(ref_c)
        if path == "freqs-fp32":
            m, inv = st["positions"][:, None], st["inv_freq"][None, :]
            bound = m * 2 * _ulp32(inv) + _ulp32(m * inv) + 2 * _ulp32(np.ones(1))
        assert np.all(np.abs(st["cos"] - ref_c) <= bound) and np.all(np.abs(st["sin"] - ref_s) <= bound)


def test_flux2_bottom_line_and_bad_input():
    """Every Flux.2 path is safe to the audited cap on all four axes (ids never cast); the text axis is reported;
    ids-dtype is refused (no diffusers code path casts Flux.2's ids); axes that do not add up name the value."""
    r = _run(str(FLUX2), "--image", "4096x4096", "--json")
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["largest_ids"] == {"reference": 0, "height": 255, "width": 255, "text": 511}
    assert out["input"]["text"] == 512
    for s in out["summary"]:
        assert s["verdict"] == "safe" and s["largest_safe"]["text_tokens"] == 2**16 and s["largest_safe"]["at_least"]
    r = _run(str(FLUX2), "-r", "ids-dtype")
    assert r.exit_code == 2 and "--recipe ids-dtype: not a code path Flux2Transformer2DModel runs" in r.output
    r = _run(str(FLUX2), "--text", "7", "--json")
    assert json.loads(r.output)["largest_ids"]["text"] == 6
    with pytest.raises(ValueError, match=r"axes_dims_rope \[32, 32, 32, 16\] sums to 112, not attention_head_dim"):
        diffusion_config_dict({"_class_name": "Flux2Transformer2DModel", "axes_dims_rope": [32, 32, 32, 16]},
                              source="f.json")
    with pytest.raises(ValueError, match=r"\[32, 32, 64\] must be 4 positive even"):
        diffusion_config_dict({"_class_name": "Flux2Transformer2DModel", "axes_dims_rope": [32, 32, 64]},
                              source="f.json")


def test_flux2_model_builds_the_readers_rope():
    """A tiny Flux2Transformer2DModel (no weights) built from a config: its Flux2PosEmbed is the reader's."""
    _torch()
    from diffusers import Flux2Transformer2DModel

    tiny = dict(patch_size=1, in_channels=4, num_layers=1, num_single_layers=1, attention_head_dim=8,
                num_attention_heads=1, joint_attention_dim=8, timestep_guidance_channels=8, axes_dims_rope=[2, 2, 2, 2],
                rope_theta=2000)
    model = Flux2Transformer2DModel(**tiny)
    read = diffusion_config_dict({"_class_name": "Flux2Transformer2DModel", **tiny}, source="t.json").rope
    assert (list(read.axes_dim), read.theta) == (list(model.pos_embed.axes_dim), model.pos_embed.theta)
