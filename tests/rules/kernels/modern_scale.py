import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def kernel(x, w):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    for r in range(x.shape[0] // 128):
        tile = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
        gain = nl.ndarray((128, 512), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=tile, src=x[r * 128:(r + 1) * 128, 0:512])
        nisa.dma_copy(dst=gain, src=w[0:128, 0:512])
        nisa.tensor_tensor(dst=tile, data1=tile, data2=gain, op=nl.multiply)
        nisa.dma_copy(dst=out[r * 128:(r + 1) * 128, 0:512], src=tile)
    return out
