"""Read a verifier output directory into a `Report` (the I/O edge of t1_reward)."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from t1_reward.outcomes import AssertionOutcome, FallbackCause, Report, VerifierReportError, fold_outcomes
from t1_reward.parsers import (
    JUNIT_ROOTS,
    parse_ctrf,
    parse_junit,
    parse_reward_json,
    parse_reward_txt,
    xml_root_tag,
)
from t1_reward.pytest_output import expand_collapsed

#: Largest verifier file read, bytes. A bigger one is treated as unparsable rather than loaded (untrusted
# output).
MAX_REPORT_BYTES = 64 * 1024 * 1024

CTRF_FILE = "ctrf.json"
REWARD_JSON_FILE = "reward.json"
REWARD_TXT_FILE = "reward.txt"
#: What test.sh printed, as T1 (``t1_rollout.verify``) and Harbor save it in the verifier's output folder.
CAPTURED_FILE = "test-stdout.txt"


def _file_kind(mode: int) -> str:
    for test, kind in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return kind
    return "of an unknown kind"


def _decode(data: bytes, name: str, notes: list[str] | None) -> str:
    """``data`` as UTF-8 text (a leading byte-order mark dropped), undecodable bytes replaced by U+FFFD.

    Test output quoted in a failure message (a program printing Latin-1, a binary diff) is the usual source
    of bytes that are not UTF-8; they sit in free text, while the structure a parser reads (JSON, XML
    markup, statuses) is ASCII. Replacing them keeps the statuses readable; a status or number that held
    such a byte no longer matches anything and is refused by the parser, as before. The count replaced is
    noted in ``notes``.
    """
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        text = data.decode("utf-8-sig", errors="replace")
        if notes is not None:
            bad = text.count("\ufffd") - data.decode("utf-8-sig", errors="ignore").count("\ufffd")
            notes.append(
                f"{name}: {bad} undecodable byte sequences (not UTF-8, first at byte {e.start}) replaced by"
                " U+FFFD; statuses read as written"
            )
        return text


def _read_text(path: Path, notes: list[str] | None = None) -> str:
    """Read a verifier file as UTF-8 text, without ever blocking.

    Only regular files are read: the file is opened non-blocking (opening a FIFO for reading would otherwise
    wait for a writer forever) and checked with ``fstat`` on the open descriptor (no race with a swap).
    A leading UTF-8 byte-order mark is dropped; bytes that are not UTF-8 are replaced by U+FFFD, with a
    note in ``notes`` (`_decode`).

    Raises:
        VerifierReportError: not a regular file (FIFO, device, socket, directory), larger than
            `MAX_REPORT_BYTES`, or unreadable.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise VerifierReportError(f"{path.name}: cannot be opened ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise VerifierReportError(
                f"{path.name}: is {_file_kind(st.st_mode)}, not a regular file; not read"
            )
        if st.st_size > MAX_REPORT_BYTES:
            raise VerifierReportError(
                f"{path.name}: {st.st_size} bytes exceeds the {MAX_REPORT_BYTES}-byte limit"
            )
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(MAX_REPORT_BYTES + 1)  # the file may grow after fstat
        if len(data) > MAX_REPORT_BYTES:
            raise VerifierReportError(f"{path.name}: exceeds the {MAX_REPORT_BYTES}-byte limit")
        return _decode(data, path.name, notes)
    except OSError as e:
        raise VerifierReportError(f"{path.name}: cannot be read ({e.strerror or e})") from None
    finally:
        os.close(fd)


def _parse_file[T](path: Path, parser: Callable[[str], T], notes: list[str]) -> T | None:
    try:
        return parser(_read_text(path, notes))
    except VerifierReportError as e:
        notes.append(str(e))
        return None
    except RecursionError:  # a report nested past the stack is unparsable, never a reader crash (dropped)
        notes.append(f"{path.name}: nested too deeply to read (not a report)")
        return None


def _read_junit(path: Path, notes: list[str]) -> tuple[AssertionOutcome, ...] | None | bool:
    """Parse one ``*.xml`` file.

    Returns its outcomes; None if it is a JUnit report that cannot be used; False if it is not a JUnit report
    at all (its root element is neither ``<testsuites>`` nor ``<testsuite>``).
    """
    try:
        text = _read_text(path, notes)
    except VerifierReportError as e:
        notes.append(str(e))
        return None
    root = xml_root_tag(text)
    if root is not None and root not in JUNIT_ROOTS:
        notes.append(f"{path.name} ignored: root element <{root}> is not a JUnit report")
        return False
    try:
        return parse_junit(text)
    except VerifierReportError as e:
        notes.append(f"{path.name}: {e}")
        return None
    except RecursionError:
        notes.append(f"{path.name}: nested too deeply to read (not a report)")
        return None


