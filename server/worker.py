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
import time
import traceback
from collections.abc import Callable
from typing import IO, Any

from accelopt_core.blas import single_threaded_blas
from accelopt_core.config import LLMSettings
from accelopt_core.engine import (
    BuiltSearch,
    ProfilerSettings,
    SearchSettings,
    build_search,
    default_rules,
    load_factories,
    make_profiler,
    profile_cache,
    quick_fixes,
    task_family,
)
from accelopt_core.memory import Memory
from accelopt_core.profiling import Profiler, ProfileResult
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

_memories: dict[str, Memory] = {}
_profilers: dict[tuple[ProfilerSettings, str | None], Profiler] = {}
_rules: dict[tuple[str, ...], list[Any]] = {}


def _memory(path: str | None) -> Memory | None:
    if path is not None and path not in _memories:
        _memories[path] = Memory(path)
    return _memories.get(path) if path is not None else None


def _profiler(settings: ProfilerSettings, memory_db: str | None) -> Profiler:
    """Profilers remember input shapes per task, so one is kept per settings and memory (the settings hold
    the service token: a token approved later must not meet a profiler made without it)."""
    key = (settings, memory_db)
    if key not in _profilers:
        if len(_profilers) >= 16:
            _profilers.clear()
        _profilers[key] = make_profiler(settings, profile_cache(_memory(memory_db)))
    return _profilers[key]


def _profile(payload: dict[str, Any], source: str, check: bool, cancel: threading.Event) -> ProfileResult:
    """`source` profiled as the payload's kernel would be: its task, hardware, file, function and profiler."""
    return _profiler(payload["profiler"], payload.get("memory_db")).profile(
        source, payload["task"], payload["hardware"], check=check, kernel_label=payload.get("label", "kernel.py"),
        kernel_name=payload.get("kernel_name"), cancel=cancel)


def profile_job(payload: dict[str, Any], cancel: threading.Event, emit: Callable[[Any], None]) -> dict[str, Any]:
    """{"result": ProfileResult} or {"task_error": why the task itself could not be used}."""
    try:
        result = _profile(payload, payload["source"], payload["check"], cancel)
    except TaskError as exc:
        return {"task_error": str(exc)}
    except Exception as exc:  # the reference raised while drawing inputs or computing outputs
        return {"task_error": f"{type(exc).__name__}: {exc}"}
    return {"result": result}


def llm_settings(llm: dict[str, Any], notes: list[str]) -> LLMSettings | None:
    """The LLM planner's settings when the editor's settings name an endpoint or a model (an explicit opt-in:
    it costs money). The API key is the one the editor passed as a secret (initializationOptions), else the
    environment's or the engine's config file's, never one from settings; `budget_usd` caps the spend."""
    if not (llm.get("endpoint") or llm.get("model")):
        return None
    budget = {"max_usd": llm["budget_usd"]} if llm.get("budget_usd") else None
    try:
        return LLMSettings.load(base_url=llm.get("endpoint"), model=llm.get("model"), api_key=llm.get("api_key"),
                                budget=budget)
    except Exception as exc:  # a bad config file
        notes.append(f"LLM planner not used: {type(exc).__name__}: {exc}")
        return None


def search_settings(payload: dict[str, Any], notes: list[str]) -> SearchSettings:
    """The search the editor's settings ask for: the agents the factories they name make ("module:callable" /
    "file.py:callable"), by default the rule-based optimizer, with the LLM planner beside it when one is
    configured."""
    llm = None if payload.get("agents") else llm_settings(payload.get("llm") or {}, notes)
    return SearchSettings(payload["preset"], workers=payload.get("workers"), profiler=payload["profiler"],
                          planner="both" if llm is not None else "rules", llm=llm,
                          agent_specs=tuple(payload.get("agents") or ()))


def optimize_job(payload: dict[str, Any], cancel: threading.Event, emit: Callable[[Any], None]) -> dict[str, Any]:
    """{"search": SearchResult} or {"search_error": why the search could not run}."""
    notes: list[str] = []
    built: BuiltSearch | None = None
    try:
        built = build_search(search_settings(payload, notes), _memory(payload.get("memory_db")), emit, cancel)
        if built.agents.missing:
            notes.append(f"LLM planner not used: missing {', '.join(built.agents.missing)}")
        task = payload["task"]
        family = payload.get("family") or task_family(task)
        return {"search": built.search.run(payload["source"], task, payload["hardware"], family,
                                           kernel_name=payload.get("kernel_name")),
                "notes": notes}
    except (SearchError, TaskError, RuntimeError, ValueError, ImportError) as exc:
        return {"search_error": str(exc), "notes": notes}
    finally:
        if built is not None:
            built.close()


def _quick_fix_rules(specs: tuple[str, ...]) -> list[Any]:
    """The rules the settings name, else the engine's default rules; loaded once per process."""
    if specs not in _rules:
        try:
            _rules[specs] = load_factories(specs) if specs else default_rules()
        except Exception:
            log.exception("loading the quick-fix rules %s failed", specs)
            _rules[specs] = []
    return _rules[specs]


def fixes_job(payload: dict[str, Any], cancel: threading.Event, emit: Callable[[Any], None]) -> dict[str, Any]:
    """{"fixes": [QuickFix]}: the rules' rewrites of this kernel that the model times faster, checked while
    `seconds` allow, each with its source."""
    rules = _quick_fix_rules(tuple(payload.get("specs") or ()))
    def evaluate(source: str, check: bool) -> ProfileResult:
        return _profile(payload, source, check, cancel)

    deadline = time.monotonic() + float(payload.get("seconds", 120.0))
    try:
        return {"fixes": quick_fixes(rules, payload["source"], payload["profile"], payload["limit"], evaluate,
                                     deadline, cancel)}
    except TaskError:
        return {"fixes": []}  # the task is reported by the profile job itself


def migrate_job(payload: dict[str, Any], cancel: threading.Event, emit: Callable[[Any], None]) -> dict[str, Any]:
    """{"offer": MigrationOffer}: the legacy kernel migrated to NKI 0.8, both versions run on the same seeds.
    libcst loads only here, for a legacy kernel, not when the worker starts."""
    from accelopt_core.migrate import offer_migration

    try:
        return {"offer": offer_migration(payload["source"], payload["task"],
                                         _profiler(payload["profiler"], payload.get("memory_db")),
                                         kernel_name=payload.get("kernel_name"))}
    except TaskError:
        return {"offer": None}  # the task is reported by the profile job itself


JOBS: dict[str, Callable[[dict[str, Any], threading.Event, Callable[[Any], None]], dict[str, Any]]] = {
    "profile": profile_job,
    "optimize": optimize_job,
    "fixes": fixes_job,
    "migrate": migrate_job,
}


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
            value = JOBS[message["op"]](message["payload"], cancel, emit)
            self.send({"id": job_id, "type": "done", "value": value, "rss_mb": rss_mb()})
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
