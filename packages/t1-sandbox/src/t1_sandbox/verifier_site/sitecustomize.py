"""The verifier's import guard: Python imports it at start in every process of a verifier launch.

It is never imported by T1 itself. Each backend that mounts a verifier toolchain puts this file's folder on
the verifier launch's ``PYTHONPATH``, alone (``/opt/t1-verifier/guard`` locally, ``/opt/t1/verifier/guard`` in
a Docker container), so Python's ``site`` imports it as ``sitecustomize`` before any of the command runs.
Standard library only, for any Python 3 (the task image's own interpreter reads it too).

In every process but pip's, the toolchain's lean ``site-packages`` (named by ``T1_VERIFIER_SITE``: pytest,
its report plugin, their dependencies) is appended to the END of ``sys.path`` when no ``pytest`` is
importable from a trusted entry of the process's own path (3. below): a bare ``pytest`` with none installed
runs the toolchain's, while an environment that has one (uvx's, a venv's, the image's) runs its own pytest
with its own plugins (``uvx -w pytest==8.4.1 -w pytest-json-ctrf==0.3.5`` gets those versions, as under
Harbor), and no plugin of the fallback mixes in. A ``pip install`` of ``test.sh`` sees the environment alone.

In a process that runs a grader (``python3 -m pytest``, ``-m py.test``, ``-m unittest``, or a script named
``pytest`` or ``py.test``), and in one that runs ``python3 -c`` code (which may call ``pytest.main()``):

1. Safe-path mode: the process re-executes itself once with ``-s -P`` (Python 3.11+), so neither the working
   directory (the agent's ``/app``, which ``-m`` puts first on ``sys.path``) nor a script's folder nor the
   user site is on the module path. Nothing the agent wrote there (``pytest.py``, a ``ctrf`` package, a
   ``statistics.py``, a ``*.dist-info`` whose ``pytest11`` entry point pytest would load) is importable.
2. Under ``-m`` and ``-c`` only, the working directory is still searched, last: a finder at the end of
   ``sys.meta_path`` resolves a name found nowhere else there (tests that import the program under test
   by name from the working directory, as ``python3 -m pytest`` allows, keep working), and only for an
   import made by code outside the standard library, the toolchain and installed packages (a plugin's
   optional import, such as ``trio``, is never served from there). It is not on ``sys.path``, so no
   distribution metadata or ``.pth`` file is read from it.
3. A top-level module named like one of the standard library or of the verifier toolchain (pytest, its
   plugins and what they import) is only taken from the interpreter's standard library, its own
   ``site-packages`` (``site.getsitepackages()``: whoever can write there has its ``.pth`` files run at
   start and its ``pytest11`` entry points loaded anyway), the toolchain or a ``sys.path`` entry this
   process can neither write nor own, even when the tests put the working directory first on ``sys.path``
   themselves.
4. The process is made non-dumpable, so the program under test (same uid) cannot open its ``/proc/<pid>/mem``
   and rewrite pytest's objects (the outcome string "failed") in place.
5. In a pytest process, before pytest starts (so before any code of the tests or of the program under test
   runs in it), one line on stderr: `MARK`, then the top-level modules that the held-out tests in ``/tests``
   import at module level and that no entry of the module path, the working directory nor ``/tests`` holds
   (possibly none). T1 reads it from the captured output (``t1_reward.no_run``): a dependency that
   ``test.sh`` installs and that was missing before any test ran is the environment's failure.

Other processes (the program under test, run by the tests) are left as Python runs them.
"""

import ast
import opcode
import os
import sys
from importlib.machinery import PathFinder

