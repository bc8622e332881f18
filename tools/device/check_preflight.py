"""Preflight of the device check: progress lines, and the Gated DeltaNet kernel the run may use.

flash-linear-attention (``fla``, the Triton kernels of Qwen3.5's Gated DeltaNet that transformers and
megatron-core pick up when it is installed) refuses to train on Hopper (compute capability 9.x) with Triton
>= 3.4.0 and < 3.7.1: its ``chunk_bwd_dqkwg`` kernel gives wrong results there, and fla raises only in the
backward, after minutes of autotuning with nothing printed. `fla_triton_problem` recognises that combination
from the versions alone, before any work; `block_fla` then hides fla from this process so that transformers
binds its own torch implementation of the gated delta rule (and megatron-core's ``GatedDeltaNet``, which
needs fla, is reported as unavailable).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import sys
import time
from typing import Any

FLA_BAD_TRITON = ((3, 4, 0), (3, 7, 1))
"""Triton versions ``[low, high)`` whose Gated DeltaNet backward fla refuses on compute capability 9.x."""


def version_tuple(version: str) -> tuple[int, ...]:
    """``"3.6.0+git1a2b"`` -> ``(3, 6, 0)``: the leading dotted integers of a version string.

    Raises:
        ValueError: the string does not start with an integer.
    """
    m = re.match(r"\d+(?:\.\d+)*", version.strip())
    if m is None:
        raise ValueError(f"version {version!r}: no leading number")
    parts = tuple(int(p) for p in m.group(0).split("."))
    return parts + (0,) * (3 - len(parts))


def fla_triton_problem(
    fla_version: str | None, triton_version: str | None, capability: tuple[int, int] | None
) -> str | None:
    """Why fla's Gated DeltaNet kernels cannot train here, or None; a pure function of the versions.

    Args:
        fla_version: the installed flash-linear-attention version, None when it is not installed.
        triton_version: the installed Triton version, None when it is not installed.
        capability: the CUDA device's compute capability ``(major, minor)``, None off CUDA.

    Returns:
        One line naming both versions and the capability when fla is installed, the device is a Hopper
        (major 9) and Triton lies in `FLA_BAD_TRITON`; None otherwise (fla absent, no CUDA device, another
        architecture, or a Triton outside that range).
    """
    if fla_version is None or triton_version is None or capability is None or capability[0] != 9:
        return None
    low, high = FLA_BAD_TRITON
    if not low <= version_tuple(triton_version) < high:
        return None
    return (
        f"flash-linear-attention {fla_version} with Triton {triton_version} on compute capability "
        f"{capability[0]}.{capability[1]} (Hopper): Triton >= {'.'.join(map(str, low))} and < "
        f"{'.'.join(map(str, high))} gives wrong results in fla's chunk_bwd_dqkwg, and fla refuses it in "
        "the backward; the Gated DeltaNet layers use transformers' torch implementation instead"
    )


def _dist_version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def installed_fla() -> str | None:
    """The installed flash-linear-attention's version (or ``"unknown"`` if only the module is found)."""
    if importlib.util.find_spec("fla") is None:
        return None
    return _dist_version("flash-linear-attention") or _dist_version("fla-core") or "unknown"


def block_fla() -> None:
    """Makes ``import fla`` fail in this process, so transformers and megatron-core take their fallbacks.

    Must run before transformers' Qwen3.5 modeling module is imported (its kernel choice is bound then).

    Raises:
        RuntimeError: fla or that modeling module is already imported (too late to switch).
    """
    late = [m for m in ("fla", "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe") if sys.modules.get(m)]
    if late:
        raise RuntimeError(f"preflight: {', '.join(late)} already imported; cannot switch fla off")
    sys.modules["fla"] = None  # type: ignore[assignment]  # None in sys.modules: import raises ImportError


def gdn_kernel(capability: tuple[int, int] | None) -> tuple[str, str | None]:
    """The Gated DeltaNet implementation this process will use: ``("fla" | "torch", refusal or None)``.

    Reads the installed fla and Triton; when `fla_triton_problem` refuses them, calls `block_fla` and returns
    ``("torch", <the refusal line>)``.
    """
    fla = installed_fla()
    problem = fla_triton_problem(fla, _dist_version("triton"), capability)
    if problem is not None:
        block_fla()
        return "torch", problem
    return ("fla" if fla is not None else "torch"), None


class Progress:
    """One line per phase on stderr: ``t1 device check [+12.3 s] <phase>: <what>``; keeps the current phase.

    The check's failures name `phase` (the last one announced), so a run that dies says where.
    """

    def __init__(self, stream: Any = None) -> None:
        self.t0 = time.perf_counter()
        self.phase = "start"
        self.stream = stream

    def elapsed(self) -> float:
        """Seconds since this object was made."""
        return time.perf_counter() - self.t0

    def __call__(self, phase: str, what: str) -> None:
        """Announces ``phase`` (it becomes `phase`) with a short description."""
        self.phase = phase
        out = self.stream or sys.stderr
        print(f"t1 device check [+{self.elapsed():.1f} s] {phase}: {what}", file=out, flush=True)
