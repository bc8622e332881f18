"""Inference engines: the `Engine` seam, its registry, the in-process embedded engine and the SGLang client.

`EmbeddedEngine` and `SGLangEngine` load on first use, so importing the seam (`SamplingParams`,
`Generation`, `ENGINES`) does not import transformers.
"""

from typing import TYPE_CHECKING, Any

from t1_rollout.engine.base import (
    ENGINES,
    Engine,
    EngineError,
    EngineStateError,
    FinishReason,
    Generation,
    SamplingParams,
)

if TYPE_CHECKING:
    from t1_rollout.engine.embedded import EmbeddedEngine
    from t1_rollout.engine.sglang import SGLangEngine

__all__ = [
    "ENGINES",
    "EmbeddedEngine",
    "Engine",
    "EngineError",
    "EngineStateError",
    "FinishReason",
    "Generation",
    "SGLangEngine",
    "SamplingParams",
]


def __getattr__(name: str) -> Any:
    if name == "EmbeddedEngine":
        from t1_rollout.engine.embedded import EmbeddedEngine

        return EmbeddedEngine
    if name == "SGLangEngine":
        from t1_rollout.engine.sglang import SGLangEngine

        return SGLangEngine
    raise AttributeError(f"module 't1_rollout.engine' has no attribute {name!r}")
