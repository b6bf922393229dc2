"""Per-instruction costs from the ISA formulas of the NKI fact sheet (B.8, A.3, A.5, A.6).

Compute instructions get an occupancy (how long the engine is busy, the initiation interval of
back-to-back work) and a tail latency (how much later a dependent instruction may start: the
static overhead plus the SBUF/PSUM access start, or MM_INIT_LATENCY on the Tensor engine). Keeping
the two apart is what lets independent instructions stream at the formula rate while a chain of
dependent ones pays the overhead every step, as the perf guide measures.

DMA transfers cost a fixed setup plus their bytes over the engines they span, slowed by the
size-efficiency curve (bytes per descriptor element) and by the element-width penalty: engines are
also limited to `engine_element_rate` elements per second, which makes 2-byte data move at half
the byte rate (calibrated on the matmul tutorial's BF16 kernels; see trn1.toml).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from accelopt_core.hardware import ComputeEngineSpec, HardwareProfile
from accelopt_core.nki.dtypes import DTYPE_SIZES
from accelopt_core.nki.instructions import Cost, cost_class
from accelopt_core.nki.trace import Access, Alu, Engine, Instruction, Op

# tensor_tensor ops that run at one element per cycle for all-BF16 SBUF operands (fact sheet B.8).
_FAST_TT_OPS = frozenset({Alu.ADD, Alu.SUBTRACT, Alu.MULTIPLY})
_FAST_REDUCE_OPS = frozenset({Alu.ADD, Alu.MAXIMUM})
_SIXTEEN_BIT = frozenset({"bfloat16", "float16"})
# Which formula prices an instruction on an engine is its declaration's cost class (nki/instructions.py); an
# engine it has no class for is priced one pass and noted in unknown_ops.


@dataclass(frozen=True, slots=True)
class DmaCost:
    """What one DMA transfer asks of the queues and the shared DMA bandwidth."""

    fixed: float  # seconds of setup before data moves (descriptors, semaphores)
    work_bytes: float  # bytes charged to the shared bandwidth: payload / efficiency
    rate: float  # bytes/s this transfer can reach alone (the engines it spans)
    engines: int  # DMA engines the transfer is split over (profiler "transfers")
    payload: int  # bytes actually moved

    @property
    def standalone(self) -> float:
        """Duration with the DMA engines to itself."""
        return self.fixed + self.work_bytes / self.rate


class CostModel:
    """Prices instructions for one hardware profile; memoises the repetitive cases."""

    def __init__(self, hardware: HardwareProfile) -> None:
        self.hw = hardware
        dma = hardware.dma
        self.aggregate_dma_rate = min(dma.engines * dma.engine_bandwidth,
                                      hardware.memory.hbm_bandwidth)
        self.unknown_ops: dict[tuple[str, str], int] = {}
        self._dma_cache: dict[tuple[object, ...], DmaCost] = {}
        self._mm_cache: dict[tuple[object, ...], float] = {}
        self._tails: dict[str, float] = {}
        self._clock: dict[str, float] = {Engine.TENSOR: hardware.tensor.clock_hz}
        self._overhead: dict[str, float] = {}
        for name in (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD):
            spec = hardware.compute_engine(name)
            self._clock[name] = spec.clock_hz
            # An instruction's static overhead occupies its engine (the profiler counts it as active
            # time); the SBUF/PSUM access start after it only delays a dependent instruction.
            self._overhead[name] = spec.static_overhead_cycles
            self._tails[name] = spec.access_start_cycles / spec.clock_hz
        self._tails[Engine.TENSOR] = hardware.tensor.mm_init_latency_cycles / hardware.tensor.clock_hz

    # ----------------------------------------------------------------- compute engines
    def tail(self, engine: str) -> float:
        """Seconds after an instruction's occupancy ends before a dependent one may start."""
        return self._tails.get(engine, 0.0)

    def occupancy(self, inst: Instruction, engine: str | None = None) -> float:
        """Seconds the engine (the instruction's own unless the scheduler placed it on another one
        the compiler may choose) is busy with it (not valid for DMA)."""
        engine = engine or inst.engine
        if engine == Engine.TENSOR:
            return self._matmul_seconds(inst)
        spec = self.hw.compute_engine(engine)
        if engine == Engine.VECTOR:
            cycles = self._vector_cycles(inst, spec)
        elif engine == Engine.SCALAR:
            cycles = self._scalar_cycles(inst, spec)
        else:
            cycles = self._gpsimd_cycles(inst, spec)
        if inst.attrs and inst.attrs.get("loop_reduce") and inst.op == Op.TENSOR_TENSOR:
            # nl.loop_reduce accumulates across iterations as the accumulate flag of the reduce that
            # produced its operand: one pass over its elements, no instruction of its own. Calibration
            # set (2025 compiler, cases.json): bmm_softmax and gqa_full run 8192 each, and their
            # VectorE active time (5.6 / 6.0 ms) has no room for 8192 x (MIN_II + overhead) = 1.5 ms more.
            return inst.free_elements / spec.clock_hz
        return (cycles + self._overhead[engine]) / spec.clock_hz

    def setup(self, inst: Instruction, engine: str | None = None) -> float:
        """Seconds of the occupancy that are the instruction's static overhead, which the engine spends on it
        while still streaming the instruction before when this one is already waiting in its queue.

        The ISA cost table gives initiation intervals (max(MIN_II, N)); the arch guide adds ~100 cycles of
        static overhead "when N is much smaller than 128 or each instruction depends on the previous one"
        (fact sheet B.8): back-to-back ready instructions hide it behind the one before (the scheduler's
        lanes overlap it so), while one that waited for its data pays it in full, as the calibration set's
        active time shows (silu, adamw: 512 + ~130 cycles per op on engines that wait for their loads)."""
        engine = engine or inst.engine
        if engine == Engine.TENSOR or (inst.attrs and inst.attrs.get("loop_reduce") and inst.op == Op.TENSOR_TENSOR):
            return 0.0
        return self._overhead[engine] / self._clock[engine]

    def _matmul_seconds(self, inst: Instruction) -> float:
        attrs = inst.attrs or {}
        stationary = attrs.get("stationary_free")
        moving = attrs.get("moving_free")
        if stationary is None or moving is None:
            stationary, moving = _matmul_shape_from_operands(inst)
        transpose = bool(attrs.get("is_transpose")) or inst.op == Op.NC_TRANSPOSE
        onezero = bool(attrs.get("onezero"))
        key = (stationary, moving, inst.dtype, transpose, onezero)
        seconds = self._mm_cache.get(key)
        if seconds is None:
            spec = self.hw.tensor
            factor = spec.factor(inst.dtype)
            four_byte = DTYPE_SIZES.get(inst.dtype, 4) == 4
            if transpose and four_byte:
                factor = min(factor, spec.fp32_transpose_factor)
            if onezero and four_byte:
                factor = max(1.0, factor / 2)  # an all-0/1 operand doubles FP32 speed (fact sheet A.3)
            base = max(min(spec.fast_weight_load_free, stationary), moving)
            seconds = base * factor / spec.clock_hz
            self._mm_cache[key] = seconds
        return seconds

    def _vector_cycles(self, inst: Instruction, spec: ComputeEngineSpec) -> float:
        cost = cost_class(inst.op, Engine.VECTOR)
        attrs = inst.attrs or {}
        ii = spec.min_ii_cycles
        n = inst.free_elements / spec.rate(DTYPE_SIZES.get(inst.dtype, 4))
        if cost == Cost.STREAMING:
            # tensor_scalar_reduce: max(MIN_II, N) + MIN_II (fact sheet B.8)
            cycles = max(ii, n / self._vector_perf_mode(inst, spec))
            if attrs.get("reduce"):
                cycles += ii
            return cycles
        if cost == Cost.TENSOR_TENSOR:
            fast = _any_in(inst.reads, "psum") or (
                _all_sixteen_bit(inst) and _all_in(inst.reads, "sbuf")
                and attrs.get("op") in _FAST_TT_OPS and _contiguous(inst))
            cycles = n if fast else spec.tensor_tensor_cycles_per_element * n
            if _all_sixteen_bit(inst) and _all_in(inst.reads, "sbuf"):
                # trn2 performance mode: 2x over NeuronCore-v2 (trainium2_arch: VectorE performance mode)
                cycles /= spec.perf_mode_other_speedup
            return max(ii, cycles)
        if cost == Cost.MEMSET:
            value = attrs.get("value", None)
            if value == 0 and _all_sixteen_bit(inst):
                return max(ii, n / 2)
            return max(ii, n)
        if cost == Cost.REDUCE:
            half = _all_sixteen_bit(inst) and attrs.get("op") in _FAST_REDUCE_OPS
            return max(ii, n / 2 if half else n)
        if cost == Cost.SCAN:
            return max(ii, 2 * n)
        if cost == Cost.SCALAR_TENSOR_TENSOR:
            # the tiles in 16 bits (reads: data, operand1, then a per-partition operand0 of any type)
            tiles = (*inst.reads[:2], *inst.writes)
            fast = (inst.dtype in _SIXTEEN_BIT and all(a.dtype in _SIXTEEN_BIT for a in tiles)
                    and tuple(attrs.get("ops", ())) == (Alu.SUBTRACT, Alu.MULTIPLY) and inst.free_elements % 2 == 0)
            return max(ii, n if fast else 2 * n)
        if cost == Cost.RECIPROCAL:
            return max(ii, spec.reciprocal_cycles_per_element * n)
        if cost == Cost.BN_AGGR:
            return max(ii, 13 * n / 3)
        if cost == Cost.SELECT:
            # priced as tensor_copy_predicated (B.8): 1x with one side in PSUM, 2x SBUF to SBUF
            psum = _any_in(inst.reads, "psum") or _any_in(inst.writes, "psum")
            return max(ii, n if psum else 2 * n)
        if cost != Cost.ONE_PASS:
            self._note_unknown(inst)
        return max(ii, n)

    def _vector_perf_mode(self, inst: Instruction, spec: ComputeEngineSpec) -> float:
        """trn2 VectorE performance mode for 16-bit copies and tensor_scalar (fact sheet A.5)."""
        if spec.perf_mode_copy_speedup == 1 and spec.perf_mode_other_speedup == 1:
            return 1.0
        if not _all_sixteen_bit(inst):
            return 1.0
        if _all_in(inst.reads, "sbuf") and _all_in(inst.writes, "sbuf") and _contiguous(inst):
            return spec.perf_mode_copy_speedup
        return spec.perf_mode_other_speedup

    def _scalar_cycles(self, inst: Instruction, spec: ComputeEngineSpec) -> float:
        attrs = inst.attrs or {}
        ii = spec.min_ii_cycles
        n = inst.free_elements / spec.rate(DTYPE_SIZES.get(inst.dtype, 4))
        if cost_class(inst.op, Engine.SCALAR) != Cost.ONE_PASS:
            self._note_unknown(inst)
        cycles = max(ii, n)
        if attrs.get("reduce"):
            cycles += ii  # reading the accumulators out (ActReadAccumulator ~64 cycles, A.5)
        return cycles

    def _gpsimd_cycles(self, inst: Instruction, spec: ComputeEngineSpec) -> float:
        # iota/affine_select are documented as 150 + N and topk as 4n + K; the rest reuse the first shape,
        # with two passes for two-input and cross-partition ops (UNCERTAIN, to calibrate).
        cost = cost_class(inst.op, Engine.GPSIMD)
        if cost == Cost.TOPK:
            return _topk_cycles(inst)
        passes = 2 if cost == Cost.TWO_PASS else 1
        if cost not in (Cost.ONE_PASS, Cost.TWO_PASS):
            self._note_unknown(inst)
        n = inst.free_elements / spec.rate(DTYPE_SIZES.get(inst.dtype, 4))
        return max(spec.min_ii_cycles, spec.startup_cycles + passes * n)

    def _note_unknown(self, inst: Instruction) -> None:
        key = (inst.engine, inst.op)
        self.unknown_ops[key] = self.unknown_ops.get(key, 0) + 1

    # ----------------------------------------------------------------------------- DMA
    def dma(self, inst: Instruction) -> DmaCost:
        """Cost of a `dma_copy`: fixed setup plus payload over the engines it spans."""
        src = inst.reads[0] if inst.reads else None
        dst = inst.writes[0] if inst.writes else None
        attrs = inst.attrs or {}
        transpose = bool(attrs.get("transpose"))
        hbm_side = _hbm_side(src, dst)
        if hbm_side is not None:
            payload = hbm_side.nbytes
            contiguous = hbm_side.contiguous_bytes
        else:
            sides = [a for a in (src, dst) if a is not None]
            payload = max((a.nbytes for a in sides), default=0)
            contiguous = min((a.contiguous_bytes for a in sides), default=0)
        if attrs.get("compute"):  # dma_compute: the engines read every source and write the sum
            payload = sum(a.nbytes for a in (*inst.reads, *inst.writes))
        partitions = max(1, inst.partitions)
        # element width: the HBM side's (a casting load moves as many elements as it reads)
        width_side = hbm_side if hbm_side is not None else src
        item = DTYPE_SIZES.get(width_side.dtype, 4) if width_side is not None else 4
        key = (payload, contiguous, partitions, transpose, hbm_side is not None,
               attrs.get("direction") == "hbm_to_hbm", item)
        cost = self._dma_cache.get(key)
        if cost is None:
            cost = self._dma_cost(payload, contiguous, partitions, transpose,
                                  hbm=hbm_side is not None, hbm_only=bool(key[5]), item_size=item)
            self._dma_cache[key] = cost
        return cost

    def spill_dma(self, payload: int, partitions: int, item_size: int = 4) -> DmaCost:
        """Cost of a transfer the compiler adds between HBM and SBUF (a spill, its reload, or a load
        issued again at a use) of `payload` bytes over `partitions` partitions."""
        partitions = max(1, min(partitions, self.hw.memory.sbuf_partitions))
        return self._dma_cost(max(1, payload), max(1, payload // partitions), partitions, False,
                              hbm=True, hbm_only=False, item_size=item_size)

    def _dma_cost(self, payload: int, contiguous: int, partitions: int, transpose: bool,
                  hbm: bool, hbm_only: bool, item_size: int = 4) -> DmaCost:
        spec = self.hw.dma
        element = contiguous if contiguous > 0 else payload
        if not hbm_only:
            element = min(element, payload / partitions)
        efficiency = spec.efficiency(max(element, 1.0))
        if transpose:
            efficiency *= spec.transpose_efficiency_hbm if hbm else spec.transpose_efficiency_sbuf
        # Narrow elements: the engines are element-bound below bandwidth / element-rate bytes
        # (2-byte data moves at half the byte rate of 4-byte data; see engine_element_rate).
        efficiency /= spec.width_penalty(item_size)
        engines = min(spec.engines, max(1, math.ceil(partitions / spec.partitions_per_engine)))
        rate = min(engines * spec.engine_bandwidth, self.aggregate_dma_rate)
        return DmaCost(fixed=spec.fixed_cost_s, work_bytes=max(payload, 1) / efficiency,
                       rate=rate, engines=engines, payload=payload)

    # ------------------------------------------------------------------------ helpers
    def standalone(self, inst: Instruction) -> float:
        """Seconds from start to a dependent-visible result with no contention at all."""
        if inst.engine == Engine.DMA:
            return self.dma(inst).standalone
        return self.occupancy(inst) + self.tail(inst.engine)


def _topk_cycles(inst: Instruction) -> float:
    """The ISA's estimate for nki.isa.topk: 4n + K GpSimd cycles, n the elements of one 16-partition snake and K
    the results; an instruction recorded without them (a test's, a rewrite's) is sized by its operands, the whole
    snake its source holds and the columns of its first output."""
    attrs = inst.attrs or {}
    n = attrs.get("n", 16 * inst.free_elements)
    k = attrs.get("k", inst.writes[0].shape[-1] if inst.writes and inst.writes[0].shape else 1)
    return 4 * n + k


def _hbm_side(src: Access | None, dst: Access | None) -> Access | None:
    if src is not None and src.buffer == "hbm":
        return src
    if dst is not None and dst.buffer == "hbm":
        return dst
    return None


def _matmul_shape_from_operands(inst: Instruction) -> tuple[int, int]:
    """Stationary and moving free sizes when the simulator gave no attrs."""
    def free(acc: Access | None) -> int:
        if acc is None or not acc.shape:
            return inst.free_elements
        count = 1
        for size in acc.shape[1:]:
            count *= size
        return count

    stationary = inst.reads[0] if inst.reads else None
    moving = inst.reads[1] if len(inst.reads) > 1 else None
    if inst.op == Op.NC_TRANSPOSE:
        return free(stationary), stationary.partitions if stationary else inst.partitions
    return free(stationary), free(moving)


def _any_in(accesses: tuple[Access, ...], buffer: str) -> bool:
    return any(a.buffer == buffer for a in accesses)


def _all_in(accesses: tuple[Access, ...], buffer: str) -> bool:
    return all(a.buffer == buffer for a in accesses)


def _all_sixteen_bit(inst: Instruction) -> bool:
    if inst.dtype not in _SIXTEEN_BIT:
        return False
    return all(a.dtype in _SIXTEEN_BIT for a in inst.reads) and all(
        a.dtype in _SIXTEEN_BIT for a in inst.writes)


def _contiguous(inst: Instruction) -> bool:
    """Every on-chip operand's free data is one contiguous run per partition."""
    for acc in inst.reads + inst.writes:
        per_partition = acc.nbytes // max(1, acc.partitions)
        if acc.contiguous_bytes < per_partition:
            return False
    return True
