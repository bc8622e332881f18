"""The ``engine.kind: sglang`` engine: SGLang replicas behind the `Engine` seam, launched or joined (T1 §7).

A trajectory sticks to one replica (its prefix stays in that server's radix cache): the replica is chosen
when a trial's asyncio task first generates, by least load (live trajectories per replica), and kept for
every later turn of that task. Publication pauses, updates and resumes every replica together, so all hold
one weight version; the prefix cache of each is flushed after every update (`weights.apply_update`). A
liveness thread probes each replica's ``/health`` every ``liveness.probe_period_s`` with the
``probe_deadline_s`` deadline; a replica that misses one is marked unusable and gets no new trajectory
(reclaiming it at the next barrier is not built).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import socket
import tempfile
import threading
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from t1_rollout.engine.base import EngineError, Generation, SamplingParams
from t1_rollout.engine.sglang.client import SGLangEngine
from t1_rollout.engine.sglang.launch import (
    ServerProcess,
    check_model,
    launch_problem,
    server_command,
    wait_ready,
)
from t1_rollout.engine.sglang.weights import (
    DiskPublisher,
    DistributedPublisher,
    TensorPublisher,
    WeightPublisher,
    apply_update,
    model_writer,
)
from t1_spec import LivenessSpec, Recipe, SGLangEngineSpec

if TYPE_CHECKING:
    import torch

__all__ = ["SGLangReplicas", "one_server_spec"]

MIB = 1 << 20


class SGLangReplicas:
    """`Engine` over one or more SGLang servers; see the module docstring.

    Args:
        servers: one client per replica, all at the same weight version.
        publisher: moves new weights to the servers (shared, so a broadcast group spans every replica).
        processes: the servers T1 launched (stopped by `close`); empty when joined by URL.
        liveness: probe period and deadline; None = no liveness thread.

    Raises:
        ValueError: no servers, or servers at different weight versions.
    """

    def __init__(
        self,
        servers: list[SGLangEngine],
        *,
        publisher: WeightPublisher | None,
        processes: list[ServerProcess] | None = None,
        liveness: LivenessSpec | None = None,
    ) -> None:
        if not servers:
            raise ValueError("SGLangReplicas needs at least one server")
        if len({s.weight_version for s in servers}) > 1:
            raise ValueError(f"servers hold weight versions {[s.weight_version for s in servers]}; need one")
        self.servers = servers
        self.publisher = publisher
        for s in servers:
            s.publisher = publisher
        self.processes = processes or []
        self._owner: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = weakref.WeakKeyDictionary()
        self._stop = threading.Event()
        self._monitor = None
        if liveness is not None:
            self._monitor = threading.Thread(
                target=self._watch, args=(liveness.probe_period_s,), daemon=True, name="t1-sglang-liveness"
            )
            self._monitor.start()

    @property
    def weight_version(self) -> int:
        """The version every replica serves (they are published together)."""
        return self.servers[0].weight_version

    # ---- building

    @classmethod
    def preflight(cls, recipe: Recipe) -> list[str]:
        """What stops ``recipe`` from running on SGLang here, one line each (empty: runnable).

        With ``engine.urls`` only HTTP is needed; launching needs the ``sglang`` package and the plan's CUDA
        devices. ``weight_sync: distributed`` needs CUDA in this process (NCCL), ``tensor`` the ``sglang``
        package (its serializer), and ``disk`` with ``urls`` an explicit ``weights_dir`` the servers read.
        """
        spec = recipe.engine
        if not isinstance(spec, SGLangEngineSpec):
            return [f"engine.kind '{spec.kind}': the SGLang engine serves kind 'sglang' only"]
        problems = []
        if not spec.urls:
            why = launch_problem(recipe)
            if why:
                problems.append(why)
        if spec.weight_sync == "distributed":
            import torch

            if not torch.cuda.is_available():
                problems.append(
                    "engine.weight_sync 'distributed': the NCCL broadcast needs a CUDA device in the "
                    "trainer's process (none visible here); use engine.weight_sync: disk"
                )
        elif spec.weight_sync == "tensor" and importlib.util.find_spec("sglang") is None:
            problems.append(
                "engine.weight_sync 'tensor': handing tensors to co-located servers needs the sglang package "
                "here (its serializer; not installed); use engine.weight_sync: disk or distributed"
            )
        elif spec.weight_sync == "disk" and spec.urls and spec.weights_dir is None:
            problems.append(
                "engine.weights_dir: weight_sync 'disk' with engine.urls needs a directory every server "
                "reads (the default is a temporary directory on this machine); set engine.weights_dir"
            )
        return problems

    @classmethod
    def from_spec(
        cls, spec: SGLangEngineSpec, *, model: torch.nn.Module, seed: int, recipe: Recipe
    ) -> SGLangReplicas:
        """Joins ``spec.urls`` or launches ``spec.replicas`` servers, waits until each is ready, checks it.

        Launched servers load ``model`` (written with ``save_pretrained`` under ``weights_dir/v0``), so the
        engine starts from the trainer's weights; joined servers must already serve them (T1 labels them
        version 0). Every server must answer a probe with the recipe's ``L * k`` routing.

        Args:
            spec: the ``engine`` section.
            model: the policy (a transformers model): its config gives L, k, E and the MoE layers; it is the
                weights launched servers load and the host copy that ``disk`` updates write.
            seed: the recipe seed (requests carry their own seeds; unused here).
            recipe: the whole recipe (``liveness`` deadlines, ``plan`` device split).

        Raises:
            EngineError: a server did not become ready within ``liveness.probe_grace_s``, exited, or does
                not serve the recipe's model; launched servers are stopped first.
        """
        del seed
        from t1_r3 import moe_layers, moe_routers

        live = recipe.liveness
        routers = moe_routers(model)
        shape = {
            "num_layers": int(model.config.num_hidden_layers),
            "top_k": int(routers[0].top_k),
            "num_experts": int(routers[0].num_experts),
            "moe_layers": moe_layers(model),
        }
        weights_dir = Path(spec.weights_dir or tempfile.mkdtemp(prefix="t1-sglang-"))
        processes: list[ServerProcess] = []
        try:
            if spec.urls:
                urls = [u.rstrip("/") for u in spec.urls]
            else:
                first = weights_dir / "v0"
                model.save_pretrained(str(first), safe_serialization=True)
                dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
                urls = [f"http://{spec.host}:{spec.base_port + i}" for i in range(spec.replicas)]
                for i, url in enumerate(urls):
                    command = server_command(
                        spec,
                        replica=i,
                        model_path=first,
                        dtype=dtype,
                        first_device=recipe.plan.training_devices,
                    )
                    processes.append(
                        ServerProcess.start(command, url=url, log_path=weights_dir / f"server-{i}.log")
                    )
            servers = [
                SGLangEngine(
                    url,
                    **shape,
                    tp=spec.tp,
                    probe_deadline_s=live.probe_deadline_s,
                    transfer_timeout_s=live.collective_timeout_s,
                )
                for url in urls
            ]
            for i, server in enumerate(servers):
                wait_ready(server, grace_s=live.probe_grace_s, process=processes[i] if processes else None)
                if spec.urls:
                    server.declare_version(0)  # a joined server's answers carry T1's version from now on
                check_model(server)
            publisher = _publisher(spec, model, weights_dir, live, local=not spec.urls)
        except BaseException:
            for p in processes:
                p.stop()
            raise
        return cls(servers, publisher=publisher, processes=processes, liveness=live)

    # ---- the Engine seam

    def _pick(self) -> SGLangEngine:
        task = asyncio.current_task()
        index = self._owner.get(task) if task is not None else None
        if index is None:
            usable = [i for i, s in enumerate(self.servers) if s.broken is None]
            if not usable:
                raise EngineError(
                    "no SGLang replica is usable: " + "; ".join(str(s.broken) for s in self.servers)
                )
            load = dict.fromkeys(usable, 0)
            for t, i in list(self._owner.items()):
                if i in load and not t.done():
                    load[i] += 1
            index = min(usable, key=lambda i: (load[i], self.servers[i].in_flight, i))
            if task is not None:
                self._owner[task] = index
        return self.servers[index]

    async def generate(
        self,
        input_ids: list[int],
        sampling: SamplingParams,
        *,
        return_logprob: bool = True,
        return_routed_experts: bool = True,
        routed_experts_start_len: int = 0,
    ) -> Generation:
        """`SGLangEngine.generate` on the calling trajectory's replica (least loaded on its first turn)."""
        return await self._pick().generate(
            input_ids,
            sampling,
            return_logprob=return_logprob,
            return_routed_experts=return_routed_experts,
            routed_experts_start_len=routed_experts_start_len,
        )

    def pause(self) -> None:
        """Pauses every replica (``/pause_generation``)."""
        for s in self.servers:
            s.pause()

    def resume(self) -> None:
        """Resumes every paused replica (``/continue_generation``), then raises the first failure, if any."""
        errors = []
        for s in self.servers:
            try:
                s.resume()
            except EngineError as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def update_weights(self, state_dict: Mapping[str, torch.Tensor], *, weight_version: int) -> None:
        """Publishes to every replica at once, then flushes each one's prefix cache (`apply_update`)."""
        apply_update(self.servers, self.publisher, state_dict, weight_version=weight_version)

    def stats(self) -> dict[str, int]:
        """Totals for the run's metrics.

        Returns:
            ``servers``, ``in_flight`` (requests now), ``broken`` (servers refused until a later update, or
            lost to a liveness probe).
        """
        return {
            "servers": len(self.servers),
            "in_flight": sum(s.in_flight for s in self.servers),
            "broken": sum(s.broken is not None for s in self.servers),
        }

    def _watch(self, period_s: float) -> None:
        while not self._stop.wait(period_s):
            for s in self.servers:
                try:
                    s.probe()
                except EngineError as exc:
                    s.broken = f"liveness probe failed: {exc}"

    def close(self) -> None:
        """Stops the liveness thread, the clients and every launched server."""
        self._stop.set()
        for s in self.servers:
            s.close()
        for p in self.processes:
            with contextlib.suppress(OSError):
                p.stop()


