"""Read a verifier output directory into a `Report` (the I/O edge of t1_reward)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from t1_reward.outcomes import AssertionOutcome, FallbackCause, Report, VerifierReportError
from t1_reward.parsers import parse_ctrf, parse_junit, parse_reward_json, parse_reward_txt

#: Largest verifier file read, bytes. A bigger one is treated as unparsable rather than loaded (untrusted
# output).
MAX_REPORT_BYTES = 64 * 1024 * 1024

CTRF_FILE = "ctrf.json"
REWARD_JSON_FILE = "reward.json"
REWARD_TXT_FILE = "reward.txt"


def _read_text(path: Path) -> str:
    try:
        size = path.stat().st_size
        if size > MAX_REPORT_BYTES:
            raise VerifierReportError(f"{path.name}: {size} bytes exceeds the {MAX_REPORT_BYTES}-byte limit")
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise VerifierReportError(f"{path.name}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise VerifierReportError(f"{path.name}: cannot be read ({e.strerror or e})") from None


def _parse_file[T](path: Path, parser: Callable[[str], T], notes: list[str]) -> T | None:
    try:
        return parser(_read_text(path))
    except VerifierReportError as e:
        notes.append(str(e))
        return None


def _read_outcomes(
    verifier_dir: Path, notes: list[str]
) -> tuple[tuple[AssertionOutcome, ...] | None, str, bool]:
    """Return (outcomes or None, source, whether some per-assertion file was present)."""
    present = False
    ctrf = verifier_dir / CTRF_FILE
    if ctrf.exists():
        present = True
        outcomes = _parse_file(ctrf, parse_ctrf, notes)
        if outcomes is not None:
            return outcomes, "ctrf", present
    xml_files = sorted(p for p in verifier_dir.glob("*.xml") if p.is_file())
    if xml_files:
        present = True
        parsed = [_parse_file(p, parse_junit, notes) for p in xml_files]
        # A set of JUnit files is used only whole: one unreadable file would silently drop its assertions.
        if all(o is not None for o in parsed):
            return tuple(o for outs in parsed for o in outs), "junit", present  # type: ignore[union-attr]
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


def read_report(verifier_dir: Path, *, timed_out: bool = False, crashed: bool = False) -> Report:
    """Read everything a verifier left in its output directory (Harbor's ``/logs/verifier``).

    Per-assertion outcomes come from ``ctrf.json`` (CTRF, as pytest-json-ctrf writes it), else from the JUnit
    XML files (``*.xml``, all of them, in name order). The binary outcome b comes from ``reward.json``
    (``{"reward": x}``, flat numeric object) or, when that file is absent, ``reward.txt`` (T1 §5.2; Harbor
    ``verifier.py``).

    The fallback cause (T1 §5.2, "Fallback") is, in this order of precedence: `VERIFIER_TIMEOUT` if
    ``timed_out``; `VERIFIER_CRASH` if ``crashed``; `UNPARSABLE` if a per-assertion file exists but cannot be
    used; when no per-assertion file exists, `UNPARSABLE` if a reward file exists but is bad, else `MISSING`.
    With a timeout or crash, outcomes that could still be parsed are kept in the report (they may be partial)
    but are not to be scored.

    Bad verifier output never raises: it is data about the trial and ends up in `Report.fallback` and
    `Report.detail`.

    Args:
        verifier_dir: Directory holding the verifier's output files (it may be missing or empty).
        timed_out: The verifier overran its deadline (T1 §7: 900 s verifier deadline).
        crashed: The verifier could not run to completion for an infrastructure reason (sandbox lost, exec
            failed).

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
    return Report(
        outcomes=outcomes or (),
        binary=binary,
        source=source,
        fallback=fallback,
        detail="; ".join(notes) if notes else None,
    )
