"""One BLAS thread per process: the simulator's matmuls are many small products, for which a
multi-threaded BLAS on a shared 2-core machine spends its time contending (measured: 30-40 ms per
128x128x512 product with threads, well under 1 ms without)."""

from __future__ import annotations

from threadpoolctl import threadpool_limits

_limited = False


def single_threaded_blas() -> None:
    """Limit BLAS/OpenMP pools to one thread for the rest of this process (idempotent)."""
    global _limited
    if not _limited:
        threadpool_limits(1)
        _limited = True
