"""A check's worker process (seeds.py): `python -m accelopt_core.profiling.seed_worker`. A module of its own,
so that the classes it pickles back are those of seeds.py, which the profiler imports."""

from accelopt_core.profiling.seeds import main

main()
