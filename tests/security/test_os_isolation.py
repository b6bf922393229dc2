"""Kernels that try to escape the sandbox, one per attack class (README, "Kernel isolation"); each fails because the
operating system (bubblewrap, seccomp, rlimits) stops it, most with the audit hook switched off first."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from attack_kit import DISABLE_AUDIT_HOOK, run_attack, write_reference

import accelopt_core
from accelopt_core.profiling import TaskRef
from accelopt_core.profiling.confine import Confinement, python_folders, sandbox_environment, spawn_confined
from accelopt_core.profiling.sandbox import MALFORMED, importable_environment

pytestmark = pytest.mark.usefixtures("confined")


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> TaskRef:
    return write_reference(tmp_path_factory.mktemp("reference"))


def test_the_attack_kit_kernel_is_correct(task: TaskRef) -> None:
    result = run_attack("pass", task)
    assert result.ok and result.correct is True, result.error


# -- running programs ---------------------------------------------------------------------------------------

FORK_EXEC = '''
import _posixsubprocess, os
errors_read, errors_write = os.pipe()
try:
    _posixsubprocess.fork_exec([b"/bin/sh", b"-c", b"sleep 1; echo escaped > {marker}"], [b"/bin/sh"], True, (),
                               None, None, -1, -1, -1, -1, -1, -1, errors_read, errors_write, True, True, -1, None,
                               None, None, -1, None, True)
except OSError as exc:
    raise RuntimeError(f"GOT refused: {{exc}}")
raise RuntimeError("GOT a shell")
'''


def test_fork_exec_cannot_start_a_program(task: TaskRef, tmp_path: Path) -> None:
    marker = tmp_path / "escaped"
    result = run_attack(FORK_EXEC.format(marker=marker), task)
    assert "GOT refused: [Errno 1] Operation not permitted" in result.error
    time.sleep(1.5)
    assert not marker.exists()


def test_new_processes_are_refused_even_without_the_audit_hook(task: TaskRef) -> None:
    attack = DISABLE_AUDIT_HOOK + '''
import os, subprocess
outcomes = []
for start in (lambda: os.fork(), lambda: subprocess.run(["/bin/true"], start_new_session=True),
              lambda: os.posix_spawn("/bin/true", ["true"], {})):
    try:
        start()
        outcomes.append("started")
    except OSError as exc:
        outcomes.append(exc.errno)
raise RuntimeError(f"GOT {outcomes}")
'''
    result = run_attack(attack, task)
    assert "GOT [1, 1, 1]" in result.error  # EPERM three times


def test_killing_the_sandbox_kills_a_process_in_a_new_session(tmp_path: Path) -> None:
    """The second layer under the seccomp filter: where processes are allowed (the Neuron SDK's profile), one
    that left the session still dies with the sandbox (its PID namespace)."""
    marker = tmp_path / "survived"
    script = textwrap.dedent(f'''
        import subprocess, time
        subprocess.Popen(["/bin/sh", "-c", "sleep 2; echo alive > {marker}"], start_new_session=True)
        time.sleep(60)
    ''')
    confinement = Confinement(workdir=str(tmp_path), processes=True)
    env = importable_environment(sandbox_environment(dict(os.environ)))
    child = spawn_confined(confinement, [sys.executable, "-c", script], env, stdin=subprocess.DEVNULL)
    time.sleep(1.0)
    os.killpg(child.pid, 9)
    child.wait(timeout=5)
    time.sleep(2.5)
    assert not marker.exists()


# -- the time limit ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("attack", ["while True:\n    pass\n",
                                    "import os, signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                                    "try:\n    os.setsid()\nexcept OSError:\n    pass\nwhile True:\n    pass\n"])
def test_the_time_limit_holds_within_a_second(task: TaskRef, attack: str) -> None:
    started = time.monotonic()
    result = run_attack(attack, task, seconds=3)
    elapsed = time.monotonic() - started
    assert "did not finish within 3 s" in result.error
    assert elapsed < 3 + 1.0, elapsed


# -- the file system -----------------------------------------------------------------------------------------


def test_dir_fd_cannot_write_or_read_outside_the_job_folder(task: TaskRef, tmp_path: Path) -> None:
    target = tmp_path / "written.txt"
    token = tmp_path / "token.txt"
    token.write_text("service-token-1234")
    reference = task.reference
    attack = f'''
import os
found = []
root = os.open("/", os.O_RDONLY)
for relative in ({str(target)[1:]!r},):
    try:
        handle = os.open(relative, os.O_WRONLY | os.O_CREAT, dir_fd=root)
        os.write(handle, b"escaped")
        found.append("wrote " + relative)
    except OSError as exc:
        found.append(type(exc).__name__)
for relative in ({str(token)[1:]!r}, {reference[1:]!r}):
    try:
        handle = os.open(relative, os.O_RDONLY, dir_fd=root)
        found.append(os.read(handle, 4096).decode())
    except OSError as exc:
        found.append(type(exc).__name__)
raise RuntimeError(f"GOT {{found}}")
'''
    result = run_attack(attack, task)
    assert "GOT" in result.error and not target.exists()
    assert "service-token-1234" not in result.error and "reference-secret" not in result.error


def test_forbidden_files_inside_the_kernel_folder_are_covered(task: TaskRef, tmp_path: Path) -> None:
    """The kernel's folder is visible (its helper modules import), but a forbidden file in it is covered by
    /dev/null, which cannot even be opened on the bound folder (nodev)."""
    token = tmp_path / "token.txt"
    token.write_text("service-token-5678")
    attack = DISABLE_AUDIT_HOOK + f'''
with open({str(token)!r}) as handle:
    raise RuntimeError("GOT [" + handle.read() + "]")
'''
    result = run_attack(attack, task, forbidden=(str(token),), kernel_file=tmp_path / "kernel.py")
    assert "PermissionError: [Errno 13]" in result.error and "service-token-5678" not in result.error


def test_mkdir_and_utime_outside_the_job_folder_fail(task: TaskRef, tmp_path: Path) -> None:
    kernel_folder = tmp_path / "kernels"
    kernel_folder.mkdir()
    helper = kernel_folder / "helper.py"
    helper.write_text("VALUE = 1\n")
    before = helper.stat().st_mtime
    attack = DISABLE_AUDIT_HOOK + f'''
import os
found = []
for action in (lambda: os.mkdir({str(kernel_folder / "made")!r}), lambda: os.mkdir({str(tmp_path / "made")!r}),
               lambda: os.utime({str(helper)!r}, (0, 0)), lambda: os.mkdir("/made"),
               lambda: open({str(kernel_folder / "new.py")!r}, "w")):
    try:
        action()
        found.append("done")
    except OSError as exc:
        found.append(exc.strerror)
raise RuntimeError(f"GOT {{found}}")
'''
    result = run_attack(attack, task, kernel_file=kernel_folder / "kernel.py")
    assert "GOT" in result.error and "done" not in result.error, result.error
    assert not (kernel_folder / "made").exists() and not (tmp_path / "made").exists()
    assert helper.stat().st_mtime == before and not (kernel_folder / "new.py").exists()


def test_the_kernel_sees_only_its_own_world(task: TaskRef) -> None:
    attack = '''
import json, os, socket
world = {"pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
         "interfaces": [name for _, name in socket.if_nameindex()], "root": sorted(os.listdir("/")),
         "home": sorted(os.listdir(HOME)) if os.path.isdir(HOME) else [], "tmp": sorted(os.listdir("/tmp")),
         "checkout": sorted(os.listdir(CHECKOUT))}
raise RuntimeError("GOT " + json.dumps(world))
'''
    checkout = Path(accelopt_core.__file__).parent.parent
    result = run_attack(attack.replace("HOME", repr(str(Path.home()))).replace("CHECKOUT", repr(str(checkout))), task)
    world = _reported(result.error)
    assert len(world["pids"]) <= 3 and world["interfaces"] == ["lo"]
    assert set(world["home"]) <= _python_under(Path.home())  # of the home directory, at most the way to Python
    # of this checkout, the package only (no tests, no references), and a virtual environment kept in it
    assert set(world["checkout"]) - _python_under(checkout) == {"accelopt_core"}
    assert len(set(world["tmp"]) - _python_under(Path("/tmp"))) <= 1  # its own job folder and the way to Python


def _python_under(folder: Path) -> set[str]:
    """The entries of `folder` on the way to this interpreter's folders (a venv in a checkout, ...)."""
    return {Path(p).relative_to(folder).parts[0] for p in python_folders()
            if Path(p).is_relative_to(folder) and Path(p) != folder}


def _reported(error: str) -> dict:
    import json

    return json.loads(error.split("GOT ", 1)[1])


# -- secrets ---------------------------------------------------------------------------------------------------


def test_the_parents_environment_is_out_of_reach(task: TaskRef, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("GH_PAT", "ghp-secret-1"), ("DB_PASSWD", "db-secret-2"),
                        ("ACCELOPT_SERVICE_TOKEN", "svc-secret-3"), ("OPENAI_API_KEY", "sk-secret-4")):
        monkeypatch.setenv(name, value)
    attack = '''
import os
seen = [f"{k}={v}" for k, v in os.environ.items()]
for pid in [p for p in os.listdir("/proc") if p.isdigit()] + [str(os.getppid())]:
    for part in ("environ", "cmdline"):
        try:
            with open(f"/proc/{pid}/{part}", "rb") as handle:
                seen.append(handle.read().decode("utf-8", "replace"))
        except OSError:
            pass
raise RuntimeError("GOT " + " ".join(seen))
'''
    result = run_attack(attack, task)
    assert "GOT" in result.error
    for secret in ("ghp-secret-1", "db-secret-2", "svc-secret-3", "sk-secret-4", "GH_PAT", "DB_PASSWD"):
        assert secret not in result.error


# -- the network -----------------------------------------------------------------------------------------------


def test_udp_to_the_hosts_loopback_reaches_nothing(task: TaskRef) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as listener:
        listener.bind(("127.0.0.1", 0))
        listener.settimeout(0.5)
        port = listener.getsockname()[1]
        attack = f'''
import socket
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
sock.sendto(b"escaped", ("127.0.0.1", {port}))
raise RuntimeError("GOT sent")
'''
        result = run_attack(attack, task)
        assert "GOT sent" in result.error  # sent into the sandbox's own loopback
        with pytest.raises(TimeoutError):
            listener.recvfrom(64)


# -- memory and the process ------------------------------------------------------------------------------------


def test_ctypes_memmove_in_its_own_process_reaches_nothing_outside(task: TaskRef, tmp_path: Path) -> None:
    """ctypes (already imported by the worker) rewrites the kernel's own memory at will; with the audit hook
    off as well, the file system and programs are still closed."""
    target = tmp_path / "escaped.txt"
    attack = DISABLE_AUDIT_HOOK + f'''
import ctypes, os
frozen = b"immutable-bytes"
ctypes.memmove(id(frozen) + bytes.__basicsize__ - 1, b"REWRITTEN-BYTES", 15)
found = [frozen.decode()]
for action in (lambda: open({str(target)!r}, "w"), lambda: os.system("true"),
               lambda: open({task.reference!r}).read()):
    try:
        found.append(str(action()))
    except OSError as exc:
        found.append(exc.strerror)
raise RuntimeError(f"GOT {{found}}")
'''
    result = run_attack(attack, task)
    assert "REWRITTEN-BYTES" in result.error  # its own memory, yes
    assert "reference-secret" not in result.error and not target.exists()


def test_dev_shm_and_memfd_are_closed(task: TaskRef) -> None:
    """Memory a kernel could fill outside its address-space limit: /dev/shm is read-only, memfd refused."""
    attack = DISABLE_AUDIT_HOOK + '''
import os
found = []
for action in (lambda: open("/dev/shm/fill", "wb"), lambda: os.memfd_create("fill")):
    try:
        action()
        found.append("opened")
    except OSError as exc:
        found.append(exc.errno)
raise RuntimeError(f"GOT {found}")
'''
    result = run_attack(attack, task)
    assert "GOT [30, 1]" in result.error or "GOT [2, 1]" in result.error  # EROFS or ENOENT; EPERM


def test_a_file_larger_than_the_memory_limit_cannot_be_written(task: TaskRef) -> None:
    attack = '''
with open("big.bin", "wb", buffering=0) as handle:
    try:
        handle.truncate(0)
        for _ in range(600):
            handle.write(b"x" * (1 << 20))
    except OSError as exc:
        raise RuntimeError(f"GOT {exc.errno} after {handle.tell() >> 20} MB")
raise RuntimeError("GOT written")
'''
    result = run_attack(attack, task, memory_mb=512, disk_mb=1024)
    assert "GOT 27 after 512 MB" in result.error  # EFBIG: RLIMIT_FSIZE is the memory limit


def test_filling_the_job_folder_past_its_budget_stops_the_kernel(task: TaskRef) -> None:
    attack = '''
import time
for index in range(200):
    with open(f"part-{index}.bin", "wb") as handle:
        handle.write(b"x" * (8 << 20))
time.sleep(30)
'''
    result = run_attack(attack, task, memory_mb=2048, disk_mb=64, seconds=25)
    assert "wrote more than 64 MB into its job folder" in result.error


def test_a_stderr_flood_does_not_grow_the_parent(task: TaskRef, tmp_path: Path) -> None:
    """512 MB on stderr: the parent keeps a bounded tail (measured in a fresh process, whose peak memory is
    its own)."""
    flood = "import os\nchunk = b'x' * (1 << 20)\nfor _ in range(512):\n    os.write(2, chunk)\n"
    script = textwrap.dedent(f'''
        import resource, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from attack_kit import run_attack
        from accelopt_core.profiling import TaskRef
        task = TaskRef(reference={task.reference!r})
        run_attack("pass", task)
        quiet = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        result = run_attack({flood!r}, task)
        flooded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(result.correct, quiet, flooded)
    ''')
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                         env=importable_environment(dict(os.environ)))
    correct, quiet, flooded = run.stdout.split()
    assert correct == "True", run.stderr[-2000:]
    assert int(flooded) - int(quiet) < 64 * 1024  # KiB: the flood costs the parent less than 64 MB


