"""The performance model's result and the NKIBench "% of peak" metric.

Field names follow the neuron-profile summary JSON (fact sheet C) so a planner prompt, the editor
and the benchmark runner read the same keys whether the numbers came from this model or from a
profile of real hardware. Units are neuron-profile's too: every `*_percent` field is a fraction of the
latency (0.739 means 73.9 %), `idle_percent` included; `peak_percent()` (the NKIBench metric) is percent.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from accelopt_core.hardware import HardwareProfile


@dataclass(slots=True)
class PerfReport:
    """Estimated timing and traffic of one kernel run on one NeuronCore."""

    hardware: str
    latency: float  # seconds, from the first instruction's start to the last result
    latency_ms: float
    total_time: float  # profiler name for the same latency, seconds
    neuroncore_cycle_count: int
    instruction_count: int

    tensor_engine_active_time: float
    vector_engine_active_time: float
    scalar_engine_active_time: float
    gpsimd_engine_active_time: float
    dma_active_time: float  # union of the intervals where some DMA moves data
    tensor_engine_active_time_percent: float
    vector_engine_active_time_percent: float
    scalar_engine_active_time_percent: float
    gpsimd_engine_active_time_percent: float
    dma_active_time_percent: float

    tensor_engine_instruction_count: int
    vector_engine_instruction_count: int
    scalar_engine_instruction_count: int
    gpsimd_engine_instruction_count: int
    dma_instruction_count: int
    matmul_instruction_count: int

    hbm_read_bytes: int
    hbm_write_bytes: int
    sbuf_read_bytes: int
    sbuf_write_bytes: int
    psum_read_bytes: int
    psum_write_bytes: int
    spill_save_bytes: int
    spill_reload_bytes: int
    sbuf_peak_live_bytes_per_partition: int
    sbuf_usable_bytes_per_partition: int

    hardware_flops: int
    transpose_flops: int
    hfu_estimated_percent: float
    mfu_inst_estimated_percent: float
    mm_arithmetic_intensity: float
    mbu_estimated_percent: float

    dma_transfer_count: int  # per-engine pieces, as the profiler counts transfers
    dma_transfer_total_bytes: int
    dma_transfer_average_bytes: float

    bottleneck: str  # "tensor", "vector", "scalar", "gpsimd", "dma" or "none"
    bottleneck_summary: str

    # the physical floor of the executed work (floor.py): no hardware is faster, so `latency` is never below it
    physical_floor_time: float = 0.0  # seconds
    physical_floor_bound: str = "none"  # "hbm", "tensor", "vector", "scalar", "gpsimd" or "none"
    physical_floor_times: dict[str, float] = field(default_factory=dict)  # seconds per resource
    hbm_distinct_read_bytes: int = 0  # HBM bytes the executed DMAs read, each once
    hbm_distinct_write_bytes: int = 0
    # a model bug: the model priced the kernel below its floor (then `latency` is the floor) or priced fewer
    # HBM bytes than the executed DMAs move; `notes` says which
    model_below_floor: bool = False
    critical_path_time: dict[str, float] = field(default_factory=dict)  # seconds per engine
    engine_busy_time: dict[str, float] = field(default_factory=dict)  # seconds per engine
    idle_percent: dict[str, float] = field(default_factory=dict)  # fraction of the latency per engine
    lines: list[dict[str, Any]] = field(default_factory=list)
    loops: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # what the latency assumes the compiler does (assumptions.py): kind, line, related_lines, instructions,
    # bytes_not_moved, bytes_added, description
    assumptions: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (plain numbers, strings, lists and dicts)."""
        return asdict(self)


def peak_percent(report: PerfReport | float, mm_flops: float, vec_flops: float,
                 hbm_bytes: float, hardware: HardwareProfile, mm_dtype: str = "float32") -> float:
    """NKIBench "% of peak": the best possible latency over the achieved one, in percent.

    The best latency is the largest of matmul time, vector time and memory time at the hardware's
    peak rates (docs/nkibench.md). `report` may also be a latency in seconds, e.g. a measured one.
    """
    latency = report.latency if isinstance(report, PerfReport) else float(report)
    if latency <= 0:
        raise ValueError("peak_percent needs a positive latency")
    return 100.0 * max(peak_times(mm_flops, vec_flops, hbm_bytes, hardware, mm_dtype).values()) / latency


def peak_times(mm_flops: float, vec_flops: float, hbm_bytes: float, hardware: HardwareProfile,
               mm_dtype: str = "float32") -> dict[str, float]:
    """Seconds of matmul, vector and memory work at peak. NKIBench's matmul peak is FP32's; a task whose
    inputs are narrower (bfloat16) may multiply at their rate, that many times faster (fact sheet A.3)."""
    peak = hardware.peak
    matmul_rate = peak.matmul_flops * hardware.tensor.factor("float32") / hardware.tensor.factor(mm_dtype)
    return {"matmul": mm_flops / matmul_rate, "vector": vec_flops / peak.vector_flops,
            "memory": hbm_bytes / peak.hbm_bandwidth}
