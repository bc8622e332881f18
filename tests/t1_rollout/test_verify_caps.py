"""Only the reports and logs of ``/logs/verifier`` come back, within byte caps, and never silently.

A verifier that writes a huge file and thousands of small ones must not copy them into every trial's folder;
what the reward reader needs (``ctrf.json``, ``reward.json``, JUnit ``*.xml``) must still arrive intact, and
whatever is left out is listed in a note.
"""

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from t1_reward import FallbackCause, read_report
from t1_rollout.verify import OMITTED_NOTE, run_verifier
from t1_sandbox.local import LocalSandbox

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None or os.geteuid() != 0,
    reason="needs bubblewrap (apt-get install bubblewrap) and root",
)

MiB = 1024 * 1024
CTRF = {
    "results": {
        "tool": {"name": "pytest"},
        "summary": {},
        "tests": [
            {"name": "test_a", "status": "passed", "duration": 1},
            {"name": "test_b", "status": "passed", "duration": 1},
            {"name": "test_c", "status": "failed", "duration": 1},
        ],
    }
}


@dataclass
class FakeTask:
    id: str
    tests_dir: Path


def _task(tmp_path: Path, body: str) -> FakeTask:
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "ctrf.json").write_text(json.dumps(CTRF))
    (tests / "test.sh").write_text("set -e\ncd /logs/verifier\n" + body)
    env = tmp_path / "env"
    env.mkdir()
    (env / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
    return FakeTask("caps", tests)


def _tree(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


async def _verify(tmp_path: Path, body: str, **caps) -> tuple[Path, object]:
    task = _task(tmp_path, body)
    async with LocalSandbox() as sb:
        await sb.start(tmp_path / "env", timeout_s=60)
        run = await run_verifier(sb, task, timeout_s=120, out_dir=tmp_path / "out", **caps)
    return tmp_path / "out", run


async def test_a_huge_file_and_thousands_of_small_ones_are_not_copied_back(tmp_path):
    body = (
        "cp /tests/ctrf.json ctrf.json\n"
        "echo '{\"reward\": 0.0}' > reward.json\n"
        "head -c 40000000 /dev/zero > big.bin\n"  # 40 MB: over the 8 MiB per-file cap
        "mkdir many; for i in $(seq 3000); do echo x > many/f$i; echo y > s$i.dat; done\n"
        "echo the tests ran\n"
    )
    out, run = await _verify(tmp_path, body)
    assert run.error is None and run.exit_code == 0
    count, size = _tree(out)
    # ctrf.json, reward.json, test-stdout.txt and the note; nothing else
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["ctrf.json", "reward.json", "test-stdout.txt", OMITTED_NOTE]
    )
    assert count == 4 and size < 1 * MiB
    note = (out / OMITTED_NOTE).read_text()
    assert "big.bin: 40000000 bytes" in note and "many: directory (3000 files, 6000 bytes)" in note
    assert run.omitted is not None and OMITTED_NOTE in run.omitted
    # the reward reader still gets the whole report: 2 of 3 assertions passed, binary 0
    report = read_report(out)
    assert report.fallback is None and report.binary == 0.0
    assert sorted((o.name, o.status.value) for o in report.outcomes) == [
        ("test_a", "passed"),
        ("test_b", "passed"),
        ("test_c", "failed"),
    ]


async def test_junit_xml_and_reward_txt_come_back(tmp_path):
    junit = (
        '<testsuite name="s" tests="2"><testcase classname="c" name="t1"/>'
        '<testcase classname="c" name="t2"><failure message="no"/></testcase></testsuite>'
    )
    body = f"echo '{junit}' > results.xml\necho 1 > reward.txt\necho junk > notes.md\n"
    out, run = await _verify(tmp_path, body)
    assert (out / "results.xml").read_text().strip() == junit
    assert (out / "reward.txt").read_text().strip() == "1"
    assert not (out / "notes.md").exists() and "notes.md: 5 bytes" in (out / OMITTED_NOTE).read_text()
    report = read_report(out)
    assert report.source == "junit" and len(report.outcomes) == 2 and report.binary == 1.0


async def test_an_oversized_report_is_present_but_unusable_never_cut(tmp_path):
    # ctrf.json padded past a 64 KiB per-file cap: cutting it could leave a parsable, wrong report
    padded = json.dumps(CTRF | {"pad": "p" * 100_000})
    (tmp_path / "big_ctrf.json").write_text(padded)
    body = "cp /tests/big.json ctrf.json\necho '{\"reward\": 1.0}' > reward.json\n"
    task = _task(tmp_path, body)
    shutil.copy(tmp_path / "big_ctrf.json", task.tests_dir / "big.json")
    async with LocalSandbox() as sb:
        await sb.start(tmp_path / "env", timeout_s=60)
        run = await run_verifier(
            sb, task, timeout_s=60, out_dir=tmp_path / "out", max_file_bytes=64 * 1024, max_total_bytes=MiB
        )
    out = tmp_path / "out"
    assert (out / "ctrf.json").read_bytes() == b""
    assert f"ctrf.json: {len(padded)} bytes, over the per-file cap" in (out / OMITTED_NOTE).read_text()
    report = read_report(out)
    assert report.fallback == FallbackCause.UNPARSABLE and report.binary == 1.0
    assert run.omitted is not None


async def test_logs_over_the_cap_keep_head_and_tail_and_the_total_is_capped(tmp_path):
    cap, total = 64 * 1024, 256 * 1024
    body = (
        "cp /tests/ctrf.json ctrf.json\n"
        "{ echo HEAD-OF-LOG; head -c 500000 /dev/zero | tr '\\0' x; echo; echo END-OF-LOG; } > main.log\n"
        "for i in 1 2 3 4 5 6; do head -c 60000 /dev/zero | tr '\\0' y > part$i.log; done\n"
        "head -c 300000 /dev/zero | tr '\\0' z\n"  # test.sh's own stdout: captured as test-stdout.txt
    )
    out, run = await _verify(tmp_path, body, max_file_bytes=cap, max_total_bytes=total)
    assert run.error is None
    count, size = _tree(out)
    note = (out / OMITTED_NOTE).read_text()
    assert size - (out / OMITTED_NOTE).stat().st_size <= total
    assert all(p.stat().st_size <= cap for p in out.iterdir())
    log = (out / "main.log").read_text()
    assert log.startswith("HEAD-OF-LOG") and log.rstrip().endswith("END-OF-LOG") and "omitted" in log
    stdout = (out / "test-stdout.txt").read_text()
    assert stdout.startswith("zzz") and "omitted" in stdout
    assert "main.log: 500024 bytes, cut to its head and tail" in note
    assert "part6.log" in note  # the total cap left the last logs out, and says so
    assert json.loads((out / "ctrf.json").read_text()) == CTRF  # reports come first under the total cap


async def test_thousands_of_junit_files_all_come_back(tmp_path):
    # 1,200 JUnit files, one assertion each: every one counts, so every one is copied back (the copy's
    # command line would pass the kernel's 128 KiB limit on one argument if it were given inline)
    case = '<testsuite name="s" tests="1"><testcase classname="c" name="t%s"/></testsuite>\\n'
    body = f"for i in $(seq 1200); do printf '{case}' $i > junit-with-a-long-name-$i.xml; done\n"
    out, run = await _verify(tmp_path, body)
    assert run.error is None and run.omitted is None
    assert len(list(out.glob("*.xml"))) == 1200
    report = read_report(out)
    assert report.fallback is None and len(report.outcomes) == 1200


async def test_a_test_stdout_txt_written_by_test_sh_does_not_replace_the_captured_output(tmp_path):
    body = "echo from-the-file > test-stdout.txt\necho from-real-stdout\n"
    out, run = await _verify(tmp_path, body)
    assert run.error is None
    assert "from-real-stdout" in (out / "test-stdout.txt").read_text()
    assert (out / "verifier-test-stdout.txt").read_text() == "from-the-file\n"
    assert "kept as verifier-test-stdout.txt" in (out / OMITTED_NOTE).read_text()


async def test_symlinks_and_unprintable_names_are_named_so_and_the_note_keeps_one_line_each(tmp_path):
    body = "ln -s /etc/passwd ctrf.json\nln -s /etc dir.log\ntouch \"$(printf 'new\\nline.log')\"\n"
    out, run = await _verify(tmp_path, body)
    note = (out / OMITTED_NOTE).read_text().splitlines()
    assert "ctrf.json: symbolic link; never followed, not copied" in note
    assert "dir.log: symbolic link; never followed, not copied" in note
    assert "'new\\nline.log': a name with control or undecodable characters; not copied" in note
    assert not (out / "ctrf.json").exists()
