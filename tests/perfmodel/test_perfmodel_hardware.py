"""The trn1/trn2 profiles load, are complete and documented, and custom files work."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

import accelopt_core.hardware as hardware_pkg
from accelopt_core.hardware import (
    HardwareProfile,
    HardwareProfileError,
    available_hardware,
    load_hardware,
)

DATA_DIR = Path(hardware_pkg.__file__).resolve().parent
SOURCE_MARK = re.compile(r"fact sheet|nkibench|UNCERTAIN|calibration|derived|trn3 guide|trn3 overview|nc-v4",
                         re.IGNORECASE)


def _keys(table: dict[str, Any], prefix: str = "") -> set[str]:
    out: set[str] = set()
    for key, value in table.items():
        name = f"{prefix}{key}"
        out.add(name)
        if isinstance(value, dict):
            out |= _keys(value, f"{name}.")
    return out


def _walk(obj: Any) -> list[tuple[str, Any]]:
    if dataclasses.is_dataclass(obj):
        pairs: list[tuple[str, Any]] = []
        for field in dataclasses.fields(obj):
            value = getattr(obj, field.name)
            pairs.append((field.name, value))
            pairs.extend((f"{field.name}.{k}", v) for k, v in _walk(value))
        return pairs
    return []


@pytest.mark.parametrize("name", ["trn1", "trn2", "trn3"])
def test_builtin_profiles_load_completely(name: str) -> None:
    profile = load_hardware(name)
    assert isinstance(profile, HardwareProfile)
    assert profile.name == name
    for key, value in _walk(profile):
        assert value is not None, key
        if isinstance(value, float | int) and not isinstance(value, bool) and key.endswith(
                ("clock_hz", "bandwidth", "flops", "lanes", "engines")):
            assert value > 0, key
    assert profile.tensor.factor("float32") == 4 * profile.tensor.factor("bfloat16")


def test_every_generation_has_the_same_keys() -> None:
    tables = [tomllib.loads((DATA_DIR / f"{n}.toml").read_text()) for n in ("trn1", "trn2", "trn3")]
    assert _keys(tables[0]) == _keys(tables[1]) == _keys(tables[2])
    assert available_hardware() == ("trn1", "trn2", "trn3")


@pytest.mark.parametrize("name", ["trn1", "trn2", "trn3"])
def test_every_number_names_its_source(name: str) -> None:
    lines = (DATA_DIR / f"{name}.toml").read_text().splitlines()
    for number, line in enumerate(lines, start=1):
        if re.match(r"\s*[A-Za-z0-9_]+\s*=\s*[-0-9.]", line):
            assert "#" in line and SOURCE_MARK.search(line.split("#", 1)[1]), f"{name}.toml:{number}: {line}"
        if re.match(r"\s*efficiency_curve\s*=", line):
            comments = " ".join(lines[max(0, number - 5):number - 1])
            assert SOURCE_MARK.search(comments), f"{name}.toml:{number}: curve without a source"


def test_trn1_peak_constants_match_nkibench() -> None:
    peak = load_hardware("trn1").peak
    assert peak.hbm_bandwidth == 410 * 2**30
    assert peak.vector_flops == pytest.approx(2 * 128 * 1.12e9)
    assert peak.matmul_flops == 23.75e12


def test_trn2_has_its_own_constants() -> None:
    trn1, trn2 = load_hardware("trn1"), load_hardware("trn2")
    assert trn2.peak != trn1.peak
    assert trn2.vector.clock_hz == 0.96e9 and trn2.tensor.clock_hz == 2.4e9
    assert trn2.memory.sbuf_usable_bytes_per_partition == 212984
    assert trn2.dma.engine_bandwidth == 23e9


def test_trn3_takes_the_architecture_guide_numbers() -> None:
    trn2, trn3 = load_hardware("trn2"), load_hardware("trn3")
    assert trn3.neuron_core_version == 4 and not trn3.calibrated
    assert trn3.vector.clock_hz == 1.2e9 and trn3.tensor.clock_hz == trn2.tensor.clock_hz
    assert trn3.memory.sbuf_bytes_per_partition * 128 == 32 * 2**20
    assert trn3.memory.psum_bytes_per_partition == trn2.memory.psum_bytes_per_partition


def test_names_are_case_insensitive_and_cached() -> None:
    assert load_hardware("TRN1") is load_hardware("trn1")


def test_unknown_name_is_a_clear_error() -> None:
    with pytest.raises(HardwareProfileError, match=r"unknown hardware 'trn9'.*trn1, trn2, trn3"):
        load_hardware("trn9")


def test_custom_profile_from_a_path(tmp_path: Path) -> None:
    text = (DATA_DIR / "trn1.toml").read_text()
    text = text.replace('name = "trn1"', 'name = "my-core"')
    text = text.replace("engine_bandwidth = 17e9", "engine_bandwidth = 20e9")
    path = tmp_path / "custom.toml"
    path.write_text(text)
    profile = load_hardware(path)
    assert profile.name == "my-core"
    assert profile.dma.engine_bandwidth == 20e9
    assert load_hardware(str(path)).source == str(path)


def test_missing_file_and_missing_or_unknown_keys(tmp_path: Path) -> None:
    with pytest.raises(HardwareProfileError, match="not found"):
        load_hardware(tmp_path / "nope.toml")
    text = (DATA_DIR / "trn1.toml").read_text()
    missing = tmp_path / "missing.toml"
    missing.write_text(re.sub(r"\nfixed_cost_s = .*", "", text))
    with pytest.raises(HardwareProfileError, match=r"\[dma\] is missing keys: fixed_cost_s"):
        load_hardware(missing)
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(text.replace("[memory]\n", "[memory]\nsbuf_magic = 3\n"))
    with pytest.raises(HardwareProfileError, match="unknown keys: sbuf_magic"):
        load_hardware(unknown)
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("clock_hz = 2.8e9", "clock_hz = 0"))
    with pytest.raises(HardwareProfileError, match="must be positive"):
        load_hardware(bad)


def test_dma_efficiency_curve_shape() -> None:
    dma = load_hardware("trn1").dma
    assert dma.efficiency(256) == pytest.approx(0.5)
    assert dma.efficiency(2048) == pytest.approx(0.97)  # calibration set (trn1.toml)
    assert dma.efficiency(4096) == 1.0
    assert dma.efficiency(1 << 20) == 1.0
    sizes = [2**i for i in range(0, 16)]
    values = [dma.efficiency(s) for s in sizes]
    assert values == sorted(values)
