"""The agents' prompts: template files in `accelopt_core/agents/prompts/`, filled with `string.Template`
(`${name}` placeholders, so kernels and JSON with braces need no escaping).

Each role's file holds its system prompt, then the `<!-- user message -->` line, then the user message.
The planner, executor and fixer share `nki_primer.md`, the hardware rules and techniques in brief.
"""

from __future__ import annotations

import ast
import functools
import os
import string
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ...hardware import available_hardware, load_hardware
from ...memory.experiences import Experience
from ...nki.loader import parse_source
from ...profiling import ProfileResult

SPLIT = "<!-- user message -->"
ROLES = ("planner", "executor", "summarizer", "fixer")

# The neuron-profile summary fields a planner sees, in this order, when the profile has them.
PROFILE_FIELDS = (
    "total_time", "hbm_read_bytes", "hbm_write_bytes", "sbuf_read_bytes", "sbuf_write_bytes", "psum_read_bytes",
    "psum_write_bytes", "spill_save_bytes", "spill_reload_bytes", "hardware_flops", "transpose_flops",
    "hfu_estimated_percent", "mbu_estimated_percent", "tensor_engine_active_time_percent",
    "vector_engine_active_time_percent", "scalar_engine_active_time_percent", "gpsimd_engine_active_time_percent",
    "dma_active_time_percent", "tensor_engine_instruction_count", "vector_engine_instruction_count",
    "scalar_engine_instruction_count", "gpsimd_engine_instruction_count", "dma_transfer_count",
    "dma_transfer_average_bytes", "sbuf_peak_live_bytes_per_partition",
)
# The few a summarizer sees for each side of a pair.
KEY_FIELDS = ("hbm_read_bytes", "hbm_write_bytes", "tensor_engine_active_time_percent",
              "vector_engine_active_time_percent", "scalar_engine_active_time_percent",
              "gpsimd_engine_active_time_percent", "dma_active_time_percent", "vector_engine_instruction_count",
              "scalar_engine_instruction_count", "dma_transfer_average_bytes")
# How to read those fields (`${units}` in the planner's and the summarizer's templates): neuron-profile's
# scale, whichever backend measured.
PROFILE_UNITS = ("The profile's fields carry neuron-profile's names and units: bytes, flops and instruction counts "
                 "as plain numbers, and every `*_percent` field as a fraction (0.74 means 74 %); only '% of peak' "
                 "is written in percent.")
TOP_LINES = 8
TOP_EXPERIENCES = 8


@dataclass(frozen=True)
class Prompt:
    """One rendered request: the system prompt and the user message."""

    system: str
    user: str

    @property
    def chars(self) -> int:
        return len(self.system) + len(self.user)


@functools.cache
def template_text(name: str) -> str:
    """A template file's text (`planner`, `executor`, `summarizer`, `fixer`, `nki_primer`)."""
    return resources.files("accelopt_core.agents").joinpath("prompts", f"{name}.md").read_text(encoding="utf-8")


def render(role: str, **values: Any) -> Prompt:
    """Fill a role's template; KeyError names a placeholder left without a value."""
    text = template_text(role)
    if SPLIT not in text:
        raise ValueError(f"prompt template {role}.md has no '{SPLIT}' line")
    system, user = text.split(SPLIT, 1)
    values.setdefault("primer", template_text("nki_primer").strip())
    values.setdefault("units", PROFILE_UNITS)
    filled = {k: str(v) for k, v in values.items()}
    return Prompt(string.Template(system).substitute(filled).strip() + "\n",
                  string.Template(user).substitute(filled).strip() + "\n")


# --- pieces the templates carry ---------------------------------------------------------------------
def number_lines(source: str) -> str:
    """The kernel with its line numbers, as the profile and error messages count them."""
    lines = source.rstrip("\n").splitlines()
    width = len(str(len(lines)))
    return "\n".join(f"{i:>{width}} | {line}".rstrip() for i, line in enumerate(lines, 1))


def _number(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int) or float(value).is_integer():
        return f"{int(value):,}".replace(",", "_") if abs(value) >= 10_000 else str(int(value))
    return f"{value:.4g}"


