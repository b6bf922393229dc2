"""NeuronCore hardware profiles, read from TOML data files.

The numbers live in one TOML file per generation in this folder (`trn1.toml`, `trn2.toml`, each with its
source beside it) rather than in code, so the performance model can be recalibrated or pointed at a custom
profile without edits. The files are also the registry of generations: every list of hardware names (CLI
choices, editor settings, service schema, prompts) is `available_hardware()`, so a new generation is one
file. Loading is strict: a missing or unknown key is an error, because a silently defaulted constant would
skew every estimate without anyone noticing.
"""

from __future__ import annotations

import functools
import itertools
import math
import os
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

HARDWARE_DIR = Path(__file__).resolve().parent  # the built-in generations: one `<name>.toml` each


class HardwareProfileError(ValueError):
    """A hardware profile name or file could not be turned into a `HardwareProfile`."""


@dataclass(frozen=True, slots=True)
class TensorEngineSpec:
    """PE array geometry and the matmul cost-model constants (fact sheet A.3)."""

    clock_hz: float
    array_rows: int
    array_cols: int
    stationary_free_max: int
    moving_free_max: int
    fast_weight_load_free: int
    mm_init_latency_cycles: float
    fp32_transpose_factor: float
    fp32_counted_flops_factor: float  # neuron-profile's hardware_flops per 2*rows*cols*N of an FP32 matmul
    default_dtype_factor: float
    dtype_factor: tuple[tuple[str, float], ...]

    def factor(self, dtype: str) -> float:
        """Cycle multiplier of a matmul whose inputs have `dtype` (FP32 is 4x BF16)."""
        return dict(self.dtype_factor).get(dtype, self.default_dtype_factor)


@dataclass(frozen=True, slots=True)
class ComputeEngineSpec:
    """Vector, Scalar or GpSimd: widths and the per-instruction overheads of fact sheet B.8."""

    clock_hz: float
    lanes: int
    elements_per_cycle: float
    elements_per_cycle_16bit: float
    elements_per_cycle_8bit: float
    min_ii_cycles: float
    startup_cycles: float
    static_overhead_cycles: float
    access_start_cycles: float
    perf_mode_copy_speedup: float
    perf_mode_other_speedup: float
    reciprocal_cycles_per_element: float  # VectorE reciprocal: cycles per element per partition
    tensor_tensor_cycles_per_element: float  # VectorE tensor_tensor outside the fast cases (two SBUF inputs)

    def rate(self, item_size: int) -> float:
        """Elements per partition per cycle for data of `item_size` bytes."""
        if item_size <= 1:
            return self.elements_per_cycle_8bit
        if item_size == 2:
            return self.elements_per_cycle_16bit
        return self.elements_per_cycle


@dataclass(frozen=True, slots=True)
class DmaSpec:
    """DMA engines and queues, per-engine bandwidth and small-transfer efficiency (fact sheet A.6)."""

    engines: int
    queues_per_engine: int
    partitions_per_engine: int
    engine_bandwidth: float
    engine_element_rate: float
    fixed_cost_s: float
    transfer_target_bytes: int  # a transfer at least this large pays its setup off (the rules merge and grow to it)
    transpose_efficiency_hbm: float
    transpose_efficiency_sbuf: float
    efficiency_curve: tuple[tuple[float, float], ...]

    def efficiency(self, element_bytes: float) -> float:
        """Share of the engine bandwidth reached when each descriptor element has this many bytes."""
        curve = self.efficiency_curve
        if element_bytes <= curve[0][0]:
            return curve[0][1]
        if element_bytes >= curve[-1][0]:
            return curve[-1][1]
        x = math.log2(element_bytes)
        for (b0, e0), (b1, e1) in itertools.pairwise(curve):
            if element_bytes <= b1:
                x0, x1 = math.log2(b0), math.log2(b1)
                return e0 + (e1 - e0) * (x - x0) / (x1 - x0)
        return curve[-1][1]

    def width_penalty(self, item_size: int) -> float:
        """How much longer than its byte count says a transfer of `item_size`-byte elements takes.

        An engine moves at most `engine_bandwidth` bytes and `engine_element_rate` elements per
        second, so elements narrower than bandwidth / element rate bytes are element-bound.
        """
        element_bound = self.engine_element_rate * max(1, item_size)
        return max(1.0, self.engine_bandwidth / element_bound)


