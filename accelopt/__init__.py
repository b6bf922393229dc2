"""The `accelopt` command: the engine's command line (accelopt_core.cli) with the front ends built on it,
the language server (`accelopt lsp`) and the NKIBench runner (`accelopt bench`). The engine imports
neither; they, and this package, import the engine."""
