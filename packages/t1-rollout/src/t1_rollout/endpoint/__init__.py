"""An OpenAI-compatible chat-completions endpoint that records tokens, log-probs and routing (T1 §4.1, §4.2).

External agent harnesses (`t1_rollout.external`) drive T1's engine through it: `EndpointServer` serves
``/v1/chat/completions`` on loopback keyed by a per-trial key, `TrialCapture` turns each call into a
`t1_tito.Turn` (prompt ids built token-in-token-out where the harness kept the history, the sampled ids,
their log-probs, routing rows and weight version), and `sandbox_exec` is the ``docker``-like command that
runs the harness's commands in the trial's sandbox.
"""

from t1_rollout.endpoint.capture import CallRecord, RequestError, TrialCapture
from t1_rollout.endpoint.chat import Reply, parse_reply, with_tools
from t1_rollout.endpoint.server import EndpointServer

__all__ = [
    "CallRecord",
    "EndpointServer",
    "Reply",
    "RequestError",
    "TrialCapture",
    "parse_reply",
    "with_tools",
]
