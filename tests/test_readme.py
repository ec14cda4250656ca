"""The README and the docs/ pages: their Python examples run, their links resolve, the README stays short.

Expected values: the README's and the pages' own ``>>>`` examples (doctest), the
quick start's two commands as the project fixed them (and the test command as
``.ci/run`` runs it), the file system (link targets) and the headings of the
target pages (anchors, slugged as mkdocs' ``toc`` and GitHub slug them).  The
output blocks themselves are checked by ``python scripts/readme.py --check``
(CI), the site by ``mkdocs build --strict`` (CI).
"""

import doctest
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
QUICK_START = (
    "pip install torch==2.13.0 . && precision-audit reproduce baichuan     # install + the headline\n"
    "pip install torch==2.13.0 -e '.[test]' && pytest -n auto              # install + the tests\n"
)


def _readme_script():
    spec = importlib.util.spec_from_file_location("readme_script", ROOT / "scripts" / "readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_python_examples():
    result = doctest.testfile(str(README), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 8
    assert result.failed == 0


@pytest.mark.parametrize("page", [p for p in PAGES if ">>> " in p.read_text()], ids=lambda p: p.name)
def test_docs_python_examples(page):
    result = doctest.testfile(str(page), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 3
    assert result.failed == 0


def test_docs_pages_with_examples_are_found():
    # the fix's and the formats' examples moved from the README to these pages: they must still run above
    assert {p.name for p in PAGES if ">>> " in p.read_text()} >= {"fix.md", "formats.md"}


def test_readme_is_short_and_keeps_the_quick_start():
    text = README.read_text()
    assert len(text.encode()) <= 20480, f"README.md is {len(text.encode())} bytes; the limit is 20480 (move to docs/)"
    assert f"```bash\n{QUICK_START}```" in text
    # the quick start's test command is the one CI runs as "the README's test command"
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    test_command = ci[ci.index("# The README's test command:") + 1]
    assert QUICK_START.splitlines()[1].split("&&")[1].split("#")[0].strip() == test_command == "pytest -n auto"
    # the front page's sections, in this order (others may sit between them); "Where to read more" ends it
    headings = re.findall(r"^## (.+)$", text, re.M)
    required = ["Quick start", "Is my model safe?", "The fix", "Guard your model in CI", "Python", "Where to read more"]
    assert [h for h in headings if h in required] == required and headings[-1] == required[-1]


def test_readme_lists_every_docs_page():
    more = README.read_text().split("## Where to read more", 1)[1]
    linked = set(re.findall(r"\]\(docs/([\w.-]+\.md)\)", more))
    assert linked == {p.name for p in PAGES} - {"index.md"}


def test_mkdocs_nav_has_every_page():
    nav = re.findall(r"^  - [^:\n]+: ([\w./-]+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    assert sorted(nav) == sorted(p.name for p in PAGES)
    assert nav[0] == "index.md"


def _slug(heading: str) -> str:
    """A heading's anchor: markdown's toc slugify of its text (GitHub gives the same for these headings)."""
    text = re.sub(r"[^\w\s-]", "", heading.replace("`", "")).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)  # headings in code blocks do not count
    return {_slug(h) for h in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def _links(page: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return [link for link in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", link)]


@pytest.mark.parametrize("page", [README, *PAGES], ids=lambda p: p.name)
def test_links_resolve(page):
    for link in _links(page):
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        assert path.exists(), f"{page.name}: link {link} has no target"
        if anchor and path.suffix == ".md":
            # index.md is the README on the site (scripts/readme.py's hook)
            assert anchor in _anchors(README if path == DOCS / "index.md" else path), f"{page.name}: {link}"
        if page == README and target:
            # the site shows the README as docs/index.md: its links must stay inside docs/ (figures/ is linked there)
            assert target.startswith(("docs/", "figures/")), f"README link {link} would not resolve on the site"


def test_site_front_page_links():
    readme = _readme_script()
    assert readme.site_front_page("see [Tests](docs/tests.md#ci) and ![x](figures/x.png)") == (
        "see [Tests](tests.md#ci) and ![x](figures/x.png)")

    class File:
        src_uri = "index.md"

    class Page:
        file = File()

    assert readme.on_page_markdown("stub", Page()) == readme.site_front_page(README.read_text())
    File.src_uri = "cli.md"
    assert readme.on_page_markdown("as is", Page()) == "as is"


def test_every_page_is_generated():
    assert _readme_script().pages() == [README, *PAGES]


def test_keep_rows_finds_the_table_below_a_preamble():
    keep = _readme_script()._keep_rows
    # a `config`-shaped output: lines before the table, the header, the rule, rows, a footer
    text = "model\n\nBottom line:\n  a\n\n h  L\n-- --\nx  1\ny  2\nz  1\nw  3\n\nfooter\n"
    assert keep(text, ["1"]) == "model\n\nBottom line:\n  a\n\n h  L\n-- --\nx  1\n...\nz  1\n...\n\nfooter\n"
    # an `hf-scan`-shaped output: the header on the first line
    assert keep("h  L\n-- --\nx  1\ny  2\n\nfooter\n", ["y"]) == "h  L\n-- --\n...\ny  2\n\nfooter\n"
    with pytest.raises(ValueError, match="no table"):
        keep("no table here\n", ["x"])


def test_named_api_exists():
    # every `precision_audit.x.y` the README and the pages name is importable (a rename must update the docs)
    names = set()
    for page in [README, *PAGES]:
        names |= {n.rstrip(".") for n in re.findall(r"precision_audit(?:\.\w+)+\.?", page.read_text())}
    assert "precision_audit.fix.keep_rotary_fp32" in names
    for name in sorted(names):
        parts = name.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:cut]))
            except ImportError:
                continue
            for attr in parts[cut:]:
                assert hasattr(obj, attr), f"{name}: {'.'.join(parts[:cut])} has no {attr}"
                obj = getattr(obj, attr)
            break


# --------------------------------------------------------------------------- one statement of the rules (issue 41)

def test_stale_rule_check_flags_a_page_that_states_the_old_rule(tmp_path):
    readme = _readme_script()
    # the statements issue 41 found, verbatim: each is flagged
    old = ["| `degraded` | max rotation error above 8x the cache format's own rounding bound (`DEFAULT_TOLERANCE`, "
           "`--tolerance`); ALiBi: a head's bias error above 8 half-ulps of its largest bias |",
           "file (the `[gguf]` extra: only its metadata and `rope_freqs` are read); why the threshold is 8x, and every",
           "`safe` of the `config` command (no collision, error at most 8x the cache format's",
           "Why `degraded` starts at 8x the cache bound: storing cos/sin in a format costs up to its rounding bound",
           "In float32 every path is `degraded`: a float32 cache could hold cos/sin to"]
    page = tmp_path / "page.md"
    page.write_text("# A page\n\nSome prose.\n\n" + "\n".join(old) + "\n")
    hits = readme.stale(page.read_text())
    assert [h.split(":")[0] for h in hits] == [f"line {n}" for n in range(5, 10)]
    # the rule as precision_audit.verdicts states it, and the columns that show (never judge) the absolute error
    from precision_audit.verdicts import rules_markdown, rules_text

    assert readme.stale(rules_markdown() + rules_text() + "\nx cache bound = max rot err / the cache format's own "
                        "rounding bound (bfloat16 2.770e-03 rad)\nat the model's context and 2x and 4x") == []


def test_no_page_and_no_help_states_a_retired_rule():
    assert _readme_script().stale_statements() == []


def test_pages_that_state_the_rules_print_the_generated_text():
    from precision_audit.verdicts import rules_markdown

    for page in (README, DOCS / "cli.md"):
        text = page.read_text()
        assert "<!-- [[[cog rules() ]]] -->\n" + rules_markdown() + "<!-- [[[end]]] -->" in text, page.name
