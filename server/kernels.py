"""What a file is, read from its text alone (nothing is executed): is it an NKI kernel, which function
is the kernel, which task checks it, and where its loops are. Used on every edit, so it stays cheap."""

from __future__ import annotations

import ast
import os
import re
import time
from dataclasses import dataclass, field

from accelopt_core.editor_api import TaskRef
from accelopt_core.nki.loader import KERNEL_NAMES, KernelLoadError, check_source, is_kernel_decorator, parse_source
from accelopt_core.tasks.declared import split_reference
from accelopt_core.tasks.registry import TaskFiles
from accelopt_core.tasks.registry import all_task_files as _all_task_files

DIRECTIVE = re.compile(r"^\s*#\s*accelopt\s*:\s*(?P<body>.*)$", re.IGNORECASE)
_NKI_IMPORT = re.compile(r"^\s*(?:import|from)\s+(?:neuronxcc(?:\.nki)?|nki)\b", re.MULTILINE)
_JIT = re.compile(r"^\s*@\s*(?:\w+\.)*jit\b", re.MULTILINE)
_DIRECTIVE_KEYS = ("task", "reference", "kernel")
_TASKS_TTL_S = 5.0
_tasks_seen: tuple[float, dict[str, TaskFiles]] | None = None


def all_task_files() -> dict[str, TaskFiles]:
    """The named tasks, re-listed at most every few seconds: linking runs on every keystroke."""
    global _tasks_seen
    now = time.monotonic()
    if _tasks_seen is None or now - _tasks_seen[0] > _TASKS_TTL_S:
        _tasks_seen = (now, _all_task_files())
    return _tasks_seen[1]


@dataclass(frozen=True)
class Directive:
    """`# accelopt: task=silu:small` or `# accelopt: reference=ref.py kernel=my_kernel`."""

    line: int  # 1-based
    values: dict[str, str]
    problems: tuple[str, ...] = ()

    @property
    def task(self) -> str | None:
        return self.values.get("task")

    @property
    def reference(self) -> str | None:
        return self.values.get("reference")

    @property
    def kernel(self) -> str | None:
        return self.values.get("kernel")


@dataclass(frozen=True)
class SourceLoop:
    """A `for` loop in the kernel: its header line, last line and loop variables."""

    line: int
    end_line: int
    targets: tuple[str, ...]
    iterator: str  # e.g. "nl.affine_range", "range"


@dataclass(frozen=True)
class KernelDef:
    """One `@nki.jit` function of a file: where a lens over it goes."""

    name: str
    def_line: int  # 1-based
    name_start: int  # column of the name on the def line


@dataclass(frozen=True)
class KernelFile:
    """Everything the server knows about a file's text without running it. In a file of several kernels
    (`kernels`), `function` is the one profiled: the one picked in the editor (`chosen`), else the one the
    directive names (`kernel=NAME`); None until one is."""

    is_kernel: bool
    function: str | None = None
    def_line: int | None = None  # 1-based line of `def`
    name_start: int = 0  # column of the function name on the def line
    end_line: int | None = None
    directive: Directive | None = None
    syntax_error: tuple[int, int, str] | None = None  # line (1-based), column (0-based), message
    problem: str | None = None  # e.g. no function named as the directive says
    loops: tuple[SourceLoop, ...] = field(default_factory=tuple)
    kernels: tuple[KernelDef, ...] = ()  # every @nki.jit function, in file order
    chosen: str | None = None  # the function picked in the editor

    @property
    def named(self) -> str | None:
        """The kernel function named for this file (by `kernel=NAME` or picked in the editor; a file of
        several kernels); None when the only kernel is found by itself. What profiles and searches are told,
        as on the command line."""
        return self.chosen or (self.directive.kernel if self.directive is not None else None)

    @property
    def choosing(self) -> bool:
        """Several kernels and none picked yet: each gets a lens to profile it."""
        return self.function is None and len(self.kernels) > 1 and not self.problem and not self.syntax_error


