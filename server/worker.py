"""A worker process of the language server (`python -m server.worker`).

The server hands it profiles and searches as length-prefixed pickles on stdin and reads events and
results from stdout. Keeping this work out of the server process means a reference that eats memory,
a search that runs for an hour, or a crash in native code never stalls the editor; the kernels
themselves run one level further down, in the engine's sandbox. `cancel` messages set the job's
event, which kills its sandboxed child within a quarter of a second.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import pickle
import signal
import sys
import threading
import traceback
from collections.abc import Callable
from typing import IO, Any

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

_memories: dict[str, Any] = {}
_profilers: dict[tuple[Any, ...], Any] = {}


def _memory(path: str) -> Any:
    from accelopt_core.memory import Memory

    if path not in _memories:
        _memories[path] = Memory(path)
    return _memories[path]


def _cache(payload: dict[str, Any]) -> Any:
    from accelopt_core.memory import ProfileCache

    from .cache import DigestedCache

    inner: Any = ProfileCache(_memory(payload["memory_db"])) if payload.get("memory_db") else {}
    return DigestedCache(inner, payload.get("digest", "-"))


class CachingProfiler:
    """Puts the memory's profile cache in front of a backend that has none of its own (the remote one)."""

    def __init__(self, inner: Any, cache: Any, check_variant: str | None):
        self.inner = inner
        self.cache = cache
        self.check_variant = check_variant
        self.backend = inner.backend

    def profile(self, kernel_source: str, task: Any, hardware: str = "trn1", check: bool = True,
                **options: Any) -> Any:
        from accelopt_core.profiling.profiler import kernel_hash

        key = (kernel_hash(kernel_source), task.key, self.check_variant, hardware, self.backend, check)
        cached = self.cache.get(key)
        if cached is not None and options.get("seeds") is None:
            return cached
        result = self.inner.profile(kernel_source, task, hardware, check, **options)
        if result.error is None and result.backend == self.backend and options.get("seeds") is None:
            self.cache[key] = result
        return result

    def at_timed_size(self) -> CachingProfiler | None:
        """The inner backend checking at the size it times, behind the same cache."""
        inner = self.inner.at_timed_size()
        return None if inner is None else CachingProfiler(inner, self.cache, None)


def make_profiler(payload: dict[str, Any], seeds: int) -> Any:
    """The simulator, or the profiling service when the backend setting is its URL."""
    from accelopt_core.profiling import SandboxLimits, SimulatorProfiler

    seconds, memory_mb = payload["limits"]
    backend = payload.get("backend") or "simulator"
    if backend != "simulator":
        from accelopt_core.profiling.remote import RemoteProfiler

        # the session's token (the editor's secret or its environment's), present only for an approved host
        token = payload.get("service_token") or ""
        remote = RemoteProfiler(backend, token, check_variant=payload.get("check_variant"))
        return CachingProfiler(remote, _cache(payload), payload.get("check_variant"))
    return SimulatorProfiler(seeds=seeds, check_variant=payload.get("check_variant"),
                             limits=SandboxLimits(seconds, memory_mb), cache=_cache(payload))


def _profiler(payload: dict[str, Any]) -> Any:
    """Profilers remember input shapes per task, so one is kept per task, reference digest and settings (and
    service token: a token approved later must not meet a profiler made without it)."""
    token = hashlib.sha256((payload.get("service_token") or "").encode()).hexdigest()
    key = (payload.get("memory_db"), payload["seeds"], payload.get("check_variant"), tuple(payload["limits"]),
           payload.get("digest"), payload["task"].key, payload.get("backend"), token)
    if key not in _profilers:
        if len(_profilers) >= 16:
            _profilers.clear()
        _profilers[key] = make_profiler(payload, payload["seeds"])
    return _profilers[key]


def profile_job(payload: dict[str, Any], cancel: threading.Event, emit: Callable[[Any], None]) -> dict[str, Any]:
    """{"result": ProfileResult} or {"task_error": why the task itself could not be used}."""
    from accelopt_core.tasks import TaskError

    try:
        result = _profiler(payload).profile(payload["source"], payload["task"], payload["hardware"],
                                            check=payload["check"], kernel_label=payload.get("label", "kernel.py"),
                                            kernel_name=payload.get("kernel_name"), cancel=cancel)
    except TaskError as exc:
        return {"task_error": str(exc)}
    except Exception as exc:  # the reference raised while drawing inputs or computing outputs
        return {"task_error": f"{type(exc).__name__}: {exc}"}
    return {"result": result}


