"""docs/harness.md says where the external harness runs and what of ``docker exec`` it is served."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _page() -> str:
    return (ROOT / "docs" / "harness.md").read_text(encoding="utf-8")


def _section(page: str, title: str) -> str:
    start = page.index(f"## {title}\n")
    end = page.find("\n## ", start + 1)
    return page[start : end if end > 0 else len(page)]


def test_a_warning_before_the_first_section_says_the_harness_runs_on_the_host() -> None:
    page = _page()
    top = " ".join(page[: page.index("\n## ")].split())
    assert "> **Warning: the harness itself runs on the host, outside the sandbox.**" in top
    for fact in (
        "as the rollout process's user",
        "root in the README's setup",
        "`T1_SANDBOX_EXEC`",
        "`POST /t1/exec`",
        "`local` environment",
        "runs them on the host",
        "Running the harness itself in a jail is not built",
    ):
        assert fact in top, fact


def test_what_is_not_built_names_the_harness_jail() -> None:
    section = " ".join(_section(_page(), "What is not built").split())
    assert "Running the harness itself in a jail" in section and "is not built" in section
    assert "as the rollout process's user" in section and "runs the model's commands on the host" in section


def test_the_exec_options_on_the_page_are_the_scripts(tmp_path: Path) -> None:
    from t1_rollout.endpoint.sandbox_exec import write_exec_command

    script = write_exec_command(tmp_path).read_text(encoding="utf-8")
    page = " ".join(_page().split())
    assert "A user asked for with `-u` (root included) is not granted" in page
    served = re.findall(r'"(-[-a-z]+)"', script[script.index("VALUED") : script.index("class _Refused")])
    assert served and all(f"`{flag}" in page or f"/{flag}`" in page for flag in served), served
