"""Chat template and token-in-token-out stitching (T1 §4.1).

`load_tokenizer` gives the Qwen3.5 tokenizer; `ChatTemplate` renders Qwen3.5-style turns; `TitoSession` builds
each turn's prompt ids from the previous ids (never re-encoding them); `stitch` turns a trial's `Turn`s into
`Sample`s with four aligned streams (token ids, loss mask, rollout log-probs, routing rows), repairing each
turn boundary by the strongest of TITO's four cases (strict, normalized, retokenized, split; `BoundaryCase`),
and a `DriftAudit`.

`RoutingMismatchError` is `t1_r3.RoutingMismatchError` itself (the one routing contract,
`t1_r3.check_routing`), so catching either name catches every misaligned routing record. No torch is imported
by this package.
"""

from t1_r3 import RoutingMismatchError
from t1_tito.audit import DriftAudit, audit_drift
from t1_tito.boundary import BoundaryCase, routing_start_len
from t1_tito.sample import InvalidTurnError, Sample, StreamMisalignmentError, Turn
from t1_tito.session import PromptBuffer, TitoSession
from t1_tito.stitch import REPAIR_MODES, StitchResult, stitch
from t1_tito.template import ChatTemplate, TemplateError, normalize_messages
from t1_tito.tokenizer import QWEN3_5_PADDED_VOCAB_SIZE, Tokenizer, load_tokenizer

__all__ = [
    "QWEN3_5_PADDED_VOCAB_SIZE",
    "REPAIR_MODES",
    "BoundaryCase",
    "ChatTemplate",
    "DriftAudit",
    "RoutingMismatchError",
    "Sample",
    "StitchResult",
    "StreamMisalignmentError",
    "InvalidTurnError",
    "PromptBuffer",
    "TemplateError",
    "TitoSession",
    "Tokenizer",
    "Turn",
    "audit_drift",
    "load_tokenizer",
    "normalize_messages",
    "routing_start_len",
    "stitch",
]
