"""Docstrings read as prose: no issue number a reader cannot look up, no sentence broken by a rewrap.

Every module, class, function and attribute docstring (a string right after an assignment, as the specs'
field docstrings are) under ``packages/*/src`` is read with ``ast``, from the raw source so columns are exact.

A rewrap that once cut every line at a narrower width and then re-filled it left fragments such as::

    One step: the scheduler launches ``rollout.launched`` trials on tasks taken in the pool's
    per-epoch
    seeded order, admits the first ...

A line is such a fragment when it ends mid-sentence (no ``.``, ``:``, ``!`` or ``?``), the paragraph goes
on (the next line is not blank, a list item, a table row, a section header such as ``Args:``, a code or
doctest line, or less indented), the next line's first word (an inline literal counts as one word) would
have fitted within ``WIDTH`` columns, and the line leaves more than ``SLACK`` columns unused. Lines that
align columns (three spaces in a row) are tables and are left alone. Calibration on this codebase: lines
wrapped by hand that end before a short word use at least 72 columns; the rewrap's fragments use at most 27.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

WIDTH = 110
"""The line length (ruff ``line-length``)."""

SLACK = 40
"""A fragment leaves more than this many columns of the line unused (it is at most 70 columns wide)."""

TERMINAL = ".!?:"
CLOSERS = ")]}\"'`*"
LIST_ITEM = re.compile(r"^\s*([-*+•]|\d+[.)]|\([a-z0-9]{1,3}\)|\|)\s")
SECTION = re.compile(r"^\s*[A-Z][A-Za-z ]*:\s*$")
ENTRY = re.compile(r"^\s*\**[A-Za-z_][\w.]*( \([^)]*\))?: ")
ALIGNED = re.compile(r"\S {3,}\S")
LITERAL_WORD = re.compile(r"^[(\[{\"']*(``[^`]+``|`[^`]+`)\S*")

ISSUE_REF = re.compile(
    r"\bissues?\s*#?\s*\d+|\b(?:PR|pull request)\s*#?\s*\d+|(?<![\w&/])#\d+\b|\bgh-\d+", re.IGNORECASE
)
EXTERNAL_PROJECT = re.compile(
    r"\b(slime|miles|verl|sglang|vllm|megatron(?:-lm|-core)?|torchtitan|transformers|pytorch|ray|harbor|"
    r"openrlhf|trl|pydantic|omegaconf)\b[\s,]*(?:(?:PR|issue|pull request)\s*)?$",
    re.IGNORECASE,
)
"""A number cited after another project's name (``verl, PR #2337``, ``slime #822``) can be looked up."""


def docstrings(tree: ast.Module):
    """Yield the string constant of every module, class, function and attribute docstring."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        body = node.body
        if body and _is_string(body[0]):
            yield body[0].value
        if isinstance(node, ast.Module | ast.ClassDef):
            for prev, cur in zip(body, body[1:], strict=False):
                if isinstance(prev, ast.Assign | ast.AnnAssign) and _is_string(cur):
                    yield cur.value


def _is_string(stmt: ast.stmt) -> bool:
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def raw_lines(source_lines: list[str], node: ast.Constant) -> list[str]:
    """The docstring's source lines with their columns kept, the quotes blanked out."""
    lines = source_lines[node.lineno - 1 : node.end_lineno]
    opening = re.search(r"[rRuU]?(\"\"\"|''')", lines[0])
    if opening is None:  # a one-quote string: no wrapped lines to judge
        return []
    q = opening.end()
    lines = [" " * q + lines[0][q:], *lines[1:]]
    quote = opening.group(1)
    lines[-1] = lines[-1][: lines[-1].rfind(quote)]
    return lines


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _ends_sentence(line: str) -> bool:
    text = line.rstrip().rstrip(CLOSERS)
    return not text or text[-1] in TERMINAL


def _first_word(line: str) -> str:
    text = line.strip()
    literal = LITERAL_WORD.match(text)
    if literal:
        return literal.group(0)
    if text.startswith("``") or text.lstrip("([").startswith("``"):  # a literal running past the line
        return text
    return text.split()[0]


