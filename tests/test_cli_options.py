"""CLI options that behave the same in every command (issue 19, "consistent options").

Repeatable dtypes (or a refused repeat), the RoPE schedule options shared by ``rope`` and
``attention``, several ``hf-scan`` lengths, ``config``'s default dtype from ``torch_dtype``, short
error messages with close matches, progress only on a terminal, and tables: the plain text
renderer when stdout is not a terminal, a rich table fitted to the terminal when it is.

The figures compared here are the library's own (the CLI must pass options through unchanged);
their correctness is tested against independent references in the auditors' test files.  Where a
value is stated, it is derived in a comment.
"""

from __future__ import annotations

import json
import re

import click
import pytest
from click.testing import CliRunner

from precision_audit.cli import _shared, main

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LLAMA3 = ('{"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, '
          '"original_max_position_embeddings": 8192, "rope_theta": 500000.0}')


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, list(args), env=env)


def commands() -> dict[str, click.Command]:
    return {name: cmd for name, cmd in main.every_command().items() if not isinstance(cmd, click.Group)}


def _tf() -> None:
    pytest.importorskip("transformers")


# --- 1. dtypes: repeatable, or a repeat refused ------------------------------------------------

def test_every_dtype_option_is_repeatable_or_refuses_a_repeat():
    seen = 0
    for name, cmd in commands().items():
        for p in cmd.params:
            if isinstance(p, click.Option) and p.type is _shared.DTYPE:
                seen += 1
                assert p.multiple, (name, p.name)  # a single option would keep the last value silently
                assert p.name in ("dtypes", "apply_dtype", "cast_dtype"), (name, p.name)
                if p.name in ("apply_dtype", "cast_dtype"):
                    assert p.callback is _shared.one_value
    assert seen >= 10


