"""Verifier reports to per-assertion outcomes to scalar reward (T1 §5)."""
