"""Cheap checks on a drafted kernel before it costs a sandboxed run: does it parse and compile, is there
a kernel, does it keep the parent's signature, does it keep its precision. A failure is a message the
fixer can act on (with the line when there is one)."""

from __future__ import annotations

import ast
import re

from ...nki.loader import KernelLoadError, check_source, parse_source

FILENAME = "candidate.py"
_LOW_PRECISION = re.compile(r"\b(bfloat16|float16|fp16|bf16|float8\w*|fp8\w*|tfloat32)\b")


def kernel_params(source: str) -> tuple[str, list[str]] | None:
    """The kernel function's name and parameter names, or None when there is no recognisable kernel."""
    try:
        name = check_source(source, FILENAME)
        tree = parse_source(source, FILENAME)
    except (KernelLoadError, SyntaxError):
        return None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            args = node.args
            return name, [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
    return None


def static_problem(source: str, parent_source: str) -> str | None:
    """Why `source` cannot be a rewrite of `parent_source`, or None when it may go to the checker."""
    try:
        tree = parse_source(source, FILENAME)
    except SyntaxError as exc:
        return f"{FILENAME}:{exc.lineno}: syntax error: {exc.msg}"
    try:
        compile(tree, FILENAME, "exec")
    except SyntaxError as exc:
        return f"{FILENAME}:{exc.lineno}: {exc.msg}"
    except ValueError as exc:
        return f"{FILENAME}: does not compile: {exc}"
    try:
        check_source(source, FILENAME)
    except KernelLoadError as exc:
        return str(exc)
    before, after = kernel_params(parent_source), kernel_params(source)
    if before is not None and after is not None and before[1] != after[1]:
        return (f"the kernel's parameters changed from ({', '.join(before[1])}) to ({', '.join(after[1])}); "
                "keep the original signature: the checker calls it with the task's inputs in that order")
    lowered = sorted(set(_LOW_PRECISION.findall(source)) - set(_LOW_PRECISION.findall(parent_source)))
    if lowered:
        return (f"the kernel uses lower precision ({', '.join(lowered)}) than the original; rewrites must keep "
                "the original dtypes")
    return None


def same_program(a: str, b: str) -> bool:
    """True when two sources differ only in comments and formatting."""
    try:
        return ast.dump(parse_source(a)) == ast.dump(parse_source(b))
    except SyntaxError:
        return a == b
