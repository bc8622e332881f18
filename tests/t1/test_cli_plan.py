"""`t1 plan` verbs and tools/check_plan: exit codes and what they print."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from t1.cli import app

ROOT = Path(__file__).resolve().parents[2]
PROD = str(ROOT / "recipes" / "t1-122b.yaml")
runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["plan", *args])


def test_check_admits_production_plan():
    res = run("check", PROD)
    assert res.exit_code == 0, res.output
    for term in (
        "expert_optimizer",
        "logit_buffer",
        "recurrent_activations",
        "allocator_residue",
        "headroom",
    ):
        assert term in res.output
    assert "ADMIT" in res.output and "step time at n=64" in res.output


def test_check_refuses_kappa2_naming_the_logit_buffer_and_the_fix():
    res = run("check", PROD, "plan.cp=2", "plan.dp=4", "plan.alpha=67584")
    assert res.exit_code == 1, res.output
    assert "REFUSE" in res.output
    assert "binding term logit_buffer" in res.output
    assert "raise cp 2 -> 4" in res.output


def test_check_invalid_recipe_exits_2():
    assert run("check", PROD, "plan.cp=2").exit_code == 2  # device product no longer matches
    assert run("check", str(ROOT / "recipes" / "missing.yaml")).exit_code == 2


def test_search_ranks_and_explains():
    res = run("search", PROD, "--top", "3")
    assert res.exit_code == 0, res.output
    assert "valid plans over 64 training devices" in res.output
    assert "refused" in res.output and "binding" in res.output


def test_calibrate_writes_override(tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text(
        "tp,pp,cp,dp,ep,token_wall,peak_gib\n2,4,4,2,16,32768,52.0\n2,4,4,2,16,86016,70.0\n2,4,2,4,16,16384,50.5\n"
    )
    out = tmp_path / "override.yaml"
    res = run("calibrate", str(csv), "--recipe", PROD, "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "residual" in res.output
    text = out.read_text()
    assert text.startswith("plan:\n  alpha: ") and "b0_gib:" in text
    assert run("calibrate", str(tmp_path / "nope.csv"), "--recipe", PROD).exit_code == 2


def test_split_reports_best_n():
    res = run(
        "split",
        "--devices",
        "8",
        "--groups",
        "256",
        "--groups-per-min",
        "4.35",
        "--training-work",
        "115",
        "--n",
        "1",
        "--n",
        "3",
    )
    assert res.exit_code == 0, res.output
    assert "generation 58.9 min" in res.output and "generation 19.6 min" in res.output


@pytest.mark.skipif(shutil.which("uv") is None, reason="tools/check_plan runs through uv")
def test_tools_check_plan_exit_codes():
    env = {**os.environ}
    ok = subprocess.run([str(ROOT / "tools" / "check_plan"), PROD], capture_output=True, text=True, env=env)
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [str(ROOT / "tools" / "check_plan"), PROD, "plan.cp=2", "plan.dp=4"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert bad.returncode == 1
    invalid = subprocess.run(
        [str(ROOT / "tools" / "check_plan"), "nope.yaml"], capture_output=True, text=True
    )
    assert invalid.returncode == 2


def test_the_refused_cp2_variant_names_the_logit_buffer():
    # recipes/t1-122b-cp2.yaml: the paper's production run at the 84k wall with kappa = 2 (T1 §7.1)
    bad = subprocess.run(
        [str(ROOT / "tools" / "check_plan"), str(ROOT / "recipes" / "t1-122b-cp2.yaml")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1
    refusal = [line for line in bad.stdout.splitlines() if line.startswith("REFUSE")]
    assert refusal and "binding term logit_buffer" in refusal[0]


@pytest.mark.parametrize("flag", ["--generation-min", "--training-min"])
@pytest.mark.parametrize("value", ["-1", "0"])
def test_check_refuses_bad_minutes_before_printing_anything(flag, value):
    res = run("check", PROD, flag, value)
    assert res.exit_code == 2, res.output
    assert "ADMIT" not in res.output and "term (GiB" not in res.output
    assert f"{flag} must be a positive" in res.output


def test_check_granularity_not_dividing_the_inference_partition_says_what_to_pass():
    res = run("check", PROD, "--granularity", "3")
    assert res.exit_code == 2, res.output
    assert "ADMIT" not in res.output
    assert "does not divide plan.inference_devices 64" in res.output and "engine.tp = 8" in res.output


def test_check_granularity_out_of_range_is_refused():
    res = run("check", PROD, "--granularity", "0")
    assert res.exit_code == 2 and "must lie in [1, 127]" in res.output


@pytest.mark.parametrize("value", ["0", "1"])
def test_check_granularity_on_a_co_located_plan_is_refused_not_ignored(value):
    res = run("check", str(ROOT / "recipes" / "tiny-cpu.yaml"), "--granularity", value)
    assert res.exit_code == 2, res.output
    assert f"--granularity {value}: this recipe's plan is co-located" in res.output
    assert "ADMIT" not in res.output


def test_check_with_nothing_fitting_still_prints_the_verdict_and_no_best_split():
    res = run("check", PROD, "plan.memory_budget_gib=20")
    assert res.exit_code == 1, res.output
    assert "REFUSE" in res.output and "best split: none" in res.output


def test_search_lists_only_plans_the_recipe_validator_accepts():
    res = run("search", PROD, "--top", "100")
    assert res.exit_code == 0, res.output
    assert "tp4" not in res.output and "tp8" not in res.output  # 2 KV heads: tp <= 2 (plan.tp_divides_heads)


def test_calibrate_refuses_a_negative_peak_naming_the_row(tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text("tp,pp,cp,dp,ep,token_wall,peak_gib\n2,4,4,2,16,32768,52.0\n2,4,4,2,16,86016,-70\n")
    res = run("calibrate", str(csv), "--recipe", PROD)
    assert res.exit_code == 2, res.output
    assert "m.csv:3" in res.output and "peak_gib must be a positive" in res.output
    assert "alpha =" not in res.output


def test_calibrate_refuses_a_fit_with_negative_alpha(tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text("tp,pp,cp,dp,ep,token_wall,peak_gib\n2,4,4,2,16,16384,80.0\n2,4,4,2,16,86016,60.0\n")
    res = run("calibrate", str(csv), "--recipe", PROD)
    assert res.exit_code == 2, res.output
    assert "inconsistent with Eq. 21" in res.output


@pytest.mark.parametrize("option", [["--top", "-5"], ["--top", "0"], ["--devices", "0"], ["--refused", "-1"]])
def test_search_refuses_non_positive_counts(option):
    result = CliRunner().invoke(app, ["plan", "search", PROD, *option])
    assert result.exit_code == 2


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--generation-work", "0", "--training-work", "0"], "--training-work"),
        (["--generation-work", "1", "--training-work", "1", "--replica-devices", "0"], "--replica-devices"),
        (["--generation-work", "1", "--training-work", "1", "--replica-devices", "8"], "--replica-devices"),
        (["--generation-work", "nan", "--training-work", "1"], "--generation-work"),
        (["--generation-work", "1", "--training-work", "inf"], "--training-work"),
        (["--generation-work", "-1", "--training-work", "1"], "--generation-work"),
        (["--groups", "256", "--groups-per-min", "0", "--training-work", "1"], "--groups-per-min"),
        (["--groups", "nan", "--groups-per-min", "4.35", "--training-work", "1"], "--groups"),
        (["--generation-work", "1", "--training-work", "1", "--n", "8"], "--n"),
        (["--generation-work", "1", "--training-work", "1", "--n", "0"], "--n"),
    ],
)
def test_split_refuses_bad_arguments_naming_the_option(args, named):
    """Issue: zero work crashed with a division by zero (exit 1), nan printed "step nan min" (exit 0)."""
    res = run("split", "--devices", "8", *args)
    assert res.exit_code == 2, res.output
    assert named in res.output
    assert "step" not in res.output.replace("--", "")  # nothing printed before the refusal
    assert "division" not in res.output and "range()" not in res.output


def test_split_refuses_generation_work_together_with_groups():
    """Both ways of giving R at once: one would be silently dropped, so refuse naming both."""
    res = run(
        "split", "--devices", "8", "--generation-work", "60", "--groups", "256", "--training-work", "115"
    )
    assert res.exit_code == 2, res.output
    assert "--generation-work" in res.output and "--groups" in res.output


def test_split_refuses_fewer_than_two_devices():
    res = run("split", "--devices", "1", "--generation-work", "1", "--training-work", "1")
    assert res.exit_code == 2, res.output
    assert "--devices" in res.output


def test_split_balance_from_first_principles():
    """R = 10, C = 30, G = 8: n* = G R / (R + C) = 2; at n = 2 both partitions take 5 min."""
    res = run("split", "--devices", "8", "--generation-work", "10", "--training-work", "30", "--n", "2")
    assert res.exit_code == 0, res.output
    assert "generation 5.0 min, training 5.0 min" in res.output and "n*=2.0" in res.output


def _csv(tmp_path, last_row: str, header_extra: str = "") -> Path:
    csv = tmp_path / "m.csv"
    filler = "," if header_extra else ""
    csv.write_text(
        f"tp,pp,cp,dp,ep,token_wall,peak_gib{header_extra}\n2,4,4,2,16,32768,52.0{filler}\n{last_row}\n"
    )
    return csv


@pytest.mark.parametrize(
    ("row", "extra", "column"),
    [
        ("2,4,4,2,16", "", "token_wall"),
        ("2,4,4,2,16,86016,abc", "", "peak_gib"),
        ("2,4,4,2,16,86016,70,9", ",stage", "stage"),
        ("2,4,4,2,16,86016,1e308", "", "peak_gib"),
    ],
)
def test_calibrate_bad_rows_exit_2_naming_file_line_and_column(tmp_path, row, extra, column):
    res = run("calibrate", str(_csv(tmp_path, row, extra)), "--recipe", PROD)
    assert res.exit_code == 2, res.output
    assert "m.csv:3: row 2" in res.output and f"column {column}" in res.output
    assert "alpha =" not in res.output and "-inf" not in res.output


def test_calibrate_refuses_a_directory_as_csv_or_out(tmp_path):
    res = run("calibrate", str(tmp_path), "--recipe", PROD)
    assert res.exit_code == 2, res.output
    assert "is a directory" in res.output
    good = _csv(tmp_path, "2,4,4,2,16,86016,70")
    res = run("calibrate", str(good), "--recipe", PROD, "--out", str(tmp_path))
    assert res.exit_code == 2, res.output
    assert "--out" in res.output and "is a directory" in res.output and "alpha =" not in res.output
    res = run("calibrate", str(good), "--recipe", PROD, "--out", str(tmp_path / "no" / "o.yaml"))
    assert res.exit_code == 2, res.output
    assert "--out" in res.output and "does not exist" in res.output


TINY = str(ROOT / "recipes" / "tiny-cpu.yaml")


def test_search_offload_none_refusal_is_coresidency_as_check_says():
    """Issue: search said "actor over M by -0.x GiB" where check said co-resident total > M.

    recipes/tiny-cpu.yaml (torch trainer, float32, calibrated activations) at b0 = 0.5 GiB: actor 1.90 GiB +
    critic 0.95 GiB - one b0 = 2.35 GiB co-resident (tests/t1_capacity/test_search.py prices it by hand).
    """
    searched = run("search", TINY, "plan.memory_budget_gib=2", "plan.b0_gib=0.5")
    checked = run("check", TINY, "plan.memory_budget_gib=2", "plan.b0_gib=0.5")
    assert searched.exit_code == checked.exit_code == 1, searched.output + checked.output
    assert "by -" not in searched.output
    assert "co-resident (offload none): 2.4 of 2.0 GiB, exceeds M by 0.4 GiB" in searched.output
    assert "co-resident (offload none): 2.4 of 2.0 GiB, exceeds M by 0.4 GiB" in checked.output


def test_search_offload_none_headroom_is_checks():
    """Issue: search printed the headroom of 95 - actor alone, check 95 - co-resident (2.21 GiB)."""
    searched = run("search", TINY)
    checked = run("check", TINY)
    assert searched.exit_code == checked.exit_code == 0, searched.output + checked.output
    row = next(line for line in searched.output.splitlines() if line.split()[:2] == ["1", "tp1"])
    assert row.split()[-2] == "92.8"
    assert "fits with 92.8 GiB headroom" in checked.output


def test_calibrate_fits_backend_coefficients_from_the_memory_benchmark(tmp_path):
    """A .jsonl of tools/bench/bench_memory.py: per-kind coefficients and b0 of the recipe's backend."""
    import json

    tiny = str(ROOT / "recipes" / "tiny-cpu.yaml")
    kinds = ("attention", "gdn", "moe", "shared_expert", "layer", "embedding", "head")
    net = {"weights": 1e8, "grads": 1e8, "optimizer": 2e8, "logits": 0.0}
    rows = [
        {
            "shape": "tiny",
            "overrides": [],
            "wall": wall,
            "actor": {
                **net,
                "activations": 7e3 * wall,
                "activations_by_kind": dict.fromkeys(kinds, 1e3 * wall),
            },
            "critic": {
                **net,
                "activations": 7e3 * wall,
                "activations_by_kind": dict.fromkeys(kinds, 1e3 * wall),
            },
            "rss_peak": 2 * 2**30,
            "rss_base": 5e8,
        }
        for wall in (1024, 2048)
    ]
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"bench": "memory", "rows": rows}) + "\n")
    out = tmp_path / "torch-cpu.json"
    res = run("calibrate", str(bench), "--recipe", tiny, "--holdout", "tiny@2048", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "activation bytes per value" in res.output and "held out (tiny@2048)" in res.output
    stored = json.loads(out.read_text())
    coefficients = set(stored["activation_bytes_per_value"])
    assert stored["backend"] == "torch" and coefficients == {*kinds, "attention_scores"}
    assert "--holdout tiny@2048" in stored["provenance"]["command"]
    assert run("calibrate", str(bench), "--recipe", tiny, "--holdout", "huge@1").exit_code == 2
