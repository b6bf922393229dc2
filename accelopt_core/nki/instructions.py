"""Every NeuronCore instruction the simulator runs, declared once: the engines it may run on, how the
performance model prices it there, the NeuronCore versions that have it, its names in both NKI APIs, the
memories its operands may live in, its size and dtype limits, and the source names the rewrite rules
recognise as it.

Everything that used to restate these facts reads them here: the trace's `Op` names, the simulator's
hardware-rule checks (nki/ops.py), the `nisa.*` functions of both APIs that have no adapter of their own
(nki/isa.py, nki/modern/isa.py), the cost model's dispatch (perfmodel/costs.py), the rules' engine tables
(agents/rules/) and the README's list. An instruction's semantics (its NumPy execution) stay in ops.py, in
the function of the same name: adding an instruction is one declaration here plus that function.

The limits follow the NKI ISA documentation (each declaration names its page), never stricter than what ran
on trn1 hardware: the calibration kernels and the public nki-samples keep running.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

HBM, SBUF, PSUM = "hbm", "sbuf", "psum"
ON_CHIP = (SBUF, PSUM)
NEURON_CORES = (2, 3, 4)  # NeuronCore-v2 (trn1), v3 (trn2), v4 (trn3): hardware/*.toml neuron_core_version


class Engine:
    """Names of the NeuronCore engines an instruction can run on."""

    TENSOR = "tensor"
    VECTOR = "vector"
    SCALAR = "scalar"
    GPSIMD = "gpsimd"
    DMA = "dma"

    ALL = (TENSOR, VECTOR, SCALAR, GPSIMD, DMA)


# What each engine can reach at all, whatever the instruction: only DMA moves data to or from HBM (and DMA has
# no PSUM port), GpSimd has no PSUM port, the Tensor engine writes PSUM only (fact sheet A.4).
ENGINE_MEMORIES: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = MappingProxyType({
    Engine.DMA: ((HBM, SBUF), (HBM, SBUF)),
    Engine.TENSOR: (ON_CHIP, (PSUM,)),
    Engine.VECTOR: (ON_CHIP, ON_CHIP),
    Engine.SCALAR: (ON_CHIP, ON_CHIP),
    Engine.GPSIMD: ((SBUF,), (SBUF,)),
})


# Engines that work partition by partition: element i of an operand meets element i of the output in the same
# lane, unless the instruction has its own data path across partitions (`across_partitions`)
LANE_ENGINES = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)


class Cost(enum.StrEnum):
    """How perfmodel/costs.py prices an instruction on one engine (each class is one formula there)."""

    DMA = "dma"  # setup plus bytes over the DMA engines it spans
    MATMUL = "matmul"  # the PE array's pass over the moving tile
    STREAMING = "streaming"  # Vector: max(MIN_II, N / performance mode), + MIN_II reading a reduction out
    TENSOR_TENSOR = "tensor_tensor"  # Vector: 1 or tensor_tensor_cycles_per_element x N by operands
    MEMSET = "memset"  # Vector: N, N/2 for a 16-bit zero fill
    REDUCE = "reduce"  # Vector: N, N/2 for a 16-bit add or max
    SCAN = "scan"  # Vector: 2N (a dependent step per element)
    SCALAR_TENSOR_TENSOR = "scalar_tensor_tensor"  # Vector: N for 16-bit subtract-multiply, else 2N
    RECIPROCAL = "reciprocal"  # Vector: reciprocal_cycles_per_element x N
    BN_AGGR = "bn_aggr"  # Vector: 13N/3
    SELECT = "select"  # Vector: N with a side in PSUM, 2N SBUF to SBUF (tensor_copy_predicated)
    ONE_PASS = "one_pass"  # max(MIN_II, N) on Vector and Scalar; startup + N on GpSimd
    TWO_PASS = "two_pass"  # GpSimd: startup + 2N (two inputs, or across partitions)
    TOPK = "topk"  # GpSimd: 4n + K, n the elements of one 16-partition snake and K the results (nisa.topk)


@dataclass(frozen=True, slots=True)
class Operand:
    """What one named operand of an instruction may be: the memories it may live in and its dtypes (an empty
    tuple: any). Named as the parameter of the semantics function in ops.py (the APIs pass it through)."""

    memories: tuple[str, ...] = ON_CHIP
    dtypes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Size:
    """The work one instruction may take on one engine: at most `partitions` partitions (None: the hardware's
    partition count) and between `min_free` and `max_free` elements per partition (None: no limit)."""

    partitions: int | None = None
    min_free: int = 0
    max_free: int | None = None


@dataclass(frozen=True, slots=True)
class Declaration:
    """One instruction of the trace."""

    name: str  # the trace's name (`Op`), as the ISA call that emits it
    engines: tuple[str, ...]  # engines it may run on; the first when neither kernel nor compiler picks
    cost: Mapping[str, Cost]  # the formula per engine; an engine without one is priced one pass and noted
    legacy: tuple[str, ...] = ()  # `neuronxcc.nki.isa` functions that emit it
    modern: tuple[str, ...] = ()  # `nki.isa` functions that emit it
    language: tuple[str, ...] = ()  # other source names the rules read as this instruction (`nl.load`)
    versions: tuple[int, ...] = NEURON_CORES  # NeuronCore versions that have it
    reads: tuple[str, ...] = ON_CHIP  # memories any operand it reads may live in
    writes: tuple[str, ...] = ON_CHIP  # memories any operand it writes may live in
    operands: Mapping[str, Operand] = field(default_factory=dict)  # finer rules of named operands
    one_in_psum: tuple[str, ...] = ()  # operands of which at most one may be in PSUM
    sizes: Mapping[str, Size] = field(default_factory=dict)  # per engine; absent: Size()
    across_partitions: bool = False  # moves data between partitions (else lane by lane on LANE_ENGINES)
    moves: bool = False  # only moves or reorders data: the same inputs give the same result, no arithmetic
    source: str = ""  # the ISA page the limits come from

    def size(self, engine: str) -> Size:
        return self.sizes.get(engine, _ANY_SIZE)


_ANY_SIZE = Size()
_V, _S, _G, _T, _D = Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD, Engine.TENSOR, Engine.DMA
_ACTIVATION_FUNCTIONS = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "silu", "gelu", "relu", "sin", "cos",
                         "arctan", "erf", "softplus", "mish", "sign", "abs", "square", "softmax")
_EIGHT = Size(min_free=8, max_free=16384)  # the top-8 instructions: 8 to 16384 elements per partition
_FLOATS = ("float32", "bfloat16", "float16")
_NARROW = ("float8_e4m3", "float8_e4m3fn", "float8_e5m2", "int8", "uint8", "int16", "uint16")
_NOT_32_BIT_INT = (*_FLOATS, *_NARROW)  # BF16, FP16, FP32, FP8, 8- and 16-bit integers
_NOT_INT32 = (*_NOT_32_BIT_INT, "bool")  # any type but 32-bit integers (tfloat32 is float32 here)
_SELECT_PREDICATE = ("uint8", "int8", "uint16", "int16", "bool")  # integer predicates (bool: a uint8 mask)


def _declare(*declarations: Declaration) -> Mapping[str, Declaration]:
    return MappingProxyType({d.name: d for d in declarations})


DECLARED: Mapping[str, Declaration] = _declare(
    Declaration("dma_copy", (_D,), {_D: Cost.DMA}, legacy=("dma_copy", "dma_transpose", "dma_compute"), moves=True,
                modern=("dma_copy", "dma_transpose", "dma_compute"),
                language=("nl.load", "nl.store", "nl.load_transpose2d", "nl.atomic_rmw"),
                reads=(HBM, SBUF), writes=(HBM, SBUF), source="nki.isa.dma_copy, dma_transpose, dma_compute"),
    Declaration("nc_matmul", (_T,), {_T: Cost.MATMUL}, legacy=("nc_matmul",), modern=("nc_matmul",),
                language=("nl.matmul",), writes=(PSUM,),
                operands={"stationary": Operand((SBUF,)), "moving": Operand((SBUF,))},
                source="nki.isa.nc_matmul (sizes: the hardware profile's stationary/moving free maxima)"),
    Declaration("nc_transpose", (_T, _V), {_T: Cost.MATMUL, _V: Cost.ONE_PASS}, legacy=("nc_transpose",),
                modern=("nc_transpose",), language=("nl.transpose",), across_partitions=True, moves=True,
                sizes={_T: Size(128, max_free=128), _V: Size(32, max_free=32)}, source="nki.isa.nc_transpose"),
    Declaration("tensor_tensor", (_V, _G), {_V: Cost.TENSOR_TENSOR, _G: Cost.TWO_PASS}, legacy=("tensor_tensor",),
                modern=("tensor_tensor",), one_in_psum=("data1", "data2"), source="nki.isa.tensor_tensor"),
    Declaration("tensor_scalar", (_V, _S, _G), {_V: Cost.STREAMING, _S: Cost.ONE_PASS, _G: Cost.ONE_PASS},
                legacy=("tensor_scalar",), modern=("tensor_scalar",), source="nki.isa.tensor_scalar"),
    Declaration("scalar_tensor_tensor", (_V,), {_V: Cost.SCALAR_TENSOR_TENSOR}, legacy=("scalar_tensor_tensor",),
                modern=("scalar_tensor_tensor",), source="nki.isa.scalar_tensor_tensor"),
    Declaration("tensor_tensor_scan", (_V,), {_V: Cost.SCAN}, legacy=("tensor_tensor_scan",),
                modern=("tensor_tensor_scan",), one_in_psum=("data0", "data1"), source="nki.isa.tensor_tensor_scan"),
    Declaration("tensor_reduce", (_V,), {_V: Cost.REDUCE}, legacy=("tensor_reduce",), modern=("tensor_reduce",),
                language=("nl.sum", "nl.max", "nl.min", "nl.prod", "nl.mean", "nl.all"),
                source="nki.isa.tensor_reduce"),
    Declaration("tensor_scalar_reduce", (_V,), {_V: Cost.STREAMING}, legacy=("tensor_scalar_reduce",),
                modern=("tensor_scalar_reduce",), source="nki.isa.tensor_scalar_reduce"),
    Declaration("tensor_partition_reduce", (_G,), {_G: Cost.TWO_PASS}, legacy=("tensor_partition_reduce",),
                modern=("tensor_partition_reduce",), reads=(SBUF,), writes=(SBUF,), across_partitions=True,
                source="nki.isa.tensor_partition_reduce"),
    Declaration("tensor_copy", (_V, _S, _G), {_V: Cost.STREAMING, _S: Cost.ONE_PASS, _G: Cost.ONE_PASS},
                legacy=("tensor_copy",), modern=("tensor_copy",), language=("nl.copy",), moves=True,
                source="nki.isa.tensor_copy"),
    Declaration("activation", (_S,), {_S: Cost.ONE_PASS}, legacy=("activation", "activation_reduce"),
                modern=("activation", "activation_reduce"),
                language=tuple(f"nl.{name}" for name in _ACTIVATION_FUNCTIONS), source="nki.isa.activation"),
    Declaration("reciprocal", (_V, _S), {_V: Cost.RECIPROCAL}, legacy=("reciprocal",), modern=("reciprocal",),
                source="nki.isa.reciprocal"),
    Declaration("memset", (_V, _G), {_V: Cost.MEMSET, _G: Cost.ONE_PASS}, legacy=("memset",), modern=("memset",),
                source="nki.isa.memset"),
    Declaration("iota", (_G,), {_G: Cost.ONE_PASS}, legacy=("iota",), modern=("iota",), reads=(), writes=(SBUF,),
                source="nki.isa.iota"),
    Declaration("select", (_V,), {_V: Cost.SELECT}, legacy=("tensor_copy_predicated",),
                modern=("tensor_copy_predicated",), language=("nl.where",), one_in_psum=("src", "predicate"),
                source="nki.isa.tensor_copy_predicated"),
    Declaration("affine_select", (_G,), {_G: Cost.ONE_PASS}, legacy=("affine_select",), modern=("affine_select",),
                reads=(SBUF,), writes=(SBUF,), source="nki.isa.affine_select"),
    Declaration("bn_stats", (_V,), {_V: Cost.ONE_PASS}, legacy=("bn_stats",), modern=("bn_stats",),
                sizes={_V: Size(max_free=512)}, source="nki.isa.bn_stats (nl.tile_size.bn_stats_fmax)"),
    Declaration("bn_aggr", (_V,), {_V: Cost.BN_AGGR}, legacy=("bn_aggr",), modern=("bn_aggr",),
                source="nki.isa.bn_aggr"),
    Declaration("dropout", (_V,), {_V: Cost.ONE_PASS}, legacy=("dropout",), modern=("dropout",),
                language=("nl.dropout",), source="nki.isa.dropout"),
    Declaration("random_seed", (_V,), {_V: Cost.ONE_PASS}, language=("nl.random_seed",),
                source="nki.language.random_seed"),
    Declaration("nc_stream_shuffle", (_V,), {_V: Cost.ONE_PASS}, legacy=("nc_stream_shuffle",),
                modern=("nc_stream_shuffle",), across_partitions=True, source="nki.isa.nc_stream_shuffle"),
    Declaration("max8", (_V,), {_V: Cost.ONE_PASS}, legacy=("max8",), modern=("max8",), sizes={_V: _EIGHT},
                source="nki.isa.max8"),
    Declaration("nc_find_index8", (_V,), {_V: Cost.ONE_PASS}, legacy=("nc_find_index8",), modern=("nc_find_index8",),
                sizes={_V: _EIGHT}, operands={"dst": Operand(dtypes=("uint16", "uint32"))},
                source="nki.isa.nc_find_index8"),
    Declaration("nc_match_replace8", (_V,), {_V: Cost.ONE_PASS}, legacy=("nc_match_replace8",),
                modern=("nc_match_replace8",), sizes={_V: _EIGHT},
                operands={"dst_idx": Operand(dtypes=("uint16", "uint32"))}, source="nki.isa.nc_match_replace8"),
    Declaration("range_select", (_V,), {_V: Cost.ONE_PASS}, legacy=("range_select",), modern=("range_select",),
                versions=(3, 4), source="nki.isa.range_select"),
    Declaration("select_reduce", (_V,), {_V: Cost.SELECT}, legacy=("select_reduce",), modern=("select_reduce",),
                one_in_psum=("on_true", "predicate"),
                operands={"predicate": Operand(dtypes=_SELECT_PREDICATE), "on_true": Operand(dtypes=_NOT_INT32),
                          "reduce_res": Operand(dtypes=_FLOATS)},
                source="nki.isa.select_reduce (priced as tensor_copy_predicated: the ISA gives no cost)"),
    Declaration("tensor_scalar_cumulative", (_V,), {_V: Cost.SCAN}, modern=("tensor_scalar_cumulative",),
                versions=(3, 4),
                operands={"src": Operand(dtypes=_NOT_32_BIT_INT), "dst": Operand(dtypes=_NOT_32_BIT_INT)},
                source="nki.isa.tensor_scalar_cumulative (priced as tensor_tensor_scan: the ISA gives no cost)"),
    Declaration("topk", (_G,), {_G: Cost.TOPK}, modern=("topk",), versions=(3, 4), reads=(SBUF,), writes=(SBUF,),
                across_partitions=True,
                operands={"src": Operand((SBUF,), ("bfloat16",)), "val_dst": Operand((SBUF,), ("bfloat16",)),
                          "idx_dst": Operand((SBUF,), ("uint32",))},
                source="nki.isa.topk (NKI 0.7, Neuron 2.33: 16-partition groups, snake layout, sorted=; its cost "
                       "4n + K and limits as NKI 0.6 documents them)"),
)


Op = enum.StrEnum("Op", {name.upper(): name for name in DECLARED}, module=__name__)
Op.__doc__ = """The instructions a trace holds (`Instruction.op`): exactly the declarations above, by name.

