"""Suite-wide set-up."""

from accelopt_core.blas import single_threaded_blas

single_threaded_blas()
