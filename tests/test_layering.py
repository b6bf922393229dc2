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


ENGINE_INTERNALS = ("accelopt_core.profiling.sandbox", "accelopt_core.agents.rules")


def test_the_server_reaches_the_sandbox_and_the_rules_only_through_the_editor_interface() -> None:
    offenders = {str(path.relative_to(ROOT)): sorted(name for name in imported_modules(path)
                                                     if name.startswith(ENGINE_INTERNALS))
                 for path in (ROOT / "server").rglob("*.py")}
    assert {path: names for path, names in offenders.items() if names} == {}
