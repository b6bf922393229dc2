"""Prompt sizes of the LLM agents on NKIBench tasks, and what one search iteration costs.

For each task the baseline kernel is profiled on the simulator (timing only) and the four prompts are
rendered exactly as the agents send them (accelopt_core.agents.llm.prompts), with a full memory: the
planner shows up to 8 lessons, here 6 that worked and 2 to avoid, each about as long as a summarizer's
lesson. Replies are estimated: a plan of about 170 tokens (the planner's answer shape, filled), a kernel
about 10% longer than the one it rewrites plus a sentence (executor and fixer), a lesson of about 90 tokens.

Tokens are counted as characters / 4, the usual rule of thumb for English and code with BPE tokenizers
(it overestimates code with long identifiers slightly and underestimates dense numbers). With
`--tiktoken ENCODING` and the tiktoken package able to load that encoding, real counts are used instead.

Cost per iteration at the paper's settings (B=6, N=12, K=2): 72 planner calls, 144 executor calls and up
to 8 summarizer calls; fixer calls depend on how often drafts fail the cheap checks and are priced per
call. Two price levels, in USD per million input / output tokens: a frontier model ($3 / $15) and an
open model served cheaply ($0.15 / $0.60). Prompt caching, where an endpoint offers it, would cut the
input side: the system prompt (role and primer) is the same for every call of an agent.

Usage: python3 benchmarks/prompt_sizes.py [--tasks silu matmul mamba] [--hardware trn1] [--json FILE]
                                          [--tiktoken o200k_base]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from accelopt_core.agents.base import Candidate, SearchContext
from accelopt_core.agents.llm import prompts
from accelopt_core.hardware import available_hardware
from accelopt_core.memory import Experience
from accelopt_core.profiling import SimulatorProfiler, TaskRef
from accelopt_core.profiling.profiler import kernel_hash
from accelopt_core.tasks.registry import find_task, task_files

PAPER = {"beam_width": 6, "plans": 12, "samples": 2, "summaries": 8}
CALLS = {"planner": 72, "executor": 144, "summarizer": 8}  # B*N, B*N*K, the memory's bound per iteration
PRICES = {"frontier ($3/$15)": (3.0, 15.0), "open ($0.15/$0.60)": (0.15, 0.60)}

SAMPLE_PLAN = """Plan: keep each input tile on chip and fuse the element-wise chain into one Scalar-engine activation
Where: lines 15-18
Steps:
- replace the separate negate, exp, add and divide instructions with one activation whose scale and bias fold
  in the constants, and a single vector instruction for the final product
