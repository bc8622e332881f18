"""Inference engines: the `Engine` seam, the in-process embedded engine and the SGLang client."""

from t1_rollout.engine.base import (
    Engine,
    EngineError,
    EngineStateError,
    FinishReason,
    Generation,
    SamplingParams,
)

__all__ = ["Engine", "EngineError", "EngineStateError", "FinishReason", "Generation", "SamplingParams"]
