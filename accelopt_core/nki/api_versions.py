"""Which NKI a kernel is written for, and what of it the targeted NKI release deprecated or removed.

Read from the source alone (no run): the imports say legacy (`neuronxcc.nki`) or the `nki` package, and the
newest construct the kernel uses says which `nki` release it needs at least. The release each construct came,
went or was deprecated in is from the NKI release notes and migration guides of Neuron 2.27-2.34
(NKI 0.2 = Neuron 2.27/2.28, 0.3 = 2.29, 0.4 = 2.30, 0.5 = 2.31, 0.6 = 2.32, 0.7 = 2.33, 0.8 = 2.34).
A change whose replacement is mechanical carries the rewritten source, for a quick fix.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass

Version = tuple[int, int]
NEWEST: Version = (0, 8)
FIRST: Version = (0, 2)  # the first release of the `nki` package (Neuron 2.27)
LEGACY_PACKAGE = "neuronxcc"

# (module, name) -> the release that introduced it: what a kernel using it needs at least
INTRODUCED: dict[tuple[str, str], Version] = {
    ("nki.language", "fori_loop"): (0, 6),
    ("nki.language", "while_loop"): (0, 6),
    ("nki.isa", "topk"): (0, 6),
    ("nki.isa", "scalar_load"): (0, 7),
    ("nki.isa", "scalar_store"): (0, 7),
    ("nki.isa", "NkiScalar"): (0, 7),
    ("nki.language", "if_else"): (0, 8),
    ("nki.isa", "scalar_alu"): (0, 8),
    ("nki.lnc", "sendrecv"): (0, 8),
    ("nki.lnc", "sendrecv_compute"): (0, 8),
    ("nki.lnc", "core_barrier"): (0, 8),
}
# (module, name, keyword) -> the release that gave a call that keyword: nisa.topk's sorted= is NKI 0.7's (its ISA
# page of Neuron 2.32 has no such parameter, that of 2.33 has)
KEYWORDS_INTRODUCED: dict[tuple[str, str, str], Version] = {("nki.isa", "topk", "sorted"): (0, 7)}
# NkiTensor view methods (Neuron 2.30, NKI 0.4): names no other tensor API uses
VIEW_METHODS: dict[str, Version] = {name: (0, 4) for name in (
    "rearrange", "reshape_dim", "flatten_dims", "expand_dim", "squeeze_dim", "vector_select", "reinterpret_cast",
    "get_pattern")}


@dataclass(frozen=True)
class ApiChange:
    """A construct the NKI releases deprecated or removed, and what replaces it."""

    module: str
    name: str
    status: str  # "deprecated" or "removed"
    since: Version
    replacement: str
    fix: Callable[[str, ast.Call, dict[str, str]], str | None] | None = None  # the source with it replaced


@dataclass(frozen=True)
class ApiFinding:
    """One use of a deprecated or removed construct: where, what to say, and the fixed source if mechanical."""

    line: int
    column: int
    end_column: int
    code: str  # "nki-deprecated" or "nki-removed"
    message: str
    fixed_source: str | None


@dataclass(frozen=True)
class ApiVersion:
    """The NKI a kernel is written for: legacy, or the `nki` package from release `minimum` on."""

    legacy: bool
    minimum: Version | None
    evidence: str | None  # the construct that decided `minimum`, as written, and its line

    def describe(self) -> str:
        if self.legacy:
            return "legacy NKI (neuronxcc.nki, removed from Neuron 2.28 on)"
        if self.minimum is None:
            return "not an NKI kernel"
        text = f"NKI {_text(self.minimum)}+"
        return f"{text} ({self.evidence})" if self.evidence else text


def _text(version: Version) -> str:
    return f"{version[0]}.{version[1]}"


def parse_version(text: str) -> Version:
    """"0.8" or "0.8.0" as (0, 8)."""
    parts = text.strip().split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        raise ValueError(f"an NKI version is written like 0.8, got {text!r}") from None


# --- reading the source ------------------------------------------------------------------------------------
def _aliases(tree: ast.Module) -> tuple[dict[str, str], bool]:
    """Local name -> the module it names (`nl` -> "nki.language"), and whether the legacy package is imported."""
    names: dict[str, str] = {}
    legacy = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                legacy |= alias.name.split(".")[0] == LEGACY_PACKAGE
                if alias.asname:
                    names[alias.asname] = alias.name
                else:
                    names[alias.name.split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            legacy |= node.module.split(".")[0] == LEGACY_PACKAGE
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names, legacy


def _dotted(node: ast.expr, aliases: dict[str, str]) -> str | None:
    """`nl.fori_loop` as "nki.language.fori_loop" (import aliases resolved), or None."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id], *reversed(parts)])


