"""vkq's layers (docs/architecture.md): every import goes down the layers or
stays in one, never up, and every module under vkq/ has its layer.

The layer table is docs/architecture.md's; this test reads it and parses
each module (ast, nothing imported), so a new module is placed by a row of
that table or by the folder it is put in."""
from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import ROOT

ARCHITECTURE = ROOT / "docs" / "architecture.md"
# A row of the table: "| 2 device | `vkq/device/` | ... |".
ROW = re.compile(r"^\| (\d+) (\w+) \| ([^|]*) \|", re.M)


def layer_table(text: str) -> dict[str, tuple[int, str]]:
    """Path ('vkq/errors.py', or a folder 'vkq/device/') -> (number, name)."""
    table = {}
    for number, name, where in ROW.findall(text):
        for path in re.findall(r"`(vkq/[^`]*)`", where):
            assert path not in table, f"{path} is in two rows of the layer table"
            table[path] = (int(number), name)
    return table


def module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(path: Path, root: Path, table: dict) -> tuple[int, str] | None:
    """A module's layer: its own row, else the row of its nearest folder."""
    rel = path.relative_to(root).as_posix()
    if rel in table:
        return table[rel]
    folders = [p for p in table if p.endswith("/") and rel.startswith(p)]
    return table[max(folders, key=len)] if folders else None


def imported_modules(path: Path, root: Path, modules: dict[str, Path]):
    """(line, statement, module) of each vkq module that `path` imports: the
    package's own modules, relative or absolute. `from X import name` counts
    as an import of X.name where that is a module, else of X."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    source_text = path.read_text()
    for node in ast.walk(ast.parse(source_text, str(path))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module
            targets = [f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source for a in node.names]
        else:
            continue
        for target in dict.fromkeys(targets):
            # `import vkq.a.b` loads vkq.a.b; its nearest module is what it names
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target:
                yield node.lineno, ast.get_source_segment(source_text, node), target


def layer_problems(root: Path, text: str) -> list[str]:
    """Why the tree under root/vkq breaks the layer table `text` (empty: it keeps it)."""
    table = layer_table(text)
    problems = [f"{p}: in the layer table but not in the tree" for p in table if not (root / p).exists()]
    paths = sorted((root / "vkq").rglob("*.py"))
    modules = {module_name(p, root): p for p in paths}
    for path in paths:
        rel = path.relative_to(root).as_posix()
        layer = layer_of(path, root, table)
        if layer is None:
            problems.append(f"{rel}: in no layer; place it in docs/architecture.md's layer table")
            continue
        for line, statement, target in imported_modules(path, root, modules):
            other = layer_of(modules[target], root, table)
            if other is not None and other[0] > layer[0]:
                problems.append(f"{rel}:{line} (layer {layer[0]} {layer[1]}) imports {target} "
                                f"(layer {other[0]} {other[1]}), a layer above: {statement}")
    return problems


def test_layer_table_is_read():
    table = layer_table(ARCHITECTURE.read_text())
    assert {name for _, name in table.values()} >= {"base", "blocks", "device", "dispatch", "API", "llama",
                                                   "commands"}, table


def test_every_module_has_a_layer_and_imports_go_down():
    problems = layer_problems(ROOT, ARCHITECTURE.read_text())
    assert not problems, "\n".join(problems)


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


TABLE = """| layer | where | what |
|---|---|---|
| 0 base | `vkq/errors.py` | errors |
| 1 blocks | `vkq/blocks/` | blocks |
| 2 device | `vkq/device/` | device |
"""


def test_an_import_up_a_layer_is_named(tmp_path):
    write(tmp_path, {"vkq/__init__.py": "", "vkq/errors.py": "", "vkq/blocks/__init__.py": "",
                     "vkq/blocks/formats.py": "from ..errors import x\nfrom ..device import runtime\n",
                     "vkq/device/__init__.py": "", "vkq/device/runtime.py": "import vkq.blocks.formats\n"})
    assert layer_problems(tmp_path, TABLE) == [
        "vkq/__init__.py: in no layer; place it in docs/architecture.md's layer table",
        "vkq/blocks/formats.py:2 (layer 1 blocks) imports vkq.device.runtime (layer 2 device), a layer above: "
        "from ..device import runtime"]


def test_an_unplaced_module_and_a_stale_row_are_named(tmp_path):
    write(tmp_path, {"vkq/blocks/__init__.py": "", "vkq/blocks/formats.py": "", "vkq/device/__init__.py": "",
                     "vkq/new.py": "from .blocks import formats\n"})
    assert layer_problems(tmp_path, TABLE) == [
        "vkq/errors.py: in the layer table but not in the tree",
        "vkq/new.py: in no layer; place it in docs/architecture.md's layer table"]
