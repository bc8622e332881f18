"""The sandbox seam: the registry picks the backend, the spec is the only home of the limits' defaults.

Also: a Docker or Daytona backend can reuse the Dockerfile parser and the tar transfer without importing the
bubblewrap code, and importing the seam stays cheap.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import t1_sandbox as sandbox_pkg
from t1_sandbox import SANDBOXES
from t1_sandbox.local import LocalSandbox
from t1_sandbox.local import bwrap as bwrap_module
from t1_spec import BackendNotBuilt, LocalSandboxSpec, load_recipe

TINY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml"


def _modules_after(code: str) -> set[str]:
    """The ``sys.modules`` names of a fresh interpreter after it ran ``code``."""
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys\nprint('\\n'.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.split())


def test_the_registry_loads_the_local_sandbox_for_kind_local():
    assert SANDBOXES.field == "sandbox.kind"
    assert {"local", "daytona"} <= set(SANDBOXES.kinds())
    assert SANDBOXES.load("local") is LocalSandbox
    assert SANDBOXES.problem("local") is None
    assert sandbox_pkg.SANDBOXES is SANDBOXES


@pytest.mark.parametrize("kind", [k for k in ("docker", "harbor") if k not in SANDBOXES.kinds()])
def test_the_registry_refuses_an_unbuilt_kind_naming_sandbox_kind(kind):
    with pytest.raises(BackendNotBuilt) as info:
        SANDBOXES.load(kind)
    assert isinstance(info.value, NotImplementedError)
    assert str(info.value).startswith(f"sandbox.kind '{kind}': ")
    assert "local" in str(info.value).split("built: ", 1)[1]
    assert SANDBOXES.problem(kind) == str(info.value)


def test_from_spec_takes_every_limit_from_the_spec():
    spec = LocalSandboxSpec(cpu_time_s=3.5, memory_mb=700, max_processes=40, disk_mb=9, network=True)
    sb = LocalSandbox.from_spec(spec)
    assert (sb.cpu_time_s, sb.memory_mb, sb.max_processes, sb.disk_mb, sb.network) == (3.5, 700, 40, 9, True)


def test_from_spec_overrides_replace_the_spec_values_they_name(tmp_path):
    sb = LocalSandbox.from_spec(
        LocalSandboxSpec(cpu_time_s=3.5, memory_mb=700), memory_mb=900, work_dir=tmp_path
    )
    assert (sb.cpu_time_s, sb.memory_mb) == (3.5, 900)


def test_a_sandbox_built_without_a_spec_has_the_spec_defaults():
    defaults = LocalSandboxSpec()
    sb = LocalSandbox()
    assert (sb.cpu_time_s, sb.memory_mb, sb.max_processes, sb.disk_mb, sb.network) == (
        defaults.cpu_time_s,
        defaults.memory_mb,
        defaults.max_processes,
        defaults.disk_mb,
        defaults.network,
    )


def test_the_recipe_sandbox_section_builds_through_the_registry():
    recipe = load_recipe(TINY)
    backend = SANDBOXES.load(recipe.sandbox.kind)
    sb = backend.from_spec(recipe.sandbox)
    assert isinstance(sb, LocalSandbox)
    assert (sb.cpu_time_s, sb.memory_mb) == (recipe.sandbox.cpu_time_s, recipe.sandbox.memory_mb)


def test_preflight_is_empty_on_a_ready_machine():
    if bwrap_module.local_sandbox_problems():
        pytest.skip("this machine cannot run local sandboxes")
    assert LocalSandbox.preflight(load_recipe(TINY)) == []


def test_preflight_names_the_field_and_how_to_fix_each_missing_prerequisite(monkeypatch):
    monkeypatch.setattr(bwrap_module.shutil, "which", lambda name: None)
    monkeypatch.setattr(bwrap_module.os, "geteuid", lambda: 1000)
    lines = LocalSandbox.preflight(load_recipe(TINY))
    assert len(lines) == 2 and all(line.startswith("sandbox.kind 'local': ") for line in lines)
    assert "apt-get install bubblewrap" in lines[0]
    assert "must run as root" in lines[1]
    # the same lines as the unprefixed check `t1 tasks validate` prints
    assert lines == [f"sandbox.kind 'local': {line}" for line in bwrap_module.local_sandbox_problems()]


def test_the_dockerfile_parser_and_the_transfer_helpers_import_no_bubblewrap_code():
    loaded = _modules_after(
        "import t1_sandbox.dockerfile, t1_sandbox.transfer, t1_sandbox.base\n"
        "from t1_sandbox.dockerfile import parse_dockerfile\n"
        "from t1_sandbox.transfer import upload_plan, download_command, unpack_download"
    )
    assert "t1_sandbox.transfer" in loaded and "t1_sandbox.dockerfile" in loaded
    assert not {m for m in loaded if m == "t1_sandbox.local" or m.startswith("t1_sandbox.local.")}


def test_importing_the_seam_loads_neither_the_backend_nor_the_spec_package():
    loaded = _modules_after("import t1_sandbox\nfrom t1_sandbox import Sandbox, SandboxError")
    assert "t1_sandbox.local" not in loaded
    assert "t1_sandbox.registry" not in loaded
    assert "t1_spec" not in loaded
