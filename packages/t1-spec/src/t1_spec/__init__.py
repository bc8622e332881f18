"""Versioned pydantic specs of a T1 run and recipe loading."""
