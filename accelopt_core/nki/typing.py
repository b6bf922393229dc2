"""`nki.typing`: annotations kernels put on their parameters (`nt.tensor[[128, 512], nl.float32]`)."""

from __future__ import annotations

from typing import Any


class _Annotation:
    """Subscriptable placeholder: annotations carry no behaviour in the simulator."""

    def __class_getitem__(cls, item: Any) -> type:
        return cls


class tensor(_Annotation):  # noqa: N801  (NKI's own name)
    pass


class mutable_tensor(_Annotation):  # noqa: N801
    pass


class scalar(_Annotation):  # noqa: N801
    pass
