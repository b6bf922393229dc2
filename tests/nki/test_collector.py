"""The cyclic collector is paused while a trace is built, and what was built skips its young generations."""

from __future__ import annotations

import gc
import threading

from accelopt_core.nki.trace import collector_paused


class Node:
    """A tracked object, as the trace's instructions and accesses are."""


def test_paused_inside_and_resumed_after() -> None:
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_what_was_built_goes_to_the_oldest_generation() -> None:
    with collector_paused():
        built = [Node() for _ in range(5000)]
    assert gc.get_count()[0] < 100  # not 5000 objects waiting for a young-generation pass
    assert len(built) == 5000


def test_objects_frozen_by_others_stay_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector_paused():
            [Node() for _ in range(100)]
        assert gc.get_freeze_count() >= frozen
    finally:
        gc.unfreeze()


def test_nested_and_concurrent_pauses_resume_once() -> None:
    entered, inner_done = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            entered.set()
            inner_done.wait(5)

    with collector_paused():
        thread = threading.Thread(target=other)
        thread.start()
        assert entered.wait(5)
        with collector_paused():
            pass
        assert not gc.isenabled()
    assert not gc.isenabled()  # the other thread's pause is still on
    inner_done.set()
    thread.join()
    assert gc.isenabled()