@dataclass(frozen=True, slots=True)
class MemorySpec:
    """HBM bandwidth per core and on-chip buffer sizes (fact sheet A.4 / A.6)."""

    hbm_bandwidth: float
    sbuf_partitions: int
    sbuf_bytes_per_partition: int
    sbuf_usable_bytes_per_partition: int
    psum_bytes_per_partition: int
    psum_banks: int
    psum_bank_bytes: int
    vector_gpsimd_share_sbuf: bool  # NC-v2: Vector and GpSimd cannot access SBUF at the same time
    vector_scalar_share_psum: bool  # NC-v2: Vector and Scalar cannot access PSUM at the same time
    rotating_buffers: int  # physical SBUF buffers the compiler gives one tile statement of a loop body, in turn
    stream_buffers: int  # buffers of a DMA stream the compiler adds (a load issued again at its uses, spill reloads)


@dataclass(frozen=True, slots=True)
class PeakSpec:
    """Peak rates used for "% of peak" (docs/nkibench.md) and for HFU (profiler definition)."""

    hbm_bandwidth: float
    vector_flops: float
    matmul_flops: float
    tensor_flops: float


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """One NeuronCore generation, as the performance model needs it."""

    name: str
    description: str
    neuron_core_version: int  # NeuronCore-v2 (trn1), -v3 (trn2): what the ISA and the compiler allow
    calibrated: bool  # False until measured kernels back the constants: every number priced with it says so
    base_clock_hz: float
    tensor: TensorEngineSpec
    vector: ComputeEngineSpec
    scalar: ComputeEngineSpec
    gpsimd: ComputeEngineSpec
    dma: DmaSpec
    memory: MemorySpec
    peak: PeakSpec
    source: str

    def compute_engine(self, engine: str) -> ComputeEngineSpec:
        """The spec of "vector", "scalar" or "gpsimd"."""
        if engine == "vector":
            return self.vector
        if engine == "scalar":
            return self.scalar
        if engine == "gpsimd":
            return self.gpsimd
        raise KeyError(f"{engine!r} is not a Vector/Scalar/GpSimd engine")


def available_hardware() -> tuple[str, ...]:
    """The built-in generations, oldest first: the names accepted by `load_hardware` besides a path."""
    return _generations(HARDWARE_DIR)


@functools.cache
def _generations(folder: Path) -> tuple[str, ...]:
    return tuple(sorted((path.stem for path in folder.glob("*.toml")), key=_generation_order))


def _generation_order(name: str) -> tuple[str, int]:
    """"trn2" before "trn10": the family, then the generation number."""
    family = name.rstrip("0123456789")
    return family, int(name[len(family):] or 0)


def load_hardware(name: str | os.PathLike[str]) -> HardwareProfile:
    """Load a built-in profile (one of `available_hardware()`) or a custom TOML file given by path."""
    text = os.fspath(name)
    key = text.strip().lower()
    if key in available_hardware():
        return _load_builtin(HARDWARE_DIR / f"{key}.toml")
    path = Path(text).expanduser()
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise HardwareProfileError(f"hardware profile file not found: {path}")
        return _load_file(path)
    known = ", ".join(available_hardware())
    raise HardwareProfileError(
        f"unknown hardware {text!r}: use one of {known}, or a path to a .toml profile"
    )


@functools.cache
def _load_builtin(path: Path) -> HardwareProfile:
    profile = _load_file(path)
    if profile.name != path.stem:  # the file name is what every front end offers: it must be the profile's
        raise HardwareProfileError(f"{path}: name = {profile.name!r}, but the file says {path.stem!r}")
    return profile


def _load_file(path: Path) -> HardwareProfile:
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise HardwareProfileError(f"{path}: invalid TOML: {exc}") from exc
    return profile_from_dict(data, source=str(path))


def profile_from_dict(data: dict[str, Any], source: str = "<dict>") -> HardwareProfile:
    """Validate parsed TOML data and build the profile; every key must be present and known."""
    top = _take(data, source, "", {"name", "description", "neuron_core_version", "calibrated", "base_clock_hz",
                                   "tensor", "vector", "scalar", "gpsimd", "dma", "memory", "peak"})
    tensor_data = dict(_section(top, source, "tensor"))
    dtype_table = tensor_data.pop("dtype_factor", None)
    if not isinstance(dtype_table, dict) or not dtype_table:
        raise HardwareProfileError(f"{source}: [tensor.dtype_factor] is missing or empty")
    tensor_data["dtype_factor"] = tuple(
        (str(k), _number(v, source, f"tensor.dtype_factor.{k}")) for k, v in dtype_table.items()
    )
    dma_data = dict(_section(top, source, "dma"))
    curve = dma_data.get("efficiency_curve")
    dma_data["efficiency_curve"] = _curve(curve, source)
    return HardwareProfile(
        name=str(top["name"]),
        description=str(top["description"]),
        neuron_core_version=_generation_number(top["neuron_core_version"], source),
        calibrated=_flag(top["calibrated"], source, "calibrated"),
        base_clock_hz=_number(top["base_clock_hz"], source, "base_clock_hz"),
        tensor=_build(TensorEngineSpec, tensor_data, source, "tensor"),
        vector=_build(ComputeEngineSpec, _section(top, source, "vector"), source, "vector"),
        scalar=_build(ComputeEngineSpec, _section(top, source, "scalar"), source, "scalar"),
        gpsimd=_build(ComputeEngineSpec, _section(top, source, "gpsimd"), source, "gpsimd"),
        dma=_build(DmaSpec, dma_data, source, "dma"),
        memory=_build(MemorySpec, _section(top, source, "memory"), source, "memory"),
        peak=_build(PeakSpec, _section(top, source, "peak"), source, "peak"),
        source=source,
    )