def _fold(
    outcomes: tuple[AssertionOutcome, ...], what: str, notes: list[str]
) -> tuple[AssertionOutcome, ...]:
    folded = fold_outcomes(outcomes)
    if len(folded) < len(outcomes):
        repeated = [o for o in folded if o.entries > 1]
        # names are untrusted text: quote at most 5 of them, each cut to 80 characters
        names = ", ".join(
            repr(o.name[:80]) + ("..." if len(o.name) > 80 else "") + f" x{o.entries}" for o in repeated[:5]
        )
        more = f" and {len(repeated) - 5} more" if len(repeated) > 5 else ""
        notes.append(
            f"{what}: {len(outcomes) - len(folded)} duplicate entries folded (reruns or repeats of a test"
            f" name: each name counts once, at its last entry's status): {names}{more}"
        )
    collapsed = [o for o in folded if o.cases > 1]  # `AssertionOutcome.collapsed`, without a call per entry
    if collapsed:
        cases = sum(o.cases for o in collapsed)
        notes.append(
            f"{what}: {len(collapsed)} entries collapse {cases} parametrized cases (pytest-json-ctrf < 0.4):"
            " each case counts as an assertion, passed only when its entry passed"
            " (pin pytest-json-ctrf >= 0.6 for per-case outcomes)"
        )
    return folded


def _read_outcomes(
    verifier_dir: Path, notes: list[str]
) -> tuple[tuple[AssertionOutcome, ...] | None, str, bool]:
    """Return (outcomes, one per test name, or None; source; whether some per-assertion file was present)."""
    present = False
    ctrf = verifier_dir / CTRF_FILE
    if ctrf.exists():
        present = True
        outcomes = _parse_file(ctrf, parse_ctrf, notes)
        if outcomes is not None:
            return _fold(outcomes, CTRF_FILE, notes), "ctrf", present
    # Directories are not files; FIFOs, devices and sockets are kept so that `_read_text` refuses them loudly.
    xml_files = sorted(p for p in verifier_dir.glob("*.xml") if p.exists() and not p.is_dir())
    parsed = [(p, _read_junit(p, notes)) for p in xml_files]
    junit = [(p, o) for p, o in parsed if o is not False]
    if junit:
        present = True
        # A set of JUnit files is used only whole: one unreadable file would silently drop its assertions.
        if all(o is not None for _, o in junit):
            outcomes = tuple(o for _, outs in junit for o in outs)  # type: ignore[union-attr]
            return _fold(outcomes, "JUnit XML", notes), "junit", present
    return None, "none", present


def _read_binary(verifier_dir: Path, notes: list[str]) -> tuple[float | None, str, bool]:
    """Return (binary or None, its file name, whether a reward file was present but unparsable).

    As in Harbor's verifier code, ``reward.json`` wins over ``reward.txt`` when it exists, even when it is
    bad.
    """
    rjson, rtxt = verifier_dir / REWARD_JSON_FILE, verifier_dir / REWARD_TXT_FILE
    if rjson.exists():
        value = _parse_file(rjson, parse_reward_json, notes)
        if value is None and rtxt.exists():
            notes.append("reward.txt ignored: reward.json exists and wins (Harbor's rule)")
        return value, REWARD_JSON_FILE, value is None
    if rtxt.exists():
        value = _parse_file(rtxt, parse_reward_txt, notes)
        return value, REWARD_TXT_FILE, value is None
    return None, "none", False