def llm_agent(llm: dict[str, Any], notes: list[str]) -> Any | None:
    """The LLM planner when the editor's settings name an endpoint or a model (an explicit opt-in: it costs
    money). The API key is the one the editor passed as a secret (initializationOptions), else the
    environment's or the engine's config file's, never one from settings; `budget_usd` caps the spend."""
    if not (llm.get("endpoint") or llm.get("model")):
        return None
    try:
        from accelopt_core.agents.llm import LLMAgent
        from accelopt_core.config import LLMSettings

        budget = {"max_usd": llm["budget_usd"]} if llm.get("budget_usd") else None
        settings = LLMSettings.load(base_url=llm.get("endpoint"), model=llm.get("model"), api_key=llm.get("api_key"),
                                    budget=budget)
        if not settings.configured():
            notes.append(f"LLM planner not used: missing {', '.join(settings.missing())}")
            return None
        return LLMAgent(settings)
    except Exception as exc:  # an engine without the LLM agents, or a bad config file
        notes.append(f"LLM planner not used: {type(exc).__name__}: {exc}")
        return None


def rule_agent(notes: list[str]) -> Any | None:
    """The engine's rule-based optimizer with its default rules (looked up by name: that part of the
    engine may be missing from a build, and the server must still run)."""
    try:
        from accelopt_core.agents.rules.agent import RuleAgent

        registry = importlib.import_module("accelopt_core.agents.rules.registry")
        return RuleAgent(registry.default_rules())
    except ImportError as exc:
        notes.append(f"rule-based optimizer not available in this build ({exc})")
        return None


def build_agents(specs: list[str], llm: dict[str, Any] | None = None, notes: list[str] | None = None) -> list[Any]:
    """Agents from factories named "module:callable" / "file.py:callable"; by default the rule-based
    optimizer, plus the LLM planner when one is configured."""
    notes = notes if notes is not None else []
    if not specs:
        agents = [agent for agent in (llm_agent(llm or {}, notes), rule_agent(notes)) if agent is not None]
        if not agents:
            raise RuntimeError("no optimizer is available: " + "; ".join(notes))
        return agents
    from .plugins import load

    try:
        return load(specs)
    except Exception as exc:
        raise RuntimeError(f"cannot load the optimizer agents {', '.join(specs)}: {exc}") from None


def optimize_job(payload: dict[str, Any], cancel: threading.Event, emit: Callable[[Any], None]) -> dict[str, Any]:
    """{"search": SearchResult} or {"search_error": why the search could not run}."""
    from accelopt_core.search import BeamSearch, SearchError, preset
    from accelopt_core.tasks import TaskError

    notes: list[str] = []
    agents: list[Any] = []
    try:
        agents = build_agents(list(payload.get("agents") or []), payload.get("llm"), notes)
        config = preset(payload["preset"], workers=payload.get("workers"))
        task = payload["task"]
        family = task.load().family
        profiler = make_profiler(payload, config.seeds)
        memory = _memory(payload["memory_db"]) if payload.get("memory_db") else None
        search = BeamSearch(profiler, agents, config, memory, emit, cancel)
        return {"search": search.run(payload["source"], task, payload["hardware"], family), "notes": notes}
    except (SearchError, TaskError, RuntimeError, ValueError, ImportError) as exc:
        return {"search_error": str(exc), "notes": notes}
    finally:
        for agent in agents:
            close = getattr(agent, "close", None)
            if callable(close):
                close()


_fixers: dict[tuple[str, ...], Any] = {}


def fixes_job(payload: dict[str, Any], cancel: threading.Event, emit: Callable[[Any], None]) -> dict[str, Any]:
    """{"fixes": [QuickFix]}: where the rewrite rules apply to this kernel, with each rewrite's source."""
    from .rules import RuleFixes

    specs = tuple(payload.get("specs") or ())
    if specs not in _fixers:
        _fixers[specs] = RuleFixes(specs=specs)
    return {"fixes": _fixers[specs].plan(payload["source"], payload["profile"], payload["limit"])}


JOBS: dict[str, Callable[[dict[str, Any], threading.Event, Callable[[Any], None]], dict[str, Any]]] = {
    "profile": profile_job,
    "optimize": optimize_job,
    "fixes": fixes_job,
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
    from accelopt_core.blas import single_threaded_blas

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
