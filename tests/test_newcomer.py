"""A newcomer's first hour (issue 41): what the README, the docs and ``--help`` show runs as shown.

Each command runs in a fresh interpreter, as a user's shell would run it, on
this checkout's code.  Expected values: the exit status a page shows next to a
command (``$ echo $?``), 0 for a ``--help`` example, and the option names as the
CLI reference (docs/cli.md) documents them.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from precision_audit.cli import main

ROOT = Path(__file__).resolve().parent.parent
CLI = "import sys; from precision_audit.cli import main; sys.exit(main(prog_name='precision-audit'))"
CTX = click.Context(main)
COMMANDS = {name: main.get_command(CTX, name) for name in main.list_commands(CTX)}
# the --help examples that need an optional package, and the slowest one (every llama rotary class, live)
NEEDS = {"hf-rope": "transformers", "hf-scan": "transformers", "hf-alibi": "transformers", "scan": "transformers"}


def _shell(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``precision-audit ARGV`` in a fresh process from ``cwd``, this checkout first on the path."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-c", CLI, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600, check=False)


def _example(name: str) -> list[str]:
    m = re.search(r"Example: precision-audit (.+)", COMMANDS[name].help or "")
    assert m, f"`{name} --help` shows no example"
    return shlex.split(m.group(1))


# Examples whose run as shown takes over 20 s of CPU (report: Llama 3.1's model report at its 128K context): in
# the slow pass (CI runs it); the default pass runs them in a fresh process at a shorter length (LONG_EXAMPLES).
LONG_EXAMPLES = {"report": ["--max-length", "8K"]}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_example_runs_in_a_fresh_process(name, tmp_path):
    """Each ``--help`` example as shown, in a fresh interpreter as a shell runs it (about 3 s of start each: the
    slow pass; the default pass runs each in this process, :func:`test_help_example_runs`)."""
    _example_runs(name, tmp_path, [])


@pytest.mark.parametrize("name", [n for n in COMMANDS if n not in LONG_EXAMPLES])
def test_help_example_runs(name, tmp_path, monkeypatch):
    """Each ``--help`` example as shown, run in this process from a fresh folder: exit 0, no exception."""
    _example_runs(name, tmp_path, [], monkeypatch)


@pytest.mark.parametrize("name", sorted(LONG_EXAMPLES))
def test_long_help_example_runs_shorter(name, tmp_path, monkeypatch):
    """The slow examples as shown, with a shorter length added (the example as shown: the slow pass)."""
    _example_runs(name, tmp_path, LONG_EXAMPLES[name], monkeypatch)


def _example_runs(name: str, tmp_path: Path, extra: list[str], monkeypatch: pytest.MonkeyPatch | None = None
                  ) -> None:
    """``name``'s example (with ``extra``) from a folder holding only ``tests/data``: in a fresh process, or in
    this one (through click's runner) where ``monkeypatch`` is given to move into that folder."""
    if name in NEEDS:
        pytest.importorskip(NEEDS[name])
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "data").symlink_to(ROOT / "tests" / "data")  # examples name tests/data/... configs
    if monkeypatch is None:
        proc = _shell(_example(name) + extra, tmp_path)
        assert proc.returncode == 0, f"`{name}` example failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        assert "Traceback" not in proc.stderr
        return
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, _example(name) + extra)
    assert result.exit_code == 0 and result.exception is None, f"`{name}` example failed:\n{result.output[-2000:]}"


def _shown_statuses(page: Path) -> list[tuple[str, int]]:
    """Each ``$ precision-audit ...`` a page shows with ``$ echo $?`` after its output, and the status shown."""
    found = []
    for block in re.findall(r"\]\]\] -->\n```\n(.*?)^```", page.read_text(), re.S | re.M):  # generated blocks
        cmd = re.match(r"\$ (precision-audit .+)\n", block)
        status = re.search(r"^\$ echo \$\?\n(\d+)$", block, re.M)
        if cmd and status:
            found.append((cmd.group(1), int(status.group(1))))
    return found


def test_cli_reference_shows_a_failing_fail_on_run():
    shown = _shown_statuses(ROOT / "docs" / "cli.md")
    assert any("--fail-on degraded" in cmd and code == 1 for cmd, code in shown), shown


