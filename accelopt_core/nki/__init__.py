"""A CPU implementation of the NKI programming interface: kernels written for the Neuron SDK run
unmodified, their hardware rules are checked, and every instruction is recorded in a trace."""

from .errors import HardwareRuleError, KernelUsageError, NkiError, UnsupportedApiError
from .loader import KernelLoadError, find_kernel, load_kernel, load_module
from .runner import Kernel, RunResult, TensorSpec, run_kernel
from .trace import Access, Engine, Instruction, LoopKind, Op, Trace

__all__ = ["Access", "Engine", "HardwareRuleError", "Instruction", "Kernel", "KernelLoadError",
           "KernelUsageError", "LoopKind", "NkiError", "Op", "RunResult", "TensorSpec", "Trace",
           "UnsupportedApiError", "find_kernel", "load_kernel", "load_module", "run_kernel"]