def read_report(
    verifier_dir: Path, *, timed_out: bool = False, crashed: bool = False, stdout: str | None = None
) -> Report:
    """Read everything a verifier left in its output directory (Harbor's ``/logs/verifier``).

    Per-assertion outcomes come from ``ctrf.json`` (CTRF, as pytest-json-ctrf writes it), else from the JUnit
    XML files: every ``*.xml`` whose root element is ``<testsuites>`` or ``<testsuite>``, in name order.
    Other XML files (``coverage.xml``, root ``<coverage>``) are not JUnit reports and are ignored, with a note
    in ``detail``; an XML file whose root cannot be read at all (empty, not XML) counts as a bad JUnit file.
    The binary outcome b comes from ``reward.json`` (``{"reward": x}``, flat numeric object) or, when that
    file is absent, ``reward.txt`` (T1 §5.2; Harbor ``verifier.py``).

    P counts assertions, not report entries (T1 §5.2, Eq. 20): entries that repeat a test name (reruns) are
    folded into one assertion at its final entry's status (`fold_outcomes`); the count folded away is
    `Report.duplicates` and the names are in ``detail``. Parametrized cases have distinct names and count
    separately; an entry in which pytest-json-ctrf < 0.4 collapsed a parametrized test's cases counts all
    of them (`AssertionOutcome.cases`, `Report.collapsed`; `parse_ctrf`), with a note in ``detail``, unless
    pytest's output names each case's outcome: such an entry is then read per case
    (`t1_reward.pytest_output.expand_collapsed`; the result is still held to pytest's closing line by
    `check_report`).

    Only regular files are read, non-blocking: a report file that is a FIFO, device, socket or directory is
    not read (it would block or make no sense) and counts as present but unusable. Files are UTF-8, a
    leading byte-order mark is dropped, bytes that are not UTF-8 are replaced by U+FFFD (noted in
    ``detail``; statuses are read as written), and at most `MAX_REPORT_BYTES` are read.

    The fallback cause (T1 §5.2, "Fallback") is, in this order of precedence: `VERIFIER_TIMEOUT` if
    ``timed_out``; `VERIFIER_CRASH` if ``crashed``; `UNPARSABLE` if a per-assertion file (``ctrf.json`` or a
    JUnit ``*.xml``) exists but cannot be used; when no per-assertion file exists, `UNPARSABLE` if a reward
    file exists but is bad, else `MISSING`.
    With a timeout or crash, outcomes that could still be parsed are kept in the report (they may be partial)
    but are not to be scored.

    Bad verifier output never raises: it is data about the trial and ends up in `Report.fallback` and
    `Report.detail`.

    Args:
        verifier_dir: Directory holding the verifier's output files (it may be missing or empty).
        timed_out: The verifier overran its deadline (T1 §7: 900 s verifier deadline).
        crashed: The verifier could not run to completion for an infrastructure reason (sandbox lost, exec
            failed).
        stdout: What ``test.sh`` printed (for the per-case outcomes of collapsed entries); None reads
            ``verifier_dir / "test-stdout.txt"`` when it exists (`captured_output`).

    Returns:
        The `Report`; ``source`` names the per-assertion format when ``fallback`` is None, otherwise the
        reward file that gave ``binary`` (or ``"none"``).

    Raises:
        TypeError: ``verifier_dir`` is not a path (a programmer error).
    """
    if not isinstance(verifier_dir, str | Path):
        raise TypeError(f"verifier_dir must be a pathlib.Path, got {type(verifier_dir).__name__}")
    verifier_dir = Path(verifier_dir)
    notes: list[str] = []
    if not verifier_dir.is_dir():
        notes.append(f"verifier directory {verifier_dir} does not exist")
        outcomes, source, present = None, "none", False
        binary, binary_source, binary_bad = None, "none", False
    else:
        outcomes, source, present = _read_outcomes(verifier_dir, notes)
        binary, binary_source, binary_bad = _read_binary(verifier_dir, notes)

    if timed_out:
        fallback: FallbackCause | None = FallbackCause.VERIFIER_TIMEOUT
        notes.insert(0, "verifier timed out")
    elif crashed:
        fallback = FallbackCause.VERIFIER_CRASH
        notes.insert(0, "verifier crashed")
    elif outcomes is not None:
        fallback = None
    elif present or binary_bad:
        fallback = FallbackCause.UNPARSABLE
    else:
        fallback = FallbackCause.MISSING
        notes.insert(0, f"no per-assertion report ({CTRF_FILE} or *.xml)")
    if fallback is not None:
        source = binary_source if binary is not None else "none"
    report = Report(
        outcomes=outcomes or (),
        binary=binary,
        source=source,
        fallback=fallback,
        detail="; ".join(notes) if notes else None,
    )
    if report.collapsed and fallback is None:
        if stdout is None:
            stdout = captured_output(verifier_dir)
        report = expand_collapsed(report, stdout)
    return report


def captured_output(verifier_dir: Path) -> str | None:
    """What ``test.sh`` printed, as saved in ``verifier_dir / CAPTURED_FILE``; None when absent or unreadable.

    An unreadable file (not regular, over `MAX_REPORT_BYTES`) reads as None; nothing is raised.
    """
    path = Path(verifier_dir) / CAPTURED_FILE
    if not path.is_file():
        return None
    try:
        return _read_text(path)
    except VerifierReportError:
        return None
