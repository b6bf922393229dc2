"""Short human-readable numbers for lenses, hovers and action titles (one place, so they agree)."""

from __future__ import annotations

from accelopt_core.profiling import ProfileResult, as_percent, measured_on


def ms(value: float | None) -> str:
    """1.33 ms, 34.0 ms, 812 µs: three significant digits and a unit a person reads at a glance."""
    if value is None:
        return "-"
    if value < 0.1:
        return f"{value * 1000:.3g} µs"
    if value < 10:
        return f"{value:.2f} ms"
    if value < 100:
        return f"{value:.1f} ms"
    return f"{value:.0f} ms"


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
