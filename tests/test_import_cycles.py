"""No module of the package imports itself in a circle: every import counts, those inside functions
too, except the ones under `if TYPE_CHECKING:` (never run)."""

import ast
import graphlib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = {
    "engine": "voicewire.engine",
    "server": "voicewire.server",
    "client": "voicewire.client",
    "integrations": "voicewire.integrations",
}


def modules(root: Path, packages: dict[str, str]) -> dict[str, Path]:
    """Import name -> file, for every module under the packages' folders."""
    found = {}
    for folder, package in packages.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = [p for p in path.relative_to(root / folder).with_suffix("").parts if p != "__init__"]
            found[".".join([package, *parts])] = path
    return found


def _runtime_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for statement in node.body for inner in ast.walk(statement))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skipped
    ]


def import_graph(root: Path, packages: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    known = modules(root, packages)
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        imported: set[str] = set()
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif node.module:
                # `from pkg import mod` imports pkg.mod; `from pkg.mod import name` imports pkg.mod.
                imported.update(
                    f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                    for alias in node.names
                )
        graph[name] = {other for other in imported if other in known and other != name}
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as exc:
        return list(exc.args[1])
    return None


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph(REPO, PACKAGES)
    assert len(graph) > 60 and "voicewire.engine.api" in graph["voicewire.server.session"]
    assert cycle(graph) is None, " -> ".join(cycle(graph) or [])


def test_a_cycle_is_found_even_inside_a_function(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("from demo.pkg import b\n")
    (tmp_path / "pkg" / "b.py").write_text("def late():\n    from demo.pkg.a import thing\n")
    (tmp_path / "pkg" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from demo.pkg import a\n"
    )
    graph = import_graph(tmp_path, {"pkg": "demo.pkg"})
    assert graph == {"demo.pkg.a": {"demo.pkg.b"}, "demo.pkg.b": {"demo.pkg.a"}, "demo.pkg.c": set()}
    found = cycle(graph)
    assert found is not None and set(found) == {"demo.pkg.a", "demo.pkg.b"}