def _take(data: dict[str, Any], source: str, where: str, expected: set[str]) -> dict[str, Any]:
    missing = sorted(expected - data.keys())
    unknown = sorted(data.keys() - expected)
    label = f"[{where}]" if where else "top level"
    if missing:
        raise HardwareProfileError(f"{source}: {label} is missing keys: {', '.join(missing)}")
    if unknown:
        raise HardwareProfileError(f"{source}: {label} has unknown keys: {', '.join(unknown)}")
    return data


def _section(top: dict[str, Any], source: str, name: str) -> dict[str, Any]:
    value = top[name]
    if not isinstance(value, dict):
        raise HardwareProfileError(f"{source}: [{name}] must be a table")
    return value


def _number(value: Any, source: str, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise HardwareProfileError(f"{source}: {key} must be a number, got {value!r}")
    if not math.isfinite(value) or value < 0:
        raise HardwareProfileError(f"{source}: {key} must be a finite non-negative number")
    return value


def _flag(value: Any, source: str, key: str) -> bool:
    if not isinstance(value, bool):
        raise HardwareProfileError(f"{source}: {key} must be true or false, got {value!r}")
    return value


def _generation_number(value: Any, source: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise HardwareProfileError(f"{source}: neuron_core_version must be a positive integer, got {value!r}")
    return value


def _curve(curve: Any, source: str) -> tuple[tuple[float, float], ...]:
    if not isinstance(curve, list) or not curve:
        raise HardwareProfileError(f"{source}: dma.efficiency_curve must be a non-empty list")
    points: list[tuple[float, float]] = []
    for point in curve:
        if not isinstance(point, list) or len(point) != 2:
            raise HardwareProfileError(f"{source}: dma.efficiency_curve points are [bytes, efficiency]")
        size = _number(point[0], source, "dma.efficiency_curve bytes")
        eff = _number(point[1], source, "dma.efficiency_curve efficiency")
        if size <= 0 or not 0 < eff <= 1:
            raise HardwareProfileError(f"{source}: dma.efficiency_curve point {point} out of range")
        if points and size <= points[-1][0]:
            raise HardwareProfileError(f"{source}: dma.efficiency_curve bytes must increase")
        points.append((size, eff))
    return tuple(points)


# Keys that divide something: zero would crash or give infinite times, so reject it at load time.
_MUST_BE_POSITIVE = frozenset({
    "clock_hz", "array_rows", "array_cols", "lanes", "elements_per_cycle",
    "elements_per_cycle_16bit", "elements_per_cycle_8bit", "perf_mode_copy_speedup",
    "perf_mode_other_speedup", "engines", "queues_per_engine", "partitions_per_engine",
    "engine_bandwidth", "engine_element_rate", "transpose_efficiency_hbm", "transpose_efficiency_sbuf",
    "hbm_bandwidth",
    "sbuf_partitions", "sbuf_usable_bytes_per_partition", "psum_banks", "psum_bank_bytes", "rotating_buffers",
    "stream_buffers",
    "vector_flops", "matmul_flops", "tensor_flops", "default_dtype_factor", "fp32_transpose_factor",
    "fp32_counted_flops_factor",
})


def _build(cls: type, data: dict[str, Any], source: str, where: str) -> Any:
    names = {f.name for f in fields(cls)}
    _take(data, source, where, names)
    values: dict[str, Any] = {}
    for f in fields(cls):
        value = data[f.name]
        if f.type in ("int", "float"):
            value = _number(value, source, f"{where}.{f.name}")
            if f.name in _MUST_BE_POSITIVE and value <= 0:
                raise HardwareProfileError(f"{source}: {where}.{f.name} must be positive")
            value = int(value) if f.type == "int" else float(value)
        values[f.name] = value
    return cls(**values)
