"""Starting the service safely: token file checks, loopback by default, no clear-text exposure by accident."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from accelopt_core.service.server import ServiceConfigError, check_bind, is_loopback, read_token

ROOT = Path(__file__).resolve().parents[2]


def test_loopback_addresses() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.1.2.3", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "10.0.0.5", "::", "example.com"))


def test_exposed_without_tls_is_refused_unless_allowed(caplog: pytest.LogCaptureFixture) -> None:
    check_bind("127.0.0.1", tls=False, allow_insecure_bind=False)
    check_bind("0.0.0.0", tls=True, allow_insecure_bind=False)
    with pytest.raises(ServiceConfigError, match="without TLS"):
        check_bind("0.0.0.0", tls=False, allow_insecure_bind=False)
    with caplog.at_level(logging.WARNING, logger="accelopt.service"):
        check_bind("10.0.0.5", tls=False, allow_insecure_bind=True)
    assert "without TLS" in caplog.text


def test_token_file_checks(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(ServiceConfigError, match="cannot read token file"):
        read_token(str(tmp_path / "absent"))
    short = tmp_path / "short"
    short.write_text("abc\n")
    with pytest.raises(ServiceConfigError, match="shorter than 16"):
        read_token(str(short))
    shared = tmp_path / "shared"
    shared.write_text("a-long-enough-token-value\nsecond line ignored\n")
    shared.chmod(0o644)
    with caplog.at_level(logging.WARNING, logger="accelopt.service"):
        assert read_token(str(shared)) == "a-long-enough-token-value"
    assert "readable by other users" in caplog.text


def test_empty_token_is_refused() -> None:
    pytest.importorskip("fastapi")
    from accelopt_core.service import create_app

    with pytest.raises(ValueError, match="token"):
        create_app("simulator", 1, "")


@pytest.mark.parametrize(("extra", "needle"), [
    (["--host", "0.0.0.0"], "without TLS"),
    (["--backend", "neuron"], "--workers is required"),
    (["--tls-cert", "cert.pem"], "both --tls-cert and --tls-key"),
])
def test_serve_command_refuses_bad_configuration(tmp_path: Path, extra: list[str], needle: str) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    token = tmp_path / "token"
    token.write_text("x" * 32)
    token.chmod(0o600)
    run = subprocess.run([sys.executable, "-m", "accelopt_core.service", "--token-file", str(token), *extra],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and needle in run.stderr and run.stderr.startswith("accelopt: ")
