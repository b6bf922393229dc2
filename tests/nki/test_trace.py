"""The trace's own counts, which need no timing model."""

from accelopt_core.nki.trace import Access, Engine, Instruction, Op, Trace


def _access(buffer: str, nbytes: int) -> Access:
    return Access(0, buffer, "float32", (1,), ((0, 1),), nbytes, nbytes)


def _instruction(engine: str, op: Op, reads: tuple[Access, ...], writes: tuple[Access, ...], flops: int = 0,
                 attrs: dict | None = None) -> Instruction:
    return Instruction(0, engine, op, reads, writes, 1, 1, flops, 1, (), attrs)


def test_the_summary_counts_bytes_by_memory_and_direction_and_the_tensor_engines_flops() -> None:
    trace = Trace([
        _instruction(Engine.DMA, Op.DMA_COPY, (_access("hbm", 512),), (_access("sbuf", 512),)),
        _instruction(Engine.TENSOR, Op.NC_MATMUL, (_access("sbuf", 64), _access("sbuf", 32)), (_access("psum", 16),),
                     flops=100),
        _instruction(Engine.TENSOR, Op.NC_TRANSPOSE, (_access("sbuf", 8),), (_access("psum", 8),), flops=30,
                     attrs={"is_transpose": True}),
        _instruction(Engine.VECTOR, Op.TENSOR_COPY, (_access("psum", 24),), (_access("sbuf", 24),), flops=7),
        _instruction(Engine.DMA, Op.DMA_COPY, (_access("sbuf", 24),), (_access("hbm", 24),)),
    ])
    assert trace.summary() == {
        "instruction_count": 5,
        "instructions_by_engine": {"tensor": 2, "vector": 1, "scalar": 0, "gpsimd": 0, "dma": 2},
        "hbm_read_bytes": 512, "hbm_write_bytes": 24, "sbuf_read_bytes": 128, "sbuf_write_bytes": 536,
        "psum_read_bytes": 24, "psum_write_bytes": 24, "hardware_flops": 130, "transpose_flops": 30,
    }
