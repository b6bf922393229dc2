"""Trainium NeuronCore profiles as data for the simulator and the performance model: one TOML file per
generation in this folder, which is also the list of generations (`available_hardware()`)."""

from accelopt_core.hardware.profile import (
    HARDWARE_DIR,
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
    "HARDWARE_DIR",
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
