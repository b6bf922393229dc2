"""Trainium NeuronCore profiles (trn1, trn2) as data for the performance model."""

from accelopt_core.hardware.profile import (
    BUILTIN_PROFILES,
    ComputeEngineSpec,
    DmaSpec,
    HardwareProfile,
    HardwareProfileError,
    MemorySpec,
    PeakSpec,
    TensorEngineSpec,
    available_hardware,
    load_hardware,
    profile_from_dict,
)

__all__ = [
    "BUILTIN_PROFILES",
    "ComputeEngineSpec",
    "DmaSpec",
    "HardwareProfile",
    "HardwareProfileError",
    "MemorySpec",
    "PeakSpec",
    "TensorEngineSpec",
    "available_hardware",
    "load_hardware",
    "profile_from_dict",
]