Str-valued: a member compares and hashes like its name, so a trace's plain form and the reports keep their
spelling. A name outside them is refused where it enters (the performance model's schedule), not priced as a
guess."""


def cost_class(op: str, engine: str) -> Cost | None:
    """The formula that prices `op` on `engine`; None where the ISA documents none (priced one pass, noted)."""
    return DECLARED[op].cost.get(engine)


def source_engine_choices() -> dict[str, tuple[str, ...]]:
    """The engines each source name may run on, the default first: `nisa.X` by the API functions that emit an
    instruction, the language's own names (`nl.load`) by `language`."""
    engines: dict[str, tuple[str, ...]] = {}
    for declaration in DECLARED.values():
        for name in (*(f"nisa.{f}" for f in (*declaration.legacy, *declaration.modern)), *declaration.language):
            engines[name] = declaration.engines
    return engines


def source_engines() -> dict[str, str]:
    """The engine each source name runs on when neither the kernel nor the compiler picks one."""
    return {name: engines[0] for name, engines in source_engine_choices().items()}


def declaration_of(api: str, function: str) -> Declaration | None:
    """The instruction `nisa.<function>` of `api` ("legacy" or "modern") emits, None when it emits none."""
    for declaration in DECLARED.values():
        if function in (declaration.legacy if api == "legacy" else declaration.modern):
            return declaration
    return None


def markdown_list() -> str:
    """The README's list of simulated instructions, one line each (tests/nki/test_instructions.py keeps the
    README equal to it)."""
    lines = []
    for d in DECLARED.values():
        versions = ", ".join(f"v{v}" for v in d.versions)
        calls = sorted({*d.legacy, *d.modern})
        apis = ("`nki.language`" if not d.legacy and not d.modern else
                "both APIs" if set(d.legacy) == set(d.modern) else
                "legacy only" if not d.modern else "`nki` only" if not d.legacy else "both APIs, in part")
        named = ", ".join(f"`nisa.{c}`" for c in calls) or ", ".join(f"`{n}`" for n in d.language)
        lines.append(f"- `{d.name}` ({'/'.join(d.engines)}; NeuronCore {versions}; {apis}): {named}")
    return "\n".join(lines)


README_BEGIN, README_END = "<!-- instructions: begin -->\n", "\n<!-- instructions: end -->"


def with_list(readme: str) -> str:
    """`readme` with its list of simulated instructions (between the markers) made from the declarations: after
    adding one, `Path("README.md").write_text(with_list(Path("README.md").read_text()))`."""
    head, rest = readme.split(README_BEGIN, 1)
    return head + README_BEGIN + markdown_list() + README_END + rest.split(README_END, 1)[1]

