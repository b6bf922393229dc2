"""Where bubblewrap cannot run, the product says so: a user's own file still profiles (with a one-line
warning), while searches, the service and every other caller refuse kernels unless the user opted in."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from attack_kit import attack_kernel, write_reference

from accelopt_core.profiling import confine
from accelopt_core.profiling.confine import OPT_IN_VARIABLE, sandbox_environment, seccomp_program
from accelopt_core.profiling.sandbox import importable_environment

ROOT = Path(__file__).resolve().parents[2]


def without_bwrap(**extra: str) -> dict[str, str]:
    """This environment with no bwrap on PATH (python is started by its absolute path) and no opt-in."""
    env = {k: v for k, v in importable_environment(dict(os.environ)).items() if k != OPT_IN_VARIABLE}
    return {**env, "PATH": "/nonexistent", **extra}


def accelopt(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "accelopt_core", *args], capture_output=True, text=True,
                          timeout=600, env=env, cwd=ROOT)


@pytest.fixture(scope="module")
def kernel_and_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("policy")
    kernel = folder / "double.py"
    kernel.write_text(attack_kernel("pass"))
    return kernel, str(write_reference(folder / "ref").reference)


def test_profile_of_ones_own_file_runs_unconfined_with_a_warning(kernel_and_reference: tuple[Path, str]) -> None:
    kernel, reference = kernel_and_reference
    run = accelopt("profile", str(kernel), "--reference", reference, "--seeds", "1", env=without_bwrap())
    assert run.returncode == 0, run.stderr
    warnings = [line for line in run.stderr.splitlines() if "without OS isolation" in line]
    assert len(warnings) == 1 and "bubblewrap (bwrap) is not installed" in warnings[0]


def test_a_search_refuses_to_run_unconfined(kernel_and_reference: tuple[Path, str], tmp_path: Path) -> None:
    kernel, reference = kernel_and_reference
    run = accelopt("optimize", str(kernel), "--reference", reference, "--preset", "quick", "--db",
                   str(tmp_path / "m.db"), env=without_bwrap())
    assert run.returncode == 2
    assert "kernels cannot be isolated here: bubblewrap (bwrap) is not installed" in run.stderr
    assert OPT_IN_VARIABLE in run.stderr


def test_the_service_refuses_to_start_unconfined(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("a-token-long-enough-for-the-service\n")
    token.chmod(0o600)
    run = accelopt("serve", "--token-file", str(token), "--port", "0", env=without_bwrap())
    assert run.returncode == 2 and "kernels cannot be isolated here" in run.stderr


def test_any_other_caller_gets_a_clear_error_unless_opted_in(kernel_and_reference: tuple[Path, str]) -> None:
    kernel, reference = kernel_and_reference
    script = ("from accelopt_core.profiling import SimulatorProfiler, TaskRef\n"
              f"task = TaskRef(reference={reference!r})\n"
              f"result = SimulatorProfiler(seeds=1).profile(open({str(kernel)!r}).read(), task)\n"
              "print(result.error or result.correct)\n")
    refused = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                             env=without_bwrap())
    assert refused.stdout.startswith("kernels cannot be isolated here: bubblewrap (bwrap) is not installed")
    opted_in = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                              env=without_bwrap(**{OPT_IN_VARIABLE: "1"}))
    assert opted_in.stdout.strip() == "True" and "without OS isolation" in opted_in.stderr


def test_the_environment_is_an_allow_list() -> None:
    env = sandbox_environment({"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "GH_PAT": "x", "DB_PASSWD": "y",
                               "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "z", "NEURON_RT_LOG_LEVEL": "INFO",
                               "NEURON_API_TOKEN": "t", "RANDOM_SERVICE_URL": "https://u:p@host"},
                              {"TMPDIR": "/job"})
    assert env == {"PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C", "NEURON_RT_LOG_LEVEL": "INFO",
                   "TMPDIR": "/job"}


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_seccomp_filter_is_well_formed(machine: str) -> None:
    """Each classic-BPF instruction is 8 bytes; every jump lands inside the program; it ends in a return."""
    import struct

    for processes in (False, True):
        program = seccomp_program(processes, machine)
        assert program is not None and len(program) % 8 == 0
        instructions = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
        for index, (code, jump_true, jump_false, _) in enumerate(instructions):
            if code & 0x07 == 0x05:  # BPF_JMP
                assert index + 1 + max(jump_true, jump_false) < len(instructions)
        assert instructions[-1][0] == 0x06
    assert seccomp_program(False, "sparc") is None


class _ProbeRun:
    """What spawn_confined hands back, for a probe that ended with `returncode`."""

    def __init__(self, returncode: int) -> None:
        self.returncode = returncode

    def communicate(self, timeout: float | None = None) -> tuple[bytes, bytes]:
        return b"", b"bwrap: setting up uid map: Permission denied\n" if self.returncode > 0 else b""


def test_a_probe_killed_by_a_signal_is_tried_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """A killed probe (memory pressure, a kill meant for the job) must not make the worker refuse every later
    kernel; a real refusal by bwrap holds for the process."""
    endings = [-9, 0, 1]
    monkeypatch.setattr(confine, "_settled_isolation", [])
    monkeypatch.setattr(confine, "spawn_confined", lambda *args, **kwargs: _ProbeRun(endings.pop(0)))
    assert confine.isolation_problem() == "the bwrap probe was killed by signal SIGKILL"
    assert confine.isolation_problem() is None
    assert confine.isolation_problem() is None and endings == [1]
    monkeypatch.setattr(confine, "_settled_isolation", [])
    refusal = "bwrap cannot create its sandbox here: bwrap: setting up uid map: Permission denied"
    assert confine.isolation_problem() == refusal
    assert confine.isolation_problem() == refusal and endings == []


def test_a_signal_is_named_and_one_this_platform_does_not_know_is_its_number() -> None:
    """The sandbox, the bwrap probe and the service's workers say how a process died in the same words."""
    assert confine.signal_name(9) == "SIGKILL" and confine.signal_name(999) == "999"