def _uses(tree: ast.Module, aliases: dict[str, str]) -> Iterator[tuple[str, str, ast.expr]]:
    """(module, name, node) of every `module.name` the source refers to."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            dotted = _dotted(node, aliases)
            if dotted and "." in dotted:
                module, _, name = dotted.rpartition(".")
                yield module, name, node
        elif isinstance(node, ast.Name) and node.id in aliases and "." in aliases[node.id]:
            module, _, name = aliases[node.id].rpartition(".")
            yield module, name, node


def detect_version(source: str) -> ApiVersion:
    """The NKI the kernel source is written for (legacy, or the oldest `nki` release that has all it uses)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ApiVersion(False, None, None)
    aliases, legacy = _aliases(tree)
    if legacy:
        return ApiVersion(True, None, None)
    if not any(module.split(".")[0] == "nki" for module in aliases.values()):
        return ApiVersion(False, None, None)
    best, evidence = FIRST, None
    for module, name, node in _uses(tree, aliases):
        needed = INTRODUCED.get((module, name))
        if needed is not None and needed > best:
            best, evidence = needed, f"{ast.unparse(node)}, line {node.lineno}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            needed = VIEW_METHODS.get(node.func.attr)
            if needed is not None and needed > best:
                best, evidence = needed, f".{node.func.attr}(...), line {node.lineno}"
            module, _, name = (_dotted(node.func, aliases) or "").rpartition(".")
            for keyword in node.keywords:
                needed = KEYWORDS_INTRODUCED.get((module, name, keyword.arg or ""))
                if needed is not None and needed > best:
                    best, evidence = needed, f"{ast.unparse(node.func)}({keyword.arg}=...), line {node.lineno}"
    return ApiVersion(False, best, evidence)


# --- deprecations and removals --------------------------------------------------------------------------------
def _splice(source: str, node: ast.AST, text: str) -> str:
    """The source with `node`'s span replaced by `text`."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    begin = starts[node.lineno - 1] + _byte_column(lines[node.lineno - 1], node.col_offset)  # type: ignore[attr-defined]
    end_line = node.end_lineno  # type: ignore[attr-defined]
    end = starts[end_line - 1] + _byte_column(lines[end_line - 1], node.end_col_offset)  # type: ignore[attr-defined]
    return source[:begin] + text + source[end:]


def _byte_column(line: str, offset: int) -> int:
    """ast's columns count UTF-8 bytes; the character index they mean."""
    return len(line.encode("utf-8")[:offset].decode("utf-8", errors="ignore"))


def _call_text(source: str, call: ast.Call, callee: str, drop: frozenset[str] = frozenset()) -> str:
    args = [ast.get_source_segment(source, a) or ast.unparse(a) for a in call.args]
    args += [f"{k.arg}={ast.get_source_segment(source, k.value) or ast.unparse(k.value)}" if k.arg else
             f"**{ast.unparse(k.value)}" for k in call.keywords if k.arg not in drop]
    return f"{callee}({', '.join(args)})"


def _alias_of(aliases: dict[str, str], module: str) -> str | None:
    return next((local for local, name in aliases.items() if name == module), None)


def _to_lnc(name: str) -> Callable[[str, ast.Call, dict[str, str]], str | None]:
    """`nisa.sendrecv(..., pipe_id=...)` -> `nki.lnc.sendrecv(...)` (nki.lnc's has no pipe_id), importing
    nki.lnc when the kernel does not."""

    def fix(source: str, call: ast.Call, aliases: dict[str, str]) -> str | None:
        local = _alias_of(aliases, "nki.lnc")
        callee = f"{local or 'nki.lnc'}.{name}"
        fixed = _splice(source, call, _call_text(source, call, callee, frozenset({"pipe_id"})))
        imported = any(isinstance(node, ast.Import) and any(a.name == "nki.lnc" and not a.asname for a in node.names)
                       for node in ast.walk(ast.parse(source)))
        return fixed if local or imported else _add_import(fixed, "import nki.lnc")

    return fix


