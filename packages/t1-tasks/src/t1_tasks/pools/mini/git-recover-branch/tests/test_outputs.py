"""Outcome checks for git-recover-branch."""

import subprocess

REPO = "/app/repo"


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True)


def test_branch_exists():
    assert git("rev-parse", "--verify", "-q", "refs/heads/feature/totals").returncode == 0


def test_branch_tip_is_the_footer_commit():
    assert git("log", "-1", "--format=%s", "feature/totals").stdout.strip() == "report: add totals footer"


def test_branch_holds_all_three_feature_commits():
    subjects = git("log", "--format=%s", "main..feature/totals").stdout.split("\n")
    assert [s for s in subjects if s] == [
        "report: add totals footer",
        "report: add totals",
        "report: count rows",
    ]


def test_main_unchanged():
    assert git("log", "-1", "--format=%s", "main").stdout.strip() == "changelog: fix 4"
    assert git("rev-list", "--count", "main").stdout.strip() == "5"
