"""W&B beside metrics.jsonl: every row, the resolved recipe and the plots, read back from the offline run.

The offline run's ``.wandb`` file is read with W&B's own record type
(``wandb.proto.wandb_internal_pb2.Record``); the file's framing (a 7-byte ``:W&B`` header, then 32 KiB blocks
of records, each behind a 7-byte header of CRC, length and fragment kind, as in LevelDB's log format) is
unwrapped here because the installed wandb reads it in its Go core only.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from t1.run.run_dir import RunDir
from t1_spec import WandbSpec

wandb = pytest.importorskip("wandb", reason="the t1[wandb] extra is not installed")
from wandb.proto import wandb_internal_pb2  # noqa: E402

DATA = Path(__file__).parent / "data" / "tiny_cpu_metrics.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text().splitlines()]
BLOCK = 32768
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _records(path: Path) -> Iterator[wandb_internal_pb2.Record]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a W&B transaction log"
    pos, pending = 7, b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # block trailer too short for a header: padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        payload, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == FIRST:
            pending = payload
            continue
        if kind == MIDDLE:
            pending += payload
            continue
        raw = pending + payload if kind == LAST else payload
        pending = b""
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        yield record


def _items(entries) -> dict[str, object]:
    """``{"a/b": value}`` of history or config items (``key`` or ``nested_key``)."""
    return {(e.key or "/".join(e.nested_key)): json.loads(e.value_json) for e in entries}


@pytest.fixture
def offline(tmp_path, monkeypatch):
    for var, sub in (("WANDB_DIR", "dir"), ("WANDB_CACHE_DIR", "cache"), ("WANDB_CONFIG_DIR", "config")):
        monkeypatch.setenv(var, str(tmp_path / sub))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    return tmp_path


def test_offline_run_holds_every_row_the_recipe_as_config_and_the_plots(offline):
    recipe = {
        "name": "tiny",
        "ppo": {"batch_size": 4, "actor_lr": 1e-6},
        "logging": {"wandb": {"mode": "offline", "project": "t1-test"}},
    }
    run = RunDir.create(offline / "runs", "tiny", recipe)
    assert run.wandb is not None
    for row in ROWS:
        run.append_metrics(row)
    warmup = {"phase": "critic_warmup", "step": 0, "critic/explained_variance": -0.5}
    run.append_metrics(warmup)
    run.write_status("finished", len(ROWS), None)

    files = list((run.root / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(files) == 1, f"expected one offline run file under {run.root / 'wandb'}: {files}"
    records = list(_records(files[0]))
    kinds = [r.WhichOneof("record_type") for r in records]
    assert "exit" in kinds

    (run_record,) = [r.run for r in records if r.WhichOneof("record_type") == "run"]
    assert run_record.project == "t1-test"
    assert run_record.display_name == run.root.name
    config = _items(run_record.config.update)
    assert config["ppo"] == recipe["ppo"] and config["logging"] == recipe["logging"]

    history = [_items(r.history.item) for r in records if r.WhichOneof("record_type") == "history"]
    ppo = [h for h in history if "step" in h]
    assert [h["step"] for h in ppo] == [row["step"] for row in ROWS]
    for logged, row in zip(ppo, ROWS, strict=True):
        assert logged["reward_mean"] == pytest.approx(row["reward_mean"])
        assert logged["tito_boundaries/strict"] == row["tito_boundaries"]["strict"]
        assert "policy_versions" not in logged  # a list has no single value (as in TensorBoard)
    (warm,) = [h for h in history if "critic_warmup/step" in h]
    assert warm["critic_warmup/critic/explained_variance"] == -0.5 and warm["critic_warmup/step"] == 0

    drawn = sorted(p.stem for p in (run.root / "plots").glob("*.png"))  # what t1 plot drew for this run
    assert drawn, "t1 plot drew no figure from the tiny run's rows"
    images = {k.split("/", 2)[1] for h in history for k in h if k.startswith("plots/")}
    assert sorted(images) == drawn
    media = [f.path for r in records if r.WhichOneof("record_type") == "files" for f in r.files.files]
    for stem in drawn:
        assert any(path.startswith(f"media/images/plots/{stem}") for path in media), (stem, media)


def test_a_failed_run_closes_with_exit_code_1(offline):
    recipe = {"name": "r", "logging": {"wandb": {"mode": "offline"}}}
    run = RunDir.create(offline / "runs", "r", recipe)
    run.write_status("running", 0, None)
    assert not run.wandb.finished  # still open while the run runs
    run.write_status("failed", 0, "RuntimeError: boom")
    (file,) = (run.root / "wandb").glob("offline-run-*/run-*.wandb")
    (exit_record,) = [r.exit for r in _records(file) if r.WhichOneof("record_type") == "exit"]
    assert exit_record.exit_code == 1


def test_wandb_is_off_by_default_and_opens_nothing(tmp_path):
    run = RunDir.create(tmp_path, "r", {"name": "r"})
    assert run.wandb is None
    run.append_metrics(ROWS[0])
    assert not (run.root / "wandb").exists()
    assert WandbSpec().mode == "disabled"


def test_an_unknown_mode_is_refused_by_the_spec():
    with pytest.raises(ValueError, match="mode"):
        WandbSpec.model_validate({"mode": "cloud"})


def test_preflight_refuses_a_wandb_mode_without_the_wandb_package(monkeypatch):
    import importlib.util

    from t1.run import wandb_log
    from t1.run.preflight import preflight
    from t1_spec import load_recipe

    recipe = load_recipe(
        Path(__file__).resolve().parents[2] / "recipes" / "tiny-cpu.yaml", ["logging.wandb.mode=offline"]
    )
    assert not any("logging.wandb" in p for p in preflight(recipe).problems)
    real = importlib.util.find_spec
    monkeypatch.setattr(
        wandb_log.importlib.util, "find_spec", lambda name: None if name == "wandb" else real(name)
    )
    assert any("logging.wandb.mode" in p and "t1[wandb]" in p for p in preflight(recipe).problems)
    assert wandb_log.wandb_problems(WandbSpec()) == []  # disabled needs nothing