def _add_import(source: str, statement: str) -> str:
    """The source with `statement` after its last top-level import."""
    tree = ast.parse(source)
    last = max((n.end_lineno or n.lineno for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))),
               default=0)
    lines = source.splitlines(keepends=True)
    return "".join([*lines[:last], statement + "\n", *lines[last:]])


def _python_range(source: str, call: ast.Call, aliases: dict[str, str]) -> str | None:
    """`nl.affine_range(n)` -> `range(n)` (NKI 0.7 made the static iterators Python's range)."""
    return _splice(source, call, _call_text(source, call, "range"))


def _register_store(source: str, call: ast.Call, aliases: dict[str, str]) -> str | None:
    """`nisa.register_store(dst, reg)` -> `nisa.scalar_store(dst, reg)`."""
    isa = _alias_of(aliases, "nki.isa")
    return _splice(source, call, _call_text(source, call, f"{isa}.scalar_store")) if isa else None


def _register_load(source: str, call: ast.Call, aliases: dict[str, str]) -> str | None:
    """The statement `nisa.register_load(reg, src)` -> `reg = nisa.scalar_load(src)`."""
    isa = _alias_of(aliases, "nki.isa")
    if isa is None or len(call.args) != 2 or call.keywords or not isinstance(call.args[0], ast.Name):
        return None
    statement = _statement_of(ast.parse(source), call)
    if statement is None:
        return None
    src = ast.get_source_segment(source, call.args[1])
    return _splice(source, statement, f"{call.args[0].id} = {isa}.scalar_load({src})")


def _statement_of(tree: ast.Module, call: ast.Call) -> ast.Expr | None:
    """The expression statement that is exactly this call, if it is one."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)
                and (node.value.lineno, node.value.col_offset) == (call.lineno, call.col_offset)):
            return node
    return None


CHANGES: tuple[ApiChange, ...] = (
    ApiChange("nki.language", "dynamic_range", "removed", (0, 7),
              "nl.fori_loop(lower, upper, body) (deprecated in NKI 0.6)"),
    ApiChange("nki.language", "affine_range", "deprecated", (0, 7), "Python's range (what it now is)",
              _python_range),
    ApiChange("nki.language", "sequential_range", "deprecated", (0, 7), "Python's range (what it now is)",
              _python_range),
    ApiChange("nki.language", "static_range", "deprecated", (0, 7), "Python's range (what it now is)",
              _python_range),
    ApiChange("nki.isa", "register_load", "deprecated", (0, 7), "reg = nisa.scalar_load(src), an NkiScalar",
              _register_load),
    ApiChange("nki.isa", "register_store", "deprecated", (0, 7), "nisa.scalar_store(dst, value)", _register_store),
    ApiChange("nki.isa", "register_alloc", "deprecated", (0, 7), "an NkiScalar from nisa.scalar_load"),
    ApiChange("nki.isa", "register_move", "deprecated", (0, 7), "NkiScalar arithmetic"),
    ApiChange("nki.isa", "sendrecv", "deprecated", (0, 8), "nki.lnc.sendrecv (without pipe_id)", _to_lnc("sendrecv")),
    ApiChange("nki.isa", "core_barrier", "deprecated", (0, 8), "nki.lnc.core_barrier", _to_lnc("core_barrier")),
)
_BY_NAME = {(change.module, change.name): change for change in CHANGES}


def api_findings(source: str, target: Version = NEWEST) -> list[ApiFinding]:
    """Every use of a construct `target` (or an earlier release) deprecated or removed, in an `nki` kernel;
    legacy kernels follow their own API and get none."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    aliases, legacy = _aliases(tree)
    if legacy:
        return []
    calls = {id(node.func): node for node in ast.walk(tree) if isinstance(node, ast.Call)}
    out: list[ApiFinding] = []
    for module, name, node in _uses(tree, aliases):
        change = _BY_NAME.get((module, name))
        if change is None or change.since > target:
            continue
        written = ast.unparse(node)
        verb = "was removed in" if change.status == "removed" else "is deprecated since"
        message = f"{written} {verb} NKI {_text(change.since)}: use {change.replacement}"
        call = calls.get(id(node))
        fixed = change.fix(source, call, aliases) if change.fix is not None and call is not None else None
        out.append(ApiFinding(node.lineno, node.col_offset, node.end_col_offset or node.col_offset,
                              f"nki-{change.status}", message, fixed))
    return sorted(out, key=lambda f: (f.line, f.column))
