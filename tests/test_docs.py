"""The documentation: links resolve, tables are valid, generated pages are current, README short.

Every check here is computed from the Markdown text itself (an independent little parser of links,
headings and table rows), not from the code that writes the pages.
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from pages.tables import markdown, methods, methods_page, setups_page

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, with inline code spans blanked out."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append(re.sub(r"(`+)(.+?)\1", lambda m: " " * len(m.group(0)), line))
    return out


def github_anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading.strip().lower())
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    for line in prose_lines(path.read_text()):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            base = github_anchor(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            found.add(base if n == 0 else f"{base}-{n}")
    return found


def relative_links(path: Path) -> list[str]:
    return [target for line in prose_lines(path.read_text()) for target in LINK.findall(line)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target)]  # http:, https:, mailto:


def test_the_link_parser_sees_links_and_anchors():
    """The helpers above on a hand-made page (so the real checks below cannot pass vacuously)."""
    assert github_anchor("Paper versus code") == "paper-versus-code"
    assert github_anchor("Results: run folders, sweeps, tables, plots") == \
        "results-run-folders-sweeps-tables-plots"
    assert github_anchor("GC layer sets") == "gc-layer-sets"
    assert github_anchor("Set-up") == "set-up"
    line = "see [a](docs/x.md#y), ![p](docs/p.png) and `[not](code.md)` or [w](https://e.org)"
    assert [t for t in LINK.findall(prose_lines(line)[0])] == \
        ["docs/x.md#y", "docs/p.png", "https://e.org"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    assert relative_links(page) or page.name != "README.md", "README.md links nowhere?"
    broken = []
    for target in relative_links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT)}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    assert not broken, f"{page.name}: " + "; ".join(broken)


def table_row_cells(line: str) -> int:
    """Cells of a Markdown table row: split at every `|` not escaped by a backslash (GitHub
    splits at pipes inside code spans too), without the outer pipes."""
    cells = re.split(r"(?<!\\)\|", line.strip())
    return len(cells) - 2


def tables(text: str) -> list[list[tuple[int, str]]]:
    """Each table as its rows (line number, text): runs of lines starting with `|`."""
    out, current = [], []
    in_code = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line.strip()):
            in_code = not in_code
        if not in_code and line.startswith("|"):
            current.append((n, line))
        elif current:
            out.append(current)
            current = []
    return out + ([current] if current else [])


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_table_row_has_the_header_s_cell_count(page):
    found = tables(page.read_text())
    bad = []
    for rows in found:
        header = table_row_cells(rows[0][1])
        assert re.fullmatch(r"\|( *:?-+:? *\|)+", rows[1][1].strip()), (page.name, rows[1])
        bad += [f"line {n}: {table_row_cells(line)} cells, header {header}"
                for n, line in rows if table_row_cells(line) != header]
    assert not bad, f"{page.name}: " + "; ".join(bad)


def accidental_list_items(text: str) -> list[str]:
    """Prose lines Markdown reads as a list item that the text wrapping made: a line starting
    with '+ ' (the docs use no '+' bullets: it is a wrapped 'A + B'), or with '- ' / '* '
    straight after a paragraph line that does not introduce a list (ends without ':')."""
    lines, bad = prose_lines(text), []
    for n, line in enumerate(lines[1:], 2):
        before = lines[n - 2]
        if re.match(r"^\s*\+ ", line) or (
                re.match(r"^[-*] ", line) and before.strip() and not before.rstrip().endswith(":")
                and not re.match(r"^\s*([-*+]|\d+[.)])\s|^[ #|<>]", before)):
            bad.append(f"line {n}: {line[:40]!r}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_no_wrapped_line_turns_into_a_list_item(page):
    assert not accidental_list_items(page.read_text()), page.name


def test_the_list_item_check_catches_a_wrap_at_a_plus_or_a_hyphen():
    wrapped = "FedACG\n+ GC-Fed ends level\n"
    assert accidental_list_items(wrapped) == ["line 2: '+ GC-Fed ends level'"]
    assert accidental_list_items("  item of FedACG\n  + GC-Fed\n")  # inside a list item too
    assert accidental_list_items("a split\n- and so on\n") == ["line 2: '- and so on'"]
    assert not accidental_list_items("The steps:\n- one\n- two\n\n* three\n")


def test_the_table_check_catches_an_unescaped_pipe():
    good = "| a | b |\n| --- | --- |\n| `x` | 1/\\|S\\| |\n"
    bad = "| a | b |\n| --- | --- |\n| `'x' | 'y'` | z |\n"
    assert [table_row_cells(r) for _, r in tables(good)[0]] == [2, 2, 2]
    assert [table_row_cells(r) for _, r in tables(bad)[0]] == [2, 2, 3]


def test_configuration_page_is_the_generated_one():
    page = (ROOT / "docs" / "configuration.md").read_text()
    assert page == markdown(), "run: python -m pages"
    assert len(tables(page)) >= 6  # one per topic


def test_setups_page_is_the_generated_one():
    page = (ROOT / "docs" / "setups.md").read_text()
    assert page == setups_page(), "run: python -m pages"


def test_a_key_without_a_topic_is_listed_under_other():
    """Each key is listed under its topic (its own, or its group's), in the order given; a key
    whose topic is unknown still gets documented, under Other (no crash)."""
    from methods import Key
    from run_config.schema import KEYS_BY_NAME
    from run_config.topics import grouped

    odd = Key("brand-new-key", int, 0, "?", "client", topic="No such topic")
    groups = grouped([KEYS_BY_NAME["lr"], odd, KEYS_BY_NAME["lam"], KEYS_BY_NAME["method"]])
    assert [(t, keys) for t, _, keys in groups] == \
        [("Method", ["lam", "method"]), ("Local training", ["lr"]), ("Other", ["brand-new-key"])]


def test_readme_is_short_and_links_the_methods_page():
    """The methods table grows with every method, so it lives in docs/methods.md, not in the
    README (which stays under its cap whatever the number of methods)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.encode()) <= 15_000, f"README.md is {len(readme.encode())} bytes"
    assert "docs/methods.md" in relative_links(ROOT / "README.md")
    assert "| method | server rule |" not in readme


