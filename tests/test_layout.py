"""The shape docs/architecture.md describes, kept true by a test: no import
cycles between the project's modules (a lazy import inside a function counts
as an import: one used to break a cycle is still a cycle), arrows that
point one way (cli -> orchestrator/analysis -> node; analysis never imports
the orchestrator), and no orchestrator module over 450 lines."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cli", "node", "orchestrator", "analysis")
MAX_LINES = 450
# Which top-level package may import which.
ALLOWED = {
    "cli": {"cli", "orchestrator", "analysis", "node"},
    "orchestrator": {"orchestrator", "node"},
    "analysis": {"analysis", "node"},
    "node": {"node"},
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "_pb2" not in path.name:
                found[module_name(path)] = path
    return found


def _type_checking_only(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project modules `name` imports, wherever in the file (type-only
    imports under TYPE_CHECKING excepted: they never run)."""
    tree = ast.parse(path.read_text())
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom) or _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        out.update(t for t in targets if t in known and t != name)
    return out


def test_no_import_cycles():
    known = modules()
    graph = {name: imports_of(name, path, known) for name, path in known.items()}
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(name: str) -> None:
        state[name] = 1
        stack.append(name)
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert cycles == [], "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_arrows_point_one_way():
    known = modules()
    wrong = []
    for name, path in known.items():
        top = name.split(".")[0]
        for dep in imports_of(name, path, known):
            if dep.split(".")[0] not in ALLOWED[top]:
                wrong.append(f"{name} imports {dep}")
    assert wrong == []


def test_no_orchestrator_module_over_450_lines():
    over = {}
    for path in sorted((ROOT / "orchestrator").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            over[rel] = lines
    assert over == {}
