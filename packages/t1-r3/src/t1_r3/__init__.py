"""Rollout routing replay: routing records, capture and replay (T1 §4.2)."""
