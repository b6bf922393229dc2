"""Reading model replies: strict about what counts as code, forgiving about everything around it.

The last fenced Python block of a reply is the kernel (models often show a snippet first and the full
kernel last). A reply without one is a failed sample with its reason, never an exception. Reasoning
(`<think>...</think>`) and prose around the code are dropped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...nki.loader import parse_source

_THINK = re.compile(r"<think(?:ing)?>.*?(?:</think(?:ing)?>|\Z)", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*$", re.MULTILINE)
_PYTHON_TAGS = {"", "python", "py", "python3", "py3"}
_MAX_PROSE_LINES = 8  # leading lines inside a block that may be prose rather than code


@dataclass
class CodeReply:
    """The code found in a reply, or why none was usable."""

    code: str | None
    reason: str | None = None


def strip_reasoning(text: str) -> str:
    """Drop <think> sections that reasoning models (served by vLLM, Ollama) put before the answer."""
    return _THINK.sub("", text or "")


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """Every fenced block as (language tag, body), in order. An unclosed last fence runs to the end
    (a reply cut at the token limit); whether its code is usable is for the syntax check to say."""
    blocks: list[tuple[str, str]] = []
    matches = list(_FENCE.finditer(text))
    i = 0
    while i < len(matches):
        opening = matches[i]
        fence, tag = opening.group(1), opening.group(2).lower()
        closing = next((m for m in matches[i + 1:] if m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence)
                        and not m.group(2)), None)
        end = closing.start() if closing else len(text)
        blocks.append((tag, text[opening.end() + 1 if opening.end() < len(text) else opening.end():end]))
        if closing is None:
            break
        i = matches.index(closing) + 1
    return blocks


def _drop_leading_prose(code: str) -> str:
    """Lines before the code proper ("Here is the kernel:") that stop the block from parsing."""
    lines = code.splitlines()
    if _parses(code):
        return code
    for skip in range(1, min(_MAX_PROSE_LINES, len(lines)) + 1):
        rest = "\n".join(lines[skip:])
        if rest.strip() and _parses(rest):
            return rest
    return code


def _parses(code: str) -> bool:
    try:
        parse_source(code)
    except SyntaxError:
        return False
    return True


def extract_code(reply: str) -> CodeReply:
    """The last fenced python (or untagged) block of a reply."""
    text = strip_reasoning(reply)
    if not text.strip():
        return CodeReply(None, "the reply is empty")
    blocks = [body for tag, body in fenced_blocks(text) if tag in _PYTHON_TAGS]
    blocks = [b for b in blocks if b.strip()]
    if not blocks:
        return CodeReply(None, "the reply has no fenced python code block")
    code = _drop_leading_prose(blocks[-1].strip("\n"))
    return CodeReply(code.rstrip() + "\n")


_HEADING = re.compile(r"^\s*(#{1,6}\s+|[-*+]\s+|\d+[.)]\s+)")
_EMPHASIS = re.compile(r"(\*\*|__|`)")
_PLAN_LABEL = re.compile(r"^\s*(?:\*\*)?\s*(?:plan|optimization|optimisation|title)\s*(?:\*\*)?\s*:\s*(?:\*\*)?\s*",
                         re.IGNORECASE)
MAX_PLAN_CHARS = 2500
MAX_TITLE_CHARS = 160


@dataclass
class PlanReply:
    """A planner's answer: a one-line title for progress and memory, and the full plan for the executor."""

    title: str
    text: str


def extract_plan(reply: str) -> PlanReply | None:
    """The plan in a planner's reply, or None when there is none (empty, or code only)."""
    text = strip_reasoning(reply)
    for tag, body in fenced_blocks(text):  # a planner that wrote code: keep only its prose
        if tag in _PYTHON_TAGS and len(body.splitlines()) > 3:
            text = text.replace(body, "")
    text = re.sub(r"^[ \t]*(`{3,}|~{3,}).*$", "", text, flags=re.MULTILINE).strip()
    if not text:
        return None
    lines = [line.rstrip() for line in text.splitlines()]
    labelled = next((line for line in lines if _PLAN_LABEL.match(line) and _PLAN_LABEL.sub("", line).strip()), None)
    first = labelled or next((line for line in lines if line.strip()), "")
    title = _EMPHASIS.sub("", _PLAN_LABEL.sub("", _HEADING.sub("", first))).strip().rstrip(":")
    title = " ".join(title.split())
    if not title:
        return None
    if len(title) > MAX_TITLE_CHARS:
        cut = title[:MAX_TITLE_CHARS]
        title = cut[: cut.rfind(" ")] + " ..." if " " in cut else cut
    body = "\n".join(lines).strip()
    if len(body) > MAX_PLAN_CHARS:
        body = body[:MAX_PLAN_CHARS].rstrip() + " ..."
    return PlanReply(title, body)


def normalized(text: str) -> str:
    """A plan's identity for de-duplication: case, punctuation and spacing ignored."""
    return " ".join(re.sub(r"[^\w.]+", " ", text.lower()).split())


_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(`\"'])")
MAX_LESSON_SENTENCES = 4
MAX_LESSON_CHARS = 700


def extract_lesson(reply: str) -> str | None:
    """A summarizer's lesson as plain text of at most four sentences, or None when it is empty."""
    text = strip_reasoning(reply)
    text = re.sub(r"^[ \t]*(`{3,}|~{3,}).*$", "", text, flags=re.MULTILINE)
    lines = [_HEADING.sub("", line) for line in text.splitlines()]
    lines = [line for line in lines if line.strip() and not re.match(r"^\s*(lesson|summary)\s*:?\s*$", line, re.I)]
    text = _EMPHASIS.sub("", " ".join(" ".join(lines).split()))
    text = re.sub(r"^\s*(?:lesson|summary)\s*:\s*", "", text, flags=re.IGNORECASE).strip()
    if not text:
        return None
    sentences = _SENTENCE.split(text)
    text = " ".join(sentences[:MAX_LESSON_SENTENCES])
    if len(text) > MAX_LESSON_CHARS:
        cut = text[:MAX_LESSON_CHARS]
        text = cut[: cut.rfind(" ")] + " ..."
    return text