def _is_nki_module(name: str) -> bool:
    return name == "nki" or name.startswith(("nki.", "neuronxcc"))


def _imports_nki(tree: ast.Module) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(_is_nki_module(a.name) for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module and _is_nki_module(node.module):
            return True
    return False


def _jit_decorated(node: ast.AST) -> bool:
    return isinstance(node, ast.FunctionDef) and any(is_kernel_decorator(d) for d in node.decorator_list)


def parse_directive(source: str) -> Directive | None:
    """The first `# accelopt:` comment in the file's leading 40 lines (a directive belongs at the top)."""
    for number, text in enumerate(source.splitlines()[:40], start=1):
        match = DIRECTIVE.match(text)
        if not match:
            continue
        values: dict[str, str] = {}
        problems: list[str] = []
        for item in re.split(r"[\s,;]+", match.group("body").strip()):
            if not item:
                continue
            key, sep, value = item.partition("=")
            key = key.strip().lower()
            if not sep or not value.strip():
                problems.append(f"expected key=value, got {item!r}")
            elif key not in _DIRECTIVE_KEYS:
                problems.append(f"unknown key {key!r} (known: {', '.join(_DIRECTIVE_KEYS)})")
            else:
                values[key] = value.strip().strip("'\"")
        if "task" in values and "reference" in values:
            problems.append("give either task= or reference=, not both")
        return Directive(number, values, tuple(problems))
    return None


def _loops(function: ast.FunctionDef) -> tuple[SourceLoop, ...]:
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.For):
            targets = tuple(n.id for n in ast.walk(node.target) if isinstance(n, ast.Name))
            call = node.iter.func if isinstance(node.iter, ast.Call) else node.iter
            found.append(SourceLoop(node.lineno, node.end_lineno or node.lineno, targets, ast.unparse(call)))
    return tuple(sorted(found, key=lambda loop: loop.line))


def analyze(source: str, filename: str = "kernel.py", chosen: str | None = None) -> KernelFile:
    """Recognise a kernel by content: an import of `nki` / `neuronxcc.nki`, or an `@...jit` function.
    `chosen`: the kernel picked in the editor among several, the latest word (over the directive's `kernel=`)."""
    directive = parse_directive(source)
    try:
        tree = parse_source(source, filename)
    except SyntaxError as exc:
        if not (_NKI_IMPORT.search(source) or _JIT.search(source) or directive):
            return KernelFile(False)
        line = exc.lineno or 1
        column = max(0, (exc.offset or 1) - 1)
        return KernelFile(True, directive=directive, syntax_error=(line, column, exc.msg or "invalid syntax"))
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    if not (_imports_nki(tree) or any(_jit_decorated(f) for f in functions.values())):
        return KernelFile(False)
    kernels = tuple(KernelDef(f.name, f.lineno, _name_column(source, f)) for f in functions.values()
                    if _jit_decorated(f))
    chosen = chosen if chosen in functions else None
    wanted = chosen or (directive.kernel if directive is not None else None)
    if wanted is None and len(kernels) > 1 and not any(known in functions for known in KERNEL_NAMES):
        return KernelFile(True, directive=directive, kernels=kernels)  # which one: each kernel's lens picks
    try:
        name = check_source(source, filename, wanted)
    except KernelLoadError as exc:
        return KernelFile(True, directive=directive, problem=str(exc), kernels=kernels)
    node = functions.get(name)
    if node is None:  # check_source only looks at top-level functions too, so this is defensive
        return KernelFile(True, directive=directive, problem=f"no top-level function named {name!r}")
    return KernelFile(True, name, node.lineno, _name_column(source, node), node.end_lineno, directive,
                      loops=_loops(node), kernels=kernels, chosen=chosen)


def _name_column(source: str, node: ast.FunctionDef) -> int:
    line = source.splitlines()[node.lineno - 1] if node.lineno - 1 < len(source.splitlines()) else ""
    index = line.find(node.name, node.col_offset)
    return max(index, 0)


