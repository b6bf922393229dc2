"""The engine ships without its front ends: nothing in accelopt_core imports the language server, the
NKIBench runner or the `accelopt` command, and the server object does not import its features. The language
server reaches the engine's sandbox and rewrite rules only through the engine's editor interface
(accelopt_core/editor_api.py)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FRONT_ENDS = {"server", "nkibench", "accelopt"}


def imported_modules(path: Path) -> set[str]:
    """Full names of the absolute imports in a file, wherever they stand (lazy imports included)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def imported_packages(path: Path) -> set[str]:
    """Top-level names of the absolute imports in a file, wherever they stand (lazy imports included)."""
    return {name.split(".")[0] for name in imported_modules(path)}


def test_the_engine_imports_no_front_end() -> None:
    offenders = {str(path.relative_to(ROOT)): sorted(imported_packages(path) & FRONT_ENDS)
                 for path in (ROOT / "accelopt_core").rglob("*.py")}
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_server_object_does_not_import_its_features() -> None:
    tree = ast.parse((ROOT / "server" / "server.py").read_text(encoding="utf-8"))
    relative = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level == 1}
    assert not any(module and module.startswith("features") for module in relative)


def nki_imports() -> dict[str, set[str]]:
    """The simulator's modules (paths under accelopt_core/nki) and the ones each imports from that folder by a
    relative import, wherever it stands (an import inside a function ties two modules just as well)."""
    folder = ROOT / "accelopt_core" / "nki"
    graph: dict[str, set[str]] = {}
    for path in folder.rglob("*.py"):
        imported: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.ImportFrom) and node.level):
                continue
            base = path.parents[node.level - 1].joinpath(*(node.module or "").split("."))
            named = [base / alias.name for alias in node.names]  # `from . import ops`, `from .modern import isa`
            for target in ([base, *named] if node.module else named):
                module = next((m for m in (target.with_suffix(".py"), target / "__init__.py") if m.is_file()), None)
                if module is not None and folder in module.parents:
                    imported.add(module.relative_to(folder).as_posix())
        graph[path.relative_to(folder).as_posix()] = imported
    return graph


def circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The import circles of a graph: its strongly connected parts of more than one module."""
    reaches = {module: _reachable(graph, module) for module in graph}
    found = {frozenset(other for other in reaches[module] if module in reaches[other]) for module in graph}
    return sorted((set(part) for part in found if len(part) > 1), key=sorted)


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_simulators_one_import_circle_is_the_modules_that_need_each_other() -> None:
    """ops records instructions on tensors, a tile's sugar (t + x, t[i] = x, t.broadcast_to) is ops' and
    language's, and language wraps both: those three import each other. The trace the performance model reads,
    its tape's wire form, the dtypes, subscripts, views and block memory stand below them (an 8-file circle
    before the tape codec left trace.py)."""
    assert circles(nki_imports()) == [{"language.py", "ops.py", "tensor.py"}]


def test_circles_are_the_modules_that_reach_each_other() -> None:
    graph = {"a": {"b"}, "b": {"a", "c"}, "c": {"d"}, "d": {"c"}, "e": {"a"}}
    assert circles(graph) == [{"a", "b"}, {"c", "d"}]


ENGINE_INTERNALS = ("accelopt_core.profiling.sandbox", "accelopt_core.agents.rules")


def test_the_server_reaches_the_sandbox_and_the_rules_only_through_the_editor_interface() -> None:
    offenders = {str(path.relative_to(ROOT)): sorted(name for name in imported_modules(path)
                                                     if name.startswith(ENGINE_INTERNALS))
                 for path in (ROOT / "server").rglob("*.py")}
    assert {path: names for path, names in offenders.items() if names} == {}