def profile_summary(result: ProfileResult, source: str | None = None, top: int = TOP_LINES) -> str:
    """Latency, bottleneck, the neuron-profile summary fields by their names, and the lines that take
    the most time (share of summed line time, engine, instruction count, the line's code)."""
    out = []
    if result.latency_ms is not None:
        peak = f", {result.peak_percent:.1f}% of the task's peak" if result.peak_percent is not None else ""
        bound = f"; at peak the task is {result.bound}-bound" if result.bound else ""
        out.append(f"latency: {result.latency_ms:.4g} ms{peak}{bound}")
    summary = result.profile.get("bottleneck_summary") or (f"{result.bottleneck}-bound" if result.bottleneck else "")
    if summary:
        out.append(f"bottleneck: {summary}")
    fields = [f"{name}={_number(result.profile[name])}" for name in PROFILE_FIELDS if name in result.profile]
    if fields:
        out.append("neuron-profile summary: " + ", ".join(fields))
    loops = result.profile.get("loops") or []
    if loops:
        out.append("loops: " + "; ".join(
            f"line {lp.get('line')} {lp.get('kind', '')} x{lp.get('iterations', '?')} "
            f"({_number(lp.get('time_ms', 0))} ms)" for lp in loops[:6]))
    lines = sorted(result.lines, key=lambda ln: -(ln.get("time_ms") or 0))
    total = sum(ln.get("time_ms") or 0 for ln in result.lines) or 1.0
    code = source.splitlines() if source else []
    if lines:
        out.append("time by line (share of summed line time; lines on different engines overlap):")
        for ln in lines[:top]:
            number = ln.get("line")
            text = code[number - 1].strip() if isinstance(number, int) and 0 < number <= len(code) else ""
            engines = ln.get("engines") or {}
            split = (" (" + ", ".join(f"{e} {_number(t)} ms" for e, t in engines.items()) + ")"
                     if len(engines) > 1 else "")
            out.append(f"  line {number}: {100 * (ln.get('time_ms') or 0) / total:.0f}%, "
                       f"{_number(ln.get('time_ms') or 0)} ms, {ln.get('engine')}{split}, "
                       f"{ln.get('instructions', '?')} instructions | {text}")
    notes = result.profile.get("notes") or []
    out.extend(f"note: {note}" for note in notes[:4])
    out.extend(f"the latency assumes, line {a['line']}: {a['description']}" for a in _weightiest(result)[:TOP_LINES])
    return "\n".join(out) or "no profile available"


def _weightiest(result: ProfileResult) -> list[dict[str, Any]]:
    """The profile's compiler assumptions, those that move the most bytes first: a plan that undoes one (a loop
    swap that breaks a reused load) changes the latency as much as the bytes it moves."""
    assumptions = result.profile.get("assumptions") or []
    return sorted(assumptions, key=lambda a: -(a.get("bytes_not_moved", 0) + a.get("bytes_added", 0)))


def key_numbers(result: ProfileResult) -> str:
    """One line of the numbers that explain a speedup, for the summarizer."""
    parts = []
    if result.latency_ms is not None:
        parts.append(f"latency {result.latency_ms:.4g} ms")
    if result.peak_percent is not None:
        parts.append(f"{result.peak_percent:.1f}% of peak")
    if result.bottleneck:
        parts.append(f"{result.bottleneck}-bound")
    parts.extend(f"{name}={_number(result.profile[name])}" for name in KEY_FIELDS if name in result.profile)
    return ", ".join(parts) or "no profile"


def experiences_block(experiences: Sequence[Experience], limit: int = TOP_EXPERIENCES) -> str:
    """Memory lessons: the ones that worked, then the ones to avoid, with their speedups."""
    worked = [e for e in experiences if e.positive][:limit]
    avoid = [e for e in experiences if not e.positive][: max(0, limit - len(worked))]
    if not worked and not avoid:
        return "None yet for this hardware."

    def line(exp: Experience) -> str:
        task = os.path.basename(exp.task or "").removesuffix(".py")
        family = exp.task_family or ""
        where = f"{task} ({family})" if task and family and family != task else (task or family or "another task")
        lesson = exp.summary or exp.plan
        tail = f" (plan: {exp.plan})" if exp.plan and exp.plan not in lesson else ""
        imported = " [imported from another memory, not measured here]" if exp.imported else ""
        return f"- {exp.speedup:.2f}x on {where}: {lesson}{tail}{imported}"

    out = []
    if worked:
        out.append("Worked (speedup of the rewrite):")
        out.extend(line(e) for e in worked)
    if avoid:
        out.append("Avoid (these rewrites made kernels slower):")
        out.extend(line(e) for e in avoid)
    return "\n".join(out)