# --- linking a kernel to its task -------------------------------------------------------------


@dataclass(frozen=True)
class TaskLink:
    """How a kernel is checked: the task, where the link came from, the reference file (to watch it),
    and a problem when the link is broken (an unknown task, a missing reference file)."""

    ref: TaskRef | None
    label: str
    origin: str  # "directive", "nkibench", "sibling" or "none"
    reference_path: str | None = None
    problem: str | None = None
    line: int | None = None  # the directive's line, for diagnostics about it

    @property
    def ok(self) -> bool:
        return self.ref is not None and self.problem is None


def _named(name: str, origin: str, line: int | None = None) -> TaskLink:
    base = name.split(":", 1)[0]
    tasks = all_task_files()
    if base not in tasks:
        known = ", ".join(sorted(tasks)) or "none"
        return TaskLink(None, name, origin, None, f"unknown task {base!r}; known tasks: {known}", line)
    return TaskLink(TaskRef(name=name), name, origin, os.path.abspath(tasks[base].reference), None, line)


def link_task(kernel: KernelFile, path: str | None) -> TaskLink:
    """A directive wins; else the NKIBench layout (`kernels/NAME.py` beside `reference/NAME.py`, our
    own nkibench/kernels by task name); else a `NAME_ref.py` sibling (the bundled examples' layout)."""
    directive = kernel.directive
    if directive is not None and (directive.task or directive.reference):
        if directive.task:
            return _named(directive.task, "directive", directive.line)
        assert directive.reference is not None
        reference = os.path.expanduser(directive.reference)
        if not os.path.isabs(reference) and path:
            reference = os.path.join(os.path.dirname(path), reference)
        reference, variant = split_reference(os.path.abspath(reference))  # `ref.py:small`
        if not os.path.isfile(reference):
            return TaskLink(None, directive.reference, "directive", reference,
                            f"reference file not found: {reference}", directive.line)
        label = os.path.basename(reference) + (f":{variant}" if variant else "")
        return TaskLink(TaskRef(reference=reference, variant=variant), label, "directive", reference, None,
                        directive.line)
    if path:
        folder, filename = os.path.split(os.path.abspath(path))
        stem = os.path.splitext(filename)[0]
        if os.path.basename(folder) == "kernels":
            sibling = os.path.join(os.path.dirname(folder), "reference", filename)
            if os.path.isfile(sibling):
                known = all_task_files().get(stem)
                if known is not None and os.path.samefile(known.reference, sibling):
                    return _named(stem, "nkibench")
                return TaskLink(TaskRef(reference=sibling), stem, "nkibench", sibling)
        sibling = os.path.join(folder, f"{stem}_ref.py")
        if os.path.isfile(sibling):
            return TaskLink(TaskRef(reference=sibling), stem, "sibling", sibling)
    return TaskLink(None, "", "none", None, None)


def suggest_tasks(path: str | None, limit: int = 3) -> list[str]:
    """Task names for the "link a task" quick fix: those whose name the file name contains first."""
    names = sorted(all_task_files())
    stem = os.path.splitext(os.path.basename(path or ""))[0].lower()
    matching = [n for n in names if n == stem] or sorted((n for n in names if n in stem or stem in n),
                                                          key=lambda n: -len(n))
    return matching[:limit] if matching else names


def directive_insert_line(source: str) -> int:
    """Where a new directive goes (0-based): after a shebang and an encoding line, else at the top."""
    lines = source.splitlines()
    line = 0
    while line < min(2, len(lines)) and (lines[line].startswith("#!") or re.match(r"^#.*coding[:=]", lines[line])):
        line += 1
    return line


__all__ = ["Directive", "KernelDef", "KernelFile", "SourceLoop", "TaskLink", "analyze", "directive_insert_line",
           "link_task", "parse_directive", "suggest_tasks"]