def test_attention_audits_every_dtype_given():
    from precision_audit.rope.attention import attention_errors
    from precision_audit.rope import RopeSchedule, preset

    res = run("attention", "-l", "2048", "-d", "bf16", "-d", "fp16", "-r", "fp32", "--distance", "1",
              "--distance", "1000", "--pairs", "2", "--shifts", "16", "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["results"]
    assert [(r["dtype"], r["distance"]) for r in rows] == [("bfloat16", 1), ("bfloat16", 1000), ("float16", 1),
                                                            ("float16", 1000)]
    for d in ("bfloat16", "float16"):
        lib = attention_errors(RopeSchedule(head_dim=128), [preset("fp32", d)], 2048, [1, 1000], pairs=2, shifts=16)
        assert [r for r in rows if r["dtype"] == d] == [r.to_dict() for r in lib]
    table = run("attention", "-l", "2048", "-d", "bf16", "-d", "fp16", "-r", "fp32", "--distance", "1",
                "--pairs", "2", "--shifts", "16").output
    assert "bfloat16" in table and " float16" in table and "rotated in bfloat16, float16" in table


def test_attention_refuses_a_second_apply_format():
    res = run("attention", "-l", "1024", "--apply", "bf16", "--apply", "fp16")
    assert res.exit_code == 2
    assert "'--apply': given 2 times (bfloat16, float16); it takes one value" in res.output


def test_hf_rope_and_hf_alibi_audit_every_dtype():
    _tf()
    res = run("hf-rope", "-m", "llama", "-l", "1024", "-d", "bf16", "-d", "fp16", "--json")
    assert res.exit_code == 0, res.output
    assert [r["dtype"] for r in json.loads(res.output)["results"]] == ["bfloat16", "float16"]
    res = run("hf-alibi", "-m", "bloom", "--heads", "4", "-l", "256", "-d", "bf16", "-d", "fp16", "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["results"]
    assert [(r["source"].split()[0], r["dtype"]) for r in rows] == [
        ("bloom", "bfloat16"), ("recipe", "bfloat16"), ("bloom", "float16"), ("recipe", "float16")]


# --- 2. attention takes rope's schedule options ---------------------------------------------

def test_rope_and_attention_share_the_schedule_options():
    rope, attention = commands()["rope"], commands()["attention"]
    names = {p.name for p in rope.params} & {p.name for p in attention.params}
    for opt in ("rotary_dim", "scaling", "rope_parameters", "max_pos", "factor", "orig_max_pos", "low_freq_factor",
                "high_freq_factor", "beta_fast", "beta_slow", "truncate", "mscale", "mscale_all_dim",
                "attention_factor", "short_factor", "long_factor"):
        assert opt in names, opt
        a = next(p for p in rope.params if p.name == opt)
        b = next(p for p in attention.params if p.name == opt)
        assert (a.opts, a.help, a.default, a.callback) == (b.opts, b.help, b.default, b.callback), opt


def test_attention_with_llama3_rope_parameters():
    from precision_audit.rope.attention import attention_errors
    from precision_audit.rope import preset
    from precision_audit.rope.schedules import schedule_from_rope_parameters

    args = ("-l", "16K", "-r", "fp32", "-r", "lowp-inv-freq", "--rope-parameters", LLAMA3)
    res = run("attention", *args, "--distance", "1", "--distance", "12000", "--pairs", "2", "--shifts", "8",
              "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    rope_doc = json.loads(run("rope", *args, "--json").output)
    # one schedule builder: the same options describe the same schedule in both commands
    assert doc["schedule"] == rope_doc["schedule"]
    assert "base=500000, rope_type=llama3, factor=8, L0=8192" in doc["schedule"]
    sched = schedule_from_rope_parameters(json.loads(LLAMA3), head_dim=128)
    lib = attention_errors(sched, [preset("fp32", "bfloat16"), preset("lowp-inv-freq", "bfloat16")], 16384,
                           [1, 12000], pairs=2, shifts=8)
    assert doc["results"] == sorted((r.to_dict() for r in lib), key=lambda r: (r["distance"], r["recipe"] != "fp32"))
    # the footer names the schedule instead of the default head_dim/base line
    text = run("attention", *args, "--distance", "1", "--pairs", "2", "--shifts", "8").output
    assert "rope_type=llama3, factor=8, L0=8192, 2 (q, k) pairs" in text


def test_attention_yarn_partial_rotary_options():
    res = run("attention", "-l", "4096", "-d", "fp64", "-r", "fp64", "--rotary-dim", "64", "--scaling", "yarn",
              "--factor", "4", "--original-max-position-embeddings", "1024", "--distance", "3000", "--pairs", "2",
              "--shifts", "8", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert "rotary_dim=64" in doc["schedule"] and "rope_type=yarn, factor=4, L0=1024" in doc["schedule"]
    # float64 everywhere: only float64 rounding separates the logit from the exact one
    assert doc["results"][0]["max_logit_error"] < 1e-9


def test_attention_rope_parameters_exclude_single_options():
    res = run("attention", "-l", "1024", "--rope-parameters", LLAMA3, "--factor", "2")
    assert res.exit_code == 2 and "--rope-parameters already gives the schedule; drop --factor" in res.output


# --- 3. hf-scan: several lengths --------------------------------------------------------------

def test_hf_scan_rows_per_length():
    _tf()
    res = run("hf-scan", "--family", "llama", "-l", "512", "-l", "1024", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["length"] == [512, 1024] and doc["dtype"] == "bfloat16"
    assert [(r["class"], r["length"]) for r in doc["results"]] == [("LlamaRotaryEmbedding", 512),
                                                                    ("LlamaRotaryEmbedding", 1024)]
    text = run("hf-scan", "--family", "llama", "-l", "512", "-l", "1024").output
    import transformers

    assert f"1 row (1 class of transformers {transformers.__version__}; " in text
    assert "at length 512, bfloat16" in text and "at length 1024, bfloat16" in text
    assert text.count("Errors in rad") == 1  # one column key after the blocks


def test_hf_scan_list_and_unknown_family():
    _tf()
    res = run("hf-scan", "--list", "--family", "llama", "--family", "gemma3")
    assert res.exit_code == 0, res.output
    assert "LlamaRotaryEmbedding" in res.output and "Gemma3RotaryEmbedding" in res.output
    assert "audited" not in res.output  # listed, not scanned
    bad = run("hf-scan", "--family", "lama")
    assert bad.exit_code == 2
    assert "unknown package 'lama' in transformers.models; did you mean: llama" in bad.output


# --- 4. config: the config's torch_dtype by default --------------------------------------------

@pytest.mark.parametrize(("saved", "expected"), [
    ({"torch_dtype": "float16"}, ["float16"]),
    ({"torch_dtype": "torch.bfloat16"}, ["bfloat16"]),
    ({"dtype": "float32"}, ["float32"]),  # transformers 5 writes "dtype"
    ({}, ["bfloat16"]),  # none saved: bfloat16, as report does
])
def test_config_default_dtype_is_torch_dtype(tmp_path, saved, expected):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "head_dim": 64, "max_position_embeddings": 256, **saved}))
    res = run("config", str(p), "-l", "256", "-r", "fp32", "--no-positions", "--json")
    assert res.exit_code == 0, res.output
    assert sorted({r["dtype"] for r in json.loads(res.output)["results"]}) == expected
    res = run("config", str(p), "-l", "256", "-r", "fp32", "--no-positions", "-d", "e4m3", "-d", "bf16", "--json")
    assert sorted({r["dtype"] for r in json.loads(res.output)["results"]}) == ["bfloat16", "float8_e4m3fn"]


def test_config_help_and_unusable_torch_dtype(tmp_path):
    help_text = " ".join(run("config", "--help").output.split())
    assert "[default: the config's torch_dtype, bfloat16 if it names none]" in help_text
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama", "head_dim": 64, "torch_dtype": "int8"}))
    res = run("config", str(p), "-l", "256")
    assert res.exit_code == 2 and "torch_dtype 'int8' is not a number format; give the dtype to audit" in res.output
    assert run("config", str(p), "-l", "256", "-d", "bf16", "-r", "fp32").exit_code == 0


# --- 5. short errors with close matches ---------------------------------------------------------

@pytest.mark.parametrize(("args", "message"), [
    (["report", "--model-type", "lama", "--out", "unused"], "unknown model type 'lama' for transformers"),
    (["hf-rope", "--model-type", "lama"], "unknown model type 'lama' for transformers"),
])
def test_unknown_model_type_is_short_and_suggests(args, message):
    _tf()
    res = run(*args)
    assert res.exit_code == 2
    assert message in res.output and "did you mean: llama" in res.output
    assert "model types; `precision-audit hf-scan --list` lists those with a rotary class)" in res.output
    assert len(res.output) < 400  # was 11.8 KB: every model type
    nosuch = run(*[a if a != "lama" else "nosuch" for a in args])
    assert nosuch.exit_code == 2 and "did you mean" not in nosuch.output and len(nosuch.output) < 400


def test_every_choice_error_is_short():
    """Each command's choice-like parameter, given a bad value, fails in a few lines (parse time, no work)."""
    needs = {"hf-alibi": ["-m", "bloom"], "report": ["--out", "unused"]}  # required options, given first
    checked = 0
    for name, cmd in commands().items():
        for p in cmd.params:
            if not isinstance(p.type, click.Choice):
                continue
            bad = [p.opts[0], "nosuch"] if isinstance(p, click.Option) else ["nosuch"]
            res = run(name, *needs.get(name, []), *bad)  # the bad value last: it is the one kept
            assert res.exit_code == 2, (name, p.name, res.output)
            assert "'nosuch' is not one of" in res.output, (name, p.name, res.output)
            assert len(res.output) < 500 and res.output.count("\n") <= 4, (name, p.name, res.output)
            checked += 1
    assert checked >= 12


# --- 6. progress only on a terminal -------------------------------------------------------------

def test_progress_only_when_stderr_is_a_terminal(monkeypatch):
    # 2 passes x 2**17 positions x 1 recipe x 1 dtype = 2**18: config draws a bar on a terminal from 2**18
    args = ("config", "tests/data/baichuan2-13b-base.json", "-l", "128K", "-r", "fp32", "--no-positions")
    quiet = run(*args)
    assert quiet.exit_code == 0, quiet.output
    assert quiet.stderr == ""  # CliRunner's stderr is not a terminal: not even the label
    monkeypatch.setattr(_shared, "stderr_is_tty", lambda: True)
    shown = run(*args)
    assert "alibi positions" in shown.stderr and shown.stdout == quiet.stdout


# --- 7. tables: plain when piped, rich and fitted on a terminal ----------------------------------

CONFIG = ("config", "tests/data/llama-3.1-8b.json", "-l", "8K", "-d", "bf16", "-d", "fp16")


def test_every_table_command_has_wide():
    for name, cmd in commands().items():
        if name != "report":  # report writes files, prints no table
            assert "wide" in {p.name for p in cmd.params}, name


def test_plain_table_when_stdout_is_not_a_terminal():
    from precision_audit.cli import table
    from precision_audit.cli.auditors import POSITION_COLUMNS

    rows = json.loads(run("positions", "-l", "8k", "-l", "64k", "-d", "bf16", "-d", "fp16", "--json").output)["results"]
    for wide in ([], ["--wide"]):  # --wide changes nothing off a terminal
        plain = run("positions", "-l", "8k", "-l", "64k", "-d", "bf16", "-d", "fp16", *wide).output
        # the table, then what construction the figures describe (and the other's rows)
        assert plain.startswith(table(rows, POSITION_COLUMNS + [("method", "method")]) + "\n\nFigures: ")
    assert table(rows[:1], [("dtype", "dtype"), ("length", "length")]) == (
        "   dtype  length\n--------  ------\nbfloat16    8192")


def _terminal(monkeypatch) -> None:
    monkeypatch.setattr(_shared, "stdout_is_tty", lambda: True)


TERMINAL = {"COLUMNS": "80", "NO_COLOR": "", "TERM": "xterm-256color"}


def test_rich_table_fits_the_terminal_and_colours_verdicts(monkeypatch):
    _terminal(monkeypatch)
    res = run(*CONFIG, env=TERMINAL)
    assert res.exit_code == 0, res.output
    lines = ANSI.sub("", res.output).splitlines()
    # the model's description, the bottom line, the table, the verdict key: blocks between blank lines
    blocks = "\n".join(lines).split("\n\n")
    body = next(b for b in blocks if any(ln.startswith("─") for ln in b.splitlines())).splitlines()
    assert any(ln.startswith("─") for ln in body) and len(body) > 10
    assert all(len(ln.rstrip()) <= 80 for ln in body), body
    assert any("3.637e-04" in ln for ln in body)  # numbers are never cut
    # verdict cells coloured: broken bold red, degraded yellow, safe green
    assert "\x1b[1;31mbroken" in res.output and "\x1b[33mdegraded" in res.output and "\x1b[32m" in res.output
    colourless = run(*CONFIG, env={**TERMINAL, "NO_COLOR": "1"})  # NO_COLOR: no colour (bold titles stay)
    assert not re.search(r"\x1b\[[0-9;]*3[0-7]m", colourless.output) and "degraded" in colourless.output


def test_rich_table_wide_shows_full_columns(monkeypatch):
    _terminal(monkeypatch)
    res = run(*CONFIG, "--wide", env={**TERMINAL, "NO_COLOR": "1"})
    head = next(ln for ln in ANSI.sub("", res.output).splitlines() if ln.split() and ln.split()[0] == "dtype")
    assert "max rot err  mean rot err  x cache bound  max run  colliding" in head and len(head.rstrip()) > 80


@pytest.mark.parametrize("width", [40, 60, 80, 100, 200])
def test_column_widths_fit(width):
    cells = [["dtype", "recipe", "max rot err", "note / reason skipped"],
             ["bfloat16", "lowp-inv-freq", "3.637e-04", "axial (2-D vision) rope: positions are pairs"],
             ["float16", "fp32", "0.003099", "-"]]
    widths, gap = _shared._column_widths(cells, width)
    natural = [max(len(r[i]) for r in cells) for i in range(4)]
    if sum(natural) + 2 * 3 <= width:
        assert (widths, gap) == (natural, 2)  # fits: nothing changes
    else:
        assert sum(widths) + gap * 3 <= width
    if width >= 60:
        assert widths[2] >= len("3.637e-04") and widths[0] >= len("bfloat16")  # numbers and dtypes whole
