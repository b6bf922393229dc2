"""`neuronxcc.nki.compiler.backends.neuron` (and its `indexing` and `tensor` modules): the compiler's
own types, which library code around kernels imports for its annotations (the NKI samples' reference
utilities annotate tile indices as `TileIndex`). Only the names such code imports exist here; any other
is reported as unsupported, naming the kernel's line."""

from __future__ import annotations

from typing import Any

from .errors import UnsupportedApiError, missing_api
from .indexing import IndexExpr as TileIndex  # noqa: F401  (the compiler's name for an index expression)


class local_tile:  # noqa: N801  (the compiler's own name)
    """The compiler's on-chip tile type: importable for annotations, not constructible here."""

    def __new__(cls, *args: Any, **kwargs: Any) -> local_tile:
        raise UnsupportedApiError("neuronxcc.nki.compiler.backends.neuron.tensor.local_tile is not implemented by "
                                  "the AccelOpt simulator")


__getattr__ = missing_api("neuronxcc.nki.compiler.backends.neuron")
