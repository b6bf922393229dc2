"""`accelopt memory ...` through a parser built the way accelopt_core/cli.py builds its own."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from accelopt_core.memory import Memory
from accelopt_core.memory.cli import add_memory_parser, format_table, run

SLOW = "x = 1\ny = 2\n"
FAST = "x = 1\n"


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="accelopt")
    add_memory_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["memory", *argv])


def main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    args = parse(*argv)
    code = args.func(args)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def db(db_path: Path) -> str:
    with Memory(db_path) as memory:
        slow, fast = memory.add_kernel(SLOW), memory.add_kernel(FAST)
        memory.add_experience("silu", "silu", "trn1", slow, fast, 1.5, summary="dropped dead code\nmore", origin="llm")
        memory.add_experience("softmax", "softmax", "trn2", fast, slow, 0.5, summary="dead code costs time")
    return str(db_path)


def test_subcommands_take_db(db: str) -> None:
    for argv in (["list"], ["show", "1"], ["export", "f"], ["import", "f"], ["pin", "1"], ["delete", "1"]):
        assert parse(*argv, "--db", db).db == db


def test_parser_dispatches_to_run() -> None:
    assert parse("list").func is run


def test_format_table_aligns_columns() -> None:
    assert format_table(["A", "BB"], [["long", "x"]]) == "A     BB\nlong  x"


def test_list_prints_a_table(capsys: pytest.CaptureFixture[str], db: str) -> None:
    code, out, _ = main(capsys, "list", "--db", db)
    assert code == 0
    header, first, second = out.splitlines()
    assert header.split()[:4] == ["ID", "PIN", "+/-", "SPEEDUP"]
    assert "1.50x" in first and "dropped dead code" in first and "more" not in first
    assert "0.50x" in second


def test_list_json(capsys: pytest.CaptureFixture[str], db: str) -> None:
    code, out, _ = main(capsys, "list", "--db", db, "--json")
    assert code == 0
    assert [e["task"] for e in json.loads(out)] == ["silu", "softmax"]


def test_list_filters(capsys: pytest.CaptureFixture[str], db: str) -> None:
    _, out, _ = main(capsys, "list", "--db", db, "--json", "--hardware", "trn2")
    assert [e["task"] for e in json.loads(out)] == ["softmax"]
    _, out, _ = main(capsys, "list", "--db", db, "--json", "--task", "silu")
    assert [e["task"] for e in json.loads(out)] == ["silu"]


def test_list_empty(capsys: pytest.CaptureFixture[str], db_path: Path) -> None:
    assert main(capsys, "list", "--db", str(db_path))[1] == "no experiences\n"


def test_list_uses_default_db(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                              db: str) -> None:
    monkeypatch.setenv("ACCELOPT_MEMORY_DB", db)
    assert "1.50x" in main(capsys, "list")[1]


def test_show_prints_summary_and_diff(capsys: pytest.CaptureFixture[str], db: str) -> None:
    code, out, _ = main(capsys, "show", "1", "--db", db)
    assert code == 0
    assert "1.500x, positive" in out and "dropped dead code" in out
    assert "-y = 2" in out


def test_show_json(capsys: pytest.CaptureFixture[str], db: str) -> None:
    _, out, _ = main(capsys, "show", "2", "--db", db, "--json")
    shown = json.loads(out)
    assert (shown["positive"], shown["slow_source"], shown["fast_source"]) == (False, FAST, SLOW)


def test_show_unknown_id(capsys: pytest.CaptureFixture[str], db: str) -> None:
    code, out, err = main(capsys, "show", "99", "--db", db)
    assert (code, out, err) == (2, "", "accelopt: no experience with id 99\n")


def test_export_then_import(capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path) -> None:
    target = str(tmp_path / "team.jsonl")
    assert main(capsys, "export", target, "--db", db)[:2] == (0, f"exported 2 records to {target}\n")
    fresh = str(tmp_path / "fresh.db")
    # the lessons are labelled: their speedups were measured by the other memory
    assert main(capsys, "import", target, "--db", fresh)[:2] == (
        0, f"imported 2 new records from {target} (lessons marked as imported)\n")
    with Memory(fresh) as memory:
        assert len(memory.list_experiences()) == 2
    code, listed, _ = main(capsys, "list", "--db", fresh)
    assert code == 0 and listed.count("(imported)") == 2


def test_import_says_that_cached_profiles_stay_out(capsys: pytest.CaptureFixture[str], db: str,
                                                   tmp_path: Path) -> None:
    with Memory(db) as memory:
        memory.put_profile(memory.add_kernel("def kernel(x):\n    return x\n"), "silu", "trn1", "simulator", "check",
                           {"latency_ms": 1e-06, "correct": True})
    target = str(tmp_path / "profiles.jsonl")
    main(capsys, "export", target, "--what", "profiles", "--db", db)
    code, out, _ = main(capsys, "import", target, "--db", str(tmp_path / "fresh.db"))
    assert code == 0 and "1 profile record not imported: cached profiles are verdicts" in out


def test_import_missing_file(capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path) -> None:
    code, _, err = main(capsys, "import", str(tmp_path / "nope.jsonl"), "--db", db)
    assert code == 2 and err.startswith("accelopt: ") and "nope.jsonl" in err


def test_import_bad_file(capsys: pytest.CaptureFixture[str], db: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{oops\n")
    code, _, err = main(capsys, "import", str(bad), "--db", db)
    assert code == 2 and "line 1" in err


def test_pin_and_unpin(capsys: pytest.CaptureFixture[str], db: str) -> None:
    assert main(capsys, "pin", "1", "--db", db)[:2] == (0, "pinned experience 1\n")
    with Memory(db) as memory:
        assert memory.get_experience(1).pinned  # type: ignore[union-attr]
    assert main(capsys, "pin", "1", "--unpin", "--db", db)[:2] == (0, "unpinned experience 1\n")
    with Memory(db) as memory:
        assert not memory.get_experience(1).pinned  # type: ignore[union-attr]


def test_pin_unknown(capsys: pytest.CaptureFixture[str], db: str) -> None:
    assert main(capsys, "pin", "99", "--db", db)[0] == 2


def test_delete(capsys: pytest.CaptureFixture[str], db: str) -> None:
    assert main(capsys, "delete", "1", "--db", db)[:2] == (0, "deleted experience 1\n")
    with Memory(db) as memory:
        assert memory.get_experience(1) is None


def test_delete_unknown(capsys: pytest.CaptureFixture[str], db: str) -> None:
    assert main(capsys, "delete", "99", "--db", db)[0] == 2


def test_not_a_database(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    code, _, err = main(capsys, "list", "--db", str(junk))
    assert code == 2 and "cannot use the memory database" in err
