"""`accelopt memory ...`: look at, curate and share the optimization memory from a terminal.

`add_memory_parser(subparsers)` adds the command to accelopt's parser; `run(args)` executes it.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sqlite3
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..hardware import available_hardware
from . import transfer
from .experiences import Experience
from .schema import SchemaError
from .store import Memory
from .transfer import KINDS, ImportFormatError

EXIT_BAD_INPUT = 2  # as in accelopt_core.cli
SUMMARY_WIDTH = 60


class MemoryCliError(Exception):
    """Bad input (an unknown id, an unreadable file): one line on stderr, exit code 2."""


def add_memory_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register `memory` and its subcommands; each takes `--db` so a team file can be inspected in place."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--db", help="memory database (default: $ACCELOPT_MEMORY_DB, else the user data dir)")
    memory = subparsers.add_parser("memory", help="inspect, curate and share the optimization memory")
    sub = memory.add_subparsers(dest="memory_command", required=True)

    listing = sub.add_parser("list", parents=[common], help="list the kept experiences")
    listing.add_argument("--task", help="only this task or task family")
    listing.add_argument("--hardware", help=f"only this hardware ({', '.join(available_hardware())})")
    listing.add_argument("--json", action="store_true", help="print a JSON array")

    show = sub.add_parser("show", parents=[common], help="one experience with its summary and kernel diff")
    show.add_argument("id", type=int)
    show.add_argument("--json", action="store_true", help="print one JSON object")

    export = sub.add_parser("export", parents=[common], help="write experiences to a JSON-lines file")
    export.add_argument("file")
    export.add_argument("--what", nargs="+", choices=KINDS, default=["experiences"], help="what to export")

    imported = sub.add_parser("import", parents=[common], help="merge a JSON-lines file into the memory")
    imported.add_argument("file")

    pin = sub.add_parser("pin", parents=[common], help="always show an experience first and never drop it")
    pin.add_argument("id", type=int)
    pin.add_argument("--unpin", action="store_true", help="remove the pin instead")

    delete = sub.add_parser("delete", parents=[common], help="forget one experience")
    delete.add_argument("id", type=int)

    memory.set_defaults(func=run)
    return memory


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns as wide as their widest cell: readable without any dependency."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=True)]
    lines = [[str(cell).ljust(width) for cell, width in zip(row, widths, strict=True)] for row in [headers, *rows]]
    return "\n".join("  ".join(line).rstrip() for line in lines)


def first_line(text: str, width: int = SUMMARY_WIDTH) -> str:
    """A summary cell: its first line, cut to fit a terminal row."""
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= width else line[: width - 3] + "..."


def experience_row(exp: Experience) -> list[str]:
    return [str(exp.id), "*" if exp.pinned else "", "+" if exp.positive else "-", f"{exp.speedup:.2f}x",
            exp.task, exp.task_family, exp.hardware, exp.label, first_line(exp.summary)]


def cmd_list(memory: Memory, args: argparse.Namespace) -> int:
    experiences = memory.list_experiences(args.task, args.hardware)
    if args.json:
        print(json.dumps([exp.to_dict() for exp in experiences], indent=2))
    elif not experiences:
        print("no experiences")
    else:
        headers = ["ID", "PIN", "+/-", "SPEEDUP", "TASK", "FAMILY", "HARDWARE", "ORIGIN", "SUMMARY"]
        print(format_table(headers, [experience_row(exp) for exp in experiences]))
    return 0


def require_experience(memory: Memory, experience_id: int) -> Experience:
    exp = memory.get_experience(experience_id)
    if exp is None:
        raise MemoryCliError(f"no experience with id {experience_id}")
    return exp


def kernel_diff(slow: str | None, fast: str | None) -> str:
    """What the rewrite changed, as a unified diff; empty when a source is not in this memory."""
    if slow is None or fast is None:
        return ""
    return "".join(difflib.unified_diff(slow.splitlines(keepends=True), fast.splitlines(keepends=True),
                                        "slow kernel", "fast kernel"))


def describe(exp: Experience, diff: str) -> str:
    kind = "positive" if exp.positive else "negative (a warning)"
    head = [f"experience {exp.id}: {exp.speedup:.3f}x, {kind}{', pinned' if exp.pinned else ''}",
            f"task:     {exp.task} (family {exp.task_family}) on {exp.hardware}, {exp.backend}",
            f"origin:   {exp.label or '-'}   search: {exp.search_id if exp.search_id is not None else '-'}",
            *(["imported: from a shared file; its speedup was measured elsewhere, not here"] if exp.imported else []),
            f"kernels:  {exp.slow_hash[:12]} -> {exp.fast_hash[:12]}",
            f"created:  {exp.created}", "", "plan:", exp.plan or "-", "", "summary:", exp.summary or "-"]
    return "\n".join(head + (["", diff.rstrip("\n")] if diff else []))


def cmd_show(memory: Memory, args: argparse.Namespace) -> int:
    exp = require_experience(memory, args.id)
    slow, fast = memory.kernel_source(exp.slow_hash), memory.kernel_source(exp.fast_hash)
    if args.json:
        print(json.dumps({**exp.to_dict(), "slow_source": slow, "fast_source": fast}, indent=2))
    else:
        print(describe(exp, kernel_diff(slow, fast)))
    return 0


def cmd_export(memory: Memory, args: argparse.Namespace) -> int:
    count = transfer.export_jsonl(memory, args.file, what=args.what)
    print(f"exported {count} record{'s' * (count != 1)} to {args.file}")
    return 0


def cmd_import(memory: Memory, args: argparse.Namespace) -> int:
    notes: list[str] = []
    refusals: list[str] = []
    count = transfer.import_jsonl(memory, args.file, notes, refusals)
    print(f"imported {count} new record{'s' * (count != 1)} from {args.file} (lessons marked as imported)")
    for note in notes:
        print(note)
    for refusal in refusals:  # the rest of the file is in; these records are not (exit 2: fix the file)
        print(f"accelopt: refused {refusal}", file=sys.stderr)
    return 2 if refusals else 0


def cmd_pin(memory: Memory, args: argparse.Namespace) -> int:
    if not memory.pin(args.id, not args.unpin):
        raise MemoryCliError(f"no experience with id {args.id}")
    print(f"{'unpinned' if args.unpin else 'pinned'} experience {args.id}")
    return 0


def cmd_delete(memory: Memory, args: argparse.Namespace) -> int:
    if not memory.delete(args.id):
        raise MemoryCliError(f"no experience with id {args.id}")
    print(f"deleted experience {args.id}")
    return 0


COMMANDS: dict[str, Callable[[Memory, argparse.Namespace], int]] = {
    "list": cmd_list, "show": cmd_show, "export": cmd_export, "import": cmd_import, "pin": cmd_pin,
    "delete": cmd_delete}


def run(args: argparse.Namespace) -> int:
    """Run one `memory` subcommand; bad input is one line on stderr and exit code 2, like the rest of accelopt."""
    try:
        with Memory(args.db) as memory:
            return COMMANDS[args.memory_command](memory, args)
    except (MemoryCliError, ImportFormatError, SchemaError) as exc:
        message = str(exc)
    except OSError as exc:
        message = f"{exc.filename or args.db}: {exc.strerror}"
    except sqlite3.DatabaseError as exc:
        message = f"cannot use the memory database: {exc}"
    print(f"accelopt: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT
