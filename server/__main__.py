"""`python -m server [--stdio | --tcp PORT]`, also reachable as `accelopt lsp`."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

HELP = "start the language server (stdio by default; --tcp PORT for debugging)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="accelopt lsp", description="The AccelOpt language server: profiles, "
                                     "bottleneck hovers, code lenses, diagnostics and rewrites for NKI kernels.")
    parser.add_argument("--stdio", action="store_true", help="talk LSP on stdin/stdout (the default)")
    parser.add_argument("--tcp", type=int, metavar="PORT", help="serve one client over TCP instead (debugging)")
    parser.add_argument("--host", default="127.0.0.1", help="address for --tcp (default 127.0.0.1)")
    parser.add_argument("--log-file", help="write the server's log here (default: stderr)")
    parser.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: logging.Handler = (logging.FileHandler(args.log_file, encoding="utf-8") if args.log_file
                                else logging.StreamHandler(sys.stderr))
    logging.basicConfig(level=getattr(logging, args.log_level), handlers=[handler],
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from .features import create_server

    server = create_server()
    if args.tcp is not None:
        server.start_tcp(args.host, args.tcp)
        return 0
    protocol_out = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print() must never land inside an LSP message
    server.start_io(sys.stdin.buffer, protocol_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
