"""NKIBench in the project: the 14 tasks of the AccelOpt paper (docs/nkibench.md), each a native
reference file in `reference/` (inputs, NumPy reference, size variants, peak work) and a baseline
kernel of our own in `kernels/`, plus the `accelopt bench` runner."""
