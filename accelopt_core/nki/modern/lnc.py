"""`nki.lnc` (NKI 0.8): exchange and synchronisation between the two physical NeuronCores that share an HBM
stack. The simulator runs one core, where a partner to send to, receive from or wait for does not exist:
each entry point stops with one line that says so, rather than returning data no core sent."""

from __future__ import annotations

from typing import Any

from ..errors import UnsupportedApiError, missing_api


def _one_core(name: str) -> UnsupportedApiError:
    return UnsupportedApiError(f"nki.lnc.{name} needs the partner NeuronCore of a logical NeuronCore; the simulator "
                               "runs one core, so there is nothing to exchange with or wait for (profile the "
                               "kernel on hardware, or split the work with nl.program_id instead)")


def sendrecv(*_: Any, **__: Any) -> None:
    raise _one_core("sendrecv")


def sendrecv_compute(*_: Any, **__: Any) -> None:
    raise _one_core("sendrecv_compute")


def core_barrier(*_: Any, **__: Any) -> None:
    raise _one_core("core_barrier")


__getattr__ = missing_api("nki.lnc")