_PYTEST = ("pytest", "py.test")
#: Modules that ``-m`` runs as a grader: pytest's names and the standard library's test runner.
_GRADER_MODULES = (*_PYTEST, "unittest")
#: Top-level names of the verifier toolchain's distributions (pytest, pytest-json-ctrf and what they need).
_TOOLCHAIN = ("pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "pygments", "ctrf")
_VALUE_FLAGS = "XWQ"  # one-letter options of the interpreter that take a value
#: The line the guard prints in a pytest process before pytest starts: the tests' imports found nowhere.
MARK = "[t1-verifier-guard] test imports found nowhere:"
_TESTS = os.environ.get("T1_VERIFIER_TESTS", "/tests")  # set only by T1 and by tests of T1
#: The variable naming the toolchain's lean ``site-packages``, the fallback appended last to ``sys.path``.
SITE_VARIABLE = "T1_VERIFIER_SITE"


def _grader_launch(argv):
    """``"module"`` (``-m pytest``, ``-m unittest``), ``"script"`` (a pytest script), ``"command"`` (``-c``).

    None for any other process. Read from ``sys.orig_argv``; ``-c`` code may call ``pytest.main()``, so it
    is guarded as a grader.
    """
    i = 1
    while i < len(argv):
        arg = argv[i]
        if arg == "-" or not arg.startswith("-"):
            return "script" if os.path.basename(arg) in _PYTEST else None
        if arg.startswith("--"):
            i += 2 if arg == "--check-hash-based-pycs" else 1
            continue
        for k, flag in enumerate(arg[1:], start=1):
            if flag == "c":
                return "command"
            if flag == "m":
                name = arg[k + 1 :] or (argv[i + 1] if i + 1 < len(argv) else "")
                return "module" if name in _GRADER_MODULES else None
            if flag in _VALUE_FLAGS:
                if not arg[k + 1 :]:
                    i += 1  # the value is the next word
                break
        i += 1
    return None


def _untrusted(entry):
    """Whether this process could write the ``sys.path`` entry (the agent runs as the same uid).

    Writable now, or owned by this uid: an owner can make a folder it made read-only writable again, so
    ``chmod 555 /app`` does not make the agent's folder trusted.
    """
    if not isinstance(entry, str) or entry in ("", "."):
        return True
    try:
        return os.access(entry, os.W_OK) or os.stat(entry).st_uid == os.getuid()
    except (OSError, ValueError):
        return True  # missing or unreadable: nothing trusted is lost by not searching it


class _ProtectedNames:
    """Resolves the standard library's and the toolchain's top-level names from trusted entries only.

    Trusted: the interpreter's own standard library (the folder of ``os`` and its ``lib-dynload``), the
    verifier toolchain (the folder above this file's: ``/opt/t1-verifier``, read-only in every launch) and
    any ``sys.path`` entry this process can neither write nor own.
    """

    def __init__(self, names):
        self.names = names
        stdlib = os.path.dirname(os.path.abspath(os.__file__))
        self.stdlib = (stdlib, os.path.join(stdlib, "lib-dynload"), *_own_site_packages())
        self.toolchain = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep

    def _trusted(self, entry):
        if not isinstance(entry, str):
            return False
        return entry in self.stdlib or entry.startswith(self.toolchain) or not _untrusted(entry)

    def find_spec(self, name, path=None, target=None):
        if path is not None or name not in self.names:
            return None
        return PathFinder.find_spec(name, [p for p in sys.path if self._trusted(p)])

    def invalidate_caches(self):
        pass


_IMPORT_NAME = opcode.opmap["IMPORT_NAME"]


class _WorkdirLast:
    """Resolves, last of all finders, a top-level name that is not protected from the working directory.

    Only for an import made by the tests' own code: an import made by the standard library, the toolchain or
    an installed package (an optional dependency a plugin tries, such as ``trio``, expecting ImportError) is
    never served from the working directory. ``importlib``'s own frames are skipped to find the importer.
    """

    def __init__(self, workdir, protected, trusted_code):
        self.workdir, self.protected = workdir, protected
        self.trusted_code = trusted_code  # folder prefixes (ending in os.sep) of code that is not the tests'
        self.importlib = os.path.join(os.path.dirname(os.path.abspath(os.__file__)), "importlib") + os.sep

    def _trusted(self, frame):
        name = frame.f_code.co_filename
        return name.startswith(self.trusted_code) or name.startswith("<frozen ")

    def _by_trusted_code(self):
        """Whether no code of the tests' own asked for this import.

        Asked by the tests: the importer (the nearest frame outside ``importlib``) is the tests' code, or it
        is trusted code importing a name it was given (``unittest.mock.patch``, ``monkeypatch.setattr``,
        ``pytest.importorskip``: a call, not an ``import`` statement of its own) called, deeper in the
        stack, by code of the tests; the launch's ``__main__`` (the ``-c`` code that calls
        ``pytest.main()``) does not count as a caller.
        """
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if not (name.startswith("<frozen importlib") or name.startswith(self.importlib)):
                break
            frame = frame.f_back
        if frame is None or not self._trusted(frame):
            return frame is None
        code = frame.f_code.co_code
        if 0 <= frame.f_lasti < len(code) and code[frame.f_lasti] == _IMPORT_NAME:
            return True  # an import statement of trusted code (an optional dependency it tries)
        frame = frame.f_back
        while frame is not None:
            if not self._trusted(frame) and frame.f_globals.get("__name__") != "__main__":
                return False
            frame = frame.f_back
        return True

    def find_spec(self, name, path=None, target=None):
        if path is not None or name in self.protected or self._by_trusted_code():
            return None
        return PathFinder.find_spec(name, [self.workdir])

    def invalidate_caches(self):
        pass


def _own_site_packages():
    """The interpreter's own ``site-packages`` folders (its venv's, or the image's system ones)."""
    try:
        import site

        return tuple(os.path.abspath(p) for p in site.getsitepackages())
    except (AttributeError, ImportError):
        return ()  # an old virtualenv's site module has no getsitepackages: nothing more is trusted


def _append_fallback_site():
    """Append the toolchain's ``site-packages`` to the end of ``sys.path`` unless pytest is found before it.

    The process's own packages then always take precedence; no fallback plugin mixes into an environment's
    pytest (pluggy registers the first distribution on ``sys.path`` of each entry-point name).
    """
    fallback = os.environ.get(SITE_VARIABLE)
    if not fallback or fallback in sys.path:
        return
    trusted = _ProtectedNames(frozenset())._trusted  # a pytest the guard would refuse does not count
    try:
        if PathFinder.find_spec("pytest", [p for p in sys.path if trusted(p)]) is not None:
            return
    except (ImportError, ValueError):
        pass
    sys.path.append(fallback)


def _installer(argv):
    """The process is pip (a ``pip``, ``pip3`` or ``pip3.13`` script, or ``-m pip``; ``sys.orig_argv``).

    pip gets no fallback: the toolchain's packages on its path would be taken as installed in the
    environment (pip would try to uninstall the read-only fallback pytest and install nothing).
    """
    for i, arg in enumerate(argv[1:], start=1):
        if arg.startswith("-m"):
            return (arg[2:] or (argv[i + 1] if i + 1 < len(argv) else "")) == "pip"
        if arg == "-" or not arg.startswith("-"):
            name = os.path.basename(arg)
            return name in ("pip", "pip3") or (name.startswith("pip3.") and name[5:].isdigit())
    return False


def _guard():
    if not _installer(list(getattr(sys, "orig_argv", ()))):
        _append_fallback_site()
    launch = _grader_launch(list(getattr(sys, "orig_argv", ())))
    if launch is None:
        return
    if (
        sys.version_info >= (3, 11)
        and sys.executable
        and not (sys.flags.safe_path and sys.flags.no_user_site)
    ):
        argv = list(sys.orig_argv)
        sys.stdout.flush()
        sys.stderr.flush()
        os.execv(sys.executable, [sys.executable, "-s", "-P", *argv[1:]])
    protected = set(getattr(sys, "stdlib_module_names", ())) | set(_TOOLCHAIN)
    protected -= {"__main__", "sitecustomize", "usercustomize"}
    finders = sys.meta_path
    at = next((i for i, f in enumerate(finders) if getattr(f, "__name__", "") == "PathFinder"), 0)
    finders.insert(at, _ProtectedNames(frozenset(protected)))
    if launch in ("module", "command"):
        stdlib = os.path.dirname(os.path.abspath(os.__file__))
        toolchain = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        sites = [p for p in sys.path if os.path.basename(p) in ("site-packages", "dist-packages")]
        trusted_code = tuple(os.path.join(p, "") for p in (stdlib, toolchain, *sites))
        try:
            finders.append(_WorkdirLast(os.getcwd(), frozenset(protected), trusted_code))
        except OSError:
            pass
    _not_dumpable()
    if launch == "script" or (launch == "module" and _module_name(sys.orig_argv) in _PYTEST):
        _announce_missing()


def _module_name(argv):
    """The module a ``-m`` launch runs (the word after ``-m``, or glued to it), or None."""
    for i, arg in enumerate(argv[1:], start=1):
        if arg == "-m":
            return argv[i + 1] if i + 1 < len(argv) else None
        if arg.startswith("-m") and not arg.startswith("--"):
            return arg[2:]
    return None


def _module_imports(tree):
    """Top-level names imported by the module-level statements of ``tree`` (not under ``try``)."""
    names = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _missing_test_imports():
    """Names the tests in `_TESTS` import at module level that no path, the workdir nor `_TESTS` holds."""
    wanted, own = set(), set()
    for folder, dirs, files in os.walk(_TESTS):
        dirs.sort()
        own.update(dirs)
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            own.add(name[:-3])
            try:
                with open(os.path.join(folder, name), "rb") as fh:
                    wanted |= _module_imports(ast.parse(fh.read()))
            except (OSError, SyntaxError, ValueError):
                continue
    wanted -= own | {"__future__"} | set(sys.builtin_module_names)
    try:
        where = [*sys.path, os.getcwd(), _TESTS]
    except OSError:
        where = [*sys.path, _TESTS]
    return sorted(n for n in wanted if n not in sys.modules and PathFinder.find_spec(n, where) is None)


def _announce_missing():
    try:
        missing = _missing_test_imports()
    except Exception:  # never keep the grader from starting; no line means no claim
        return
    sys.stderr.write(f"{MARK} {', '.join(missing)}\n")
    sys.stderr.flush()


def _not_dumpable():
    """Make this process non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``), Linux only.

    Its ``/proc/<pid>`` files then belong to root: a process of the same uid (the program under test, which
    the tests start) can no longer open its ``mem`` to rewrite pytest's objects, nor its descriptors. Exec
    resets the flag, so the programs the tests start are dumpable as usual.
    """
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # 4: PR_SET_DUMPABLE
    except (ImportError, OSError, AttributeError):
        pass  # no ctypes or no prctl (not Linux): the rest of the guard still holds


if __name__ == "sitecustomize":
    _guard()
