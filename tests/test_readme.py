"""README.md and the reference pages it links to (docs/), as a user reads
them: every ```python block of a page runs as written, in order, in one
namespace per page (the later blocks build on the earlier ones), on vkq's
example model; every command of a ```sh block names something that exists (a
`vkq` command line parses, a make target, a script, a path), and the cheap
ones run as written; every link to a page or a heading leads somewhere; and
every count of block types, in the pages and in `vkq --help`, is the number
vkq has."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, child_env, smollm2_or_skip

from vkq.blocks.formats import FORMATS
from vkq.commands import model_file
from vkq.commands.cli import build_parser

README = ROOT / "README.md"
# The user's pages: the README and the reference it links to. docs/measurements.md
# is a dated record (its counts are those of their day), checked for its links only.
PAGES = (README, *(ROOT / "docs" / name for name in (
    "cli.md", "python-api.md", "numerics.md", "types-and-devices.md", "install.md", "development.md",
    "models.md", "testing.md")))
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)

# Commands of the README run for real, as written (each a few seconds on lavapipe).
RUN = (
    "vkq model",
    "vkq info | head -2",
    'vkq generate "$(vkq model)" -p "Once upon a time" -n 48',
)


def blocks(language: str, page: Path = README) -> list[str]:
    return [body for lang, body in FENCE.findall(page.read_text()) if lang == language]


def commands(page: Path = README) -> list[str]:
    """The command lines of a page's ```sh blocks, comments and continuations joined."""
    out = []
    for body in blocks("sh", page):
        for line in body.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def test_pages_have_blocks():
    assert len(blocks("python")) >= 1 and len(commands()) >= 10
    assert len(blocks("python", ROOT / "docs" / "python-api.md")) >= 3
    assert sum(len(commands(page)) for page in PAGES) >= 25
    for page in PAGES:
        assert not [lang for lang, _ in FENCE.findall(page.read_text()) if lang not in ("python", "sh")], \
            f"{page.name}: every fenced block says its language (python or sh), so that this test reads it"


@pytest.mark.parametrize("page", [p for p in PAGES if blocks("python", p)], ids=lambda p: p.name)
def test_python_blocks_run(page, capsys):
    smollm2_or_skip()
    namespace: dict = {"__name__": "readme"}
    for i, code in enumerate(blocks("python", page)):
        try:
            exec(compile(code, f"{page.name} python block {i + 1}", "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"{page.name} python block {i + 1} fails: {e!r}\n{code}") from e
    capsys.readouterr()


def test_shell_commands_exist():
    """What each command names exists: a vkq command line parses (argparse
    exits on an unknown command or option), a make target is in the Makefile,
    a script or file is in the checkout."""
    makefile = (ROOT / "Makefile").read_text()
    checked = 0
    for line in (line for page in PAGES for line in commands(page)):
        for part in re.split(r"\s*(?:\||&&)\s*", line):
            words = shlex.split(part)
            while words and words[0] in ("sudo", "$"):
                words = words[1:]
            if not words:
                continue
            for inner in re.findall(r"\$\((vkq [^)]*)\)", part):
                build_parser().parse_args(shlex.split(inner)[1:])
            if words[0] == "vkq":
                build_parser().parse_args(words[1:])
            elif words[0] == "make":
                for target in words[1:]:
                    assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"no make target {target}: {line}"
            elif words[0].startswith("tools/"):
                assert (ROOT / words[0]).is_file(), line
            elif words[0].endswith("python") and words[1:3] == ["-m", "vkq.commands.model_file"]:
                model_file.build_parser().parse_args(words[3:])
            elif words[0].endswith("python") and words[1:3] == ["-m", "pytest"]:
                for path in words[3:]:
                    if not path.startswith("-"):
                        assert (ROOT / path).exists(), line
            else:
                continue
            checked += 1
    assert checked >= 25


def test_apt_line_has_what_the_venv_needs():
    """The apt-get line of "Installing into an existing environment" installs
    python3-venv too (Debian's Python makes no venv without it)."""
    (apt,) = [line for line in commands() if "apt-get install" in line]
    assert "python3-venv" in apt.split() and "python3-dev" in apt.split()


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation but - and _ dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def headings(page: Path) -> set[str]:
    return {anchor(h) for h in re.findall(r"^#+ (.+)$", page.read_text(), re.M)}


def test_links_lead_somewhere():
    """Every relative link of the pages (and of docs/measurements.md) names a
    file of the checkout, and its #anchor one of that page's headings."""
    checked = 0
    for page in (*PAGES, ROOT / "docs" / "measurements.md"):
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"\w+:", target):
                continue  # https: and the like
            path, _, fragment = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            assert file.exists(), f"{page.name}: link to {target}: no such file"
            if fragment:
                assert fragment in headings(file), f"{page.name}: link to {target}: no such heading"
            checked += 1
    assert checked >= 20


def test_measurements_open_with_where_vkq_stands():
    """docs/measurements.md's first section is the summary the README links to."""
    first = re.search(r"^## (.+)$", (ROOT / "docs" / "measurements.md").read_text(), re.M).group(1)
    assert anchor(first) == "where-vkq-stands"
    assert "(docs/measurements.md#where-vkq-stands)" in README.read_text()


def test_scripts_name_readme_headings():
    """A script's comment that sends the reader to a README section
    (README.md, "Heading") names a heading the README has."""
    named = [(script.name, heading) for script in sorted((ROOT / "tools").glob("*.sh"))
             for heading in re.findall(r'README\.md,? \(?"([^"]+)"', script.read_text().replace("\n# ", " "))]
    assert named, "the install scripts point to the README's install section"
    readme = headings(README)
    assert not [(name, h) for name, h in named if anchor(h) not in readme]


TYPE_COUNT = re.compile(r"\b(\d+) (?:GGUF )?(?:block )?types\b")


def help_texts() -> list[str]:
    parser = build_parser()
    (sub,) = [a for a in parser._actions if a.choices and isinstance(a.choices, dict)]
    return [parser.format_help()] + [p.format_help() for p in sub.choices.values()]


def test_type_counts_are_vkq_s():
    """Every "N block types" in the pages and in `vkq --help` is the number of
    block types vkq has (vkq.blocks.formats.FORMATS), and the README says it."""
    readme_counts = [int(n) for n in TYPE_COUNT.findall(README.read_text())]
    assert len(FORMATS) in readme_counts
    wrong = [(page.name, int(n)) for page in PAGES for n in TYPE_COUNT.findall(page.read_text())
             if int(n) != len(FORMATS)]
    wrong += [("--help", int(n)) for text in help_texts() for n in TYPE_COUNT.findall(" ".join(text.split()))
              if int(n) != len(FORMATS)]
    assert not wrong, f"vkq has {len(FORMATS)} block types; these say otherwise: {wrong}"


@pytest.mark.parametrize("line", RUN)
def test_shell_example_runs(line):
    """The line is in the README as written, and runs: exit status 0, no traceback."""
    smollm2_or_skip()
    assert line in commands(), f"{line!r} is no longer in README.md: update RUN"
    script = f'vkq() {{ "{sys.executable}" -m vkq "$@"; }}\n{line}\n'
    r = subprocess.run(["bash", "-c", script], env=child_env(), capture_output=True, text=True, timeout=300,
                       cwd=Path.home())
    assert r.returncode == 0 and r.stdout.strip(), (r.returncode, r.stderr)
    assert not re.search(r"Traceback|[Ee]rror|Broken pipe", r.stderr), r.stderr
