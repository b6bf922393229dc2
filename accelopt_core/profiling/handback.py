"""What a kernel's child process hands back to the trusted side: plain data only.

The child writes `result.json` and, per recorded run, a `tape-K.stream` (the trace's tape, nki/tape.py,
in chunks written as the kernel runs) into its job folder; the neuron backend's child writes one `.npy`
file per output array instead (the hardware's outputs are the measurement there). Nothing in them is
ever executed: every file is opened with `open_job_file` (no link followed, no blocking on a FIFO, checked
on its descriptor), JSON is parsed, arrays are memory-mapped after their header as the unsigned integers of
their element size and only then viewed as the dtype the JSON names (NumPy cannot store ml_dtypes'
bf16/fp8 in a .npy header; they would come back as opaque `|V2`). The trusted side checks every name,
path, dtype, shape and size; anything else is a `MalformedResultError`, which the caller turns into one
failed evaluation.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import time
from typing import Any, BinaryIO

import numpy as np

from ..nki import dtypes
from ..nki.replay import ReplayLimitError
from ..nki.trace import collector_paused

RESULT_FILE = "result.json"
MAX_RESULT_BYTES = 64 * 1024 * 1024  # the report and the line table; arrays and traces travel in files of their own
# A trace's tape: the 66,336-instruction full-size NKIBench matmul is 15 MB, a 155,904-instruction per-block
# matmul 24 MB (benchmarks/replay_cost.py). Parsed JSON takes about ten times its size in memory.
MAX_TRACE_BYTES = 128 * 1024 * 1024
_ARRAY_FILE = re.compile(r"out-\d{1,6}-\d{1,6}\.npy")
_TAPE_FILE = re.compile(r"tape-\d{1,3}\.stream")
DTYPES = dtypes.NAMED  # the dtypes an output may have, by name


class MalformedResultError(ValueError):
    """The child's result is not what an honest child writes."""


def _storage(dtype: np.dtype) -> np.dtype:
    """The little-endian unsigned integer an element of `dtype` is stored as."""
    return np.dtype(f"<u{dtype.itemsize}")


def save_array(folder: str, name: str, array: np.ndarray) -> dict[str, Any]:
    """Child side: store `array` as FOLDER/NAME and return its descriptor for the JSON."""
    dtype = DTYPES.get(array.dtype.name)
    if dtype is None:
        raise TypeError(f"an output of dtype {array.dtype} cannot be checked (use one of {', '.join(DTYPES)})")
    plain = np.ascontiguousarray(array, dtype=dtype)
    np.save(os.path.join(folder, name), plain.view(_storage(dtype)), allow_pickle=False)
    return {"file": name, "dtype": dtype.name, "shape": list(plain.shape)}


def write_result(folder: str, fields: dict[str, Any]) -> None:
    """Child side: the result's fields (outputs as descriptors from `save_array`) as FOLDER/result.json."""
    with open(os.path.join(folder, RESULT_FILE), "w", encoding="utf-8") as handle:
        json.dump(fields, handle, default=_plain_number)


class TapeFile:
    """Child side: a recorded run's tape as FOLDER/tape-INDEX.stream, written chunk by chunk while the
    kernel runs (nki.tape.TapeWriter), each chunk as its length in ASCII digits, a newline and its JSON, so
    the trusted side can replay what is there while the rest is being recorded."""

    def __init__(self, folder: str, index: int):
        self.name = f"tape-{index}.stream"
        self._handle = open(os.path.join(folder, self.name), "wb")  # noqa: SIM115 (closed by close)

    def write(self, chunk: dict[str, Any]) -> None:
        data = json.dumps(chunk, separators=(",", ":")).encode()  # one shot: json.dump's encoder is 6x slower
        self._handle.write(b"%d\n" % len(data) + data)
        self._handle.flush()

    def close(self) -> None:
        self._handle.close()


# json.loads's objects take at most 16 bytes per byte of text (a one-character string: 50 bytes for at least 3)
# plus 72 per list or object (its header and its slot in its parent); measured on lists, objects, strings
# and numbers, an honest tape takes about half of it
PARSED_BYTES_PER_BYTE = 16
PARSED_BYTES_PER_CONTAINER = 72


def parsed_size_bound(data: bytes) -> int:
    """An upper bound of the memory `json.loads(data)` takes, counted without parsing."""
    return PARSED_BYTES_PER_BYTE * len(data) + PARSED_BYTES_PER_CONTAINER * (data.count(b"[") + data.count(b"{"))


class ParseBudget:
    """The memory the parsed tapes of one evaluation may take, all of them together: each chunk's bound is
    spent before it is parsed, so a tape of millions of empty entries is refused before it is materialised.
    Running out is the trusted side's limit (ReplayLimitError), not the kernel's fault."""

    def __init__(self, limit: int):
        self.limit = limit
        self.spent = 0

    def require(self, name: str, cost: int) -> None:
        """ReplayLimitError unless `cost` more bytes fit."""
        if self.spent + cost > self.limit:
            raise ReplayLimitError(f"{name}: the kernel's traces would take more than "
                                   f"{self.limit / 2**20:.0f} MiB of memory once read (memory limit)")

    def spend(self, name: str, cost: int) -> None:
        self.require(name, cost)
        self.spent += cost


