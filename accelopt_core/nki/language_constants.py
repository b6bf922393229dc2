"""`neuronxcc.nki.language.constants`: facts about NKI's types that library code around kernels reads
(the NKI samples' reference kernels size their buffers with `sizeinbytes`)."""

from __future__ import annotations

from typing import Any

from . import dtypes
from .errors import missing_api


def sizeinbytes(dtype: Any) -> int:
    """The bytes one element of `dtype` takes on the device."""
    return dtypes.facts_of(dtypes.as_dtype(dtype))[1]


__getattr__ = missing_api("nki.language.constants")
