"""The verifier run: held-out tests uploaded read-only after the agent is gone, run, checked, fetched.

Source: Harbor ``verifier.py`` (``tests/`` to ``/tests`` at verification time, ``bash /tests/test.sh``, the
``/logs/verifier/`` directory downloaded; harbor_tb.md §1.3); T1 §5.2 (the per-assertion report feeds the
dense reward); T1 §7 (900 s verifier deadline); T1 §10 (read-only test mounts and checksummed verifiers, left
there as future work, built here). The sequence, identical on every backend because it uses only the
``Sandbox`` seam:

1. the tests are hashed on the host; ``sealed_verifier(tests, "/tests")`` ends the agent phase
   (``stop_agent()``) and gives the sandbox the verifier runs in, the tests read-only there, reclaimed at the
   end: on Docker a fresh container of the agent's committed filesystem, run as root as Harbor runs it
   (``t1_sandbox.docker.sealed``); elsewhere the agent's own stopped sandbox (local: the agent's uid);
2. the wheelhouse of what ``test.sh`` installs is uploaded read-only (``t1_rollout.verifier_toolchain``);
3. a fresh ``/logs/verifier`` is made and ``bash /tests/test.sh`` runs through ``exec_verifier`` (the
   verifier toolchain is visible to that launch only), its output's head and tail kept
   (``t1_rollout.verifier_capture``);
4. right after ``test.sh`` exits, the report files are hashed in the sandbox and the folder is set aside
   (``/logs/.t1-verifier-done``, so that ending the agent phase again cannot clear it);
5. ``stop_agent()`` again: nothing that ``test.sh`` or the program under test started is left running;
6. the report is copied back and hashed on the host: any change since step 4 is tamper evidence
   (``report_changed``); the tests are downloaded and hashed against step 1 (``tests_changed``).

Who is to blame for the result (the environment, the agent, a forger) is worked out in
``t1_rollout.attribution`` (``judge_run``), and how it is scored is decided in one place,
``t1_reward.judge``.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import hashlib
import logging
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from t1_reward import TamperEvidence
from t1_rollout.verifier_capture import INNER_TIMEOUT_MARK, TIMEOUT_EXIT, capture_command, inner_deadline
from t1_rollout.verifier_toolchain import provision
from t1_sandbox.base import STEP_ENV, ExecResult, Sandbox, SandboxError, SandboxTimeout
from t1_sandbox.local.toolchain import VERIFIER_UV_DIR

__all__ = [
    "VerifierRun",
    "run_verifier",
    "sandbox_network",
    "tree_digest",
    "TESTS_DIR",
    "VERIFIER_LOG_DIR",
    "MAX_FILE_BYTES",
    "MAX_TOTAL_BYTES",
    "OMITTED_NOTE",
    "REPORT_PATTERNS",
    "LOG_PATTERNS",
]

TESTS_DIR = "/tests"
VERIFIER_LOG_DIR = "/logs/verifier"
#: Where ``/logs/verifier`` is set aside once ``test.sh`` has exited (read from there afterwards).
DONE_DIR = "/logs/.t1-verifier-done"
MAX_FILE_BYTES = 8 * 1024 * 1024  # one file copied back, bytes
MAX_TOTAL_BYTES = 32 * 1024 * 1024  # all files copied back for one trial, bytes
OMITTED_NOTE = "t1-omitted.txt"  # lists what was not copied back (written only when something was left out)
# What t1_reward.read_report reads, in the order it is copied back (the total cap serves these first) ...
REPORT_PATTERNS = ("ctrf.json", "reward.json", "reward.txt", "*.xml")
# ... and the test output logs, copied after them (head and tail kept when over the per-file cap).
LOG_PATTERNS = ("test-stdout.txt", "test-stderr.txt", "*.log")
#: What test.sh printed, as captured by T1 (stdout, then stderr), in the output folder.
CAPTURED_LOG = "test-stdout.txt"
#: Where a ``test-stdout.txt`` that test.sh wrote into /logs/verifier itself is kept instead.
OWN_LOG = "verifier-test-stdout.txt"
_STAGE_DIR = "/tmp/.t1-verifier-out"
_log = logging.getLogger("t1.rollout.verify")
_STAGE_SCRIPT = "/tmp/.t1-verifier-stage.sh"
_INLINE_SCRIPT_BYTES = 32 * 1024
_TAIL_CHARS = 4000
_NOTE_LINES = 200
_NAMES_KEPT = 20


class _TaskLike(Protocol):
    id: str
    tests_dir: Path


@dataclass(frozen=True)
class VerifierRun:
    """What one verifier run left behind.

    Attributes:
        out_dir: host directory holding the downloaded ``/logs/verifier/`` (``ctrf.json``, ``reward.json``,
            ``test-stdout.txt``); read it with ``t1_reward.read_report(out_dir, timed_out=..., crashed=...)``.
        exit_code: ``test.sh``'s exit status (informational: Harbor ignores it, the report files count);
            None when it did not finish.
        timed_out: ``test.sh`` ran past the verifier deadline (its report is a ``verifier_timeout`` fallback).
        duration_s: wall seconds of the whole run (upload, test.sh, checks, download).
        stdout_tail: the last 4000 characters of test.sh's stdout and stderr.
        error: why a T1-side call of the run failed (upload, exec, download: a ``SandboxError``), or None.
            Only this is an infrastructure failure (the trial is dropped, never scored).
        omitted: one line saying which of ``/logs/verifier``'s entries were left out or cut (details in
            ``out_dir / OMITTED_NOTE``), or None when everything was copied back.
        signal: the signal that ended ``test.sh`` (its exit status was 128 + it), not the deadline; None
            when it exited on its own. Its report is then not a verdict (``crashed``).
        sabotage: why T1 could not collect the output after ``test.sh`` exited although the sandbox still
            answered (a disk the agent filled, a folder it made unreadable): scored 0 by
            ``t1_reward.judge``, never dropped; None otherwise.
        evidence: tamper evidence found in the sandbox: ``report_changed`` (a report file differs between
            the moment ``test.sh`` exited and the copy taken once every process was killed),
            ``tests_changed`` (the tests downloaded after the run differ from the bundle's files).
        network: the sandbox's network policy as T1 set it (``True``: the sandbox may reach the network,
            ``False``: it has none), read from the sandbox's ``network`` attribute; None when the backend
            does not say. A fact the agent cannot change, used to attribute a verifier that reached no host
            (``t1_rollout.attribution``).
        toolchain: what T1 provided to the verifier (``t1_rollout.verifier_toolchain.Provision.describe``:
            its home with uv, the wheelhouse, offline or not), or None when the run did not get that far.
    """

    out_dir: Path
    exit_code: int | None
    timed_out: bool
    duration_s: float
    stdout_tail: str
    error: str | None = None
    omitted: str | None = None
    signal: int | None = None
    evidence: tuple[TamperEvidence, ...] = ()
    sabotage: str | None = None
    network: bool | None = None
    toolchain: str | None = None

    @property
    def crashed(self) -> bool:
        """No verdict came out of the run: an infrastructure failure, or ``test.sh`` ended by a signal."""
        return self.error is not None or self.signal is not None


def tree_digest(root: Path) -> dict[str, str]:
    """sha256 of every regular file under ``root``: ``{"./relative/path": hex digest}``.

    Links are skipped, as a download drops them (``t1_sandbox.transfer.regular_only``).
    """
    root = Path(root)
    digests: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root)
        if path.is_symlink() or not path.is_file() or any((root / p).is_symlink() for p in rel.parents):
            continue
        digests["./" + rel.as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def _changed(expected: dict[str, str], found: dict[str, str]) -> list[str]:
    """Names added, removed or modified between two digests, each as ``name (what)``."""
    out = [f"{n} (modified)" for n in sorted(expected.keys() & found.keys()) if expected[n] != found[n]]
    out += [f"{n} (removed)" for n in sorted(expected.keys() - found.keys())]
    out += [f"{n} (added)" for n in sorted(found.keys() - expected.keys())]
    return out


async def run_verifier(
    sandbox: Sandbox,
    task: _TaskLike,
    *,
    timeout_s: float,
    out_dir: Path,
    max_file_bytes: int = MAX_FILE_BYTES,
    max_total_bytes: int = MAX_TOTAL_BYTES,
) -> VerifierRun:
    """Run the task's held-out tests in ``sandbox`` with the integrity sequence of the module docstring.

    Call it only after the agent has finished: the tests are not in the sandbox before this call, and the
    call first ends the agent phase and takes the verifier's sandbox (``sandbox.sealed_verifier``: the shell
    and anything the agent left running are killed, the tests put in read-only; on Docker a fresh container
    of the agent's final filesystem where the verifier runs as root), and empties ``/logs/verifier`` so that
    no agent-written report is read. ``test.sh`` runs through that sandbox's ``exec_verifier`` (the verifier
    toolchain, python3 with pytest and pytest-json-ctrf, for that launch only). Its stdout and stderr, in
    order, are saved as ``test-stdout.txt`` in ``out_dir``: all of it, or its head and tail around a ``[... N
    bytes omitted`` line (``t1_rollout.verifier_capture``), so pytest's closing line survives output printed
    before it.

    Only what the reward reader uses and what helps debugging is copied back from ``/logs/verifier``: its
    top-level regular files named like `REPORT_PATTERNS` (``ctrf.json``, ``reward.json``, ``reward.txt``,
    JUnit ``*.xml``: what ``t1_reward.read_report`` reads), then `LOG_PATTERNS` (the test output logs),
    each at most ``max_file_bytes`` and together at most ``max_total_bytes`` (the captured ``test-stdout.txt``
    counts). A log over the per-file cap keeps its head and tail around a marker line. A report file that
    does not fit is not cut (a cut report could still parse and give a wrong reward): an empty file of the
    same name takes its place, so the reader sees the report present but unusable, as the verifier's own
    unreadable report would be (``unparsable`` fallback), never a silently different reward. Everything left
    out (other files, sub-directories, links, over-cap files) is listed in ``out_dir / OMITTED_NOTE`` and
    summed up in ``VerifierRun.omitted``.

    Args:
        sandbox: a started sandbox in which the agent has finished.
        task: the task (``t1_tasks.Task``: ``id``, ``tests_dir``).
        timeout_s: the verifier's wall-clock deadline in seconds, also its CPU budget: the recipe's
            ``rollout.verifier_deadline_s`` in training, ``[verifier].timeout_sec`` in ``t1 tasks validate``.
            ``test.sh`` itself gets 10% less (at most 30 s less), so that what it printed is still kept
            when it overruns (``t1_rollout.verifier_capture``).
        out_dir: host directory to receive the verifier's output (created).
        max_file_bytes: the largest file copied back, bytes (> 0; default 8 MiB).
        max_total_bytes: all files copied back together, bytes (>= ``max_file_bytes``; default 32 MiB).

    Returns:
        The ``VerifierRun``; failures are recorded in it with their cause, never raised (cancellation aside).

    Raises:
        ValueError: a non-positive cap, or ``max_total_bytes < max_file_bytes``.
    """
    for name, cap in (("max_file_bytes", max_file_bytes), ("max_total_bytes", max_total_bytes)):
        if isinstance(cap, bool) or not isinstance(cap, int) or cap <= 0:
            raise ValueError(f"run_verifier: {name} must be a positive int of bytes, got {cap!r}")
    if max_total_bytes < max_file_bytes:
        raise ValueError(
            f"run_verifier: max_total_bytes ({max_total_bytes}) must be >= max_file_bytes ({max_file_bytes})"
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    exit_code: int | None = None
    timed_out = False
    signal: int | None = None
    tail = ""
    toolchain: str | None = None
    error: str | None = None
    log_bytes = 0
    first: dict[str, str] | None = None
    ran = False  # test.sh ran to its end (or deadline): later failures may be the agent's doing
    broken = False  # test.sh could not start in the WORKDIR the agent removed or replaced
    sabotage: str | None = None
    evidence: list[TamperEvidence] = []
    control_s = max(1.0, min(60.0, timeout_s))
    expected: dict[str, str] = {}
    box = sandbox  # the sandbox the verifier runs in: the agent's own, or a sealed box (sealed_verifier)
    stack = contextlib.AsyncExitStack()
    try:
        if not Path(task.tests_dir).is_dir():
            raise SandboxError(f"upload: the task's tests {task.tests_dir} are not a directory")
        expected = await asyncio.to_thread(tree_digest, Path(task.tests_dir))
        box = await stack.enter_async_context(
            sandbox.sealed_verifier(Path(task.tests_dir), TESTS_DIR, timeout_s=control_s)
        )
        given = await provision(box, Path(task.tests_dir), network=sandbox_network(sandbox))
        toolchain = given.describe()
        # Whatever the agent left in /logs/verifier (a forged ctrf.json or reward.json) is removed first.
        # So is uv's state of the verifier's launch (UV_ISOLATION): the agent may have planted it in /tmp.
        fresh = f"{VERIFIER_LOG_DIR} {DONE_DIR} {VERIFIER_UV_DIR}"
        # test.sh's output keeps its head and tail (pytest's closing line survives a flood printed before it)
        run_tests = capture_command(
            f"bash {TESTS_DIR}/test.sh", inner_deadline(timeout_s), min(max_file_bytes, MAX_FILE_BYTES)
        )
        try:
            result = await box.exec_verifier(
                f"chmod -R u+rwx {fresh} 2>/dev/null; rm -rf {fresh} && mkdir -p {VERIFIER_LOG_DIR} "
                f"&& {{ {given.prelude} {run_tests}; }}",
                timeout_s=timeout_s,  # no cwd: test.sh runs in the environment's WORKDIR, as Harbor runs it
            )
        except SandboxError as exc:
            if not isinstance(exc, SandboxTimeout) and await _workdir_broken(box, control_s):
                broken = True  # the agent removed or replaced its WORKDIR: its doing (`_blame`), not ours
            raise
        exit_code, timed_out = result.exit_code, result.timed_out
        if exit_code == TIMEOUT_EXIT and INNER_TIMEOUT_MARK in result.stdout[-200:]:
            exit_code, timed_out = None, True  # the inner deadline: test.sh ran past it (the output is kept)
        if exit_code is not None and exit_code > 128 and not timed_out:
            signal = exit_code - 128  # killed (by the program under test, a sandbox limit): no verdict
        combined = result.stdout + (("\n[stderr]\n" + result.stderr) if result.stderr else "")
        tail = combined[-_TAIL_CHARS:]
        log = _head_tail(combined.encode("utf-8"), max_file_bytes)
        (out_dir / CAPTURED_LOG).write_bytes(log)
        log_bytes = len(log)
        ran = True
        first = await _seal_report(box)
        await box.stop_agent()  # whatever test.sh or the program under test started is gone now
    except (SandboxError, OSError) as exc:
        error = f"verifier of task {task.id} could not run: {type(exc).__name__}: {exc}"
        if ran or broken:
            error, sabotage = await _blame(box, error)
    except BaseException:
        await stack.aclose()  # cancelled: the sealed box is reclaimed all the same
        raise
    omitted: str | None = None
    try:
        if error is None and sabotage is None:
            omitted, found, error, sabotage = await _collect(
                box, task, out_dir, first, expected, caps=(max_file_bytes, max_total_bytes), used=log_bytes
            )
            evidence += found
    finally:
        try:
            await stack.aclose()  # the sealed box, when there is one, is reclaimed (also on cancellation)
        except SandboxError as exc:  # the verdict stands; what the daemon kept is retried at exit
            _log.warning("verifier of task %s: %s", task.id, exc)
    return VerifierRun(
        out_dir=out_dir,
        exit_code=exit_code,
        timed_out=timed_out,
        duration_s=time.monotonic() - started,
        stdout_tail=tail,
        error=error,
        omitted=omitted,
        signal=signal,
        evidence=tuple(evidence),
        sabotage=sabotage,
        network=sandbox_network(sandbox),
        toolchain=toolchain,
    )


async def _collect(
    box: Sandbox,
    task: _TaskLike,
    out_dir: Path,
    first: dict[str, str] | None,
    expected: dict[str, str],
    *,
    caps: tuple[int, int],
    used: int,
) -> tuple[str | None, list[TamperEvidence], str | None, str | None]:
    """Step 6: copy back, compare; ``(omitted, evidence, error, sabotage)`` (a failed copy: `_blame`)."""
    evidence: list[TamperEvidence] = []
    try:
        omitted, copied = await _copy_back(
            box, out_dir, max_file_bytes=caps[0], max_total_bytes=caps[1], used=used
        )
        if first is not None:
            found = {n: hashlib.sha256((out_dir / n).read_bytes()).hexdigest() for n in copied}
            # a report file too big to copy whole is compared by presence only
            found |= {n: first[n] for n in set(first) - set(copied) if (out_dir / n).exists()}
            if changes := _changed(first, found):
                evidence.append(_evidence("report_changed", "report files", changes, "after test.sh exited"))
        evidence += await _check_tests(box, expected)
    except SandboxError as exc:
        error = f"verifier output of task {task.id} could not be downloaded: {type(exc).__name__}: {exc}"
        return (None, evidence, *await _blame(box, error))
    return omitted, evidence, None, None


def sandbox_network(sandbox: Sandbox) -> bool | None:
    """The sandbox's network policy (its ``network`` attribute when it is a bool), or None when unknown."""
    network = getattr(sandbox, "network", None)
    return network if isinstance(network, bool) else None


async def _blame(sandbox: Sandbox, error: str) -> tuple[str | None, str | None]:
    """``(error, None)`` when the sandbox is lost, ``(None, error)`` when it still runs a command.

    A T1-side step after ``test.sh`` that fails in a sandbox that still answers failed on what the agent
    controls (its disk, its files), so it is the agent's doing, scored 0, not an infrastructure failure.
    """
    try:
        probe = await sandbox.exec("true", timeout_s=30, cwd="/", env=STEP_ENV)
    except SandboxError:
        return error, None
    return (None, error) if probe.ok else (error, None)


async def _workdir_broken(sandbox: Sandbox, timeout_s: float) -> bool:
    """Whether the sandbox runs a command at ``/`` but not in its WORKDIR (the default ``cwd``).

    Asked after the verifier's launch failed: ``stop_agent`` has given a locked WORKDIR its mode back, so a
    WORKDIR still unusable was removed or replaced (a file, a dangling link) by the agent, which owns it.
    """
    try:
        if not (await sandbox.exec("true", timeout_s=timeout_s, cwd="/", env=STEP_ENV)).ok:
            return False
    except SandboxError:
        return False  # the sandbox itself is lost: an infrastructure failure
    try:
        return not (await sandbox.exec("true", timeout_s=timeout_s, env=STEP_ENV)).ok
    except SandboxTimeout:
        return False
    except SandboxError:
        return True


def _evidence(check: str, what: str, changes: list[str], when: str) -> TamperEvidence:
    shown = ", ".join(changes[:3]) + (f" and {len(changes) - 3} more" if len(changes) > 3 else "")
    return TamperEvidence(
        check, f"{len(changes)} {what} changed {when}: {shown}", names=tuple(changes[:_NAMES_KEPT])
    )


async def _seal_report(sandbox: Sandbox) -> dict[str, str]:
    """Hash the report files of ``/logs/verifier`` in the sandbox, then set the folder aside as `DONE_DIR`.

    Returns:
        ``{file name: sha256 hex}`` of the top-level regular report files as ``test.sh`` left them.

    Raises:
        SandboxError: the exec could not run or timed out.
    """
    patterns = " ".join(REPORT_PATTERNS)
    result = await sandbox.exec(
        f"cd {VERIFIER_LOG_DIR} 2>/dev/null && for f in {patterns}; do "
        '[ -f "$f" ] && [ ! -L "$f" ] && timeout 30 sha256sum -- "$f"; done; '
        f"cd / && mv -T {VERIFIER_LOG_DIR} {DONE_DIR} 2>/dev/null; true",
        timeout_s=60,
        cwd="/",
        env=STEP_ENV,
    )
    if result.timed_out:
        raise SandboxError("hashing the verifier's report timed out")
    digests: dict[str, str] = {}
    for line in result.stdout.splitlines():
        digest, sep, name = line.partition("  ")
        if sep and len(digest) == 64 and not digest.startswith("\\"):
            digests[name] = digest
    return digests


async def _check_tests(sandbox: Sandbox, expected: dict[str, str]) -> list[TamperEvidence]:
    """Download ``/tests`` and compare its sha256 digests with the bundle's (``expected``)."""
    with tempfile.TemporaryDirectory(prefix="t1-tests-") as tmp:
        await sandbox.download(TESTS_DIR, Path(tmp) / "tests", timeout_s=60)
        found = await asyncio.to_thread(tree_digest, Path(tmp) / "tests")
    changes = _changed(expected, found)
    return [_evidence("tests_changed", "test files", changes, "during the run")] if changes else []


def _head_tail(data: bytes, cap: int) -> bytes:
    """``data`` if it fits in ``cap`` bytes, else its head and tail around a marker line (about ``cap``)."""
    if len(data) <= cap:
        return data
    half = max(cap // 2 - 64, 0)
    marker = f"\n[... {len(data) - 2 * half} bytes omitted: over the {cap}-byte cap ...]\n".encode()
    return data[:half] + marker + data[len(data) - half :]


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def _shq(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


async def _copy_back(
    sandbox: Sandbox, out_dir: Path, *, max_file_bytes: int, max_total_bytes: int, used: int
) -> tuple[str | None, list[str]]:
    """Copy the selected files of the set-aside report folder into ``out_dir`` within the caps.

    The selection and the cut are made inside the sandbox (``find``, then ``cp``, ``head -c`` and ``tail -c``
    into a staging directory), so an oversized output never crosses to the host. A missing folder (test.sh,
    or the program it tested, removed ``/logs/verifier`` or locked ``/logs``) copies nothing: no report.

    Returns:
        ``(summary of what was left out or None, names of the report files copied whole)``.

    Raises:
        SandboxError: the folder could not be listed, staged or downloaded.
    """
    listing = await sandbox.exec(
        f"[ -d {DONE_DIR} ] || exit 0; find {DONE_DIR} -mindepth 1 -printf '%y %s %P\\0'",
        timeout_s=60,
        cwd="/",
        env=STEP_ENV,
    )
    if not listing.ok:
        why = (
            "timed out" if listing.timed_out else f"exit {listing.exit_code}: {listing.stderr.strip()[-500:]}"
        )
        raise SandboxError(f"listing {DONE_DIR} failed ({why})")
    entries: list[tuple[str, int, str]] = []  # (find's type letter, size in bytes, relative path)
    for item in listing.stdout.split("\0"):
        kind, _, rest = item.partition(" ")
        size, _, path = rest.partition(" ")
        if len(kind) == 1 and size.isdigit() and path:
            entries.append((kind, int(size), path))
    budget = max_total_bytes - used  # ``used``: bytes already written to out_dir (the captured log)
    copy: list[tuple[str, int]] = []  # (name, bytes to keep: a log over the cap keeps head and tail)
    placeholders: list[str] = []
    left_out: list[str] = []
    # a name that did not decode (invalid UTF-8) or holds a control character cannot be named back safely
    files = {
        path: size
        for kind, size, path in entries
        if kind == "f" and "/" not in path and path.isprintable() and "\ufffd" not in path
    }
    reports = sorted((n for n in files if _matches(n, REPORT_PATTERNS)), key=_report_order)
    logs = sorted(n for n in files if n not in reports and _matches(n, LOG_PATTERNS))
    for name in reports:
        size = files[name]
        if size > min(max_file_bytes, budget):
            cap = "per-file" if size > max_file_bytes else "total"
            left_out.append(f"{name}: {size} bytes, over the {cap} cap; replaced by an empty file (unusable)")
            placeholders.append(name)
            continue
        copy.append((name, size))
        budget -= size
    over_total: list[str] = []
    for name in logs:
        size = files[name]
        keep = min(size, max_file_bytes, budget)
        if keep < size:
            if keep < 1024:
                left_out.append(f"{name}: {size} bytes, over the total cap; not copied")
                over_total.append(name)
                continue
            left_out.append(f"{name}: {size} bytes, cut to its head and tail ({keep} bytes)")
        copy.append((name, keep))
        budget -= keep
    handled = {name for name, _ in copy} | set(placeholders) | set(over_total)
    # Everything else, by top-level entry (a directory with the count and bytes of the files under it),
    # largest first: the note names what filled the verifier's directory.
    tops: dict[str, list[Any]] = {}  # name -> [kind, files, bytes]
    for kind, size, path in entries:
        top, _, below = path.partition("/")
        if top in handled:
            continue
        slot = tops.setdefault(top, ["d" if below else kind, 0, 0])
        if kind == "f":
            slot[1] += 1
            slot[2] += size
    skipped_bytes = sum(nbytes for _, _, nbytes in tops.values())
    for top, (kind, nfiles, nbytes) in sorted(tops.items(), key=lambda kv: (-kv[1][2], kv[0])):
        shown = top if top.isprintable() and "\ufffd" not in top else ascii(top)  # one line per entry
        if kind == "l":
            left_out.append(f"{shown}: symbolic link; never followed, not copied")
        elif shown != top:
            left_out.append(f"{shown}: a name with control or undecodable characters; not copied")
        else:
            what = {"f": f"{nbytes} bytes", "d": f"directory ({nfiles} files, {nbytes} bytes)"}.get(
                kind, f"type {kind}"
            )
            left_out.append(f"{shown}: {what}, not a report or log file; not copied")
    if any(name == CAPTURED_LOG for name, _ in copy):
        left_out.append(
            f"{CAPTURED_LOG}: written by test.sh itself, kept as {OWN_LOG}; "
            f"{CAPTURED_LOG} is what test.sh printed"
        )

    if copy:
        parts = [f"rm -rf {_STAGE_DIR} && mkdir -p {_STAGE_DIR}"]
        # Whole files with one cp per 256 names (the sizes cannot change: every process of the verifier's
        # exec died with it); logs over the cap with head and tail.
        # test.sh's own test-stdout.txt must not overwrite the output captured from it: staged as OWN_LOG
        whole = [
            _shq(f"{DONE_DIR}/{name}") for name, keep in copy if keep >= files[name] and name != CAPTURED_LOG
        ]
        for i in range(0, len(whole), 256):
            parts.append(f"cp -P -- {' '.join(whole[i : i + 256])} {_STAGE_DIR}/")
        for name, keep in copy:
            if keep >= files[name] and name != CAPTURED_LOG:
                continue
            src = _shq(f"{DONE_DIR}/{name}")
            dst = _shq(f"{_STAGE_DIR}/{OWN_LOG if name == CAPTURED_LOG else name}")
            if keep >= files[name]:
                parts.append(f"cp -P -- {src} {dst}")
                continue
            half = max(keep // 2 - 64, 0)
            marker = f"\\n[... {files[name] - 2 * half} bytes omitted: over the cap ...]\\n"
            cut = f"head -c {half} -- {src}; printf '{marker}'; tail -c {half} -- {src}"
            parts.append(f"{{ {cut}; }} > {dst}")
        script = " && ".join(parts)
        if len(script) > _INLINE_SCRIPT_BYTES:  # one argv string is limited (Linux: 128 KiB): upload it
            with tempfile.TemporaryDirectory(prefix="t1-stage-") as tmp:
                local = Path(tmp) / "stage.sh"
                local.write_text(script + "\n", encoding="utf-8")
                await sandbox.upload(local, _STAGE_SCRIPT, timeout_s=60)
            script = f"bash {_STAGE_SCRIPT}"
        staged = await sandbox.exec(script, timeout_s=60, cwd="/", env=STEP_ENV)
        if not staged.ok:
            why = (
                "timed out"
                if staged.timed_out
                else f"exit {staged.exit_code}: {staged.stderr.strip()[-500:]}"
            )
            raise SandboxError(f"staging the verifier output failed ({why})")
        await sandbox.download(_STAGE_DIR, out_dir, timeout_s=60)
        await sandbox.exec(f"rm -rf {_STAGE_DIR} {_STAGE_SCRIPT}", timeout_s=60, cwd="/", env=STEP_ENV)
    for name in placeholders:
        (out_dir / name).write_bytes(b"")
    copied = [name for name, keep in copy if name in reports]
    if not left_out:
        return None, copied
    summary = (
        f"{len(left_out)} top-level entries of {DONE_DIR} left out or cut "
        f"({skipped_bytes} bytes of other files not copied; caps: {max_file_bytes} bytes per file, "
        f"{max_total_bytes} in all); see {OMITTED_NOTE}"
    )
    lines = left_out[:_NOTE_LINES]
    if len(left_out) > _NOTE_LINES:
        lines.append(f"... and {len(left_out) - _NOTE_LINES} more")
    (out_dir / OMITTED_NOTE).write_text(summary + "\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return summary, copied


def _why(result: ExecResult) -> str:
    return "timed out" if result.timed_out else f"exit {result.exit_code}: {result.stderr.strip()[-500:]}"


def _report_order(name: str) -> tuple[int, str]:
    """Copy order of report files: ``ctrf.json``, ``reward.json``, ``reward.txt``, then ``*.xml`` by name."""
    fixed = REPORT_PATTERNS[:-1]
    return (fixed.index(name), "") if name in fixed else (len(fixed), name)
