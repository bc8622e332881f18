"""Engines, sandboxes, agent harness and scheduler."""
