"""Chat template and token-in-token-out stitching (T1 §4.1)."""