def one_server_spec(spec: SGLangEngineSpec, index: int) -> SGLangEngineSpec:
    """The ``engine`` section of replica ``index`` alone: the server of ``urls[index]``, one replica.

    A Ray engine replica (one actor per server, T1 §7) builds its engine from this. Its ``weights_dir``,
    when given, becomes ``weights_dir/replica-<index>``, so the ``disk`` updates of two replicas never
    write the same version directory at once.

    Raises:
        ValueError: ``spec.urls`` empty (launching a server per actor is not built) or ``index`` outside it.
    """
    if not 0 <= index < len(spec.urls):
        raise ValueError(
            f"engine.urls has {len(spec.urls)} url(s); replica {index} has none (one url per replica)"
        )
    weights_dir = None if spec.weights_dir is None else str(Path(spec.weights_dir) / f"replica-{index}")
    return spec.model_copy(update={"urls": [spec.urls[index]], "replicas": 1, "weights_dir": weights_dir})


def _publisher(
    spec: SGLangEngineSpec, model: torch.nn.Module, weights_dir: Path, live: LivenessSpec, *, local: bool
) -> WeightPublisher:
    """The publisher of ``spec.weight_sync``."""
    bucket = int(spec.bucket_mib * MIB)
    if spec.weight_sync == "disk":
        return DiskPublisher(weights_dir, model_writer(model))
    if spec.weight_sync == "tensor":
        serializer = importlib.import_module("sglang.srt.utils").MultiprocessingSerializer
        return TensorPublisher(
            lambda named: serializer.serialize(named, output_str=True), bucket_bytes=bucket
        )
    from t1_rollout.engine.sglang.nccl import TorchBroadcaster

    address = "127.0.0.1" if local else socket.gethostbyname(socket.gethostname())
    return DistributedPublisher(
        TorchBroadcaster(address, backend="nccl", timeout_s=live.collective_timeout_s), bucket_bytes=bucket
    )