class TapeFollower:
    """Trusted side: the chunks of the tape stream a child writes (`TapeFile`), parsed as they become whole.
    The file must be a plain file of the child's own, within MAX_TRACE_BYTES; it is read in pieces, each
    chunk's parsed size is charged to `budget` before it is parsed (the declared length alone is refused
    when it cannot fit). Its chunks are kept, so what was read once is what every replay of it sees,
    whatever the child writes over later."""

    def __init__(self, folder: str, name: Any, budget: ParseBudget | None = None, deadline: float = math.inf):
        if not isinstance(name, str) or not _TAPE_FILE.fullmatch(name):
            raise MalformedResultError(f"tape file name {str(name)[:40]!r} is not one the worker writes")
        self.name = name
        self.path = os.path.join(folder, name)
        self.budget = budget or ParseBudget(MAX_TRACE_BYTES * PARSED_BYTES_PER_BYTE)
        self.deadline = deadline  # of the kernel's time limit (time.monotonic), checked before each piece
        self.chunks: list[Any] = []
        self._read = 0  # bytes of the file consumed
        self._pending = bytearray()

    def poll(self) -> list[Any]:
        """The chunks completed since the last poll (none when the file does not exist yet)."""
        if not os.path.lexists(self.path):
            return []
        chunks: list[Any] = []
        with open_job_file(self.path, MAX_TRACE_BYTES) as handle:
            handle.seek(self._read)
            while piece := handle.read(_READ_BYTES):
                if time.monotonic() > self.deadline:
                    raise ReplayLimitError(f"{self.name}: reading the kernel's traces did not finish within "
                                           "its time limit")
                self._read += len(piece)
                if self._read > MAX_TRACE_BYTES:
                    raise MalformedResultError(f"{self.name} is larger than {MAX_TRACE_BYTES} bytes")
                self._pending += piece
                chunks += self._whole_chunks()
        self.chunks += chunks
        return chunks

    def _whole_chunks(self) -> list[Any]:
        """Parse the chunks `_pending` holds whole, and keep the rest."""
        buffer, start, chunks = self._pending, 0, []
        while True:
            newline = buffer.find(b"\n", start, start + _MAX_HEADER)
            if newline < 0:
                if len(buffer) - start >= _MAX_HEADER:
                    raise MalformedResultError(f"{self.name}: a chunk does not start with its length")
                break
            header = bytes(buffer[start:newline])
            if not header.isdigit():
                raise MalformedResultError(f"{self.name}: a chunk does not start with its length")
            length = int(header)
            self.budget.require(self.name, PARSED_BYTES_PER_BYTE * length)  # refused before it is read
            end = newline + 1 + length
            if end > len(buffer):
                break
            data = bytes(buffer[newline + 1:end])
            self.budget.spend(self.name, parsed_size_bound(data))
            chunks.append(_parsed_chunk(self.name, data))
            start = end
        del buffer[:start]
        return chunks

    def whole_chunks(self) -> bool:
        """Does what was read end at the end of a chunk?"""
        return not self._pending


_MAX_HEADER = 12  # a chunk's length in digits and its newline: MAX_TRACE_BYTES has 9 digits
_READ_BYTES = 4 * 2**20  # read at a time: a tape is never in memory twice as bytes


def _parsed_chunk(name: str, data: bytes) -> Any:
    try:
        with collector_paused():
            return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise MalformedResultError(f"{name}: a chunk is not JSON: {str(exc)[:200]}") from None


def check_tape_names(names: list[str], runs: int) -> None:
    """A result names exactly the tapes the worker writes for its runs, each once (`tape-0.stream` ...),
    checked before any is opened: the same tape named six times was parsed six times before the count
    was compared."""
    expected = [f"tape-{run}.stream" for run in range(runs)]
    if names != expected:
        shown = ", ".join(str(name)[:40] for name in names[:4]) + (", ..." if len(names) > 4 else "")
        raise MalformedResultError(f"the result names the tapes [{shown}], not the {runs} of its runs")


def read_tape(folder: str, name: Any, budget: ParseBudget | None = None, deadline: float = math.inf) -> list[Any]:
    """Trusted side: every chunk of a tape stream the child has finished writing (`TapeFollower`)."""
    follower = TapeFollower(folder, name, budget, deadline)
    if not os.path.lexists(follower.path):
        raise MalformedResultError(f"{name} is missing")
    follower.poll()
    if not follower.whole_chunks():
        raise MalformedResultError(f"{name} ends inside a chunk")
    return follower.chunks


def _plain_number(value: Any) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"{type(value).__name__} is not plain data")


