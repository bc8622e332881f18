"""The run's own local Ray cluster is joined without Ray's "Connecting to existing Ray cluster" line."""

from __future__ import annotations

from pathlib import Path

import pytest

from t1_spec import load_recipe

TINY_RAY = Path(__file__).resolve().parents[2] / "recipes" / "tiny-ray.yaml"
pytestmark = pytest.mark.ray


def test_the_started_cluster_is_joined_quietly(capfd, caplog):
    pytest.importorskip("ray", reason="the ray package (t1[ray] extra) is not installed")
    from t1.run.ray.placement import RayCluster, placement_for

    recipe = load_recipe(TINY_RAY)
    try:
        cluster = RayCluster.start(recipe, placement_for(recipe))
    except RuntimeError as exc:
        pytest.skip(f"a local Ray cluster cannot start on this machine: {exc}")
    try:
        assert cluster.local
    finally:
        cluster.stop()
    said = capfd.readouterr()
    assert "Connecting to existing Ray cluster" not in said.out + said.err + caplog.text