def test_methods_page_is_the_generated_one_with_a_row_per_method():
    import methods as registry

    page = (ROOT / "docs" / "methods.md").read_text()
    assert page == methods_page(), "run: python -m pages"
    assert methods() in page
    (table,) = tables(page)
    names = [re.fullmatch(r"\| `([^`]+)` \|.*", line).group(1) for _, line in table[2:]]
    assert sorted(names) == sorted(registry.METHODS)
    # a few rows by hand (docs/algorithms.md#presets)
    assert "| `fedacg` | momentum | proximal | `lookahead` true, `lam` 0.85, `beta` 0.01 |" in page
    assert "| `fedavg` | momentum | - | - |" in page


def project_files(pattern: str) -> list[Path]:
    """The project's own files: those git tracks or would track (not ignored), never a venv,
    a run folder or anything else of the user's inside the checkout."""
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the project's files are git's list")
    out = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z",
                          "--", pattern], cwd=ROOT, capture_output=True, check=True).stdout
    return [ROOT / name for name in out.decode().split("\0") if name and (ROOT / name).is_file()]


def test_no_python_file_cites_the_old_contract():
    """Code cites docs/algorithms.md sections; the maths contract the project started from is
    not part of the repository, so no .py file may name it."""
    word = "SP" + "EC"  # spelled apart so this file does not name it either
    files = project_files("*.py")
    assert len(files) > 50
    hits = [f"{p.relative_to(ROOT)}:{n}" for p in files
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if word in line]
    assert not hits, "cite docs/algorithms.md#<section> instead: " + ", ".join(hits)


def test_the_fidelity_tables_cover_every_setup_and_every_element():
    """docs/setups.md#fidelity: every shipped set-up falls under one paper's table, and each code
    that was read has a row for every element the issue of the set-ups names."""
    import fnmatch
    import re

    from pages.fidelity import FIDELITY
    from run_config.setups import setup_names

    patterns = [re.findall(r"`([^`]+)`", setups) for _, setups, _, _ in FIDELITY]
    for name in setup_names():
        covering = [i for i, pats in enumerate(patterns)
                    if any(fnmatch.fnmatch(name, p) for p in pats)]
        assert len(covering) == 1, (name, covering)
    elements = ("split", "padding", "model", "initialisation", "optimizer", "lr schedule",
                "precision", "local steps", "client weights", "server optimizer", "method knobs")
    for title, _, code, rows in FIDELITY:
        if "FedACG, Tables 1" in title or "GC-Fed" in title:
            assert {e for e, *_ in rows} >= set(elements), title
    assert "## Fidelity" in (ROOT / "docs" / "setups.md").read_text()


