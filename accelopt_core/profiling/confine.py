"""Confining a kernel's process with the operating system (bubblewrap), not only with Python's audit hook.

Every kernel child starts as `bwrap ... -- python -m WORKER`, in its own user, PID, network, IPC, UTS
and cgroup namespaces, with no capabilities and a fresh read-only /proc (no view of the parent's),
and sees only:
- read-only: the system's program and library folders, the Python installation and its site-packages,
  this checkout's `accelopt_core` package, and the folder the kernel imports its helpers from;
- read-write: its own job folder (on disk, never /dev/shm, whose pages escape the memory limit);
- nothing else: not the task's reference, the memory database, token files, the home directory or
  the rest of /tmp (forbidden paths inside a visible folder are covered with an empty file).
A seccomp filter refuses new processes (threads are allowed), new namespaces, mounts, memfd and SysV
shared memory (memory outside the address-space limit), ptrace, bpf and io_uring. Killing bwrap kills
the whole PID namespace, a process that started its own session included (--die-with-parent).

Where bwrap is missing or cannot run, kernels run only when the caller allows it for this launch (a
user's own file in `accelopt profile`) or the user opted in with ACCELOPT_ALLOW_UNCONFINED=1.
"""

from __future__ import annotations

import errno
import functools
import os
import platform
import re
import shutil
import signal
import site
import struct
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field

BWRAP = "bwrap"
OPT_IN_VARIABLE = "ACCELOPT_ALLOW_UNCONFINED"
INSTALL_HINT = (f"install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap), or set {OPT_IN_VARIABLE}=1 to "
                "run kernels with only the in-process guard")

# -- the environment: an allow-list ---------------------------------------------------------------------------

ALLOWED_VARIABLES = frozenset({"PATH", "LANG", "LANGUAGE", "TZ", "PYTHONPATH", "PYTHONHOME", "PYTHONIOENCODING",
                               "PYTHONUTF8", "LD_LIBRARY_PATH"})
ALLOWED_PREFIXES = ("LC_", "NEURON_")  # locale; the Neuron runtime's and compiler's settings
# even an allowed prefix never carries something named like a credential
SECRET_PATTERN = re.compile(r"(KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|_PAT\b|_PAT_)", re.IGNORECASE)


def signal_name(number: int) -> str:
    """SIGKILL for 9; the number itself for one this platform does not name."""
    try:
        return signal.Signals(number).name
    except ValueError:
        return str(number)


def sandbox_environment(environ: dict[str, str], extra: dict[str, str] | None = None) -> dict[str, str]:
    """The kernel's environment: only variables on the allow-list (locale, paths, Neuron settings), none
    named like a credential, plus `extra` (set by the trusted caller, e.g. the NeuronCore to use)."""
    kept = {name: value for name, value in environ.items()
            if (name in ALLOWED_VARIABLES or name.startswith(ALLOWED_PREFIXES)) and not SECRET_PATTERN.search(name)}
    return {**kept, **(extra or {})}


# -- the seccomp filter ---------------------------------------------------------------------------------------

# struct seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (linux/seccomp.h)
_NR, _ARCH, _ARG0_LOW = 0, 4, 16
# classic BPF opcodes (linux/filter.h): BPF_LD|BPF_W|BPF_ABS, BPF_JMP|BPF_JEQ|BPF_K, BPF_JMP|BPF_JGE|BPF_K,
# BPF_ALU|BPF_AND|BPF_K, BPF_RET|BPF_K
_LOAD, _JEQ, _JGE, _AND, _RET = 0x20, 0x15, 0x35, 0x54, 0x06
_ALLOW, _KILL_PROCESS, _ERRNO = 0x7FFF0000, 0x80000000, 0x00050000  # SECCOMP_RET_* (linux/seccomp.h)
_CLONE_THREAD = 0x00010000
# CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
_CLONE_NAMESPACES = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
_X32_SYSCALL_BIT = 0x40000000  # x86-64's x32 ABI numbers its system calls from here

