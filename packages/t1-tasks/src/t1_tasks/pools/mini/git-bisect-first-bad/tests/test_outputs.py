"""Outcome checks for git-bisect-first-bad: every commit is re-checked by running its own price.sh."""

import re
import subprocess
from pathlib import Path

REPO = "/app/repo"
ANSWER = Path("/app/first_bad.txt")


def git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", REPO, *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def is_good(commit: str) -> bool:
    script = git("show", f"{commit}:price.sh")
    out = subprocess.run(["bash", "-s", "200", "15"], input=script, capture_output=True, text=True).stdout
    return out.strip() == "170"


def answer() -> str:
    return ANSWER.read_text().strip()


def test_answer_is_a_full_hash():
    assert ANSWER.is_file(), "first_bad.txt missing"
    assert re.fullmatch(r"[0-9a-f]{40}", answer())


def test_main_history_intact():
    commits = git("rev-list", "main").split()
    assert len(commits) == 48
    assert is_good(commits[-1]) and not is_good(commits[0])


def test_answer_is_on_main():
    assert answer() in git("rev-list", "main").split()


def test_answer_is_bad():
    assert not is_good(answer())


def test_parent_of_answer_is_good():
    assert is_good(git("rev-parse", answer() + "^"))
