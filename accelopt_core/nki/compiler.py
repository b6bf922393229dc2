"""`nki.compiler` (legacy `neuronxcc.nki.compiler`): direct allocation, kernel decorators and loop
directives.

Allocation (`sbuf.alloc`, `sbuf.mod_alloc`, `psum.alloc`, `psum.mod_alloc`) places each logical block
of a tensor on a physical tile (allocation.py). The decorators only steer the Neuron compiler's
passes; the simulator runs kernels as written either way, and `force_auto_alloc` makes it ignore the
kernel's placements, as the compiler does. Loop directives (`no_reorder`, `multi_buffer`) are
accepted and not modelled.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

from . import tensor
from .allocation import Placement, modulo
from .errors import missing_api


def _sbuf_alloc(func: Callable[..., Any]) -> Placement:
    """Place each logical block where `func(block_index, partitions, bytes_per_partition)` says:
    (start_partition, byte_addr)."""
    return Placement(tensor.SBUF, func, "ncc.sbuf.alloc(...)")


def _sbuf_mod_alloc(*, base_addr: int, base_partition: int = 0, num_par_tiles: tuple[int, ...] = (),
                    num_free_tiles: tuple[int, ...] = ()) -> Placement:
    """Rotate the logical blocks over num_par_tiles x num_free_tiles physical tiles from base_addr."""

    def locate(idx: tuple[int, ...], pdim_size: int, fdim_size: int) -> tuple[int, int]:
        return (modulo(base_partition, num_par_tiles, idx, pdim_size),
                modulo(base_addr, num_free_tiles, idx, fdim_size))

    return Placement(tensor.SBUF, locate, f"ncc.sbuf.mod_alloc(base_addr={base_addr}, "
                     f"num_free_tiles={tuple(num_free_tiles)})")


def _psum_alloc(func: Callable[..., Any]) -> Placement:
    """Place each logical block where `func(block_index, partitions, bytes_per_partition)` says:
    (bank_id, start_partition, byte_addr)."""
    return Placement(tensor.PSUM, func, "ncc.psum.alloc(...)")


def _psum_mod_alloc(*, base_bank: int, base_addr: int = 0, base_partition: int = 0,
                    num_bank_tiles: tuple[int, ...] = (), num_par_tiles: tuple[int, ...] = (),
                    num_free_tiles: tuple[int, ...] = ()) -> Placement:
    """Rotate the logical blocks over num_bank_tiles PSUM banks from base_bank."""

    def locate(idx: tuple[int, ...], pdim_size: int, fdim_size: int) -> tuple[int, int, int]:
        return (modulo(base_bank, num_bank_tiles, idx, 1), modulo(base_partition, num_par_tiles, idx, pdim_size),
                modulo(base_addr, num_free_tiles, idx, fdim_size))

    return Placement(tensor.PSUM, locate, f"ncc.psum.mod_alloc(base_bank={base_bank}, "
                     f"num_bank_tiles={tuple(num_bank_tiles)})")


def _namespace(name: str, alloc: Callable[..., Placement], mod_alloc: Callable[..., Placement],
               auto: tensor.Buffer) -> types.SimpleNamespace:
    return types.SimpleNamespace(__name__=f"nki.compiler.{name}", alloc=alloc, mod_alloc=mod_alloc,
                                 auto_alloc=lambda: auto)


sbuf = _namespace("sbuf", _sbuf_alloc, _sbuf_mod_alloc, tensor.Buffer("sbuf", tensor.SBUF))
psum = _namespace("psum", _psum_alloc, _psum_mod_alloc, tensor.Buffer("psum", tensor.PSUM))


def _mark(kernel: Any, option: str, value: Any = True) -> Any:
    options = getattr(kernel, "options", None)
    if isinstance(options, dict):
        options[option] = value
    return kernel


def skip_middle_end_transformations(func: Any) -> Any:
    """Decorator: the compiler skips its middle-end passes (the simulator runs the kernel as written)."""
    return _mark(func, "skip_middle_end_transformations")


def enable_stack_allocator(func: Any = None, log_level: int = 50) -> Any:
    """Decorator, bare or with `log_level=`: the compiler allocates with its stack allocator."""
    if func is None:
        return lambda f: _mark(f, "stack_allocator", log_level)
    return _mark(func, "stack_allocator", log_level)


def force_auto_alloc(func: Any) -> Any:
    """Decorator: the compiler allocates every tensor itself, ignoring direct-allocation buffers."""
    return _mark(func, "force_auto_alloc")


class Directive:
    """A loop directive (`nl.sequential_range(n, directives=ncc.no_reorder())`): accepted, not modelled."""

    def __init__(self, name: str, *args: Any):
        self.name = name
        self.args = args

    def __repr__(self) -> str:
        return f"ncc.{self.name}{self.args}"


def no_reorder() -> Directive:
    return Directive("no_reorder")


def multi_buffer(count: int) -> Directive:
    return Directive("multi_buffer", count)


__getattr__ = missing_api("nki.compiler")
