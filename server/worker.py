"""A worker process of the language server (`python -m server.worker`).

The server hands it profiles and searches as length-prefixed pickles on stdin and reads events and
results from stdout. Keeping this work out of the server process means a reference that eats memory,
a search that runs for an hour, or a crash in native code never stalls the editor; the kernels
themselves run one level further down, in the engine's sandbox. `cancel` messages set the job's
event, which kills its sandboxed child within a quarter of a second.
"""

from __future__ import annotations

import logging
import os
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import IO, Any

from accelopt_core.blas import single_threaded_blas
from accelopt_core.config import LLMSettings
from accelopt_core.editor_api import EditorEngine, LLMRequest, OptimizeReply, OptimizeRequest, message_from_dict
from accelopt_core.engine import BuiltSearch, SearchSettings, build_search, task_family
from accelopt_core.search import SearchError
from accelopt_core.tasks import TaskError

log = logging.getLogger(__name__)

HEADER = 4


def read_frame(stream: IO[bytes]) -> Any | None:
    """One message, or None at end of stream."""
    header = stream.read(HEADER)
    if len(header) < HEADER:
        return None
    size = int.from_bytes(header, "big")
    body = stream.read(size)
    if len(body) < size:
        return None
    return pickle.loads(body)


def encode_frame(message: Any) -> bytes:
    body = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    return len(body).to_bytes(HEADER, "big") + body


def rss_mb() -> float:
    """This process's resident memory, for the server's decision to recycle a worker."""
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return 0.0


# --- the jobs -------------------------------------------------------------------------------------

engine = EditorEngine()  # this process's memories, profilers and quick-fix rules


def llm_settings(llm: LLMRequest, notes: list[str]) -> LLMSettings | None:
    """The LLM planner's settings when the editor's settings name an endpoint or a model (an explicit opt-in:
    it costs money). The API key is the one the editor passed as a secret (initializationOptions), else the
    environment's or the engine's config file's, never one from settings; `budget_usd` caps the spend."""
    if not (llm.endpoint or llm.model):
        return None
    budget = {"max_usd": llm.budget_usd} if llm.budget_usd else None
    try:
        return LLMSettings.load(base_url=llm.endpoint, model=llm.model, api_key=llm.api_key,
                                budget=budget)
    except Exception as exc:  # a bad config file
        notes.append(f"LLM planner not used: {type(exc).__name__}: {exc}")
        return None


def search_settings(request: OptimizeRequest, notes: list[str]) -> SearchSettings:
    """The search the editor's settings ask for: the agents the factories they name make ("module:callable" /
    "file.py:callable"), by default the rule-based optimizer, with the LLM planner beside it when one is
    configured."""
    llm = None if request.agents else llm_settings(request.llm or LLMRequest(), notes)
    return SearchSettings(request.preset, workers=request.workers, profiler=request.profiler,
                          planner="both" if llm is not None else "rules", llm=llm,
                          agent_specs=tuple(request.agents))


def optimize_job(request: OptimizeRequest, cancel: threading.Event, emit: Callable[[Any], None]) -> OptimizeReply:
    """The search's result, or why the search could not run."""
    notes: list[str] = []
    built: BuiltSearch | None = None
    try:
        built = build_search(search_settings(request, notes), engine.memory(request.memory_db), emit, cancel)
        if built.agents.missing:
            notes.append(f"LLM planner not used: missing {', '.join(built.agents.missing)}")
        family = request.family or task_family(request.task)
        return OptimizeReply(built.search.run(request.source, request.task, request.hardware, family,
                                              kernel_name=request.kernel_name, kernel_label=request.label),
                             notes=tuple(notes))
    except (SearchError, TaskError, RuntimeError, ValueError, ImportError) as exc:
        return OptimizeReply(error=str(exc), notes=tuple(notes))
    finally:
        if built is not None:
            built.close()


def answer(request: Any, cancel: threading.Event, emit: Callable[[Any], None]) -> Any:
    """The reply to one request: the engine's editor interface answers all but the search."""
    handler = engine.handler(request)
    if handler is not None:
        return handler(request, cancel)
    if isinstance(request, OptimizeRequest):
        return optimize_job(request, cancel, emit)
    raise TypeError(f"the worker does not answer {type(request).__name__}")


# --- the loop -------------------------------------------------------------------------------------


class Worker:
    """Reads requests on the main thread; each job runs on its own thread so cancels get through."""

    def __init__(self, out: IO[bytes]):
        self.out = out
        self.lock = threading.Lock()
        self.cancels: dict[int, threading.Event] = {}
        self.threads: list[threading.Thread] = []

    def send(self, message: dict[str, Any]) -> None:
        try:
            data = encode_frame(message)
        except Exception as exc:  # something unpicklable in a result: report it instead of dying
            data = encode_frame({"id": message.get("id"), "type": "failed", "error": f"unpicklable result: {exc}"})
        with self.lock:
            self.out.write(data)
            self.out.flush()

    def run(self, message: dict[str, Any], cancel: threading.Event) -> None:
        job_id = message["id"]

        def emit(event: Any) -> None:
            self.send({"id": job_id, "type": "event", "value": event})

        try:
            reply = answer(message_from_dict(message["request"]), cancel, emit)
            self.send({"id": job_id, "type": "done", "value": reply.to_dict(), "rss_mb": rss_mb()})
        except BaseException:
            self.send({"id": job_id, "type": "failed", "error": traceback.format_exc(), "rss_mb": rss_mb()})
        finally:
            self.cancels.pop(job_id, None)

    def stop_all(self, wait: float = 3.0) -> None:
        """Cancel every job (their sandboxes die with them) and give them a moment to report."""
        for event in list(self.cancels.values()):
            event.set()
        for thread in self.threads:
            thread.join(timeout=wait)

    def serve(self, stream: IO[bytes]) -> None:
        while True:
            message = read_frame(stream)
            if message is None or message.get("op") == "shutdown":
                break
            if message.get("op") == "cancel":
                event = self.cancels.get(message["id"])
                if event is not None:
                    event.set()
                continue
            cancel = threading.Event()
            self.cancels[message["id"]] = cancel
            thread = threading.Thread(target=self.run, args=(message, cancel), daemon=True,
                                      name=f"job-{message['id']}")
            self.threads = [t for t in self.threads if t.is_alive()] + [thread]
            thread.start()
        self.stop_all()


def main() -> None:
    # The protocol owns the real stdout; anything else printing (a kernel's reference, a library)
    # goes to stderr instead of corrupting a frame.
    protocol_out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    single_threaded_blas()
    worker = Worker(protocol_out)

    def terminate(signum: int, frame: Any) -> None:
        worker.stop_all(wait=2.0)
        os._exit(0)

    signal.signal(signal.SIGTERM, terminate)
    worker.serve(sys.stdin.buffer)
    os._exit(0)  # job threads are daemons; do not wait on a stuck reference at exit


if __name__ == "__main__":
    main()
