"""Starting the service: token file, bind address checks, uvicorn."""

from __future__ import annotations

import ipaddress
import logging
import os
import stat
from typing import Any

from ..profiling.confine import INSTALL_HINT, OPT_IN_VARIABLE, isolation_problem, unconfined_allowed
from ..profiling.sandbox import SandboxLimits

log = logging.getLogger("accelopt.service")

MIN_TOKEN_LENGTH = 16
MAX_CONNECTIONS = 512  # beyond this uvicorn answers 503 rather than letting slow clients pile up


class ServiceConfigError(Exception):
    """The service cannot start as configured; the message says what to change."""


def read_token(path: str) -> str:
    """The bearer token: the file's first line. Warns when others can read the file."""
    try:
        with open(path, encoding="utf-8") as handle:
            token = handle.readline().strip()
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ServiceConfigError(f"cannot read token file {path}: {exc.strerror}") from None
    if len(token) < MIN_TOKEN_LENGTH:
        raise ServiceConfigError(f"the token in {path} is shorter than {MIN_TOKEN_LENGTH} characters; create one "
                                 "with: python3 -c 'import secrets; print(secrets.token_urlsafe(32))' > FILE")
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        log.warning("token file %s is readable by other users; run: chmod 600 %s", path, path)
    return token


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_bind(host: str, tls: bool, allow_insecure_bind: bool) -> None:
    """Loopback is always fine. Elsewhere without TLS the token travels in clear text: refuse unless
    the operator says a TLS proxy is in front (allow_insecure_bind), and warn even then."""
    if is_loopback(host) or tls:
        return
    message = (f"listening on {host} without TLS: bearer tokens and kernels cross the network in clear text; "
               "terminate TLS in a reverse proxy in front of the service (docs/deploy.md) or pass "
               "--tls-cert/--tls-key")
    if not allow_insecure_bind:
        raise ServiceConfigError(message + "; pass --allow-insecure-bind to accept this")
    log.warning("%s", message)


def check_isolation() -> None:
    """Kernels from clients run only under the OS sandbox, unless the operator opted in to running them
    with the in-process guard alone (then a warning says so)."""
    problem = isolation_problem()
    if problem is None:
        return
    if not unconfined_allowed():
        raise ServiceConfigError(f"kernels cannot be isolated here: {problem}; {INSTALL_HINT}")
    log.warning("kernels from clients run without OS isolation (%s) because %s is set", problem, OPT_IN_VARIABLE)


def serve(host: str = "127.0.0.1", port: int = 8765, backend: str = "simulator", workers: int | None = 2,
          token_file: str | None = None, ray_address: str | None = None, allow_insecure_bind: bool = False,
          *, tls_cert: str | None = None, tls_key: str | None = None, queue_limit: int | None = None,
          seeds: int = 5, timeout: float = 300.0, memory_mb: int = 8192, log_level: str = "info",
          neuron_options: dict[str, Any] | None = None) -> None:
    """Run the service until interrupted. Jobs live in memory only: a restart forgets them."""
    import uvicorn

    from .app import create_app
    from .workers import become_subreaper

    logging.basicConfig(level=getattr(logging, log_level.upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not token_file:
        raise ServiceConfigError("--token-file is required (every call but /v1/health needs the token)")
    if (tls_cert is None) != (tls_key is None):
        raise ServiceConfigError("give both --tls-cert and --tls-key, or neither")
    if not ray_address and not workers:
        if backend == "neuron":
            raise ServiceConfigError("--workers is required with --backend neuron: one per NeuronCore to use "
                                     "(e.g. 2 on trn1.2xlarge, 32 on trn1.32xlarge)")
        workers = 2
    token = read_token(token_file)
    check_bind(host, tls_cert is not None, allow_insecure_bind)
    check_isolation()
    if ray_address:
        from .ray_backend import _ray

        _ray()  # fail now, with a clear message, if Ray is not installed
    else:
        become_subreaper()  # sandboxed children of a killed worker come back to us to be stopped
    forbidden = tuple(os.path.abspath(p) for p in (token_file,))
    app = create_app(backend, workers or 0, token, queue_limit=queue_limit, seeds=seeds,
                     limits=SandboxLimits(seconds=timeout, memory_mb=memory_mb), ray_address=ray_address,
                     neuron_options=neuron_options, forbidden_paths=forbidden)
    log.info("accelopt service: backend %s, %s, on %s://%s:%d", backend,
             f"Ray at {ray_address}" if ray_address else f"{workers} worker(s)", "https" if tls_cert else "http",
             host, port)
    uvicorn.run(app, host=host, port=port, ssl_certfile=tls_cert, ssl_keyfile=tls_key, log_level=log_level,
                server_header=False, timeout_keep_alive=30, limit_concurrency=MAX_CONNECTIONS)
