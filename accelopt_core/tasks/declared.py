"""What a reference declares about itself, read from its text without running it: its task family and
its size variants. The language server decides how to check and where to look in memory before any
reference is imported (it imports none in its own process), and the search decides the same way."""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass

from ..nki.loader import parse_source


@dataclass(frozen=True)
class Declared:
    """`FAMILY` (None when the reference names none: its family is then the task's name) and the keys
    of `VARIANTS`, as literals in the reference's top level."""

    family: str | None = None
    variants: tuple[str, ...] = ()


def _constant_assignments(tree: ast.Module) -> dict[str, ast.expr]:
    """Top-level `NAME = value` assignments, the last one of each name."""
    values: dict[str, ast.expr] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    values[target.id] = node.value
    return values


def read_declared(reference: str) -> Declared:
    """The declarations of the reference file at `reference`; nothing for one that cannot be read."""
    try:
        with open(reference, encoding="utf-8") as handle:
            tree = parse_source(handle.read(), reference)
    except (OSError, SyntaxError, ValueError):
        return Declared()
    values = _constant_assignments(tree)
    family = values.get("FAMILY")
    variants = values.get("VARIANTS")
    return Declared(
        family.value if isinstance(family, ast.Constant) and isinstance(family.value, str) else None,
        tuple(k.value for k in variants.keys if isinstance(k, ast.Constant) and isinstance(k.value, str))
        if isinstance(variants, ast.Dict) else ())


def default_task_name(reference: str) -> str:
    """The name a reference file gives its task: the file name without `.py` and a `_ref` suffix."""
    return os.path.splitext(os.path.basename(reference))[0].removesuffix("_ref")


def split_reference(text: str) -> tuple[str, str | None]:
    """A reference named with a size variant, `ref.py:small` (as a named task is, `silu:small`), as the
    file and the variant; a path that is a file as it stands (one with a colon in its name) has none."""
    path, colon, variant = text.rpartition(":")
    if not colon or os.path.isfile(text) or not path or not variant or os.sep in variant:
        return text, None
    return path, variant