def broken_lines(lines: list[str]) -> list[tuple[int, str, str]]:
    """``(offset, line, next line)`` of every fragment (see the module docstring)."""
    found = []
    code_indent: int | None = None
    fenced = False
    for i in range(len(lines) - 1):
        line, nxt = lines[i], lines[i + 1]
        if line.strip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        if code_indent is not None:
            if line.strip() and _indent(line) <= code_indent:
                code_indent = None
            else:
                continue
        if line.rstrip().endswith("::"):
            code_indent = _indent(line)
            continue
        if not line.strip() or not nxt.strip():
            continue
        if line.lstrip().startswith((">>>", "...")) or nxt.lstrip().startswith((">>>", "```")):
            continue
        if _ends_sentence(line) or LIST_ITEM.match(nxt) or SECTION.match(nxt):
            continue
        if ALIGNED.search(line.strip()) or ALIGNED.search(nxt.strip()):
            continue
        if _indent(nxt) < _indent(line) or (_indent(nxt) > _indent(line) and not ENTRY.match(line)):
            continue
        width = len(line.rstrip())
        if width + 1 + len(_first_word(nxt)) <= WIDTH and width < WIDTH - SLACK:
            found.append((i, line.rstrip(), nxt.rstrip()))
    return found


def issue_references(text: str) -> list[str]:
    """Every reference to an issue or pull-request number of this project found in ``text``."""
    refs = []
    for match in ISSUE_REF.finditer(text):
        if EXTERNAL_PROJECT.search(text[max(0, match.start() - 40) : match.start()]):
            continue
        refs.append(match.group(0))
    return refs


def _docstring_problems(package) -> tuple[list[str], list[str]]:
    issues, broken = [], []
    for path in package.modules:
        source = path.read_text(encoding="utf-8")
        lines = source.splitlines()
        where = path.relative_to(REPO_ROOT).as_posix()
        for node in docstrings(ast.parse(source, where)):
            issues += [f"{where}:{node.lineno}: {ref!r}" for ref in issue_references(node.value)]
            for offset, line, nxt in broken_lines(raw_lines(lines, node)):
                broken.append(f"{where}:{node.lineno + offset}: {line.strip()!r} / {nxt.strip()[:40]!r}...")
    return issues, broken


def test_no_issue_numbers_in_docstrings(package):
    issues, _ = _docstring_problems(package)
    assert not issues, "docstrings cite issue numbers a reader cannot look up: " + "; ".join(issues)


def test_no_sentence_broken_mid_line(package):
    _, broken = _docstring_problems(package)
    assert not broken, (
        f"docstring lines ending mid-sentence while the next word fits within {WIDTH} columns "
        "(rewrap the paragraph): \n" + "\n".join(broken)
    )


def test_the_detector_catches_the_rewrap_damage():
    """The damaged paragraph the rewrap left is flagged; the same paragraph filled by hand is not."""
    damaged = [
        "One step (T1 §2, Fig. 2): the scheduler launches ``rollout.launched`` trials on tasks taken "
        "in the pool's",
        "per-epoch",
        "seeded order, admits the first ``rollout.admitted`` that finish and cancels the tail (§7.4); "
        "every admitted",
        "trial is",
        "stitched into samples whose four streams stay aligned.",
    ]
    filled = [
        "One step (T1 §2, Fig. 2): the scheduler launches ``rollout.launched`` trials on tasks taken "
        "in the pool's",
        "per-epoch seeded order, admits the first ``rollout.admitted`` that finish and cancels the tail "
        "(§7.4); every",
        "admitted trial is stitched into samples whose four streams stay aligned.",
    ]
    assert [line for _, line, _ in broken_lines(damaged)] == ["per-epoch", "trial is"]
    assert broken_lines(filled) == []


def test_the_detector_leaves_lists_sections_code_and_literals_alone():
    text = [
        "    Args:",
        "        routed_experts: int32 ``[rows, L, k]`` with",
        "            ``rows = len(input_ids) + len(output_ids) - 1 - start_len``; None when not requested.",
        "    Usage::",
        "        short code",
        "        more code",
        "    A list follows",
        "    - item one",
        "    Returns:",
        "        the value",
    ]
    assert broken_lines(text) == []


def test_issue_references_are_found_but_external_citations_kept():
    assert issue_references("Source: issue 2 part 3.") == ["issue 2"]
    assert issue_references("fixed in (#12) and issue #3") == ["#12", "issue #3"]
    assert issue_references("the variant of verl, PR #2337; slime #822, miles #2697") == []