_OPEN_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def open_job_file(path: str, limit: int | None = None) -> BinaryIO:
    """Trusted side: a file the child wrote, open for reading in binary. Opened without following a link
    and without blocking (a FIFO swapped in cannot hold the parent in `open`), then checked on the open
    descriptor, never by name first: a regular file, one link (not a link to something outside), at most
    `limit` bytes. Every read of a job folder's files goes through here."""
    name = os.path.basename(path)
    try:
        descriptor = os.open(path, _OPEN_FLAGS)
    except FileNotFoundError:
        raise MalformedResultError(f"{name} is missing") from None
    except OSError as exc:  # ELOOP: a link; ENXIO: a socket or a FIFO nobody writes
        raise MalformedResultError(f"{name} is not a plain file ({exc.strerror})") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
            raise MalformedResultError(f"{name} is not a plain file")
        if limit is not None and info.st_size > limit:
            raise MalformedResultError(f"{name} is larger than {limit} bytes")
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def read_job_file(path: str, limit: int) -> bytes:
    """The whole of a file the child wrote (`open_job_file`), at most `limit` bytes even if it grows."""
    with open_job_file(path, limit) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise MalformedResultError(f"{os.path.basename(path)} is larger than {limit} bytes")
    return data


def load_array(folder: str, descriptor: Any) -> np.ndarray:
    """Trusted side: the array a descriptor names, checked, read-only (memory-mapped)."""
    if not isinstance(descriptor, dict) or set(descriptor) != {"file", "dtype", "shape"}:
        raise MalformedResultError("an output descriptor is not {file, dtype, shape}")
    name, dtype_name, shape = descriptor["file"], descriptor["dtype"], descriptor["shape"]
    if not isinstance(name, str) or not _ARRAY_FILE.fullmatch(name):
        raise MalformedResultError(f"output file name {name!r} is not one the worker writes")
    dtype = DTYPES.get(dtype_name) if isinstance(dtype_name, str) else None
    if dtype is None:
        raise MalformedResultError(f"output dtype {dtype_name!r} is not allowed")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise MalformedResultError(f"output shape {shape!r} is not a list of sizes")
    with open_job_file(os.path.join(folder, name)) as handle:
        return _mapped_array(handle, name, dtype, shape).view(dtype)


_NPY_HEADERS = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}


def _mapped_array(handle: BinaryIO, name: str, dtype: np.dtype, shape: list[int]) -> np.ndarray:
    """The .npy array in the open file, memory-mapped read-only, after its header says the storage of
    `dtype` in `shape` and the file holds exactly its bytes."""
    try:
        version = np.lib.format.read_magic(handle)
        if version not in _NPY_HEADERS:
            raise ValueError(f"format version {version}")
        stored_shape, fortran, stored_dtype = _NPY_HEADERS[version](handle)
    except (OSError, ValueError) as exc:
        raise MalformedResultError(f"{name} is not a plain .npy array: {exc}") from exc
    if stored_dtype != _storage(dtype) or list(stored_shape) != shape:
        raise MalformedResultError(f"{name} holds {stored_dtype}{list(stored_shape)}, not {dtype.name}{shape}")
    offset, size = handle.tell(), os.fstat(handle.fileno()).st_size
    if size != offset + stored_dtype.itemsize * math.prod(shape):
        raise MalformedResultError(f"{name} does not hold the {math.prod(shape)} elements its header says")
    if not all(shape):
        return np.empty(shape, stored_dtype)
    return np.memmap(handle, stored_dtype, "r", offset, tuple(shape), "F" if fortran else "C")


def read_result(folder: str) -> dict[str, Any]:
    """Trusted side: FOLDER/result.json as a dict whose `outputs` (per case, per output) are checked
    arrays."""
    text = read_job_file(os.path.join(folder, RESULT_FILE), MAX_RESULT_BYTES)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise MalformedResultError(f"{RESULT_FILE} is not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise MalformedResultError(f"{RESULT_FILE} is not an object")
    cases = data.get("outputs", [])
    if not isinstance(cases, list) or not all(isinstance(case, list) for case in cases):
        raise MalformedResultError("outputs is not a list of cases")
    data["outputs"] = [[load_array(folder, d) for d in case] for case in cases]
    return data


OPTIONAL_TEXT = (str, type(None))
OPTIONAL_INT = (int, type(None))
OPTIONAL_NUMBER = (int, float, type(None))


def typed(data: dict[str, Any], types: dict[str, tuple[type, ...]]) -> dict[str, Any]:
    """The fields of `types` present in `data`, each of its allowed types (bools are not numbers)."""
    fields = {}
    for key, allowed in types.items():
        if key not in data:
            continue
        value = data[key]
        if not isinstance(value, allowed) or (isinstance(value, bool) and bool not in allowed):
            raise MalformedResultError(f"{key} is a {type(value).__name__}")
        fields[key] = value
    return fields

