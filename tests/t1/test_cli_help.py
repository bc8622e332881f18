"""Every verb's --help is plain text: no reST double backticks, no ``<bool>`` on flags, and a word in square
brackets (``[agent]``, a TOML table) printed as written, not taken for markup."""

from __future__ import annotations

import re
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from t1.cli import app


def _paths(command: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    paths = [prefix]
    if hasattr(command, "commands"):  # a group (typer's own click classes, not click's)
        for name, sub in command.commands.items():
            paths += _paths(sub, (*prefix, name))
    return paths


ROOT = typer.main.get_command(app)
VERBS = _paths(ROOT)


def _command(path: tuple[str, ...]) -> Any:
    command = ROOT
    for name in path:
        command = command.commands[name]
    return command


def test_every_verb_is_walked():
    walked = {" ".join(p) for p in VERBS}
    assert {"train", "eval", "sft", "plot", "reward", "recipe validate", "plan check"} <= walked
    assert {"tasks validate", "tasks audit", "tasks overlap", "recipe diff", "plan split"} <= walked


@pytest.mark.parametrize("path", VERBS, ids=[" ".join(p) or "t1" for p in VERBS])
def test_help_is_plain_text(path):
    result = CliRunner().invoke(app, [*path, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "``" not in out
    assert "<bool>" not in out
    assert "╭" not in out  # no Rich panels: plain help is what was written
    command = _command(path)
    written = " ".join([command.help or "", *(getattr(p, "help", None) or "" for p in command.params)])
    for bracketed in set(re.findall(r"\[[a-z_.]+\]", written)):
        assert bracketed in out, f"{bracketed} lost from t1 {' '.join(path)} --help"


def test_tasks_validate_help_names_the_task_toml_tables():
    out = CliRunner().invoke(app, ["tasks", "validate", "--help"], terminal_width=100).output
    assert "[agent] timeout_sec" in " ".join(out.split())
    assert "[verifier] timeout_sec" in " ".join(out.split())
