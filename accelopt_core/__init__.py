"""AccelOpt's engine: NKI simulator, Trainium performance model, tasks, profiling and search."""
