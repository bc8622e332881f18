"""Strict parsers of verifier output files: CTRF JSON, JUnit XML, reward.json, reward.txt.

Each parser takes the file's text and either returns the parsed value or raises `VerifierReportError` naming
what is wrong. `read_report` (in `t1_reward.report`) does the I/O and turns errors into tagged fallbacks.
Formats: CTRF per `ctrf-io/ctrf` schema (``results.tests[].name/status``) as pytest-json-ctrf writes it; JUnit
XML as pytest ``--junitxml`` writes it; reward files as Harbor's verifier reads them (numeric
``reward.json``, single float ``reward.txt``).
"""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from typing import Any

from t1_reward.outcomes import AssertionOutcome, AssertionStatus, VerifierReportError

# CTRF statuses (schema enum) -> our four. `pending` did not run, like `skipped`. Matched ignoring ASCII
# letter case; any other string is not a CTRF status and makes the report unparsable (never a silent failure).
_CTRF_STATUS = {
    "passed": AssertionStatus.PASSED,
    "failed": AssertionStatus.FAILED,
    "skipped": AssertionStatus.SKIPPED,
    "pending": AssertionStatus.SKIPPED,
    "other": AssertionStatus.OTHER,
}


def _reject_constant(name: str) -> float:
    raise VerifierReportError(f"non-finite number {name} in JSON")


