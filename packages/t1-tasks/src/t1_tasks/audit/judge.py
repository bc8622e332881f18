"""The LLM judge of the audit: the rubric as a versioned prompt, a JSON answer checked by pydantic (T1 §3.2).

The paper's audit runs on DeepSeek-V4-Pro; here any OpenAI-compatible chat-completions endpoint will do
(vLLM, SGLang, a hosted API). The system message is the rubric file ``prompts/<RUBRIC_VERSION>.md`` shipped in
this package; the user message holds the task's files (instruction, Dockerfile, tests, solution), each cut to
``JudgeConfig.max_file_chars``. The answer must be one JSON object that validates as :class:`JudgeAnswer`
(eight scores 1-5, four hard-reject flags, a rationale). An answer that does not validate, or a failed
request, is retried ``max_attempts`` times in all with exponential backoff, then reported as a
:class:`JudgeFailure` for that task: a failure is never scored.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from importlib import resources
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from t1_tasks.task import Task

__all__ = [
    "RUBRIC_VERSION",
    "JudgeAnswer",
    "JudgeConfig",
    "JudgeConfigError",
    "JudgeFailure",
    "JudgeHardRejects",
    "JudgeScores",
    "JudgeVerdict",
    "judge_task",
    "rubric_prompt",
    "task_message",
]

RUBRIC_VERSION = "rubric-v1"
"""The prompt file the judge uses (``prompts/rubric-v1.md``); recorded in every audit row."""


class JudgeConfigError(ValueError):
    """The judge cannot be configured: no model named, or a bad option (the message names the option)."""


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


Score = Annotated[int, Field(ge=1, le=5, strict=True)]


class JudgeScores(_Answer):
    """The eight dimension scores, integers 1-5 (``t1_tasks.audit.rubric.DIMENSIONS``)."""

    instruction_verifier_alignment: Score
    verifier_fairness: Score
    verifier_coverage: Score
    solution_correctness: Score
    solution_reasonableness: Score
    instruction_clarity: Score
    instruction_completeness: Score
    task_value: Score


class JudgeHardRejects(_Answer):
    """The four hard-reject flags of T1 §3.2 (``t1_tasks.audit.rubric.HARD_REJECTS``)."""

    hidden_requirement: bool = Field(strict=True)
    test_leakage: bool = Field(strict=True)
    solution_shortcut: bool = Field(strict=True)
    weak_verifier: bool = Field(strict=True)


class JudgeAnswer(_Answer):
    """The judge's answer for one task: every key required, no other key allowed."""

    scores: JudgeScores
    hard_rejects: JudgeHardRejects
    rationale: str = Field(min_length=1)


@dataclass(frozen=True)
class JudgeConfig:
    """Where and how to ask the judge.

    Attributes:
        model: the model name the endpoint serves.
        base_url: the endpoint's base URL (``http://host:port/v1``); None uses the client's default.
        api_key: the key; a local endpoint that needs none gets ``"EMPTY"``.
        max_attempts: requests per task before it is reported as a judge failure (>= 1).
        backoff_s: seconds before the second attempt, doubled before each later one.
        timeout_s: seconds one request may take.
        max_file_chars: characters of each task file put in the prompt (longer files are cut, and say so).
    """

    model: str
    base_url: str | None = None
    api_key: str | None = None
    max_attempts: int = 3
    backoff_s: float = 2.0
    timeout_s: float = 120.0
    max_file_chars: int = 12_000

    @classmethod
    def resolve(
        cls,
        base_url: str | None = None,
        model: str | None = None,
        api_key: str | None = None,
        **kwargs: float,
    ) -> JudgeConfig:
        """Options first, then the environment: ``OPENAI_BASE_URL``, ``T1_JUDGE_MODEL``, ``OPENAI_API_KEY``.

        Raises:
            JudgeConfigError: no model in the options or in ``T1_JUDGE_MODEL``, or ``max_attempts`` < 1.
        """
        model = model or os.environ.get("T1_JUDGE_MODEL")
        if not model:
            raise JudgeConfigError("the judge needs a model: pass --model or set T1_JUDGE_MODEL")
        config = cls(
            model=model,
            base_url=base_url or os.environ.get("OPENAI_BASE_URL"),
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            **kwargs,  # type: ignore[arg-type]
        )
        if config.max_attempts < 1:
            raise JudgeConfigError(f"max_attempts must be >= 1, got {config.max_attempts}")
        return config


@dataclass(frozen=True)
class JudgeVerdict:
    """A validated answer.

    Attributes:
        answer: the answer.
        attempts: requests it took (1 when the first answer validated).
        model: the model that answered.
        rubric_version: the prompt it answered.
    """

    answer: JudgeAnswer
    attempts: int
    model: str
    rubric_version: str = RUBRIC_VERSION


