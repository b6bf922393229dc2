"""The Neuron backend against stand-ins of the Neuron SDK (`neuronxcc`) and of `neuron-profile`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from neuron_standin import install_standins, standin_environment
from servicekit import TINY_REFERENCE, tiny_kernel

from accelopt_core.profiling import SandboxLimits, SimulatorProfiler, TaskRef
from accelopt_core.profiling.neuron import NeuronProfiler, lines_from_instructions, parse_summary


@pytest.fixture(scope="module")
def standins(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return install_standins(tmp_path_factory.mktemp("neuron-sdk"))


@pytest.fixture
def sdk(standins: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The stand-ins on PYTHONPATH and PATH; yields the call log."""
    for name, value in standin_environment(*standins).items():
        monkeypatch.setenv(name, value)
    log = tmp_path / "calls.jsonl"
    monkeypatch.setenv("STANDIN_CALL_LOG", str(log))
    yield log


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> TaskRef:
    path = tmp_path_factory.mktemp("task") / "tiny_ref.py"
    path.write_text(TINY_REFERENCE)
    return TaskRef(reference=str(path))


def calls(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def profiler(log: Path, **options: Any) -> NeuronProfiler:
    """The kernel's environment is an allow-list: the stand-ins' settings reach it as the operator's extra_env."""
    standin = {name: value for name, value in os.environ.items() if name.startswith("STANDIN_")}
    return NeuronProfiler(seeds=2, limits=SandboxLimits(seconds=60, memory_mb=4096), writable_paths=[str(log)],
                          extra_env=standin, **options)


def test_profile_on_the_stand_in_sdk(sdk: Path, reference: TaskRef) -> None:
    result = profiler(sdk, visible_cores="3").profile(tiny_kernel(1), reference, kernel_label="double.py")
    simulated = SimulatorProfiler(seeds=1).profile(tiny_kernel(1), reference)
    assert result.ok, result.error
    assert result.backend == "neuron" and result.correct is True and result.kernel == "double.py"
    assert result.latency_ms == pytest.approx(simulated.latency_ms)  # nc_latency p50 in us, read as ms
    for name in ("hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes", "vector_engine_active_time_percent"):
        assert result.profile[name] == pytest.approx(simulated.profile[name])
    assert result.profile["nc_idx"] == 3 and result.profile["timing_stable"] is True
    assert result.bottleneck in ("vector", "dma") and result.lines
    assert {line["line"] for line in result.lines} <= set(range(1, tiny_kernel(1).count("\n") + 1))

    log = calls(sdk)
    baremetal = [c for c in log if c["call"] == "baremetal"]
    benchmark = [c for c in log if c["call"] == "benchmark"]
    profile = [c for c in log if c["call"] == "profile"]
    views = [c["argv"] for c in log if c["call"] == "neuron-profile"]
    assert len(baremetal) == 2 and all(c["shapes"] == [[128, 64]] and c["options"] == {} for c in baremetal)
    assert len(benchmark) == 2 and all(c["options"] == {"warmup": 2, "iters": 10} for c in benchmark)
    assert len(profile) == 1
    options = profile[0]["options"]
    assert Path(options.pop("working_directory")).is_absolute()
    assert options == {"save_neff_name": "file.neff", "save_trace_name": "profile.ntff", "overwrite": True,
                       "profile_nth": 2}
    assert {c["visible_cores"] for c in baremetal + benchmark + profile} == {"3"}
    assert views[0][:3] == ["view", "--output-format", "summary-json"]
    assert views[0][3] == "-n" and views[0][4].endswith("file.neff")
    assert views[0][5] == "-s" and views[0][6].endswith("profile.ntff")
    assert views[1][:5] == ["view", "--output-format", "json", "--output-file", views[1][4]]


def test_wrong_outputs_fail_the_check(sdk: Path, reference: TaskRef) -> None:
    result = profiler(sdk).profile(tiny_kernel(2, factor=3.0), reference)
    assert result.ok and result.correct is False and "relative L2 error" in result.check_message
    assert result.latency_ms is not None


def test_disagreeing_runs_are_repeated_until_two_agree(sdk: Path, reference: TaskRef,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_BENCH_JITTER", "1.0,1.2,1.0,1.004")
    result = profiler(sdk).profile(tiny_kernel(3), reference, check=False)
    runs = result.profile["benchmark_p50_us_runs"]
    assert len(runs) == 4 and result.profile["timing_stable"] is True and result.correct is None
    assert result.latency_ms == pytest.approx((runs[2] + runs[3]) / 2 / 1000)
    assert len([c for c in calls(sdk) if c["call"] == "benchmark"]) == 4


def test_runs_that_never_agree_stop_after_the_limit(sdk: Path, reference: TaskRef,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STANDIN_BENCH_JITTER", "1.0,1.1,1.2,1.3,1.4,1.5")
    result = profiler(sdk, max_timing_runs=3).profile(tiny_kernel(4), reference, check=False)
    runs = result.profile["benchmark_p50_us_runs"]
    assert len(runs) == 3 and result.profile["timing_stable"] is False
    assert result.latency_ms == pytest.approx(runs[1] / 1000)  # the median
    assert result.profile["benchmark_spread_percent"] == pytest.approx(0.2)  # a fraction, like the summary's


def test_kernel_exception_names_its_line(sdk: Path, reference: TaskRef) -> None:
    broken = tiny_kernel(5).replace("nl.load(x)", "nl.load(x) + undefined_name")
    result = profiler(sdk).profile(broken, reference, kernel_label="broken.py")
    line = broken.splitlines().index(next(s for s in broken.splitlines() if "undefined_name" in s)) + 1
    assert result.error == f"broken.py:{line}: NameError: name 'undefined_name' is not defined"
    assert result.error_line == line


@pytest.mark.parametrize(("body", "needle"), [
    ("    open(REF).read()\n", "reading"),
    ("    import subprocess\n    subprocess.run(['true'])\n", "starting true is not allowed"),
    ("    import socket\n    socket.create_connection(('127.0.0.1', 9))\n", "socket.connect is not allowed"),
    ("    open('/tmp/accelopt-escape.txt', 'w')\n", "writing /tmp/accelopt-escape.txt is not allowed"),
])
def test_the_child_is_guarded(sdk: Path, reference: TaskRef, body: str, needle: str) -> None:
    kernel = tiny_kernel(6).replace("def kernel(x):\n", "def kernel(x):\n" + body.replace("REF",
                                                                                          repr(reference.reference)))
    result = profiler(sdk).profile(kernel, reference)
    assert result.error is not None and needle in result.error and "not allowed" in result.error


def test_other_hardware_is_refused(sdk: Path, reference: TaskRef) -> None:
    result = profiler(sdk, hardware="trn1").profile(tiny_kernel(7), reference, "trn2")
    assert result.error == "this host profiles on trn1; the job asked for trn2"


def test_missing_neuron_profile_keeps_the_timing(sdk: Path, reference: TaskRef, tmp_path: Path) -> None:
    result = profiler(sdk, neuron_profile=str(tmp_path / "absent")).profile(tiny_kernel(8), reference)
    # the summary nki.profile saved beside the NTFF is read instead
    assert result.ok and result.correct is True and result.profile["hbm_read_bytes"] > 0


def test_parse_summary_shapes() -> None:
    fields = {"total_time": 0.017, "sb_read_bytes": "4096", "hbm_read_bytes": 10}
    expected = {"total_time": 0.017, "sbuf_read_bytes": 4096, "hbm_read_bytes": 10}
    assert parse_summary(json.dumps({"summary": [fields]})) == expected
    assert parse_summary("level=info msg=x\n" + json.dumps({"n_0123": fields})) == expected
    assert parse_summary(json.dumps(fields)) == expected
    with pytest.raises(ValueError):
        parse_summary("no json here")


def test_lines_from_instruction_records() -> None:
    records = [{"duration": 2_000_000, "label": "Vector", "nki_source_location": "k.py:7"},
               {"duration": 1_000_000, "label": "TensorMatrix", "nki_source_location": "k.py:7"},
               {"duration": 5_000_000, "label": "qSyncIO", "nki_source_location": "other.py:7"},
               {"duration": 1_000, "label": "Pool", "nki_source_location": ""}]
    assert lines_from_instructions(records, "/x/k.py") == [
        {"line": 7, "time_ms": 3.0, "instructions": 2, "engines": {"vector": 2.0, "tensor": 1.0}, "engine": "vector"}]


def test_service_on_the_neuron_backend_gives_each_worker_its_core(standins: tuple[Path, Path], tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    pytest.importorskip("httpx")
    from servicekit import service_process, tiny_job

    with service_process(tmp_path, "--backend", "neuron", "--workers", "2", "--seeds", "1",
                         env=standin_environment(*standins)) as service, service.client() as client:
        assert client.get("/v1/health").json()["backend"] == "neuron"
        ids = [client.post("/v1/jobs", json=tiny_job(variant, sleep=0.1)).json()["id"] for variant in range(4)]
        states = [service.wait_job(client, job_id) for job_id in ids]
        workers = client.get("/v1/workers").json()
    assert [w["neuron_core"] for w in workers] == ["0", "1"]
    for state in states:
        result = state["result"]
        assert state["status"] == "done" and result["backend"] == "neuron" and result["correct"] is True, state
        assert result["nc_idx"] == state["slot"] and result["neuron_core"] == str(state["slot"])
    assert {state["slot"] for state in states} == {0, 1}
