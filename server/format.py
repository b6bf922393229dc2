"""Short human-readable numbers for lenses, hovers and action titles (one place, so they agree)."""

from __future__ import annotations

from typing import Any

from accelopt_core.editor_api import ProfileResult, as_percent, measured_on


def ms(value: float | None) -> str:
    """1.333 ms, 34.02 ms, 81.23 µs, 12.35 s: four significant digits, so a 1.01x rewrite shows a different number
    (0.6640 ms -> 0.6574 ms; three would round both to 0.66 at two decimals), in a unit read at a glance."""
    if value is None:
        return "-"
    if value < 0.1:
        return f"{value * 1000:.4g} µs"
    if value >= 1000:
        return f"{value / 1000:.4g} s"
    return f"{value:.4g} ms"


def percent(value: float | None, digits: int = 0) -> str:
    """A value already in percent (`peak_percent`): `41%`."""
    return "-" if value is None else f"{value:.{digits}f}%"


def fraction(value: float | None, digits: int = 0) -> str:
    """A fraction (a profile's `*_percent` field, as neuron-profile writes it, or a share of time): `74%`."""
    return percent(as_percent(value), digits)


def nbytes(value: float | None) -> str:
    if value is None:
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} GiB"


def flops(value: float | None) -> str:
    if not value:
        return "0"
    for unit, scale in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value:.0f} FLOP"


def headline(result: ProfileResult) -> str:
    """`1.33 ms · 40% of peak · simulated trn1 · vector-bound`: the code lens over a kernel."""
    parts = [ms(result.latency_ms)]
    if result.peak_percent is not None:
        parts.append(f"{result.peak_percent:.0f}% of peak")
    parts.append(measured_on(result))
    if result.bottleneck and result.bottleneck != "none":
        parts.append(f"{result.bottleneck}-bound")
    return " · ".join(parts)


# how the editor raises the check's time and memory (its settings, as docs/neovim.md names them)
EDITOR_LIMIT_KNOBS = ("the sandboxSeconds setting", "the sandboxMemoryMb setting")


def short_error(text: str, limit: int = 90) -> str:
    """The first line of an error, cut to fit a lens."""
    first = text.strip().splitlines()[0] if text.strip() else "unknown error"
    return first if len(first) <= limit else first[: limit - 1] + "…"


def fix_gain(fix: Any) -> str:
    """What a quick fix is worth, by whose word: `1.25x faster, checked (0.6640 -> 0.5312 ms)` once its checked run
    showed it, `estimated 1.25x faster, not checked (...)` while only the model's trace-only timing has."""
    numbers = f"({ms(fix.baseline_ms)} -> {ms(fix.estimated_ms)})"
    if fix.checked:
        return f"{fix.speedup:.2f}x faster, checked {numbers}"
    return f"estimated {fix.speedup:.2f}x faster, not checked {numbers}"
