"""The memory across processes: the language server and the CLI writing at once, and a search killed
with SIGKILL in the middle of its work."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from accelopt_core.memory import Memory

ROOT = Path(__file__).resolve().parents[2]

WRITER = textwrap.dedent("""
    import os, sys, time
    from accelopt_core.memory import Memory

    path, name, go, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    with Memory(path) as memory:
        search = memory.start_search(name, "trn1", {}, None, "test")
        while not os.path.exists(go):
            time.sleep(0.001)
        for i in range(count):
            digest = memory.add_kernel(f"{name}-{i}")
            memory.record_candidate(search, i // 10, digest, None, "plan", "llm", {"i": i}, "correct")
            memory.put_profile(digest, name, "trn1", "simulator", "check", {"i": i})
            memory.add_experience(name, "shared", "trn1", "slow", digest, 1.5 + i / 1000)
    print(search)
""")

KILLED = textwrap.dedent("""
    import sys, time
    from accelopt_core.memory import Memory

    path, count = sys.argv[1], int(sys.argv[2])
    memory = Memory(path)
    search = memory.start_search("silu", "trn1", {"beam_width": 2}, None, "rules")
    for i in range(count):
        memory.record_candidate(search, 0, memory.add_kernel(f"k{i}"), None, f"plan {i}", "rule:x",
                                {"latency_ms": i}, "correct")
    memory.finish_iteration(search, 0, ["k0", "k1"])
    memory.add_experience("silu", "silu", "trn1", "k0", "k1", 2.0, summary="last write before the kill")
    print(search, flush=True)
    time.sleep(600)
""")

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def python(code: str, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=ROOT)


def test_two_processes_write_at_once(db_path: Path, tmp_path: Path) -> None:
    count, go = 120, tmp_path / "go"
    Memory(db_path).close()
    writers = [python(WRITER, str(db_path), name, str(go), str(count)) for name in ("server", "cli")]
    go.touch()
    outputs = [w.communicate(timeout=300) for w in writers]
    for writer, (_, err) in zip(writers, outputs, strict=True):
        assert writer.returncode == 0, err
        assert "locked" not in err
    with Memory(db_path) as memory:
        for out, _ in outputs:
            state = memory.search_state(int(out))
            assert [c.result for c in state.candidates] == [{"i": i} for i in range(count)]  # nothing lost
        assert memory.db["kernels"].count == 2 * count
        assert memory.db["profiles"].count == 2 * count
        kept = memory.list_experiences()
        assert sorted(e.speedup for e in kept) == sorted(1.5 + i / 1000 for i in range(count - 8, count)
                                                         for _ in range(2))


def test_sigkill_loses_nothing_recorded(db_path: Path) -> None:
    count = 25
    child = python(KILLED, str(db_path), str(count))
    assert child.stdout is not None
    search = int(child.stdout.readline())
    child.send_signal(signal.SIGKILL)
    child.communicate(timeout=60)
    assert child.returncode == -signal.SIGKILL
    with Memory(db_path) as memory:
        state = memory.search_state(search)
        assert [c.plan for c in state.candidates] == [f"plan {i}" for i in range(count)]
        assert (state.config, state.iteration, state.beam) == ({"beam_width": 2}, 0, ["k0", "k1"])
        assert [e.summary for e in memory.list_experiences()] == ["last write before the kill"]
        assert memory.kernel_source(state.candidates[-1].kernel_hash) == f"k{count - 1}"


def test_threads_share_one_memory(memory: Memory) -> None:
    """The language server profiles off its main thread with the same Memory object."""
    def write(prefix: str) -> None:
        for i in range(50):
            memory.put_profile(memory.add_kernel(f"{prefix}{i}"), "silu", "trn1", "simulator", "check", {"i": i})

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(write, "abcd"))
    assert memory.db["profiles"].count == 200
