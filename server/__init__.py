"""The AccelOpt language server: a thin pygls layer over `accelopt_core`.

`python -m server` (or `accelopt lsp`) starts it on stdio; `--tcp PORT` serves one client over TCP
for debugging. Kernels never run in this process: profiling and search happen in worker processes
(server/worker.py), which in turn run every kernel in the engine's sandbox.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
