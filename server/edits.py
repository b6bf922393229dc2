"""Turning "the file should now read like this" into the smallest set of whole-line replacements, so
an editor's undo, cursor and diff preview see only what a rewrite really changed."""

from __future__ import annotations

import difflib
from dataclasses import dataclass


@dataclass(frozen=True)
class LineEdit:
    """Replace lines [start, end) (0-based) with `text` (which ends with a newline unless it is the
    file's unterminated last line). `end == line count` reaches the end of the document."""

    start: int
    end: int
    text: str


def line_edits(old: str, new: str) -> list[LineEdit]:
    """The hunks that turn `old` into `new`, in document order, never overlapping."""
    before = old.splitlines(keepends=True)
    after = new.splitlines(keepends=True)
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    edits = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag != "equal":
            edits.append(LineEdit(i1, i2, "".join(after[j1:j2])))
    return edits


def apply_line_edits(old: str, edits: list[LineEdit]) -> str:
    """What a client does with the edits (used by tests and to double-check before offering them)."""
    lines = old.splitlines(keepends=True)
    for edit in sorted(edits, key=lambda e: e.start, reverse=True):
        lines[edit.start:edit.end] = [edit.text] if edit.text else []
    return "".join(lines)


def line_map(old: str, new: str) -> dict[int, int]:
    """For lines (1-based) of `old` that survive unchanged in `new`, their line number in `new`: lets a
    profile of an earlier text keep pointing at the right lines while the user edits."""
    matcher = difflib.SequenceMatcher(a=old.splitlines(), b=new.splitlines(), autojunk=False)
    mapping: dict[int, int] = {}
    for block in matcher.get_matching_blocks():
        for offset in range(block.size):
            mapping[block.a + offset + 1] = block.b + offset + 1
    return mapping