_COMMON_DENIED = ("unshare", "setns", "mount", "umount2", "pivot_root", "open_tree", "move_mount", "fsopen",
                  "fsconfig", "fsmount", "fspick", "mount_setattr", "memfd_create", "memfd_secret", "shmget",
                  "ptrace", "process_vm_readv", "process_vm_writev", "bpf", "perf_event_open", "userfaultfd",
                  "io_uring_setup", "keyctl", "add_key", "request_key", "kexec_load", "kexec_file_load",
                  "init_module", "finit_module", "delete_module")
_PROCESS_DENIED = ("fork", "vfork")  # clone is allowed for threads only; clone3 says ENOSYS (glibc then uses clone)


@dataclass(frozen=True)
class SyscallTable:
    """One architecture's audit identifier (linux/audit.h) and system call numbers (its asm/unistd.h)."""

    audit_arch: int
    numbers: dict[str, int]
    x32: bool = False


SYSCALLS = {
    "x86_64": SyscallTable(0xC000003E, {
        "clone": 56, "fork": 57, "vfork": 58, "clone3": 435, "unshare": 272, "setns": 308, "mount": 165,
        "umount2": 166, "pivot_root": 155, "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
        "fsmount": 432, "fspick": 433, "mount_setattr": 442, "memfd_create": 319, "memfd_secret": 447, "shmget": 29,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "bpf": 321, "perf_event_open": 298,
        "userfaultfd": 323, "io_uring_setup": 425, "keyctl": 250, "add_key": 248, "request_key": 249,
        "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176},
        x32=True),
    "aarch64": SyscallTable(0xC00000B7, {  # asm-generic/unistd.h: no fork or vfork, only clone
        "clone": 220, "clone3": 435, "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
        "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "mount_setattr": 442, "memfd_create": 279, "memfd_secret": 447, "shmget": 194, "ptrace": 117,
        "process_vm_readv": 270, "process_vm_writev": 271, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282,
        "io_uring_setup": 425, "keyctl": 219, "add_key": 217, "request_key": 218, "kexec_load": 104,
        "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106}),
}


def _instruction(code: int, k: int, jump_true: int = 0, jump_false: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jump_true, jump_false, k)


def seccomp_program(processes: bool, machine: str | None = None) -> bytes | None:
    """The compiled filter bwrap loads with --seccomp (None on an architecture without a table here).
    Denied calls fail with EPERM; a system call of another ABI (i386, x32) kills the process."""
    table = SYSCALLS.get(machine or platform.machine())
    if table is None:
        return None
    eperm = _ERRNO | errno.EPERM
    program = [_instruction(_LOAD, _ARCH), _instruction(_JEQ, table.audit_arch, 1, 0),
               _instruction(_RET, _KILL_PROCESS), _instruction(_LOAD, _NR)]
    if table.x32:
        program += [_instruction(_JGE, _X32_SYSCALL_BIT, 0, 1), _instruction(_RET, _KILL_PROCESS)]
    denied = _COMMON_DENIED + (() if processes else _PROCESS_DENIED)
    for name in denied:
        if name in table.numbers:
            program += [_instruction(_JEQ, table.numbers[name], 0, 1), _instruction(_RET, eperm)]
    if not processes:
        program += [_instruction(_JEQ, table.numbers["clone3"], 0, 1), _instruction(_RET, _ERRNO | errno.ENOSYS),
                    _instruction(_JEQ, table.numbers["clone"], 0, 5), _instruction(_LOAD, _ARG0_LOW),
                    _instruction(_AND, _CLONE_THREAD | _CLONE_NAMESPACES),
                    _instruction(_JEQ, _CLONE_THREAD, 0, 1), _instruction(_RET, _ALLOW), _instruction(_RET, eperm)]
    return b"".join([*program, _instruction(_RET, _ALLOW)])


# -- what the sandbox sees ------------------------------------------------------------------------------------

SYSTEM_FOLDERS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")
SOURCE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass(frozen=True)
class Confinement:
    """What one kernel's process may see and do beyond the system and Python (see the module docstring)."""

    workdir: str
    read_only: tuple[str, ...] = ()  # e.g. the kernel's import folder
    writable: tuple[str, ...] = ()  # besides the job folder (the Neuron backend's configured paths)
    hidden: tuple[str, ...] = ()  # never visible, even inside a read-only folder: reference, memory, tokens
    devices: tuple[str, ...] = ()  # device nodes passed through (NeuronCores)
    processes: bool = False  # the Neuron SDK runs its compiler and tools; a simulated kernel needs none
    extra_system: tuple[str, ...] = field(default=())  # more read-only trees (the Neuron SDK's /opt folder)


def python_folders() -> list[str]:
    """Where this interpreter, its standard library and its installed packages live."""
    paths = sysconfig.get_paths()
    places = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
              os.path.dirname(os.path.realpath(sys.executable)), *site.getsitepackages(),
              *(paths[name] for name in ("stdlib", "platstdlib", "purelib", "platlib") if name in paths)]
    user_site = site.getusersitepackages() if site.ENABLE_USER_SITE else None
    if user_site and user_site in sys.path:
        places.append(user_site)
    return places


def private_folder(path: str) -> bool:
    """The root, or a folder holding the user's home or the temporary folder: binding it would show the
    user's files, or every other evaluation's job folder (a kernel file in /tmp gets no folder at all)."""
    real = os.path.realpath(path)
    shared = {os.path.realpath(place) for place in (os.path.expanduser("~"), tempfile.gettempdir(), "/tmp")}
    return real == os.sep or any(_inside(place, real) for place in shared)


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _system_arguments() -> list[str]:
    """The system's folders: merged-/usr links stay links, real folders are bound read-only."""
    arguments: list[str] = []
    for path in SYSTEM_FOLDERS:
        if os.path.islink(path):
            arguments += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            arguments += ["--ro-bind", path, path]
    for path in SYSTEM_FILES:
        if os.path.exists(path):
            arguments += ["--ro-bind", path, path]
    return arguments


def _covered_by_system(path: str) -> bool:
    return any(_inside(path, root) or _inside(path, os.path.realpath(root)) for root in SYSTEM_FOLDERS
               if os.path.isdir(root))


def visible_trees(confinement: Confinement, environ: dict[str, str]) -> list[tuple[str, str]]:
    """The read-only trees beyond the system folders, as (real source, path inside the sandbox): each at
    its real path and, when it is named through a link, at that name too. Never the root or a folder
    holding the home directory."""
    # this checkout is on PYTHONPATH so that the child imports it; of the checkout only the package is shown
    python_path = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep)
                   if p and os.path.realpath(p) != os.path.realpath(SOURCE_ROOT)]
    tools = environ.get("PATH", "").split(os.pathsep) if confinement.processes else []
    wanted = [*python_folders(), os.path.join(SOURCE_ROOT, "accelopt_core"), *python_path, *tools,
              *confinement.extra_system, *confinement.read_only]
    names: set[str] = set()
    for path in wanted:
        if path and os.path.isabs(path) and os.path.exists(path) and not private_folder(path):
            names.update({os.path.realpath(path), os.path.normpath(path)})
    kept: list[str] = []
    for name in sorted(names, key=len):
        if not _covered_by_system(name) and not any(_inside(name, other) for other in kept):
            kept.append(name)
    return [(os.path.realpath(name), name) for name in kept]


