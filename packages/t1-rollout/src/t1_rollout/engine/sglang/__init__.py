"""The SGLang engine (``engine.kind: sglang``): HTTP clients of launched or joined servers, with publication.

- `SGLangEngine` (`client`): one server's native ``/generate`` (ids in, ids, log-probs and routed experts
  out, each answer checked on arrival), pause, continue, flush, probes.
- `SGLangReplicas` (`replicas`): the registered engine; replicas behind the `Engine` seam, ``from_spec`` and
  ``preflight``.
- `launch`: the server command lines and readiness; `weights`: publication by broadcast, tensor or disk;
  `nccl`: the trainer side of the broadcast group.

Importing this package imports no SGLang (joining running servers needs only the standard library).
"""

from t1_rollout.engine.sglang.client import SGLangEngine
from t1_rollout.engine.sglang.replicas import SGLangReplicas

__all__ = ["SGLangEngine", "SGLangReplicas"]
