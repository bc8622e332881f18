"""Context parallelism of the recurrent (Gated DeltaNet) layers: the sequence-sharded scan of T1 §7.1.

- `PackedCPDescriptor`: which entries a packed micro-batch holds, real or padding, and how many interleaved
  segments each contributes to the group's layout.
- `interleaved_to_contiguous` / `contiguous_to_interleaved`: the re-layout between the trainer's
  load-balanced shards and the contiguous segments a state-passing scan needs; `stream_positions`, where a
  rank's tokens sit in the full stream (for sharding and gathering by index).
- `gated_delta_rule_cp`, `causal_conv1d_cp`: the scan with its state handed from rank to rank, and the short
  convolution with its halo; both differentiable across ranks.
- `gated_deltanet_cp`: a whole Qwen3.5 Gated DeltaNet mixer on interleaved tokens.

Everything runs over a ``torch.distributed`` group, gloo on the CPU included. Full-attention layers are not
here (`t1_trainer.megatron.cp`).
"""

from t1_trainer.context_parallel.descriptor import DescriptorError, PackedCPDescriptor
from t1_trainer.context_parallel.layer import gated_deltanet_cp
from t1_trainer.context_parallel.relayout import (
    contiguous_to_interleaved,
    interleaved_to_contiguous,
    stream_positions,
)
from t1_trainer.context_parallel.scan import causal_conv1d_cp, gated_delta_rule_cp

__all__ = [
    "DescriptorError",
    "PackedCPDescriptor",
    "causal_conv1d_cp",
    "contiguous_to_interleaved",
    "gated_delta_rule_cp",
    "gated_deltanet_cp",
    "interleaved_to_contiguous",
    "stream_positions",
]
