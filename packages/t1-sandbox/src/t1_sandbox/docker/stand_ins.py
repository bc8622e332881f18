"""How a local stand-in image differs from the base image a task names, read from the stand-in's labels.

T1's local base images say what they are in their labels: ``org.t1.base`` (``debian:<suite>`` from
``tools/docker/build_base_images.sh``, ``python:X.Y-slim-<suite>`` from
``tools/docker/build_python_images.sh``) and ``org.t1.python`` (the CPython they hold, ``X.Y.Z``).
`differences` compares those with the base as the task names it (``python:3.13-slim-bookworm``,
``debian:12-slim``, ``ubuntu:24.04``) and lists what a task may notice: another distribution or Debian suite
(other ``openssl`` output, other package names), another CPython minor version, or Debian's Python where the
python images put CPython under ``/usr/local`` (Debian's ``/usr/bin/python``, and its PEP 668
``EXTERNALLY-MANAGED`` marker that refuses ``pip install``). An image without T1's labels (the user's own) is
not judged. Source: the official python and debian images' layout (CPython built under ``/usr/local``, no
marker; Debian's python3 package ships the marker).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["BaseFacts", "base_facts", "check_stand_in", "differences"]

log = logging.getLogger("t1.sandbox.docker")

_DEBIAN_NUMBERS = {"10": "buster", "11": "bullseye", "12": "bookworm", "13": "trixie", "14": "forky"}
_SUITES = ("buster", "bullseye", "bookworm", "trixie", "forky")
_WARNED: set[tuple[str, str, str]] = set()


@dataclass(frozen=True)
class BaseFacts:
    """What an image reference says about its userland.

    Attributes:
        distribution: ``"debian"``, ``"ubuntu"``, ``"alpine"``, or the repository name when unknown.
        suite: the Debian suite (``"bookworm"``) or the Ubuntu release (``"24.04"``); None when not named.
        python: ``"X.Y"`` of a ``python:*`` image, else None.
    """

    distribution: str
    suite: str | None = None
    python: str | None = None


def base_facts(ref: str) -> BaseFacts:
    """The `BaseFacts` of an image reference (``python:3.13-slim-bookworm``, ``debian:12-slim``, ...).

    A registry prefix (``docker.io/library/``, ``public.ecr.aws/docker/library/``) and a digest are ignored.
    """
    name = ref.split("@", 1)[0].rsplit("/", 1)[-1].lower()
    repo, _, tag = name.partition(":")
    parts = tag.split("-") if tag else []
    suite = next((p for p in parts if p in _SUITES), None)
    if repo == "python":
        version = re.match(r"(\d+)\.(\d+)", tag)
        distribution = "alpine" if any(p.startswith("alpine") for p in parts) else "debian"
        return BaseFacts(distribution, suite, f"{version[1]}.{version[2]}" if version else None)
    if repo == "debian":
        number = re.match(r"(\d+)", tag)
        return BaseFacts("debian", suite or (_DEBIAN_NUMBERS.get(number[1]) if number else None))
    if repo == "ubuntu":
        return BaseFacts("ubuntu", parts[0] if parts and parts[0] else None)
    return BaseFacts(repo)


def differences(base: str, labels: Mapping[str, str]) -> list[str]:
    """What a task built ``FROM base`` may notice when a stand-in with ``labels`` runs in its place.

    Args:
        base: the image the task names.
        labels: the stand-in image's labels (``org.t1.base``, ``org.t1.python``).

    Returns:
        One short sentence per difference, in a fixed order; empty when the stand-in is faithful as far as
        its labels tell, or carries no ``org.t1.base`` label (not T1's image: not judged).
    """
    stand_in = labels.get("org.t1.base")
    if not stand_in:
        return []
    want, have = base_facts(base), base_facts(stand_in)
    python = labels.get("org.t1.python", "")
    out = []
    if want.distribution != have.distribution:
        out.append(f"a Debian {have.suite or ''} userland, not {want.distribution}".replace("  ", " "))
    elif want.suite and have.suite and want.suite != have.suite:
        out.append(
            f"Debian {have.suite}, not {want.suite} (other library and tool versions, e.g. openssl's output, "
            "and other package names)"
        )
    if want.python:
        if have.python is None:
            out.append(
                f"Debian's CPython {python or '(unknown version)'} at /usr/bin/python3, not CPython "
                f"{want.python} at /usr/local/bin/python3; /usr/bin/python exists; Debian's PEP 668 "
                "EXTERNALLY-MANAGED marker refuses pip install"
            )
        elif python and not python.startswith(f"{want.python}."):
            out.append(f"CPython {python}, not {want.python}")
    return out


def check_stand_in(api: Any, task: str, base: str, target: str) -> list[str]:
    """The `differences` of ``target`` standing in for ``base``, logged once per task as a warning.

    Args:
        api: a ``docker.APIClient``.
        task: what names the task in the warning (its environment folder).
        base: the base the task names.
        target: the local image used instead.

    Returns:
        The differences (empty when faithful, not T1's image, or not inspectable).
    """
    try:
        labels = (api.inspect_image(target).get("Config") or {}).get("Labels") or {}
    except Exception:  # a missing image is reported by the build; nothing to compare here
        return []
    found = differences(base, labels)
    if found and (task, base, target) not in _WARNED:
        _WARNED.add((task, base, target))
        log.warning(
            "docker sandbox: %s: %s is not a faithful stand-in for %s: %s",
            task,
            target,
            base,
            "; ".join(found),
        )
    return found