def _quote(text: str, limit: int = 40) -> str:
    """The text as a repr, truncated to ``limit`` characters (verifier output may be huge)."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def _load_json(text: str, what: str) -> Any:
    # A UTF-8 byte-order mark (Windows editors, PowerShell) is not part of the JSON document.
    text = text.removeprefix("\ufeff")
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except VerifierReportError as e:
        raise VerifierReportError(f"{what}: {e}") from None
    except RecursionError:  # nesting deeper than the interpreter's stack: a malformed report, not a crash
        raise VerifierReportError(f"{what}: nested too deeply to read (not a report)") from None
    except json.JSONDecodeError as e:
        raise VerifierReportError(
            f"{what}: invalid JSON ({e.msg} at line {e.lineno} column {e.colno})"
        ) from None
    except ValueError:  # an integer past the interpreter's digit limit: a malformed report, not a crash
        raise VerifierReportError(f"{what}: a number too long to read (not a report)") from None


def parse_ctrf(text: str) -> tuple[AssertionOutcome, ...]:
    """Parse a CTRF report into per-assertion outcomes.

    Accepts the current schema (``reportFormat``/``specVersion`` present) and the older plugin output (only
    ``results``). A status is one of CTRF's five, ``passed``, ``failed``, ``skipped``, ``pending`` (read as
    skipped: it did not run) and ``other``, matched ignoring ASCII letter case (``PASSED`` is ``passed``).
    Any other status (``ok``, ``error``, ``passed `` with a space) is not CTRF: the whole report is refused,
    so that a verifier's format slip falls back to the binary outcome with its cause instead of being
    scored as a failed assertion, the agent's 0 (T1 §5.2, Fallback).
    pytest-json-ctrf before 0.4 (Harbor's template and Terminal-Bench 2 pin 0.3.5) collapses the cases of a
    parametrized test into one entry: its name is the node id cut at ``[``, ``retries`` counts the other
    cases (and is left out when it is 1), and its status is the first failing or skipped case's, else
    passed. Such a report is recognised by its snake-case ``file_path`` key (0.4 and later write
    ``filePath``); each of its entries stands for ``retries + 1`` cases (2 when ``retries`` is absent), kept
    as `AssertionOutcome.cases`, so T counts every case and P counts a collapsed entry's cases only when it
    passed (a lower bound: the report does not say which cases of a failed entry passed). In later versions
    each case is its own entry and ``retries`` counts reruns of one test (pytest-rerunfailures), whose
    ``status`` is already the final attempt's: it is read as it is, a rerun that passed counts as passed.
    A leading UTF-8 byte-order mark is ignored.

    Args:
        text: The content of ``ctrf.json``.

    Returns:
        One outcome per entry of ``results.tests``, in file order (``cases`` > 1 for a collapsed entry of
        pytest-json-ctrf < 0.4). A name that several entries share with
        different ``filePath`` values is qualified as ``filePath::name`` (distinct tests of a reporter whose
        names are bare titles); entries that repeat a name otherwise are returned as they are (the file's
        content), and `read_report` folds them with `fold_outcomes`.

    Raises:
        VerifierReportError: invalid JSON (nesting too deep to read included); ``results.tests`` missing
            or not a list; a test without a string ``name`` or ``status``; a status that is not one of
            CTRF's five (the message quotes it and the test's index and name); a collapsed entry whose
            ``retries`` is not a non-negative integer; zero tests (a report that lists nothing carries no
            per-assertion information); or ``results.summary.tests`` disagreeing with the number of
            entries (a partial report).
    """
    data = _load_json(text, "ctrf.json")
    if not isinstance(data, dict) or not isinstance(data.get("results"), dict):
        raise VerifierReportError("ctrf.json: top level must be an object with a 'results' object")
    results = data["results"]
    tests = results.get("tests")
    if not isinstance(tests, list):
        raise VerifierReportError("ctrf.json: 'results.tests' is missing or not a list")
    outcomes: list[AssertionOutcome] = []
    # the first file path each name was seen with; a name seen with another one is in `several_files`
    file_of: dict[str, str | None] = {}
    several_files: set[str] = set()
    for i, test in enumerate(tests):
        if not isinstance(test, dict):
            raise VerifierReportError(f"ctrf.json: results.tests[{i}] is not an object")
        name, raw = test.get("name"), test.get("status")
        if not isinstance(name, str) or not isinstance(raw, str):
            raise VerifierReportError(f"ctrf.json: results.tests[{i}] lacks a string 'name' and 'status'")
        # an exact match first (what every reporter writes), else ASCII letter case ignored
        status = _CTRF_STATUS.get(raw) or (_CTRF_STATUS.get(raw.lower()) if raw.isascii() else None)
        if status is None:
            raise VerifierReportError(
                f"ctrf.json: results.tests[{i}] ({_quote(name)}) has status {_quote(raw)}, not a CTRF status "
                f"({', '.join(_CTRF_STATUS)}, in any letter case)"
            )
        message = test.get("message")
        if message is not None and not isinstance(message, str):
            message = None
        cases = _collapsed_cases(test, name, i) if "file_path" in test else 1
        outcomes.append(AssertionOutcome(name, status, message, 1, cases))
        file_path = _file_path(test)
        if file_of.setdefault(name, file_path) != file_path:
            several_files.add(name)
    # One name in several files is several tests (a non-pytest reporter whose names are bare titles): qualify
    # those names with their file, so that only true repeats are folded later. pytest node ids are unique.
    if several_files:
        outcomes = [
            AssertionOutcome(f"{f}::{o.name}", o.status, o.message, cases=o.cases)
            if (f := _file_path(test)) and o.name in several_files
            else o
            for o, test in zip(outcomes, tests, strict=True)
        ]
    if not outcomes:
        raise VerifierReportError("ctrf.json: 'results.tests' is empty (no assertion was reported)")
    summary = results.get("summary")
    if (
        isinstance(summary, dict)
        and isinstance(summary.get("tests"), int)
        and summary["tests"] != len(outcomes)
    ):
        raise VerifierReportError(
            f"ctrf.json: summary.tests = {summary['tests']} but {len(outcomes)} tests are listed"
            " (partial report)"
        )
    return tuple(outcomes)


def _file_path(test: dict[str, Any]) -> str | None:
    """A CTRF entry's ``filePath`` when it is a non-empty string, else None."""
    file_path = test.get("filePath")
    return file_path if isinstance(file_path, str) and file_path else None


def _collapsed_cases(test: dict[str, Any], name: str, index: int) -> int:
    """How many parametrized cases one CTRF entry stands for (1 unless pytest-json-ctrf < 0.4 wrote it).

    Raises:
        VerifierReportError: a collapsed entry whose ``retries`` is not a non-negative integer.
    """
    # 0.1 to 0.3.x write snake-case ``file_path`` and cut the node id at "["; later versions never do
    if "file_path" not in test or "filePath" in test or "[" in name:
        return 1
    retries = test.get("retries", 1)  # 0.3.x leaves retries out when it is 1 (two cases)
    if isinstance(retries, bool) or not isinstance(retries, int) or retries < 0:
        raise VerifierReportError(
            f"ctrf.json: results.tests[{index}] ({_quote(name)}) has retries {_quote(repr(retries))}, not a"
            " non-negative integer (pytest-json-ctrf < 0.4 counts a parametrized test's other cases there)"
        )
    return retries + 1


def parse_junit(text: str) -> tuple[AssertionOutcome, ...]:
    """Parse a JUnit XML report into per-assertion outcomes.

    A ``<testcase>`` with a ``<failure>`` or ``<error>`` child is `FAILED`, with ``<skipped>`` is `SKIPPED`,
    otherwise `PASSED`. Names are ``classname::name`` (just ``name`` when there is no classname). Reruns
    are read at their final status: the Maven Surefire rerun children (``<flakyFailure>``,
    ``<flakyError>``: failed attempts of a test that then passed; ``<rerunFailure>``, ``<rerunError>``:
    earlier attempts of a test whose final ``<failure>`` is also there) are attempt history and do not set
    the status, and a test that pytest-rerunfailures reported once per attempt (repeated ``<testcase>``
    elements) is folded to its last one by `fold_outcomes`.

    Args:
        text: The XML document (root ``<testsuites>`` or ``<testsuite>``; see `xml_root_tag` to tell a JUnit
            report from other XML before parsing).

    Returns:
        One outcome per ``<testcase>`` in document order. Repeated names are returned as they are;
        `read_report` folds them with `fold_outcomes`.

    Raises:
        VerifierReportError: malformed XML, a root other than ``<testsuites>``/``<testsuite>``, a testcase
            without a name, or no testcase at all.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as e:
        raise VerifierReportError(f"JUnit XML: malformed ({e})") from None
    if root.tag not in ("testsuites", "testsuite"):
        raise VerifierReportError(
            f"JUnit XML: root element is <{root.tag}>, expected <testsuites> or <testsuite>"
        )
    outcomes: list[AssertionOutcome] = []
    for case in root.iter("testcase"):
        name = case.get("name")
        if not name:
            raise VerifierReportError("JUnit XML: a <testcase> has no name")
        classname = case.get("classname")
        full = f"{classname}::{name}" if classname else name
        status, message = AssertionStatus.PASSED, None
        for child in case:
            if child.tag in ("failure", "error"):
                status, message = AssertionStatus.FAILED, child.get("message")
                break
            if child.tag == "skipped":
                status, message = AssertionStatus.SKIPPED, child.get("message")
        outcomes.append(AssertionOutcome(name=full, status=status, message=message))
    if not outcomes:
        raise VerifierReportError("JUnit XML: no <testcase> elements (no assertion was reported)")
    return tuple(outcomes)


#: Root elements of a JUnit XML report; any other XML file (coverage.xml, ...) is not one.
JUNIT_ROOTS = ("testsuites", "testsuite")


def xml_root_tag(text: str) -> str | None:
    """The tag of an XML document's root element, read from its start tag only.

    Lets `read_report` ignore XML files that are not JUnit reports (``coverage.xml`` has root
    ``<coverage>``) while a truncated JUnit file (``<testsuites><testsuite>`` cut short) is still recognised
    as JUnit, and so reported unparsable rather than ignored.

    Args:
        text: The XML document, possibly truncated or malformed after the root's start tag.

    Returns:
        The root tag (``{namespace}tag`` when namespaced), or None when no root start tag can be read (empty
        or not XML).
    """
    parser = ET.XMLPullParser(events=("start",))
    try:
        parser.feed(text)
        for _event, element in parser.read_events():
            return element.tag
    except ET.ParseError:
        # The error may come after the root's start tag: events read before it are still valid.
        for _event, element in parser.read_events():
            return element.tag
    return None


def _harbor_number(value: Any) -> float | None:
    """``value`` as Harbor's reward model coerces it (pydantic ``float | int``, lax), or None if it cannot be.

    Numbers (NaN and infinities included, as Python's ``json`` reads them), booleans (1 and 0) and numeric
    strings such as ``"0.5"`` are numbers to Harbor; null, lists, objects and other strings are not.
    """
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, int | float):
        try:
            return float(value)
        except OverflowError:  # an integer beyond float's range: infinite, so refused as not finite
            return math.inf if value > 0 else -math.inf
    if isinstance(value, str):
        match = _REWARD_TXT.fullmatch(value)
        return float(match.group(1)) if match is not None else None
    return None


def parse_reward_json(text: str) -> float:
    """Parse Harbor's ``reward.json`` as Harbor reads it and return the trial's reward.

    Harbor loads the file with ``json.loads`` into a ``dict[str, float | int]`` (its ``VerifierResult``):
    any number of keys, each value a number or something pydantic coerces to one (a boolean, a numeric
    string); a value it cannot coerce (null, a list, an object, other text) makes Harbor refuse the file.
    The reward is the ``"reward"`` key when there is one, else the first key's value (Harbor's consumers:
    the uploader's primary reward, the leaderboard). Extra keys (``n_passed``, ``loss``, even a NaN one)
    are allowed and ignored. T1 adds rules of its own: the reward itself is a finite number in [0, 1], and
    not a boolean (``{"reward": true}`` is refused; Harbor's lax pydantic would read it as 1.0).

    Source: Harbor ``verifier/verifier.py`` (``_parse_reward_json``), ``models/verifier/result.py``,
    ``upload/uploader.py`` (``_extract_primary_reward``), v0.13.1.

    Args:
        text: The content of ``reward.json`` (a leading UTF-8 byte-order mark is ignored).

    Returns:
        The binary (terminal) outcome b, in [0, 1] (1 solved, 0 not; a fraction is kept as the verifier's
        partial credit).

    Raises:
        VerifierReportError: invalid JSON (nesting too deep to read included), not an object, an empty
            object (no reward), a value Harbor cannot read as a number (the keys are named), a boolean
            reward, or a reward that is not finite or lies outside [0, 1] (the message quotes it): an
            outcome such as -1 or 2.5 is a verifier slip, never a reward.
    """
    text = text.removeprefix("\ufeff")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise VerifierReportError(
            f"reward.json: invalid JSON ({e.msg} at line {e.lineno} column {e.colno})"
        ) from None
    except RecursionError:  # nesting deeper than the interpreter's stack: a malformed file, not a crash
        raise VerifierReportError("reward.json: nested too deeply to read (not a reward)") from None
    except ValueError:  # an integer past the interpreter's digit limit: a malformed file, not a crash
        raise VerifierReportError("reward.json: a number too long to read (not a reward)") from None
    if not isinstance(data, dict):
        raise VerifierReportError('reward.json: must be a flat JSON object such as {"reward": 1.0}')
    bad = [k for k, v in data.items() if _harbor_number(v) is None]
    if bad:
        raise VerifierReportError(
            f"reward.json: values for keys {bad[:10]} are not numbers (Harbor refuses such a file too)"
        )
    if not data:
        raise VerifierReportError('reward.json: an empty object holds no reward (write {"reward": x})')
    key = "reward" if "reward" in data else next(iter(data))
    if isinstance(data[key], bool):
        # T1's rule: a boolean is not a reward (pydantic's lax float would read true as 1.0)
        raise VerifierReportError(
            f"reward.json: {key!r} = {json.dumps(data[key])} is a boolean, not a number"
        )
    value = _harbor_number(data[key])
    assert value is not None  # every value was checked above
    if not math.isfinite(value):
        raise VerifierReportError(f"reward.json: {key!r} = {data[key]!r} is not finite")
    return _binary_in_range(value, f"reward.json: {key!r} = {data[key]!r}")


def _binary_in_range(value: float, what: str) -> float:
    """``value`` if it lies in [0, 1] (-0.0 read as 0.0).

    Raises:
        VerifierReportError: outside [0, 1]; the message opens with ``what``, which quotes the value.
    """
    if not 0.0 <= value <= 1.0:
        raise VerifierReportError(
            f"{what} is outside [0, 1]: a binary outcome is 1 (solved), 0 (not) or a fraction between"
        )
    return value + 0.0


# A plain decimal number (ASCII digits, optional sign, fraction and exponent) with optional ASCII whitespace
# around it. Stricter than float(), which also takes "1_0", "nan", "inf" and non-ASCII digits.
_WS = r"[ \t\r\n\f\v]*"
_REWARD_TXT = re.compile(_WS + r"([+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)" + _WS)


def parse_reward_txt(text: str) -> float:
    """Parse Harbor's ``reward.txt``: one finite decimal number in [0, 1].

    Accepted: optional ASCII whitespace around an optional sign, ASCII digits with an optional decimal point
    and fraction, and an optional exponent (``1``, ``0.5``, ``+1``, ``.5``, ``1e-05`` as Python prints small
    floats), whose value lies in [0, 1]. Refused, unlike Python's ``float()``: digit separators (``1_0``),
    ``nan``/``inf``, non-ASCII digits, two numbers (``1 0``). A leading UTF-8 byte-order mark is ignored.

    Args:
        text: The content of ``reward.txt``.

    Returns:
        The binary (terminal) outcome b, in [0, 1].

    Raises:
        VerifierReportError: empty file, not a plain decimal number (the message quotes the text, truncated
            to 40 characters), not finite (e.g. ``1e999``), or outside [0, 1] (``-1``, ``2.5``; quoted).
    """
    text = text.removeprefix("\ufeff")
    if not text.strip():
        raise VerifierReportError("reward.txt: empty")
    match = _REWARD_TXT.fullmatch(text)
    if match is None:
        raise VerifierReportError(f"reward.txt: not a plain decimal number: {_quote(text.strip())}")
    value = float(match.group(1))
    if not math.isfinite(value):
        raise VerifierReportError(f"reward.txt: not finite: {_quote(match.group(1))}")
    return _binary_in_range(value, f"reward.txt: {_quote(match.group(1))}")