@dataclass(frozen=True)
class JudgeFailure:
    """No valid answer after every attempt: reported for the task, never scored.

    Attributes:
        error: the last attempt's error (request failure or why the answer did not validate).
        attempts: requests made.
        model: the model asked.
        rubric_version: the prompt asked.
    """

    error: str
    attempts: int
    model: str
    rubric_version: str = RUBRIC_VERSION


def rubric_prompt(version: str = RUBRIC_VERSION) -> str:
    """The rubric prompt file's text (package data ``t1_tasks/audit/prompts/<version>.md``).

    Raises:
        FileNotFoundError: no prompt file of that version.
    """
    return (resources.files("t1_tasks.audit") / "prompts" / f"{version}.md").read_text(encoding="utf-8")


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + f"\n[... cut: {len(text) - limit} more characters]"


def task_message(task: Task, max_file_chars: int = 12_000) -> str:
    """The user message: the task's instruction, Dockerfile, tests and reference solution, each fenced.

    Args:
        task: the task.
        max_file_chars: characters kept of each file.

    Returns:
        Markdown text with one section per file (paths relative to the bundle).
    """
    files = [task.path / "instruction.md", task.environment_dir / "Dockerfile"]
    files += sorted(p for p in task.tests_dir.rglob("*") if p.is_file() and p.suffix in (".py", ".sh"))
    files += sorted(p for p in task.solution_dir.rglob("*") if p.is_file())
    parts = [f"# Task {task.id} (category {task.category}, difficulty {task.difficulty})"]
    for p in files:
        text = p.read_text(encoding="utf-8", errors="replace")
        parts.append(f"## {p.relative_to(task.path)}\n\n````\n{_cut(text, max_file_chars)}\n````")
    env = sorted(str(p.relative_to(task.path)) for p in task.environment_dir.rglob("*") if p.is_file())
    parts.append("## environment/ files\n\n" + "\n".join(f"- {e}" for e in env))
    return "\n\n".join(parts) + "\n"


_FENCE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.S)


def _parse(content: str | None) -> JudgeAnswer:
    """The answer in ``content`` (a bare JSON object, or one inside a ```json fence).

    Raises:
        ValueError: empty, not JSON or not a valid answer (pydantic's message names the field).
    """
    if not content or not content.strip():
        raise ValueError("empty answer")
    m = _FENCE.match(content)
    text = m.group(1) if m else content
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"answer is not JSON ({exc.msg} at char {exc.pos}): {text[:80]!r}") from exc
    try:
        return JudgeAnswer.model_validate(data)
    except ValidationError as exc:
        fields = "; ".join(f"{'.'.join(map(str, e['loc'])) or '(root)'}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"answer does not match the rubric's JSON: {fields}") from exc


def judge_task(task: Task, config: JudgeConfig, *, sleep=time.sleep) -> JudgeVerdict | JudgeFailure:
    """Ask the judge to score ``task`` on the rubric (T1 §3.2, Fig. 4).

    Args:
        task: the task to audit.
        config: the endpoint, model and retry budget.
        sleep: the backoff's sleep (tests pass a no-op).

    Returns:
        A ``JudgeVerdict`` holding the validated answer, or a ``JudgeFailure`` when every attempt failed (a
        request error, an HTTP error status, or an answer that is not the rubric's JSON). Nothing is raised
        for a failed attempt.
    """
    import openai

    client = openai.OpenAI(
        base_url=config.base_url, api_key=config.api_key, max_retries=0, timeout=config.timeout_s
    )
    messages = [
        {"role": "system", "content": rubric_prompt()},
        {"role": "user", "content": task_message(task, config.max_file_chars)},
    ]
    error = "no attempt made"
    for attempt in range(1, config.max_attempts + 1):
        if attempt > 1:
            sleep(config.backoff_s * 2 ** (attempt - 2))
        try:
            reply = client.chat.completions.create(model=config.model, messages=messages, temperature=0.0)
            content = reply.choices[0].message.content if reply.choices else None
            return JudgeVerdict(_parse(content), attempt, config.model)
        except openai.APIStatusError as exc:
            error = f"HTTP {exc.status_code} from {config.base_url or 'the default endpoint'}: {exc.message}"
        except openai.APIError as exc:
            error = f"request to {config.base_url or 'the default endpoint'} failed: {exc.message}"
        except ValueError as exc:
            error = str(exc)
    return JudgeFailure(f"{error} (after {config.max_attempts} attempts)", config.max_attempts, config.model)
