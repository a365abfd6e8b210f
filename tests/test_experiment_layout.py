"""The shape of orchestrator/experiment/: its modules import each other in one
direction (no cycle, not even one broken by an import inside a function).
Function size is tests/test_layout.py's rule, for every package.

Imports under `if TYPE_CHECKING:` are not counted: they never run, they only
name a type for the checker (resolve.py and layout.py name `Experiment`,
whose `resolve()` calls them).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "orchestrator" / "experiment"
PREFIX = "orchestrator.experiment"


def _runtime_imports(tree: ast.Module) -> set[str]:
    """Modules of this package that `tree` imports when it runs, wherever the
    import statement is (module level or inside a function)."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PREFIX:
                found.update(f"{PREFIX}.{alias.name}" for alias in node.names)
            elif node.module.startswith(PREFIX + "."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith(PREFIX + "."))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def graph() -> dict[str, set[str]]:
    modules = {f"{PREFIX}.{p.stem}": p for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    return {name: _runtime_imports(ast.parse(path.read_text())) & set(modules) for name, path in modules.items()}


def test_the_package_imports_in_one_direction():
    edges = graph()
    assert f"{PREFIX}.resolve" in edges[f"{PREFIX}.experiment"]  # the graph is really read
    state: dict[str, str] = {}

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for target in sorted(edges[module]):
            assert state.get(target) != "open", "import cycle: " + " -> ".join([*trail, module, target])
            if target not in state:
                visit(target, [*trail, module])
        state[module] = "done"

    for module in sorted(edges):
        if module not in state:
            visit(module, [])