@pytest.mark.parametrize("page", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_commands_exit_with_the_status_the_page_shows(page):
    for command, code in _shown_statuses(page):
        proc = _shell(shlex.split(command)[1:], ROOT)
        assert proc.returncode == code, f"{page.name}: `{command}` exited {proc.returncode}, the page shows {code}"
        if code == 1 and "--fail-on" in command:
            named = [line for line in proc.stderr.splitlines() if line.startswith("fail-on ")]
            assert named, f"{command}: exit 1 names no failing row"
            assert all(line in page.read_text() for line in named)  # the rows it names are on the page


def test_readme_quick_start_headline_runs():
    quick = re.search(r"```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    command = re.search(r"&& (precision-audit [^#\n]+?)\s+#", quick).group(1)
    proc = _shell(shlex.split(command)[1:], ROOT)
    assert proc.returncode == 0 and "verdict: reproduced" in proc.stdout, proc.stderr


# --------------------------------------------------------------------------- one convention for names


def _opts(cmd: click.Command) -> list[click.Option]:
    return [p for p in cmd.params if isinstance(p, click.Option)]


def test_short_options_mean_one_thing_across_commands():
    by_long: dict[str, set[tuple[str, ...]]] = {}
    by_short: dict[str, set[str]] = {}
    for cmd in COMMANDS.values():
        for p in _opts(cmd):
            if p.hidden:
                continue
            longs = sorted(o for o in p.opts if o.startswith("--"))
            shorts = tuple(sorted(o for o in p.opts if not o.startswith("--")))
            by_long.setdefault(longs[0], set()).add(shorts)
            for s in shorts:
                by_short.setdefault(s, set()).add(longs[0])
    assert {k: v for k, v in by_long.items() if len(v) > 1} == {}  # an option has the same short form everywhere
    # a short form names one option (relative's -r is its --path: the code paths, as --recipe elsewhere)
    assert {k: v for k, v in by_short.items() if len(v) > 1} == {"-r": {"--recipe", "--path"}}
    assert by_long["--length"] == {("-l",)} and by_long["--dtype"] == {("-d",)}
    assert by_long["--model-type"] == {("-m",)} and by_long["--out"] == {("-o",)}


@pytest.mark.parametrize("name", ["config", "report", "hf-rope"])
def test_a_model_is_the_first_argument(name):
    args = [p for p in COMMANDS[name].params if isinstance(p, click.Argument)]
    assert [a.name for a in args] == ["model"]
    assert COMMANDS[name].params.index(args[0]) == 0


@pytest.mark.slow  # two model reports with figures (20 s): the deprecated spelling's equality, in the slow pass
def test_report_takes_model_and_out_as_config_does(tmp_path):
    pytest.importorskip("matplotlib")
    model = str(ROOT / "tests" / "data" / "llama-2-7b-hf.json")
    runner = CliRunner()
    new = runner.invoke(main, ["report", model, "-o", str(tmp_path / "a"), "-d", "bf16", "--max-length", "1K"])
    assert new.exit_code == 0, new.output
    assert new.stderr == ""  # no deprecation note for the new spelling
    old = runner.invoke(main, ["report", "--model", model, "--out", str(tmp_path / "b"), "-d", "bf16",
                               "--max-length", "1K"])
    assert old.exit_code == 0, old.output
    assert old.stderr.count("\n") == 1 and "deprecated" in old.stderr and "report MODEL -o DIR" in old.stderr
    for name in ("report.md", "results.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()


@pytest.mark.parametrize("args, message", [
    (["report", "tests/data/llama-2-7b-hf.json"], "give the output folder: -o DIR"),
    (["report", "tests/data/llama-2-7b-hf.json", "--model", "tests/data/llama-2-7b-hf.json", "-o", "x"],
     "give MODEL once"),
    (["report", "no/such/config.json", "-o", "x"], "no/such/config.json: cannot read"),
    (["report", "tests/data/llama-2-7b-hf.json", "-m", "llama", "-o", "x"], "give MODEL or --model-type"),
])
def test_report_bad_names_exit_2_in_one_line(args, message, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 2, res.output
    errors = [line for line in res.output.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and message in errors[0], res.output
