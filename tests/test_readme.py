"""README.md as a user reads it: every ```python block runs as written, in
order, in one namespace (the later blocks build on the earlier ones), on
vkq's example model; every command of a ```sh block names something that
exists (a `vkq` command line parses, a make target, a script, a path), and
the cheap ones run as written."""
from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, child_env, smollm2_or_skip

from vkq.commands.cli import build_parser

README = ROOT / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.M | re.S)

# Commands of the README run for real, as written (each a few seconds on lavapipe).
RUN = (
    "vkq model",
    "vkq info | head -2",
    'vkq generate "$(vkq model)" -p "Once upon a time" -n 48',
)


def blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(README.read_text()) if lang == language]


def commands() -> list[str]:
    """The command lines of the ```sh blocks, comments and continuations joined."""
    out = []
    for body in blocks("sh"):
        for line in body.replace("\\\n", " ").splitlines():
            line = line.split(" #")[0].strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def test_readme_has_blocks():
    assert len(blocks("python")) >= 3 and len(commands()) >= 15
    assert not [lang for lang, _ in FENCE.findall(README.read_text()) if lang not in ("python", "sh")], \
        "every fenced block says its language (python or sh), so that this test reads it"


def test_python_blocks_run(capsys):
    smollm2_or_skip()
    namespace: dict = {"__name__": "readme"}
    for i, code in enumerate(blocks("python")):
        try:
            exec(compile(code, f"README.md python block {i + 1}", "exec"), namespace)
        except Exception as e:
            raise AssertionError(f"README.md python block {i + 1} fails: {e!r}\n{code}") from e
    capsys.readouterr()


def test_shell_commands_exist():
    """What each command names exists: a vkq command line parses (argparse
    exits on an unknown command or option), a make target is in the Makefile,
    a script or file is in the checkout."""
    makefile = (ROOT / "Makefile").read_text()
    checked = 0
    for line in commands():
        for part in re.split(r"\s*(?:\||&&)\s*", line):
            words = shlex.split(part)
            while words and words[0] in ("sudo", "$"):
                words = words[1:]
            if not words:
                continue
            if words[0] == "vkq":
                build_parser().parse_args(words[1:])
                for inner in re.findall(r"\$\((vkq [^)]*)\)", part):
                    build_parser().parse_args(shlex.split(inner)[1:])
            elif words[0] == "make":
                for target in words[1:]:
                    assert re.search(rf"^{re.escape(target)}:", makefile, re.M), f"no make target {target}: {line}"
            elif words[0].startswith("tools/"):
                assert (ROOT / words[0]).is_file(), line
            elif words[0].endswith("python") and words[1:3] == ["-m", "pytest"]:
                for path in words[3:]:
                    if not path.startswith("-"):
                        assert (ROOT / path).exists(), line
            else:
                continue
            checked += 1
    assert checked >= 15


def test_apt_line_has_what_the_venv_needs():
    """The apt-get line of "Into an existing environment" installs python3-venv
    too (Debian's Python makes no venv without it)."""
    (apt,) = [line for line in commands() if "apt-get install" in line]
    assert "python3-venv" in apt.split() and "python3-dev" in apt.split()


def anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading: lower case, punctuation but - and _ dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_links_to_measurements_name_a_section():
    """README's and the page's own links into docs/measurements.md point at one of its headings."""
    page = (ROOT / "docs" / "measurements.md").read_text()
    headings = {anchor(h) for h in re.findall(r"^#+ (.+)$", page, re.M)}
    links = re.findall(r"\(docs/measurements\.md#([^)]+)\)", README.read_text()) + re.findall(r"\]\(#([^)]+)\)", page)
    assert links and not [link for link in links if link not in headings]


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
