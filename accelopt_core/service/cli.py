"""`accelopt serve`: the arguments and the command, kept here so accelopt_core/cli.py only wires them in.

Importing this module imports neither FastAPI nor uvicorn; `run_serve` does, so the rest of the
command line works without the service's extra dependencies.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from ..hardware import available_hardware


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: loopback only)")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--backend", choices=("simulator", "neuron"), default="simulator",
                        help="where kernels run: the CPU simulator, or this host's NeuronCores (Neuron SDK)")
    parser.add_argument("--workers", type=int, help="worker processes, one per NeuronCore with --backend neuron "
                        "(default 2 on the simulator; with --ray, the cluster's neuron_core total)")
    parser.add_argument("--token-file", required=True, help="file whose first line is the bearer token")
    parser.add_argument("--ray", metavar="ADDRESS", help="run jobs as Ray tasks on this cluster (each needs one "
                        "`neuron_core` resource)")
    parser.add_argument("--queue-limit", type=int, help="queued evaluations before 429 (default 16 per worker)")
    parser.add_argument("--seeds", type=int, default=5, help="random seeds per correctness check (default 5)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds one kernel may run (default 300)")
    parser.add_argument("--memory-mb", type=int, help="address-space limit of a kernel's process in MiB (0: none; "
                        "default 8192 on the simulator, none on the Neuron backend, whose runtime maps device memory)")
    parser.add_argument("--neuron-hardware", choices=available_hardware(),
                        help="this host's Trainium generation; jobs for the other one are refused")
    parser.add_argument("--neuron-profile", metavar="PATH", help="the neuron-profile executable (default: from PATH, "
                        "else /opt/aws/neuron/bin/neuron-profile)")
    parser.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key", help="and this private key (PEM)")
    parser.add_argument("--allow-insecure-bind", action="store_true",
                        help="allow a non-loopback address without TLS (a TLS proxy must be in front)")
    parser.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error"))


def run_serve(args: argparse.Namespace) -> int:
    """Start the service; bad configuration is one line on stderr and exit code 2."""
    try:
        from .server import ServiceConfigError, serve
    except ImportError as exc:
        print(f"accelopt: the service needs its extra dependencies ({exc.name} is missing): "
              "pip install 'accelopt[service]'", file=sys.stderr)
        return 2
    neuron_options = {key: value for key, value in (("hardware", args.neuron_hardware),
                                                    ("neuron_profile", args.neuron_profile)) if value}
    memory_mb = args.memory_mb if args.memory_mb is not None else (0 if args.backend == "neuron" else 8192)
    try:
        serve(args.host, args.port, args.backend, args.workers, args.token_file, args.ray, args.allow_insecure_bind,
              tls_cert=args.tls_cert, tls_key=args.tls_key, queue_limit=args.queue_limit, seeds=args.seeds,
              timeout=args.timeout, memory_mb=memory_mb, log_level=args.log_level, neuron_options=neuron_options)
    except ServiceConfigError as exc:
        print(f"accelopt: {exc}", file=sys.stderr)
        return 2
    except ImportError as exc:
        print(f"accelopt: --ray needs Ray installed (pip install 'ray[default]>=2'): {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="accelopt serve", description="Serve profile jobs over HTTP.")
    add_serve_arguments(parser)
    return run_serve(parser.parse_args(argv))