- allocate the intermediate tiles inside the loop body so consecutive iterations overlap
- widen the free-axis tile to 1024 columns so every DMA moves 512 KiB
Why faster: vector_engine_instruction_count drops by about 3x, vector_engine_active_time_percent falls below
dma_active_time_percent, and dma_transfer_average_bytes doubles; the kernel should become DMA-bound
Risks: 1024 must divide the free dimension at both sizes; the activation must keep float32"""
SAMPLE_LESSON = ("Fusing a chain of element-wise instructions into one Scalar-engine activation with scale and bias "
                 "removes most Vector-engine instructions and their fixed per-instruction overhead, so a "
                 "vector-bound kernel becomes bound by its DMAs. It applies whenever the chain is an affine "
                 "transform feeding a function the activation table has.")


@dataclass
class Row:
    task: str
    role: str
    system: int
    user: int
    output: int

    @property
    def input(self) -> int:
        return self.system + self.user


def counter(encoding: str | None) -> tuple[Callable[[str], int], str]:
    """Tokens of a text: tiktoken when asked for and loadable, else characters / 4."""
    if encoding:
        try:
            import tiktoken

            enc = tiktoken.get_encoding(encoding)
            return (lambda text: len(enc.encode(text))), f"tiktoken {encoding}"
        except Exception as exc:  # not installed, or the encoding file cannot be fetched offline
            print(f"tiktoken {encoding} unavailable ({type(exc).__name__}); using characters / 4", file=sys.stderr)
    return (lambda text: (len(text) + 3) // 4), "characters / 4"


def memory(task_family: str, hardware: str) -> list[Experience]:
    worked = [Experience("other", task_family, hardware, "a", f"b{i}", 1.6 - 0.08 * i,
                         "fuse the element-wise chain into one activation", SAMPLE_LESSON) for i in range(6)]
    avoid = [Experience("other", task_family, hardware, "a", f"c{i}", 0.7, "split the free axis into 128-column "
                        "tiles", "Narrow tiles multiply the instruction count; each instruction pays a fixed "
                        "overhead, so the Vector engine spends most of its time starting instructions.",
                        positive=False) for i in range(2)]
    return worked + avoid


def measure(task: str, hardware: str, count: Callable[[str], int]) -> list[Row]:
    source = Path(task_files(task).kernel).read_text()
    result = SimulatorProfiler(seeds=1).profile(source, TaskRef(task), hardware, check=False)
    if result.error:
        raise SystemExit(f"{task}: the baseline does not run: {result.error}")
    parent = Candidate(source, kernel_hash(source), result)
    family = find_task(task).family or task
    context = SearchContext(task, family, hardware, memory(family, hardware))
    kernel_out = int(count(source) * 1.1) + count("Here is the rewritten kernel with the plan applied.")
    planner = prompts.planner_prompt(parent, context, 1, PAPER["plans"])
    executor = prompts.executor_prompt(parent, SAMPLE_PLAN, task)
    summarizer = prompts.summarizer_prompt(parent, Candidate(source, "fast", result, plan="fuse the chain"), context)
    error = "candidate.py:16: hardware rule: PSUM tile of shape (128, 1024): free size 1024 exceeds 512"
    fixer = prompts.fixer_prompt(source, error, source, SAMPLE_PLAN, task, 1, 2)
    return [Row(task, "planner", count(planner.system), count(planner.user), count(SAMPLE_PLAN)),
            Row(task, "executor", count(executor.system), count(executor.user), kernel_out),
            Row(task, "summarizer", count(summarizer.system), count(summarizer.user), count(SAMPLE_LESSON)),
            Row(task, "fixer", count(fixer.system), count(fixer.user), kernel_out)]


def cost(rows: list[Row], price: tuple[float, float]) -> dict[str, float]:
    """USD per iteration by role (fixer: per call) at one price level."""
    out = {}
    for row in rows:
        one = (row.input * price[0] + row.output * price[1]) / 1e6
        out[row.role] = one * CALLS.get(row.role, 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=["silu", "matmul", "mamba"])
    parser.add_argument("--hardware", choices=available_hardware(), default="trn1")
    parser.add_argument("--tiktoken", metavar="ENCODING", help="count with tiktoken (e.g. o200k_base) if it loads")
    parser.add_argument("--json", help="also write the numbers to this JSON file")
    args = parser.parse_args()
    count, method = counter(args.tiktoken)

    print(f"Prompt sizes in tokens ({method}); input = system + user, output estimated\n")
    print(f"| {'task':<7} | {'agent':<10} | {'system':>6} | {'user':>6} | {'input':>6} | {'output':>6} |")
    print(f"|{'-' * 9}|{'-' * 12}|{'-' * 8}|{'-' * 8}|{'-' * 8}|{'-' * 8}|")
    results = {}
    for task in args.tasks:
        rows = measure(task, args.hardware, count)
        results[task] = rows
        for row in rows:
            print(f"| {task:<7} | {row.role:<10} | {row.system:>6} | {row.user:>6} | {row.input:>6} "
                  f"| {row.output:>6} |")

    print(f"\nCost of one search iteration at the paper's settings (B={PAPER['beam_width']}, N={PAPER['plans']}, "
          f"K={PAPER['samples']}: {CALLS['planner']} planner, {CALLS['executor']} executor, up to "
          f"{CALLS['summarizer']} summarizer calls), USD\n")
    header = ("| task | price level | tokens in | tokens out | planner | executor | summarizer | iteration "
              "| fixer/call |")
    print(header)
    print("|" + "|".join("-" * (len(part) + 2) for part in header.strip("|").split(" | ")) + "|")
    summary = {}
    for task, rows in results.items():
        tokens_in = sum(r.input * CALLS.get(r.role, 0) for r in rows)
        tokens_out = sum(r.output * CALLS.get(r.role, 0) for r in rows)
        for level, price in PRICES.items():
            by_role = cost(rows, price)
            total = sum(v for role, v in by_role.items() if role in CALLS)
            summary.setdefault(task, {})[level] = {"tokens_in": tokens_in, "tokens_out": tokens_out, **by_role,
                                                   "iteration": total}
            print(f"| {task} | {level} | {tokens_in:,} | {tokens_out:,} | {by_role['planner']:.3f} | "
                  f"{by_role['executor']:.3f} | {by_role['summarizer']:.4f} | {total:.2f} | {by_role['fixer']:.4f} |")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"method": method, "calls": CALLS, "prices": PRICES,
                       "sizes": {t: [vars(r) for r in rows] for t, rows in results.items()}, "cost": summary},
                      handle, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
