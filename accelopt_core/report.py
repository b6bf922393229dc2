"""Human-readable rendering of a profile for the terminal."""

from __future__ import annotations

import linecache

from .profiling import ProfileResult, as_percent, measured_on

ENGINES = (("tensor", "tensor_engine_active_time_percent"), ("vector", "vector_engine_active_time_percent"),
           ("scalar", "scalar_engine_active_time_percent"), ("gpsimd", "gpsimd_engine_active_time_percent"),
           ("dma", "dma_active_time_percent"))


def counted(count: int, noun: str) -> str:
    """`1 seed`, `5 seeds`: a count with its noun in the number it takes."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _bar(percent: float, width: int = 24) -> str:
    filled = round(max(0.0, min(100.0, percent)) / 100 * width)
    return "█" * filled + "·" * (width - filled)


CLI_LIMIT_KNOBS = ("--seconds", "--memory-mb")  # how the command line raises the check's time and memory


def render(result: ProfileResult, kernel_path: str | None = None, top: int = 8,
           limit_knobs: tuple[str, str] = CLI_LIMIT_KNOBS) -> str:
    """The summary, engine activity bars and the most expensive kernel lines; an unchecked kernel names the
    knob that raises the limit it ran out of (`limit_knobs`: time's, memory's)."""
    p = result.profile
    out = [f"kernel    {result.kernel}",
           f"task      {result.task}    {measured_on(result)}"]
    if result.nki_api:
        out.append(f"api       {result.nki_api}")
    if result.error:
        out.append(f"error     {result.error}")
        return "\n".join(out)
    if result.unchecked:
        out.append(f"check     {result.unchecked_text(*limit_knobs)}")
    elif result.correct is None:
        out.append("check     skipped (--no-check)")
    elif result.correct:
        out.append(f"check     correct on {counted(len(result.seeds), 'seed')} (relative L2 error "
                   f"{result.rel_l2_error:.2e}, max abs error {result.max_abs_error:.2e})")
    else:
        out.append(f"check     WRONG RESULTS: {result.check_message}")
    if result.latency_ms is not None:
        peak = f"{result.peak_percent:.1f}% of peak" if result.peak_percent is not None else "no peak formula"
        bound = f" ({result.bound_text()})" if result.bound else ""
        out.append(f"latency   {result.latency_ms:.4g} ms    {peak}    bottleneck: {result.bottleneck}{bound}")
        spmd = p.get("spmd")
        if spmd:
            grids = ", ".join("x".join(map(str, grid)) for grid in spmd["grids"])
            out.append(f"spmd      grid {grids}: {spmd['schedule']}")
        out.append("engines")
        for name, key in ENGINES:
            value = as_percent(p.get(key))
            if value is not None:
                out.append(f"  {name:<7} {_bar(value)} {value:5.1f}%")
        out.append(f"memory    HBM read {_bytes(p.get('hbm_read_bytes'))}, write {_bytes(p.get('hbm_write_bytes'))}"
                   f"  ·  SBUF read {_bytes(p.get('sbuf_read_bytes'))}, write {_bytes(p.get('sbuf_write_bytes'))}"
                   f"  ·  PSUM read {_bytes(p.get('psum_read_bytes'))}, write {_bytes(p.get('psum_write_bytes'))}")
        spills = (p.get("spill_save_bytes") or 0) + (p.get("spill_reload_bytes") or 0)
        if spills:
            save, reload = _bytes(p.get("spill_save_bytes")), _bytes(p.get("spill_reload_bytes"))
            out.append(f"spills    save {save}, reload {reload}")
        for note in p.get("notes") or []:  # the model's own caveats, e.g. live SBUF above the usable SBUF
            out.append(f"note      {note}")
        for assumption in p.get("assumptions") or []:  # what the latency assumes the compiler does
            out.append(f"assumes   line {assumption['line']}: {assumption['description']}")
        flops = p.get("hardware_flops")
        if flops is not None:
            out.append(f"flops     {flops / 1e9:.3g} GFLOP on the Tensor engine "
                       f"({(p.get('transpose_flops') or 0) / 1e9:.3g} GFLOP of it transposes), "
                       "as neuron-profile counts them (an FP32 matmul twice)")
    if result.lines:
        # a line's time is its instructions' busy time on every engine added up (engines overlap, so it can
        # exceed the latency); the share is of all lines' busy time
        out.append("top lines (engine busy time, all engines added; share of all lines' busy time)")
        total = sum(line["time_ms"] for line in result.lines) or 1.0
        for line in result.lines[:top]:
            text = linecache.getline(kernel_path, line["line"]).strip() if kernel_path else ""
            out.append(f"  {line['line']:>4}  {line['time_ms']:8.4f} ms {100 * line['time_ms'] / total:5.1f}%  "
                       f"{line['engine']:<6} {line['instructions']:>7} instr  {text}")
    return "\n".join(out)


# What kind of change helps a kernel the profile finds bound by each engine (the search's rules of that kind).
_REMEDIES = {
    "dma": "fewer, larger transfers (2 KiB or more per partition), loads spread over more queues",
    "tensor": "fewer matmul passes: larger moving tiles (up to 512 columns), the stationary operand reused "
              "across more of them, transposes folded into the loads",
    "vector": "fewer element-wise passes: fused instructions (an activation's scale and bias, tensor_scalar's "
              "two operators), larger tiles, or part of the work moved to the Scalar or GpSimd engine",
    "scalar": "fewer activation passes: one activation with scale and bias instead of several, larger tiles, or "
              "affine work moved to the Vector engine",
    "gpsimd": "work moved off GpSimd (the slowest engine) to the Vector or Scalar engine",
}


LARGE_TRANSFER_BYTES = 32 * 1024  # fact sheet A.6: aim for 32 KiB or more per transfer


def _remedy(bottleneck: str, profile: dict, traffic_known: bool) -> str:
    """The kind of change that helps a kernel bound by `bottleneck`; a DMA-bound kernel whose transfers are
    already large is not told to make them larger (nki-library's cumsum: 64 KiB transfers, told "2 KiB or more"),
    nor one that moves only what its task needs told to keep data on chip (`traffic_known`: the bytes said so)."""
    average = float(profile.get("dma_transfer_average_bytes") or 0)
    if bottleneck == "dma" and average >= LARGE_TRANSFER_BYTES:
        return (f"more transfers in flight at once (loads and stores spread over more DMA queues, overlapped with "
                f"compute); its transfers already average {_bytes(average)}, larger ones gain little")
    if bottleneck == "dma" and not traffic_known:
        return f"{_REMEDIES['dma']}, or data kept on chip instead of loaded again"
    return _REMEDIES[bottleneck]


def what_bounds(result: ProfileResult) -> list[str]:
    """Why a kernel is as fast as it is, in a few lines: its bottleneck with its share of the busy time, its
    share of the task's peak and what that peak is bound by, the HBM bytes it moves against the minimum the
    task needs, and the kind of change that could help. Said when a search finds nothing faster."""
    p = result.profile or {}
    lines: list[str] = []
    if result.bottleneck:
        summary = str(p.get("bottleneck_summary") or f"{result.bottleneck}-bound").split(";")[0]
        lines.append(f"bound by:  {summary}")
    if result.peak_percent is not None:
        bound = f" (the task's best time is set by its {result.bound} work)" if result.bound else ""
        lines.append(f"roofline:  {result.peak_percent:.1f}% of the task's peak{bound}")
    moved = float(p.get("hbm_read_bytes") or 0) + float(p.get("hbm_write_bytes") or 0)
    needed = float((result.peak_work or {}).get("hbm_bytes") or 0)
    if moved and needed:
        lines.append(f"HBM:       {_bytes(moved)} moved, {moved / needed:.2f}x the {_bytes(needed)} the task's "
                     "inputs and outputs need" + ("" if moved > 1.1 * needed else " (no traffic left to save)"))
    if result.peak_percent is not None and result.peak_percent >= 90:
        lines.append("could help: little: the kernel is within 10% of the task's peak")
    elif moved and needed and moved > 1.1 * needed:
        lines.append("could help: moving fewer bytes: data loaded more than once kept on chip (hoisted loads, "
                     "fused loops), intermediates kept out of HBM")
    elif result.bottleneck in _REMEDIES:
        lines.append(f"could help: {_remedy(result.bottleneck, p, bool(moved and needed))}")
    return lines