# -- what comes back -------------------------------------------------------------------------------------------


def _forged_outputs(descriptor: dict) -> dict:
    return {"outputs": [[descriptor]], "report": {"latency_ms": 1e-6}, "facts": {}}


@pytest.mark.parametrize("forged", [_forged_outputs({"file": "/etc/passwd", "dtype": "float32", "shape": [128, 64]}),
                                    _forged_outputs({"file": "../../../etc/passwd", "dtype": "float32",
                                                     "shape": [128, 64]}),
                                    _forged_outputs({"file": "out-0-0.npy", "dtype": "float32", "shape": [128, 64]}),
                                    {"traces": ["/etc/passwd"]}, {"traces": ["../../../etc/passwd"]},
                                    {"traces": ["trace-0.json"]}])
def test_a_forged_output_path_is_one_failed_evaluation(task: TaskRef, forged: dict) -> None:
    """The kernel writes its own result.json (an output descriptor or a trace file naming a file outside, or a
    link to the reference) and exits."""
    attack = DISABLE_AUDIT_HOOK + f'''
import json, os
os.symlink({task.reference!r}, "out-0-0.npy")
os.symlink({task.reference!r}, "trace-0.json")
with open("result.json", "w") as handle:
    json.dump({forged!r}, handle)
os._exit(0)
'''
    result = run_attack(attack, task)
    assert result.error is not None and result.error.startswith(MALFORMED) and result.correct is not True


def test_a_forged_output_path_exits_the_cli_cleanly(task: TaskRef, tmp_path: Path) -> None:
    kernel = tmp_path / "forger.py"
    from attack_kit import attack_kernel

    kernel.write_text(attack_kernel('''
import json, os
with open("result.json", "w") as handle:
    json.dump({"outputs": [[{"file": "/etc/passwd", "dtype": "float32", "shape": [1]}]], "report": {}}, handle)
os._exit(0)
'''))
    run = subprocess.run([sys.executable, "-m", "accelopt_core", "profile", str(kernel), "--reference",
                          task.reference, "--seeds", "1"], capture_output=True, text=True, timeout=300,
                         env=importable_environment(dict(os.environ)))
    assert run.returncode == 1 and MALFORMED in run.stderr and "Traceback" not in run.stderr