def _hiding_arguments(hidden: Sequence[str], trees: Sequence[tuple[str, str]]) -> list[str]:
    """Cover each forbidden path wherever a visible tree shows it: a file with an empty one, a folder with
    an empty read-only one."""
    arguments: list[str] = []
    for path in hidden:
        real = os.path.realpath(path)
        if not os.path.exists(real):
            continue
        for source, inside in trees:
            if not _inside(real, source):
                continue
            target = inside + real[len(source):]
            if os.path.isdir(real):
                arguments += ["--tmpfs", target, "--remount-ro", target]
            else:
                arguments += ["--ro-bind", os.devnull, target]
    return arguments


def bwrap_arguments(confinement: Confinement, environ: dict[str, str], seccomp_fd: int | None) -> list[str]:
    """bwrap's command line up to the program to run (which follows after `--`)."""
    arguments = [BWRAP, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
                 "--hostname", "accelopt-sandbox", *_system_arguments()]
    trees = visible_trees(confinement, environ)
    for source, inside in trees:
        arguments += ["--ro-bind", source, inside]
    arguments += ["--proc", "/proc", "--remount-ro", "/proc", "--dev", "/dev"]
    for device in confinement.devices:
        arguments += ["--dev-bind", device, device]
    arguments += ["--remount-ro", "/dev"]
    writable = [(os.path.realpath(p), os.path.realpath(p)) for p in (confinement.workdir, *confinement.writable)
                if os.path.exists(p)]
    for source, inside in writable:
        arguments += ["--bind", source, inside]
    arguments += _hiding_arguments(confinement.hidden, [*trees, *writable])
    arguments += ["--remount-ro", "/", "--chdir", confinement.workdir]
    if seccomp_fd is not None:
        arguments += ["--seccomp", str(seccomp_fd)]
    return [*arguments, "--"]


