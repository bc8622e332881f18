"""Closed-form per-device memory model and plan search (T1 §7.1)."""
