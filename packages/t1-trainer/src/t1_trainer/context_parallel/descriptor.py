"""The packed-sequence descriptor of a context-parallel micro-batch (T1 §7.1).

A micro-batch is one packed token stream of entries: real samples and padding. Under context parallelism
(``cp`` ranks) the trainer lays each entry out for load balance: a *split* entry is cut into ``2 * cp`` equal
chunks and rank ``r`` holds chunks ``r`` and ``2 * cp - 1 - r`` (Megatron's per-sequence layout for
attention); a *rank-local* entry, the padding a trainer appends to every rank's shard, contributes one equal
segment per rank. The recurrent scan needs to know, for every local token, which entry it belongs to, whether
that entry is real, and how many interleaved segments it contributes: T1 §7.1 notes that this is unrecoverable
from cumulative offsets alone, since a padding entry and a real sample can have the same length and
divisibility. `PackedCPDescriptor` records it explicitly, and `PackedCPDescriptor.check` refuses a descriptor
that does not match the tensor or the group it is used with.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

__all__ = ["DescriptorError", "PackedCPDescriptor"]


class DescriptorError(ValueError):
    """A packed-sequence descriptor is missing, malformed, or does not match its tensor or rank group."""


@dataclass(frozen=True)
class PackedCPDescriptor:
    """How a packed micro-batch's entries are laid out over ``cp`` context-parallel ranks (T1 §7.1).

    Entry ``e`` spans ``lengths[e]`` tokens of the full (unsharded) packed stream, in order. Every rank holds
    ``lengths[e] // cp`` of its tokens, in either layout, so the local stream has ``local_tokens`` tokens.

    Attributes:
        cp: context-parallel degree (ranks in the group), ``>= 1``.
        lengths: tokens of each entry in the full packed stream (padded lengths), each ``> 0`` and a multiple
            of the entry's ``segments``.
        real: per entry, True for a real sample (its recurrent state starts at zero and is carried across
            ranks), False for padding (no state, output zero).
        segments: interleaved segments each entry contributes to the group's layout: ``2 * cp`` for an entry
            split across the group in load-balanced chunks (required of real samples), ``cp`` for a
            rank-local padding entry (one segment on every rank, already contiguous).

    Raises:
        DescriptorError: ``cp < 1``, fields of different lengths, no entry, a non-positive length, a
            ``segments`` value other than ``2 * cp`` or ``cp``, a real sample not split ``2 * cp`` ways, or a
            length that is not a multiple of its segments (each names the entry).
    """

    cp: int
    lengths: tuple[int, ...]
    real: tuple[bool, ...]
    segments: tuple[int, ...]

    def __post_init__(self) -> None:
        cp = self.cp
        if not isinstance(cp, int) or cp < 1:
            raise DescriptorError(f"PackedCPDescriptor: cp {cp!r} must be an int >= 1")
        n = len(self.lengths)
        if n == 0:
            raise DescriptorError("PackedCPDescriptor: no entries (a micro-batch packs at least one)")
        if len(self.real) != n or len(self.segments) != n:
            raise DescriptorError(
                f"PackedCPDescriptor: {n} lengths but {len(self.real)} real flags and "
                f"{len(self.segments)} segment counts; one of each per entry"
            )
        for e, (length, real, seg) in enumerate(zip(self.lengths, self.real, self.segments, strict=True)):
            if length <= 0:
                raise DescriptorError(f"PackedCPDescriptor: entry {e} has length {length}; must be > 0")
            if seg not in (cp, 2 * cp):
                raise DescriptorError(
                    f"PackedCPDescriptor: entry {e} contributes {seg} segments; with cp={cp} an entry is "
                    f"split into {2 * cp} interleaved chunks or is rank-local padding of {cp} segments"
                )
            if real and seg != 2 * cp:
                raise DescriptorError(
                    f"PackedCPDescriptor: entry {e} is a real sample with {seg} segments; real samples are "
                    f"split into 2*cp = {2 * cp} load-balanced chunks"
                )
            if length % seg:
                raise DescriptorError(
                    f"PackedCPDescriptor: entry {e} has length {length}, not a multiple of its {seg} "
                    f"segments (pad each sample to a multiple of 2*cp = {2 * cp})"
                )

    @classmethod
    def from_cu_seqlens(
        cls, cu_seqlens: Sequence[int] | torch.Tensor, *, cp: int, real: Sequence[bool]
    ) -> PackedCPDescriptor:
        """The descriptor of a stream whose every entry is split ``2 * cp`` ways (Megatron's THD layout).

        Args:
            cu_seqlens: padded cumulative offsets ``[0, l_0, l_0 + l_1, ...]`` of the full packed stream
                (``cu_seqlens_q_padded`` of megatron's ``PackedSeqParams``), ints, non-decreasing.
            cp: context-parallel degree.
            real: per entry, real sample or padding: the flag the offsets cannot carry (T1 §7.1).

        Raises:
            DescriptorError: offsets that do not start at 0 or decrease, or any check of the class.
        """
        cu = [int(x) for x in (cu_seqlens.tolist() if isinstance(cu_seqlens, torch.Tensor) else cu_seqlens)]
        if not cu or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:], strict=False)):
            raise DescriptorError(
                f"PackedCPDescriptor.from_cu_seqlens: offsets {cu[:8]} must start at 0 and not decrease"
            )
        lengths = tuple(b - a for a, b in zip(cu, cu[1:], strict=False))
        return cls(
            cp=cp, lengths=lengths, real=tuple(bool(x) for x in real), segments=(2 * cp,) * len(lengths)
        )

    @property
    def local_tokens(self) -> int:
        """Tokens every rank holds (in either layout): ``sum(lengths) // cp``."""
        return sum(n // self.cp for n in self.lengths)

    @property
    def piece_lengths(self) -> tuple[int, ...]:
        """Tokens of each entry on one rank (its contiguous piece, or its two interleaved chunks)."""
        return tuple(n // self.cp for n in self.lengths)

    @property
    def real_entries(self) -> tuple[int, ...]:
        """Indices of the real samples, in stream order."""
        return tuple(e for e, r in enumerate(self.real) if r)

    def fingerprint(self) -> int:
        """A 63-bit digest of the descriptor, equal on every rank that holds the same descriptor."""
        text = f"{self.cp}|{self.lengths}|{self.real}|{self.segments}".encode()
        return int.from_bytes(hashlib.sha256(text).digest()[:8], "little") >> 1

    def check(
        self, local_tokens: int, group: dist.ProcessGroup | None, *, where: str, agree: bool = False
    ) -> None:
        """Refuses a descriptor that does not fit this rank's tensor or group.

        Args:
            local_tokens: the length of this rank's local stream (the tensor's sequence dimension).
            group: the context-parallel group, or None for a single rank.
            where: the caller, named in the error.
            agree: also verify (one all-gather over ``group``) that every rank holds the same descriptor.

        Raises:
            DescriptorError: the group's size is not ``cp``, the tensor's length is not ``local_tokens``, or
                (``agree``) another rank's descriptor differs.
        """
        size = 1 if group is None else dist.get_world_size(group)
        if size != self.cp:
            raise DescriptorError(f"{where}: descriptor has cp={self.cp} but the rank group has {size} ranks")
        if local_tokens != self.local_tokens:
            raise DescriptorError(
                f"{where}: local stream has {local_tokens} tokens but the descriptor's {len(self.lengths)} "
                f"entries (lengths {list(self.lengths)[:8]}, cp={self.cp}) give {self.local_tokens} per rank"
            )
        if agree and size > 1:
            mine = torch.tensor([self.fingerprint()], dtype=torch.int64)
            every = [torch.zeros_like(mine) for _ in range(size)]
            dist.all_gather(every, mine, group=group)
            differ = [r for r, t in enumerate(every) if int(t) != int(mine)]
            if differ:
                raise DescriptorError(
                    f"{where}: ranks {differ} of the group hold a different packed-sequence descriptor"
                )