# -- can it run here? -----------------------------------------------------------------------------------------


class IsolationUnavailableError(RuntimeError):
    """bwrap is missing or cannot create its namespaces here, and running unconfined was not allowed."""


_settled_isolation: list[str | None] = []


def isolation_problem() -> str | None:
    """Why kernels cannot be confined on this machine, or None when bwrap works (tried with the same options
    every kernel gets). A clear answer holds for the process; a probe killed by a signal or out of time says
    nothing about bwrap (memory pressure, a kill aimed elsewhere), so it is tried again next time."""
    if _settled_isolation:
        return _settled_isolation[0]
    problem, settled = _probe_isolation()
    if settled:
        _settled_isolation.append(problem)
    return problem


def _probe_isolation() -> tuple[str | None, bool]:
    """(what stops bwrap here or None, whether that answer is settled rather than a transient failure)."""
    if shutil.which(BWRAP) is None:
        return "bubblewrap (bwrap) is not installed", True
    folder = tempfile.mkdtemp(prefix="accelopt-probe-")
    try:
        run = spawn_confined(Confinement(workdir=folder), [sys.executable, "-c", "pass"],
                             sandbox_environment(dict(os.environ)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL)
        try:
            _, stderr = run.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            run.kill()
            run.communicate()
            return "bwrap did not start its sandbox within 30 s", False
    except OSError as exc:
        return f"bwrap could not run: {exc}", True
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if run.returncode < 0:
        return f"the bwrap probe was killed by signal {signal_name(-run.returncode)}", False
    if run.returncode != 0:
        detail = stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"status {run.returncode}"]
        return f"bwrap cannot create its sandbox here: {detail[0]}", True
    return None, True


def unconfined_allowed(environ: dict[str, str] | None = None) -> bool:
    """Whether the user opted in to running kernels without the OS sandbox."""
    value = (environ if environ is not None else os.environ).get(OPT_IN_VARIABLE, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


@functools.cache
def warn_unconfined(reason: str) -> None:
    """One line on stderr, once per process and reason, when a kernel runs without the OS sandbox."""
    print(f"accelopt: warning: kernels run without OS isolation ({reason}); only the in-process guard applies",
          file=sys.stderr)


def spawn_confined(confinement: Confinement, command: list[str], env: dict[str, str],
                   **popen: object) -> subprocess.Popen[bytes]:
    """Start `command` under bwrap, in its own process group (killing the group kills the sandbox)."""
    program = seccomp_program(confinement.processes)
    if program is None:
        return subprocess.Popen([*bwrap_arguments(confinement, env, None), *command], env=env,
                                start_new_session=True, **popen)  # type: ignore[call-overload]
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, program)  # a few hundred bytes: fits in the pipe before bwrap reads it
        os.close(write_end)
        write_end = -1
        return subprocess.Popen([*bwrap_arguments(confinement, env, read_end), *command], env=env,
                                pass_fds=(read_end,), start_new_session=True,
                                **popen)  # type: ignore[call-overload]
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)
