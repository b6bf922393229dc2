"""A new Trainium generation is one TOML file: dropped into the hardware folder, the command line, the
editor's settings and lenses, the service's schema and the simulator all offer it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from accelopt_core.cli import build_parser
from accelopt_core.hardware import available_hardware, load_hardware, profile
from accelopt_core.nki.tensor import Limits
from accelopt_core.service.app import create_app
from accelopt_core.tasks.registry import task_files
from server.config import Settings, merge
from server.features.code_lens import lenses
from server.state import KernelDocument

NEW = "trn5"  # a generation no file ships


@pytest.fixture
def third_generation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A hardware folder holding the shipped profiles and one more, made from trn2's numbers."""
    for name in available_hardware():
        shutil.copy(profile.HARDWARE_DIR / f"{name}.toml", tmp_path)
    text = (profile.HARDWARE_DIR / "trn2.toml").read_text()
    (tmp_path / f"{NEW}.toml").write_text(text.replace('name = "trn2"', f'name = "{NEW}"')
                                          .replace("neuron_core_version = 3", "neuron_core_version = 4"))
    monkeypatch.setattr(profile, "HARDWARE_DIR", tmp_path)
    return NEW


def test_the_registry_lists_the_toml_files_in_generation_order(third_generation: str) -> None:
    assert available_hardware() == ("trn1", "trn2", "trn3", third_generation)
    assert load_hardware(third_generation).name == third_generation


def test_the_command_line_offers_the_new_generation(third_generation: str) -> None:
    args = build_parser().parse_args(["profile", "k.py", "--task", "silu", "--hardware", third_generation])
    assert args.hardware == third_generation


def test_the_editor_settings_accept_it_and_the_lens_offers_it(third_generation: str) -> None:
    settings, problems = merge(Settings(), {"accelopt": {"hardware": third_generation}})
    assert settings.hardware == third_generation and not problems
    doc = KernelDocument.create("file:///nowhere/silu.py",
                                "# accelopt: task=silu\n" + Path(task_files("silu").kernel).read_text())
    titles = [title for _, title, _, _ in lenses(doc, "trn1")]
    assert "Profile on trn2" in titles and f"Profile on {third_generation}" in titles
    assert "Profile on trn1" not in titles


def test_the_service_schema_offers_it(third_generation: str) -> None:
    schema = create_app(token="t", workers=1).openapi()
    assert schema["components"]["schemas"]["JobRequest"]["properties"]["hardware"]["enum"] == [
        "trn1", "trn2", "trn3", third_generation]


def test_the_simulator_takes_its_limits_from_the_file(third_generation: str) -> None:
    limits = Limits.for_hardware(third_generation)
    assert limits.neuron_core_version == 4
    assert limits.sbuf_partition_bytes == load_hardware(third_generation).memory.sbuf_bytes_per_partition


def test_a_file_named_unlike_its_profile_is_refused(third_generation: str) -> None:
    misnamed = profile.HARDWARE_DIR / "trn6.toml"
    misnamed.write_text((profile.HARDWARE_DIR / f"{third_generation}.toml").read_text())
    with pytest.raises(profile.HardwareProfileError, match="the file says 'trn6'"):
        load_hardware("trn6")


def test_trainium3_ships_uncalibrated_and_every_front_end_says_so(tmp_path: Path) -> None:
    from accelopt_core.profiling import ProfileResult, measured_on

    assert "trn3" in available_hardware() and not load_hardware("trn3").calibrated
    assert all(load_hardware(name).calibrated for name in ("trn1", "trn2"))
    result = ProfileResult(kernel="k.py", task="silu", hardware="trn3", backend="simulator", latency_ms=1.0)
    assert measured_on(result) == "simulated trn3, uncalibrated" and result.to_dict()["calibrated"] is False
    assert ProfileResult.from_dict(result.to_dict()).to_dict() == result.to_dict()
    trn2 = ProfileResult(kernel="k.py", task="silu", hardware="trn2", backend="simulator", latency_ms=1.0)
    assert measured_on(trn2) == "simulated trn2" and trn2.to_dict()["calibrated"] is True
    doc = KernelDocument.create("file:///nowhere/silu.py",
                                "# accelopt: task=silu\n" + Path(task_files("silu").kernel).read_text())
    assert "Profile on trn3 (uncalibrated)" in [title for _, title, _, _ in lenses(doc, "trn1")]


def test_the_extension_offers_every_shipped_generation() -> None:
    import json

    package = json.loads((Path(__file__).resolve().parents[2] / "extension" / "package.json").read_text())
    setting = package["contributes"]["configuration"]["properties"]["accelopt.hardware"]
    assert tuple(setting["enum"]) == available_hardware()
    assert len(setting["enumDescriptions"]) == len(setting["enum"])
