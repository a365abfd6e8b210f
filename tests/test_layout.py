"""The shape docs/architecture.md draws, kept true by a test. It measures
design, not length:

- no import cycles between the project's modules (a lazy import inside a
  function counts: one used to break a cycle is still a cycle);
- arrows that point one way between the top-level packages (cli ->
  orchestrator/analysis -> node; analysis never imports the orchestrator)
  and between the orchestrator's concept packages (RULES below: the
  experiment model knows no way of running it, shaping knows no backend,
  swarm reaches docker's vocabulary only through dockerapi, the simulator
  touches no host);
- modules live in the folder of their concept: the top of orchestrator/ and
  node/ holds only what every package shares;
- functions of at most about 60 lines.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cli", "node", "orchestrator", "analysis")
MAX_FUNCTION_LINES = 60
# Functions written before the rule that are still over it, at most as long
# as they are now: they may only shrink, and a new one may not join them.
# (The analysis' numeric decoders and figure builders, to be cut along their
# stages as compute was.)
LONG_BEFORE_THE_RULE = {
    "analysis/columnar.py decode": 93,
    "analysis/fidelity.py fidelity": 78,
    "analysis/report/dissemination.py _tree": 70,
    "analysis/metrics.py summarize": 69,
    "analysis/metrics.py compute": 67,
    "analysis/deliveries.py expected_recipients": 64,
    "analysis/report/draw.py _graph": 62,
}
# What may sit at the top of a package: what every concept package shares.
FLAT = {
    "orchestrator": {"__init__", "errors", "fanout", "progress", "version"},
    "node": {"__init__", "__main__", "atomic", "config", "dilation", "errors"},
}
# Concept packages -> the packages they must never import (prefix match).
RULES = {
    "orchestrator.experiment": ("orchestrator.backends", "orchestrator.run", "orchestrator.sim",
                                "orchestrator.shaping", "orchestrator.images", "orchestrator.records",
                                "orchestrator.dockerapi", "orchestrator.host", "orchestrator.doctor"),
    "orchestrator.shaping": ("orchestrator.backends", "orchestrator.run", "orchestrator.sim"),
    "orchestrator.backends.swarm": ("orchestrator.backends.docker", "orchestrator.backends.process"),
    "orchestrator.backends.docker": ("orchestrator.backends.swarm", "orchestrator.backends.process",
                                     "orchestrator.run", "orchestrator.sim"),
    "orchestrator.backends.process": ("orchestrator.backends.docker", "orchestrator.backends.swarm",
                                      "orchestrator.run", "orchestrator.sim", "orchestrator.dockerapi"),
    "orchestrator.sim": ("orchestrator.backends", "orchestrator.run", "orchestrator.shaping",
                         "orchestrator.images", "orchestrator.dockerapi", "orchestrator.host", "orchestrator.pypy"),
    "orchestrator.routers": ("orchestrator.backends.docker", "orchestrator.backends.swarm",
                             "orchestrator.backends.process", "orchestrator.run", "orchestrator.sim"),
    "orchestrator.records": ("orchestrator.backends", "orchestrator.run", "orchestrator.sim"),
    "orchestrator.images": ("orchestrator.backends", "orchestrator.run", "orchestrator.sim", "orchestrator.pypy"),
    "orchestrator.pypy": ("orchestrator.backends", "orchestrator.run", "orchestrator.shaping", "orchestrator.host"),
    "orchestrator.dockerapi": ("orchestrator.backends", "orchestrator.run", "orchestrator.sim",
                               "orchestrator.images", "orchestrator.shaping"),
    "orchestrator.host": ("orchestrator.backends", "orchestrator.run", "orchestrator.sim",
                          "orchestrator.dockerapi", "orchestrator.shaping"),
    "orchestrator.run": ("orchestrator.sim", "orchestrator.backends.docker", "orchestrator.backends.swarm",
                         "orchestrator.backends.process"),
}
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


def _rule_for(name: str) -> tuple[str, tuple[str, ...]] | None:
    matches = [p for p in RULES if name == p or name.startswith(p + ".")]
    return (max(matches, key=len), RULES[max(matches, key=len)]) if matches else None


def test_concept_packages_import_only_downwards():
    known = modules()
    wrong = []
    for name, path in known.items():
        rule = _rule_for(name)
        if rule is None:
            continue
        package, forbidden = rule
        wrong += [f"{name} imports {dep} ({package} must not import {prefix}*)"
                  for dep in sorted(imports_of(name, path, known))
                  for prefix in forbidden if dep.startswith(prefix) and not dep.startswith(package)]
    assert wrong == []


def test_modules_live_in_their_concept_folder():
    flat = {
        package: sorted(p.stem for p in (ROOT / package).glob("*.py") if "_pb2" not in p.name and p.stem not in allowed)
        for package, allowed in FLAT.items()
    }
    assert flat == {package: [] for package in FLAT}, "put these modules in the concept package they belong to"


def long_functions(path: Path) -> list[str]:
    """"FILE:LINE NAME (N lines)" for each function over its limit:
    MAX_FUNCTION_LINES, or its size when the rule came (LONG_BEFORE_THE_RULE)."""
    tree = ast.parse(path.read_text())
    where = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
            lines = node.end_lineno - node.lineno + 1
            if lines > LONG_BEFORE_THE_RULE.get(f"{where} {node.name}", MAX_FUNCTION_LINES):
                out.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return out


def test_functions_stay_short():
    found = [line for path in sorted(modules().values()) for line in long_functions(path)]
    assert found == [], f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(found)


def test_the_long_ones_are_still_there():
    """Each function the rule found long still exists: one that shrank or
    went leaves this list with it, so the list never hides a new one."""
    found = {f"{path.relative_to(ROOT).as_posix()} {node.name}": node.end_lineno - node.lineno + 1
             for path in modules().values() for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None}
    stale = {key: size for key, size in LONG_BEFORE_THE_RULE.items() if found.get(key, 0) <= MAX_FUNCTION_LINES}
    assert stale == {}, "now within the rule: drop these from LONG_BEFORE_THE_RULE"


def test_the_rules_see_what_they_check(tmp_path):
    """A function one line too long is found and one at the limit is not; a
    module deep in a concept package falls under its package's rule."""
    body = "    x = 1\n" * (MAX_FUNCTION_LINES - 2)
    (tmp_path / "ok.py").write_text("def f():\n" + body + "    return x\n")
    (tmp_path / "long.py").write_text("def f():\n" + body + "    x += 1\n    return x\n")
    assert long_functions(tmp_path / "ok.py") == []
    assert len(long_functions(tmp_path / "long.py")) == 1
    package, forbidden = _rule_for("orchestrator.backends.swarm.teardown") or ("", ())
    assert package == "orchestrator.backends.swarm" and "orchestrator.backends.docker" in forbidden
    assert _rule_for("orchestrator.errors") is None
