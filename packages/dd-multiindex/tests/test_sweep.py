"""The sweep: seeds from the cell, not the schedule; resume after a kill; workers; refusals."""

from __future__ import annotations

import json

import pytest
from dd_multiindex.config import DistillConfig, SearchConfig, SweepSpec
from dd_multiindex.io import read_rows
from dd_multiindex.runs import parse_grid, sweep
from dd_multiindex.sweep import run_cell

from icml26_shared import UserError

TINY = SweepSpec(cells=((8, 1, 32, "12"), (8, 2, 32, "2")), seeds=2, tune_lr=False,
                 distill=DistillConfig(steps=30, lr=0.1, n_inits=1),
                 search=SearchConfig(m1_max=16, n_val=128, n_test=128, real_max_factor=16))


def _key(rows):
    return [json.dumps(r, sort_keys=True) for r in sorted(rows, key=lambda r: (r["d"], r["r"], r["L"], r["seed"]))]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run = tmp_path_factory.mktemp("a") / "run"
    return run, sweep(TINY, run)


def test_rows_have_the_pinned_columns(uninterrupted):
    _, rows = uninterrupted
    assert len(rows) == 4
    need = {"d", "r", "L", "seed", "m1_star", "m2_star", "memory", "test_mse", "alignment", "n_real_star",
            "random_test_mse", "herding_test_mse", "kcenter_test_mse", "test_mse_0step", "flags"}
    full = [r for r in rows if r["stages"] == "12"]
    assert all(need <= set(r) for r in full)
    assert all(r["m1_star"] is None for r in rows if r["stages"] == "2")
    for r in full:  # a search that ends at its floor or ceiling says so
        assert (r["m1_star"] is None) == ("m1:ceiling" in r["flags"])
    done = [r for r in full if r["memory"] is not None]
    assert done, "no tiny cell completed: the final-set path went untested"
    for r in done:
        assert r["memory"] == r["m1_star"] * (r["d"] + 1) + r["m2_star"] + 1
        assert r["baseline_points"] == r["memory"] // (r["d"] + 1)
        assert r["test_mse_owninit"] is not None and 0 <= r["alignment_owninit"] <= 1  # the own-init ablation
        for name in ("random", "herding", "kcenter"):  # tuned with a ridge that reaches the constant predictor
            assert r[f"{name}_test_mse"] <= 1.25 * r["zero_test_mse"], (name, r)
        assert r["target_mse"] > 0 and r["n_real_ceiling"] == 16 * r["d"] ** 2


def test_a_killed_sweep_resumes_to_the_same_rows(uninterrupted, tmp_path):
    run_a, rows_a = uninterrupted
    run_b = tmp_path / "run"
    run_b.mkdir()
    (run_b / "spec.json").write_text((run_a / "spec.json").read_text())
    lines = (run_a / "rows.jsonl").read_text().splitlines(keepends=True)
    (run_b / "rows.jsonl").write_text(lines[0] + lines[1][: len(lines[1]) // 2])  # torn last line
    assert len(read_rows(run_b)) == 1
    rows_b = sweep(TINY, run_b)
    assert _key(rows_b) == _key(rows_a)
    assert len((run_b / "rows.jsonl").read_text().splitlines()) == 4


def test_two_workers_equal_one(uninterrupted, tmp_path):
    _, rows_a = uninterrupted
    assert _key(sweep(TINY, tmp_path / "run", workers=2)) == _key(rows_a)


def test_a_cell_seed_does_not_depend_on_what_ran_before(uninterrupted):
    _, rows = uninterrupted
    alone = run_cell(TINY, 8, 2, 32, "2", 1, 0.1)
    assert json.dumps(alone, sort_keys=True) in _key(rows)


def test_another_spec_into_the_run_is_refused_and_nothing_changes(uninterrupted):
    run, _ = uninterrupted
    before = {p.name: p.read_bytes() for p in run.iterdir()}
    other = SweepSpec(cells=TINY.cells, seeds=3, tune_lr=False, distill=TINY.distill, search=TINY.search)
    with pytest.raises(UserError, match="another sweep"):
        sweep(other, run)
    assert {p.name: p.read_bytes() for p in run.iterdir()} == before


@pytest.mark.parametrize("grid, match", [
    ("d=8;r=9;L=4", "r <= d"), ("d=8;r=1;L=0", "L >= 1"), ("d=8;r=1", "give all"),
    ("d=8,x;r=1;L=4", "integers"), ("banana", "malformed"),
])
def test_bad_grids_are_refused(grid, match):
    with pytest.raises(UserError, match=match):
        parse_grid(grid)


def test_named_grids_match_the_issue():
    quick = parse_grid("quick")
    stage1 = {(d, r) for d, r, L, s in quick if s == "12"}
    assert stage1 == {(d, r) for d in (32, 64, 128) for r in (1, 2, 3, 4)}
    assert {L for d, r, L, s in quick if r == 2} == {64, 256, 1024}
    assert {(d, r) for d, r, _, _ in parse_grid("smoke")} == {(d, r) for d in (16, 32) for r in (1, 2)}