@functools.lru_cache(maxsize=64)
def task_brief(task_key: str) -> str:
    """What the kernel computes, from its reference file: docstring, sizes, tolerance, reference code.
    Works for named tasks (`silu`, `matmul:small`) and reference paths; falls back to the name."""
    path = _reference_path(task_key)
    name = os.path.basename(task_key).split(":", 1)[0].removesuffix(".py")
    if path is None:
        return f"{name}: make the kernel faster without changing its results."
    try:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
        tree = parse_source(source, path)
    except (OSError, SyntaxError):
        return f"{name}: make the kernel faster without changing its results."
    out = [(ast.get_docstring(tree) or name).strip()]
    constants: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                constants[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    variants = constants.get("VARIANTS")
    if isinstance(variants, dict) and variants:
        sizes = "; ".join(f"{v}: " + ", ".join(f"{k}={n}" for k, n in dims.items())
                          for v, dims in variants.items() if isinstance(dims, dict))
        out.append(f"Sizes: {sizes}. Correctness is checked at the small size and time is measured at the full "
                   "size, so the kernel must work for both.")
    rtol = constants.get("RTOL")
    out.append(f"Correct means: relative L2 error of the output below {rtol if rtol else 2e-5} on random inputs.")
    reference = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in ("reference", "forward")),
                     None)
    if reference is not None:
        segment = ast.get_source_segment(source, reference) or ""
        if segment and len(segment.splitlines()) <= 40:
            out.append("Reference (NumPy):\n```python\n" + segment + "\n```")
    return "\n".join(out)


def _reference_path(task_key: str) -> str | None:
    if os.path.isfile(task_key):
        return task_key
    try:
        from ...tasks.registry import task_files

        return task_files(task_key).reference
    except Exception:  # an unknown task only loses its description
        return None


def hardware_line(hardware: str) -> str:
    """The generation with its description from the hardware registry ("trn1: AWS Trainium1, ...")."""
    if hardware not in available_hardware():
        return hardware
    return f"{hardware}: {load_hardware(hardware).description}"


# --- the four prompts, as the agent sends them (the prompt-size benchmark renders the same) -----------
def planner_prompt(parent: Any, context: Any, index: int = 0, count: int = 1) -> Prompt:
    """Task, hardware, numbered kernel, profile summary and memory lessons; proposals after the first
    are nudged towards a different idea, since N plans are drawn for the same kernel."""
    hint = ("" if index == 0 else f"This is proposal {index + 1} of {count} for this kernel; others are being "
            "written in parallel, so a different good idea is worth more than the most obvious one.")
    return render("planner", task=task_section(context.task, parent.result), hardware=hardware_line(context.hardware),
                  kernel=number_lines(parent.source), backend=parent.result.backend,
                  profile=profile_summary(parent.result, parent.source),
                  experiences=experiences_block(context.experiences), variant_hint=hint)


def executor_prompt(parent: Any, plan: str, task: str) -> Prompt:
    return render("executor", task=task_section(task, parent.result), plan=plan, kernel=parent.source.rstrip("\n"))


def task_section(task: str, result: ProfileResult) -> str:
    """The task's brief, and which function is the kernel when the file holds several (a tutorial file keeps
    every version of its kernel): that one is profiled and rewritten, the others stay as they are."""
    brief = task_brief(task)
    if not result.function:
        return brief
    return (f"{brief}\n\nThe kernel is the function `{result.function}`; it is the one profiled and the one to "
            "rewrite. Keep the file's other functions as they are.")


def fixer_prompt(source: str, error: str, reference: str, plan: str, task: str, attempt: int, tries: int) -> Prompt:
    return render("fixer", task=task_brief(task) if task else "(see the kernel)", plan=plan or "(not given)",
                  error=error, kernel=number_lines(source), reference=reference.rstrip("\n"), attempt=attempt,
                  tries=tries)


def summarizer_prompt(slow: Any, fast: Any, context: Any) -> Prompt:
    """Both kernels, both profiles' key numbers and the speedup; a slowdown asks for a warning."""
    speedup = slow.latency_ms / fast.latency_ms if fast.latency_ms else 1.0
    faster = speedup >= 1
    result = f"{speedup:.2f}x {'faster' if faster else 'slower'}: {slow.latency_ms:.4g} ms -> {fast.latency_ms:.4g} ms"
    direction = ("Write the lesson." if faster else
                 "The rewrite made the kernel slower: write the lesson as a warning about what to avoid.")
    return render("summarizer", task=context.task, family=context.task_family, hardware=context.hardware,
                  plan=fast.plan or "(not recorded)", result=result, slow_latency=f"{slow.latency_ms:.4g} ms",
                  fast_latency=f"{fast.latency_ms:.4g} ms", slow_profile=key_numbers(slow.result),
                  fast_profile=key_numbers(fast.result), slow_kernel=slow.source.rstrip("\n"),
                  fast_kernel=fast.source.rstrip("\n"), direction=direction)