# --- `python -m pages` writes every generated file, pyproject's section in place (issue 59) ---
STALE_PYPROJECT = """# head comment
[project]
name = "x"  # kept

# Keys (this comment stays: it comes before the header)
[tool.flwr.app.config]
# Old topic
lr = 0.1
gone = "key"

# a comment before the next table stays
[tool.ruff]
line-length = 100
"""
FRESH_SECTION = "[tool.flwr.app.config]\n# Method\nmethod = \"auto\"\n# Local training\nlr = 0.05"
WRITTEN_PYPROJECT = """# head comment
[project]
name = "x"  # kept

# Keys (this comment stays: it comes before the header)
[tool.flwr.app.config]
# Method
method = "auto"
# Local training
lr = 0.05

# a comment before the next table stays
[tool.ruff]
line-length = 100
"""


def test_the_pyproject_section_is_replaced_in_place_and_nothing_else():
    from pages.generated import with_config_section

    assert with_config_section(STALE_PYPROJECT, FRESH_SECTION) == WRITTEN_PYPROJECT
    # the last table of a file, without a final newline
    last = STALE_PYPROJECT.split("\n\n# a comment")[0]
    assert with_config_section(last, FRESH_SECTION) == WRITTEN_PYPROJECT.split("\n\n# a c")[0] \
        + "\n"


@pytest.mark.parametrize("text, says", [
    (STALE_PYPROJECT + "[tool.flwr.app.config]\nx = 1\n", "2 lines [tool.flwr.app.config]"),
    (STALE_PYPROJECT + "[tool.flwr.app.config.sub]\nx = 1\n", "would change more"),
    ("[project]\nname = 1\n", "0 lines [tool.flwr.app.config]"),
    (STALE_PYPROJECT.replace('gone = "key"', "gone = [\n[1, 2],\n]"), "would change more"),
    (STALE_PYPROJECT.replace('name = "x"', "name = "), "not valid TOML"),
])
def test_a_pyproject_that_cannot_be_rewritten_in_place_is_refused_naming_why(text, says):
    from pages.generated import GeneratedFileError, with_config_section

    with pytest.raises(GeneratedFileError, match=re.escape(says)):
        with_config_section(text, FRESH_SECTION)


def test_pages_writes_every_generated_file_pyproject_included(tmp_path):
    """In a copy of the project's generated files, with pyproject's section stale (a value
    changed, a key gone) and the pages missing: one write restores pyproject.toml byte for byte
    and writes each page; a second writes nothing."""
    from pages.generated import generated_files, stale_files, write_files

    real = (ROOT / "pyproject.toml").read_text()
    stale = real.replace("\nlr = 0.05\n", "\nlr = 0.5\n").replace("\nseed = 0\n", "\n")
    assert stale.count("\n") == real.count("\n") - 1
    (tmp_path / "docs").mkdir()
    (tmp_path / "pyproject.toml").write_text(stale)
    expected = generated_files(tmp_path)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in stale_files(expected)) == [
        "docs/configuration.md", "docs/methods.md", "docs/setups.md", "pyproject.toml"]
    write_files(expected, tmp_path)
    assert (tmp_path / "pyproject.toml").read_text() == real
    for name in ("configuration.md", "methods.md", "setups.md"):
        assert (tmp_path / "docs" / name).read_text() == (ROOT / "docs" / name).read_text()
    assert write_files(generated_files(tmp_path), tmp_path) == []


def test_pages_check_finds_the_checkout_up_to_date():
    out = subprocess.run([sys.executable, "-m", "pages", "--check"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def test_extending_says_a_codec_s_knob_is_declared_in_its_own_module():
    """docs/extending.md#uplink-codecs: knobs are declared in each part's `settings` (the codec
    of FedPAQ declares `uplink-bits` in methods/fedpaq.py), not in the app's schema."""
    text = (ROOT / "docs" / "extending.md").read_text()
    section = text.split("## Uplink codecs", 1)[1].split("\n## ", 1)[0]
    assert "run_config/schema.py" not in section and "`settings`" in section
    assert 'Key("uplink-bits"' in (ROOT / "methods" / "fedpaq.py").read_text()
