"""Weight publication to SGLang servers: by ``torch.distributed`` broadcast, tensor hand-over, or disk.

Every path runs with generation paused (the caller's barrier, `t1_trainer.publish.publish_weights`) and ends
in `apply_update` with ``/flush_cache`` on every server, so a prefix computed by the old weights, and the
routing rows SGLang recorded with it, is never served after the update (T1 §4.2, §7). The three transports:

- `DistributedPublisher` (``weight_sync: distributed``): each server joins one group with the trainer as
  rank 0 (``/init_weights_update_group``, once); then per bucket of at most ``bucket_bytes`` every server is
  told the names, dtypes and shapes (``/update_weights_from_distributed``) while the trainer broadcasts the
  tensors in that order. The broadcast is the trainer side's `Broadcaster` (NCCL on GPUs, a fake in tests).
- `TensorPublisher` (``weight_sync: tensor``, co-located servers): per bucket, the tensors serialized for
  every TP rank (``/update_weights_from_tensor``); the serializer is SGLang's, supplied by the caller.
- `DiskPublisher` (``weight_sync: disk``): HF safetensors written to a directory the servers read
  (``/update_weights_from_disk``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from t1_rollout.engine.base import EngineError, EngineStateError

if TYPE_CHECKING:
    import torch

    from t1_rollout.engine.sglang.client import SGLangEngine

__all__ = [
    "Broadcaster",
    "DiskPublisher",
    "DistributedPublisher",
    "TensorPublisher",
    "WeightPublisher",
    "apply_update",
    "buckets",
    "dtype_name",
]

GROUP_NAME = "t1_weight_update"
"""Name of the weight-update group on the servers (SGLang's ``group_name``)."""


class WeightPublisher(Protocol):
    """Moves one version of the weights to a set of paused servers (no flush, no version bookkeeping)."""

    def publish(
        self, servers: Sequence[SGLangEngine], state_dict: Mapping[str, torch.Tensor], weight_version: int
    ) -> None:
        """Loads ``state_dict`` into every server as ``weight_version``; raises `EngineError` on failure."""
        ...


def dtype_name(tensor: torch.Tensor) -> str:
    """The dtype as SGLang's weight endpoints spell it: ``torch.bfloat16`` -> ``"bfloat16"``."""
    return str(tensor.dtype).removeprefix("torch.")


def buckets(
    state_dict: Mapping[str, torch.Tensor], bucket_bytes: int
) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Groups ``state_dict`` in order into buckets of at most ``bucket_bytes`` bytes.

    A tensor larger than ``bucket_bytes`` forms a bucket of its own; no tensor is split.

    Args:
        state_dict: names -> tensors, in the order they are sent.
        bucket_bytes: bytes per bucket (> 0).

    Raises:
        ValueError: ``bucket_bytes`` not positive.
    """
    if bucket_bytes <= 0:
        raise ValueError(f"bucket_bytes={bucket_bytes} must be > 0")
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in state_dict.items():
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > bucket_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


def apply_update(
    servers: Sequence[SGLangEngine],
    publisher: WeightPublisher | None,
    state_dict: Mapping[str, torch.Tensor],
    *,
    weight_version: int,
) -> None:
    """Publishes ``state_dict`` to every paused server, flushes each one's cache, and advances its version.

    On any failure every server is marked ``broken`` (its weights may be half old, half new), so its
    `SGLangEngine.generate` refuses until a later update succeeds; resuming generation stays the caller's
    (the barrier resumes every paused server whatever raised).

    Raises:
        EngineStateError: a server is not paused.
        EngineError: no publisher, or the transfer or a flush failed.
    """
    running = [s.base_url for s in servers if not s.paused]
    if running:
        raise EngineStateError(f"update_weights while generation is not paused on {', '.join(running)}")
    if publisher is None:
        raise EngineError("this SGLang client was built without a weight publisher (engine.weight_sync)")
    try:
        publisher.publish(servers, state_dict, weight_version)
        for server in servers:
            server.flush_cache()  # never serve routing rows of a prefix computed by the old weights
    except Exception as exc:
        for server in servers:
            server.broken = f"the update to weight version {weight_version} failed: {exc}"
        raise
    for server in servers:
        server.weight_version, server.broken = weight_version, None


def _all(servers: Sequence[SGLangEngine], job: Callable[[SGLangEngine], Any]) -> list[Any]:
    """Runs ``job`` on every server at once (each blocks until the trainer side acts); first error raised."""
    with ThreadPoolExecutor(max_workers=max(1, len(servers)), thread_name_prefix="t1-sglang-update") as pool:
        futures = [pool.submit(job, s) for s in servers]
        return [f.result() for f in futures]


class Broadcaster(Protocol):
    """The trainer side of ``update_weights_from_distributed``: rank 0 of a group the servers join."""

    master_address: str
    """Address of the group's rendezvous, reachable from every server."""

    master_port: int
    """Port of the group's rendezvous."""

    def init_group(self, world_size: int, group_name: str) -> None:
        """Joins the group as rank 0; returns once every server's ranks have joined."""
        ...

    def broadcast(self, bucket: Sequence[tuple[str, torch.Tensor]], group_name: str) -> None:
        """Broadcasts each tensor of ``bucket`` from rank 0, in order."""
        ...


class DistributedPublisher:
    """``weight_sync: distributed``: one broadcast group of the trainer (rank 0) and every server's TP ranks.

    The group is formed on the first publication: server i joins with ranks ``rank_offset .. rank_offset +
    tp - 1``, ``rank_offset = 1 + sum of the tp of the servers before it``, ``world_size = 1 + sum of tp``.

    Args:
        broadcaster: the trainer side (NCCL on GPUs).
        bucket_bytes: bytes per ``/update_weights_from_distributed`` request (`buckets`).
        backend: the group's backend on the servers, ``"nccl"``.
    """

    def __init__(self, broadcaster: Broadcaster, *, bucket_bytes: int, backend: str = "nccl") -> None:
        self.broadcaster, self.bucket_bytes, self.backend = broadcaster, bucket_bytes, backend
        self.group_members: tuple[str, ...] | None = None

    def _init_group(self, servers: Sequence[SGLangEngine]) -> None:
        world_size = 1 + sum(s.tp for s in servers)
        offsets = [1 + sum(s.tp for s in servers[:i]) for i in range(len(servers))]
        b = self.broadcaster

        def join(server: SGLangEngine) -> Any:
            payload = {
                "master_address": b.master_address,
                "master_port": b.master_port,
                "rank_offset": offsets[servers.index(server)],
                "world_size": world_size,
                "group_name": GROUP_NAME,
                "backend": self.backend,
            }
            return server.post_ok("/init_weights_update_group", payload, timeout_s=server.transfer_timeout_s)

        with ThreadPoolExecutor(max_workers=1) as trainer:
            joined = trainer.submit(b.init_group, world_size, GROUP_NAME)
            _all(servers, join)
            joined.result()
        self.group_members = tuple(s.base_url for s in servers)

    def publish(
        self, servers: Sequence[SGLangEngine], state_dict: Mapping[str, torch.Tensor], weight_version: int
    ) -> None:
        """Forms the group once, then sends every bucket: metadata to the servers, tensors by broadcast.

        Raises:
            EngineError: the servers differ from the group's members, or a server refused a request.
        """
        members = tuple(s.base_url for s in servers)
        if self.group_members is None:
            self._init_group(servers)
        elif members != self.group_members:
            raise EngineError(
                f"the weight-update group holds {list(self.group_members)} but this publication targets "
                f"{list(members)}; a group cannot change members"
            )
        parts = list(buckets(state_dict, self.bucket_bytes))
        for i, bucket in enumerate(parts):
            last = i == len(parts) - 1
            payload: dict[str, Any] = {
                "names": [n for n, _ in bucket],
                "dtypes": [dtype_name(t) for _, t in bucket],
                "shapes": [list(t.shape) for _, t in bucket],
                "group_name": GROUP_NAME,
                "flush_cache": last,
                "abort_all_requests": False,
            }
            if last:
                payload["weight_version"] = str(weight_version)  # the label changes with the last bucket

            def send(server: SGLangEngine, body: dict[str, Any] = payload) -> Any:
                return server.post_ok(
                    "/update_weights_from_distributed", body, timeout_s=server.transfer_timeout_s
                )

            with ThreadPoolExecutor(max_workers=1) as http:
                answers = http.submit(_all, servers, send)  # servers block in their broadcast receive
                self.broadcaster.broadcast(bucket, GROUP_NAME)
                answers.result()


class TensorPublisher:
    """``weight_sync: tensor``: co-located servers receive the tensors themselves (CUDA IPC handles).

    Args:
        serialize: SGLang's ``MultiprocessingSerializer.serialize(named_tensors, output_str=True)``, one
            call per TP rank of a server; the tensors stay on the trainer's device.
        bucket_bytes: bytes per ``/update_weights_from_tensor`` request (`buckets`).
    """

    def __init__(
        self, serialize: Callable[[list[tuple[str, torch.Tensor]]], str], *, bucket_bytes: int
    ) -> None:
        self.serialize, self.bucket_bytes = serialize, bucket_bytes

    def publish(
        self, servers: Sequence[SGLangEngine], state_dict: Mapping[str, torch.Tensor], weight_version: int
    ) -> None:
        """Sends every bucket to every server; raises `EngineError` when a server refuses."""
        parts = list(buckets(state_dict, self.bucket_bytes))
        for i, bucket in enumerate(parts):
            last = i == len(parts) - 1
            for server in servers:
                payload: dict[str, Any] = {
                    "serialized_named_tensors": [self.serialize(list(bucket)) for _ in range(server.tp)],
                    "flush_cache": last,
                    "abort_all_requests": False,
                }
                if last:
                    payload["weight_version"] = str(weight_version)
                server.post_ok("/update_weights_from_tensor", payload, timeout_s=server.transfer_timeout_s)


class DiskPublisher:
    """``weight_sync: disk``: HF safetensors under ``<directory>/v<version>``, loaded by every server.

    Args:
        directory: a directory every server can read (shared storage across machines).
        write: writes ``state_dict`` as an HF checkpoint directory (``config.json`` and safetensors) at the
            given path; `SGLangReplicas` passes the policy model's ``save_pretrained``.
        keep: versions kept on disk (older ones are deleted after a successful update); >= 1.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        write: Callable[[Mapping[str, torch.Tensor], Path], None],
        *,
        keep: int = 1,
    ) -> None:
        self.directory, self.write, self.keep = Path(directory), write, max(1, keep)

    def version_dir(self, weight_version: int) -> Path:
        """Where version ``weight_version`` is written: ``<directory>/v<version>``."""
        return self.directory / f"v{weight_version}"

    def publish(
        self, servers: Sequence[SGLangEngine], state_dict: Mapping[str, torch.Tensor], weight_version: int
    ) -> None:
        """Writes the version once, then every server loads it; raises `EngineError` when one refuses."""
        target = self.version_dir(weight_version)
        shutil.rmtree(target, ignore_errors=True)  # what a failed earlier attempt at this version left
        self.write(state_dict, target)
        payload = {
            "model_path": str(target),
            "flush_cache": True,
            "abort_all_requests": False,
            "weight_version": str(weight_version),
        }
        _all(
            servers, lambda s: s.post_ok("/update_weights_from_disk", payload, timeout_s=s.transfer_timeout_s)
        )
        if weight_version - self.keep >= 0:
            shutil.rmtree(self.version_dir(weight_version - self.keep), ignore_errors=True)


def model_writer(model: torch.nn.Module) -> Callable[[Mapping[str, torch.Tensor], Path], None]:
    """A `DiskPublisher` writer: loads ``state_dict`` into ``model`` and saves it with ``save_pretrained``.

    ``model`` is the engine's host copy of the policy (a transformers model), so the directory holds the
    ``config.json`` and HF-named safetensors that SGLang's loader reads.
    """

    def write(state_dict: Mapping[str, torch.Tensor], target: Path) -> None:
        if state_dict:
            model.load_state_dict(dict(state_dict), strict=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(target), safe_serialization=True)

    return write
