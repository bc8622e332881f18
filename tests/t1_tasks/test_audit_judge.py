"""The audit's LLM judge against a local fake OpenAI-compatible server (no network model is reachable here).

The server is a ``http.server`` on 127.0.0.1 answering ``POST /v1/chat/completions`` from a script of
replies: a good answer, a malformed one, an HTTP error. Each test says what the judge must do with them.
"""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from t1_tasks import load_pool, load_task
from t1_tasks.audit import (
    DIMENSIONS,
    RUBRIC_VERSION,
    JudgeConfig,
    JudgeConfigError,
    JudgeFailure,
    JudgeVerdict,
    audit_task,
    judge_task,
)
from t1_tasks.audit.judge import rubric_prompt
from t1_tasks.audit.rubric import DIMENSION_NAMES, HARD_REJECTS

GOOD = {
    "scores": dict.fromkeys(DIMENSION_NAMES, 4) | {"task_value": 3},
    "hard_rejects": dict.fromkeys(HARD_REJECTS, False),
    "rationale": "The instruction names every path the tests read; the task is short.",
}


class FakeServer:
    """Answers each chat-completions request with its next scripted reply: ``("ok", text)`` or ``(code,)``."""

    def __init__(self, replies: list[tuple]) -> None:
        self.replies = list(replies)
        self.requests: list[dict] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append({"path": self.path, "body": body})
                reply = fake.replies.pop(0) if fake.replies else (500,)
                if reply[0] == "ok":
                    status, payload = (
                        200,
                        {
                            "id": "cmpl-1",
                            "object": "chat.completion",
                            "created": 0,
                            "model": body["model"],
                            "choices": [
                                {
                                    "index": 0,
                                    "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": reply[1]},
                                }
                            ],
                        },
                    )
                else:
                    status, payload = reply[0], {"error": {"message": "fake server error", "type": "server"}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"


@pytest.fixture
def serve() -> Iterator:
    servers: list[FakeServer] = []

    def start(replies: list[tuple]) -> FakeServer:
        server = FakeServer(replies)
        server.thread.start()
        servers.append(server)
        return server

    yield start
    for s in servers:
        s.httpd.shutdown()
        s.httpd.server_close()


@pytest.fixture(scope="module")
def task():
    return load_pool("builtin:mini").get("csv-region-totals")


def _config(server: FakeServer, attempts: int = 3) -> JudgeConfig:
    return JudgeConfig(model="fake-judge", base_url=server.base_url, api_key="k", max_attempts=attempts)


def _no_sleep(seconds: float) -> None:
    pass


def test_good_answer_is_validated_and_the_request_carries_the_rubric_and_task(serve, task):
    server = serve([("ok", json.dumps(GOOD))])
    verdict = judge_task(task, _config(server), sleep=_no_sleep)
    assert isinstance(verdict, JudgeVerdict)
    assert verdict.attempts == 1 and verdict.rubric_version == RUBRIC_VERSION == "rubric-v1"
    assert verdict.answer.scores.task_value == 3 and verdict.answer.scores.verifier_fairness == 4
    (req,) = server.requests
    assert req["path"] == "/v1/chat/completions" and req["body"]["model"] == "fake-judge"
    system, user = req["body"]["messages"]
    assert system["content"] == rubric_prompt()
    assert task.instruction in user["content"] and "tests/test_outputs.py" in user["content"]


def test_fenced_json_answer_is_accepted(serve, task):
    server = serve([("ok", "```json\n" + json.dumps(GOOD) + "\n```")])
    assert isinstance(judge_task(task, _config(server), sleep=_no_sleep), JudgeVerdict)


def test_malformed_then_good_answer_is_retried_with_backoff(serve, task):
    bad_score = GOOD | {"scores": GOOD["scores"] | {"verifier_coverage": 7}}
    server = serve(
        [("ok", "I think the task is fine."), ("ok", json.dumps(bad_score)), ("ok", json.dumps(GOOD))]
    )
    slept: list[float] = []
    config = JudgeConfig(model="m", base_url=server.base_url, api_key="k", max_attempts=3, backoff_s=0.5)
    verdict = judge_task(task, config, sleep=slept.append)
    assert isinstance(verdict, JudgeVerdict) and verdict.attempts == 3
    assert slept == [0.5, 1.0]  # exponential backoff before the 2nd and 3rd attempts
    assert len(server.requests) == 3


def test_always_malformed_is_reported_as_a_failure_not_scored(serve, task):
    missing_key = {k: v for k, v in GOOD.items() if k != "rationale"}
    server = serve([("ok", json.dumps(missing_key))] * 3)
    verdict = judge_task(task, _config(server), sleep=_no_sleep)
    assert isinstance(verdict, JudgeFailure)
    assert verdict.attempts == 3 and len(server.requests) == 3
    assert "rationale" in verdict.error and "after 3 attempts" in verdict.error


def test_server_error_is_retried_then_reported(serve, task):
    server = serve([(500,), (503,)])
    verdict = judge_task(task, _config(server, attempts=2), sleep=_no_sleep)
    assert isinstance(verdict, JudgeFailure)
    assert "HTTP 503" in verdict.error and verdict.attempts == 2


def test_server_error_then_good_answer_succeeds(serve, task):
    server = serve([(500,), ("ok", json.dumps(GOOD))])
    verdict = judge_task(task, _config(server), sleep=_no_sleep)
    assert isinstance(verdict, JudgeVerdict) and verdict.attempts == 2


def test_unreachable_endpoint_is_a_failure(task):
    config = JudgeConfig(
        model="m", base_url="http://127.0.0.1:9/v1", api_key="k", max_attempts=1, timeout_s=2
    )
    verdict = judge_task(task, config, sleep=_no_sleep)
    assert isinstance(verdict, JudgeFailure) and "failed" in verdict.error


def test_config_reads_the_environment_and_options_win(monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("T1_JUDGE_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    c = JudgeConfig.resolve()
    assert (c.base_url, c.model, c.api_key) == ("http://127.0.0.1:1/v1", "env-model", "env-key")
    c = JudgeConfig.resolve(base_url="http://x/v1", model="opt-model")
    assert (c.base_url, c.model) == ("http://x/v1", "opt-model")
    monkeypatch.delenv("T1_JUDGE_MODEL")
    with pytest.raises(JudgeConfigError, match="T1_JUDGE_MODEL"):
        JudgeConfig.resolve()


def test_rubric_prompt_names_every_dimension_weight_and_hard_reject():
    text = rubric_prompt()
    assert text.startswith("<!-- rubric-v1:")
    for d in DIMENSIONS:
        assert f"| {d.name} | {d.weight:.0%} | {d.question} |" in text
    for name in HARD_REJECTS:
        assert f"- {name}:" in text


def test_pool_audit_with_the_judge_scores_all_eight_and_keeps_the_lower_static_score(serve, tmp_path):
    src = load_pool("builtin:mini").get("csv-region-totals").path
    bundle = shutil.copytree(src, tmp_path / "t")
    tests = bundle / "tests" / "test_outputs.py"
    tests.write_text(tests.read_text() + '\n\ndef test_x():\n    assert Path("/srv/hidden.txt").exists()\n')
    server = serve([("ok", json.dumps(GOOD))])
    row = audit_task(load_task(bundle), judge=_config(server), sleep=_no_sleep)
    assert set(row.scores) == set(DIMENSION_NAMES) and not row.quality_partial and row.scored_weight == 1.0
    # the static candidate (2) is lower than the judge's 4: kept, with its source and evidence
    align = row.scores["instruction_verifier_alignment"]
    assert (align.score, align.source) == (2, "static") and "/srv/hidden.txt" in align.evidence[0]
    assert row.scores["task_value"].source == "judge"
    # 0.20 * 2 + 0.10 * 3 + (0.15 + 0.10 + 0.15 + 0.10 + 0.10 + 0.10) * 4 = 0.4 + 0.3 + 2.8 = 3.5
    assert row.quality_score == pytest.approx(3.5)
    assert row.rubric_version == "rubric-v1" and row.judge_model == "fake-judge"
    assert not row.admitted and row.critical_failures == {"instruction_verifier_alignment": 2}


def test_judge_hard_reject_flag_rejects_the_task(serve, task):
    flagged = GOOD | {"hard_rejects": GOOD["hard_rejects"] | {"hidden_requirement": True}}
    server = serve([("ok", json.dumps(flagged))])
    row = audit_task(task, judge=_config(server), sleep=_no_sleep)
    assert not row.admitted
    assert [r.source for r in row.hard_rejects["hidden_requirement"]] == ["judge"]


def test_judge_failure_is_reported_in_the_row_and_never_scored(serve, task):
    server = serve([("ok", "not json")] * 2)
    row = audit_task(task, judge=_config(server, attempts=2), sleep=_no_sleep)
    assert row.judge_failure and "not JSON" in row.judge_failure and row.judge_attempts == 2
    # no judge score, and the mini task has no static one
    assert row.scores == {} and row.quality_score is None
    assert not row.admitted and row.reasons[0].startswith("judge failure (not scored)")
