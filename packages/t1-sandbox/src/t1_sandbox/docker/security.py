"""What the Docker sandbox's container may do: its capabilities and its seccomp profile.

The agent's and the verifier's processes run as uid 1000 with no capabilities (``t1run.py`` drops to it) and
no-new-privileges; the container's root keeps `CAPS` for T1's own control execs. Source: Docker's seccomp
profile format (``defaultAction``, ``syscalls``, ``errnoRet``) and its default profile's ``clone`` rules.
"""

from __future__ import annotations

import json
import platform

from t1_sandbox.base import SandboxError
from t1_sandbox.local.seccomp import DENIED

__all__ = ["CAPS", "CLONE_NEWUSER", "seccomp_profile"]

#: capabilities left to the container's root: T1's own control execs (uploads, chown, kill) need them; the
#: agent's and the verifier's processes run as AGENT_UID with none, and no-new-privileges keeps them so
CAPS = ["CHOWN", "DAC_OVERRIDE", "FOWNER", "KILL", "SETUID", "SETGID"]
_ARCHES = {"x86_64": ["SCMP_ARCH_X86_64", "SCMP_ARCH_X86", "SCMP_ARCH_X32"], "aarch64": ["SCMP_ARCH_AARCH64"]}
CLONE_NEWUSER = 0x10000000


def seccomp_profile() -> str:
    """The container's seccomp profile (Docker's JSON form): the local sandbox's denylist, and more.

    Every syscall of ``local.seccomp.DENIED`` fails with EPERM; ``clone`` with ``CLONE_NEWUSER`` too (no
    nested user namespaces); ``clone3`` with ENOSYS, so the C library falls back to ``clone``, whose flags
    the filter can see (as Docker's own profile does). Everything else is allowed: the container also runs
    with all but `CAPS` dropped, its processes without any, and with no-new-privileges.
    """
    arches = _ARCHES.get(platform.machine())
    if arches is None:
        raise SandboxError(f"docker sandbox: no seccomp profile for {platform.machine()}")
    return json.dumps(
        {
            "defaultAction": "SCMP_ACT_ALLOW",
            "architectures": arches,
            "syscalls": [
                {"names": list(DENIED), "action": "SCMP_ACT_ERRNO", "errnoRet": 1},
                {
                    "names": ["clone"],
                    "action": "SCMP_ACT_ERRNO",
                    "errnoRet": 1,
                    "args": [
                        {
                            "index": 0,
                            "value": CLONE_NEWUSER,
                            "valueTwo": CLONE_NEWUSER,
                            "op": "SCMP_CMP_MASKED_EQ",
                        }
                    ],
                },
                {"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": 38},
            ],
        }
    )
