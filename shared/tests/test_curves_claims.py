"""Learning curves and their flags, claims apart from checks, early stopping."""

import json
import math

import pytest

from icml26_shared import Claim, ClaimCheck, Results
from icml26_shared.report import claim_counts, curve_rows, markdown_for
from icml26_shared.results import Curve
from icml26_shared.train import EarlyStopping

CLAIM = Claim("c", "method beats baseline", "acc", "higher")
CHECK = Claim("k", "codes take 4 bytes", "bytes", "lower", kind="check")


def test_curve_peaking_in_its_last_tenth_is_still_improving():
    steps = list(range(1, 101))
    c = Curve("e", "m", "hr", steps, [s / 100 for s in steps])
    assert c.flags() == ["still improving"]
    plateau = [min(s, 50) / 100 for s in steps]  # best reached at 50 and held: not improving
    assert Curve("e", "m", "hr", steps, plateau).flags() == []


def test_curve_direction_and_budget():
    loss = Curve("e", "m", "loss", [1, 2, 3, 4], [4.0, 3.0, 2.0, 1.0], direction="lower")
    assert loss.flags() == ["still improving"]
    # the best point at step 4 of a budget of 100 is not in the last tenth
    assert Curve("e", "m", "loss", [1, 2, 3, 4], [4, 3, 2, 1], direction="lower",
                 budget=100).flags() == []


def test_curve_stopped_at_a_fifth_of_its_budget_is_flagged():
    c = Curve("e", "m", "hr", [1, 2, 3, 4, 5, 6, 7, 8], [0.1, 0.3, 0.2, 0.2, 0.2, 0.1, 0.1, 0.1],
              budget=40, stopped_at=8)
    assert c.flags() == ["stopped early"]
    late = Curve("e", "m", "hr", [1, 2, 3, 4, 5], [0.1, 0.2, 0.3, 0.2, 0.2], budget=10,
                 stopped_at=5)
    assert late.flags() == []
    # stopped at 6 of 15 but judged on epoch 2: the transient dip a patience of 4 leaves unseen
    dip = Curve("e", "m", "hr", [1, 2, 3, 4, 5, 6], [0.07, 0.077, 0.075, 0.074, 0.072, 0.072],
                budget=15, stopped_at=6)
    assert dip.flags() == ["stopped early"]


def test_curves_round_trip_with_nan_and_old_files_load(tmp_path):
    res = Results("p", "0.1.0", "quick", 0)
    res.add("e", "m", "acc", 0.5)
    res.add_curve("e", "m", "acc", [1, 2, 3], [0.1, math.nan, 0.3], "dev", 0, budget=3)
    path = res.to_json(tmp_path / "results.json")
    assert "NaN" not in path.read_text()
    back = Results.from_json(path)
    back.validate()
    assert math.isnan(back.curves[0].values[1]) and back.curves[0].budget == 3
    old = json.loads(path.read_text())
    old["schema_version"] = 1
    del old["curves"]
    for c in old["claims"]:
        c.pop("kind", None)
        c.pop("evaluated", None)
    old_res = Results.from_dict(old)
    old_res.validate()
    assert old_res.curves == [] and old_res.schema_version == 2
    with pytest.raises(ValueError, match="2 values"):
        res.add_curve("e", "m", "acc", [1, 2, 3], [0.1, 0.2])


def test_check_never_enters_the_held_count():
    res = Results("p", "0.1.0", "quick", 0)
    res.add("e", "m", "acc", 0.9)
    res.claims += [ClaimCheck.compare(CLAIM, 0.5, 0.6, "base"),
                   ClaimCheck.compare(CHECK, 4.0, threshold=4.0)]
    assert res.claims[1].kind == "check" and res.claims[1].held is True
    assert claim_counts(res) == (0, 1, 0)
    md = markdown_for(res)
    assert md.index("codes take 4 bytes") > md.index("Checks")


def test_a_claim_with_several_rows_holds_only_when_every_row_holds():
    res = Results("p", "0.1.0", "quick", 0)
    res.add("e", "m", "acc", 0.9)
    res.claims += [ClaimCheck.compare(CLAIM, 0.9, 0.5, "random"),
                   ClaimCheck.compare(CLAIM, 0.5, 0.6, "matched")]
    assert claim_counts(res) == (0, 1, 0)
    res.claims[1] = ClaimCheck.compare(CLAIM, 0.7, 0.6, "matched")
    assert claim_counts(res) == (1, 0, 0)
    res.claims[1].mark_not_evaluated("too few units")
    assert claim_counts(res) == (0, 0, 1)


def test_not_evaluated_withdraws_the_verdict_and_nan_intervals_give_none():
    ck = ClaimCheck.compare(CLAIM, 0.9, 0.5, "base")
    assert ck.status == "held"
    ck.mark_not_evaluated("not evaluated at smoke scale")
    assert ck.held is None and ck.status == "not evaluated" and ck.ours == 0.9
    nan_iv = ClaimCheck.compare(CLAIM, 0.9, 0.5, "base", interval=(math.nan, math.nan))
    assert nan_iv.status == "not evaluated" and "fewer than 3" in nan_iv.note

    class Iv:  # anything with low / high, e.g. eval.PairedInterval
        low, high = 0.1, 0.3

    assert ClaimCheck.compare(CLAIM, 0.9, 0.5, "base", interval=Iv()).interval == [0.1, 0.3]
    res = Results("p", "0.1.0", "quick", 0, claims=[ck])
    res.add("e", "m", "acc", 0.9)
    assert claim_counts(res) == (0, 0, 1)


def test_curve_rows_name_budget_best_and_flags():
    res = Results("p", "0.1.0", "quick", 0)
    res.add_curve("e", "m", "hr", [1, 2, 3], [0.1, 0.3, 0.2], budget=20, stopped_at=3)
    assert curve_rows(res) == [("e", "m", "hr", "dev", "", "20", "2", "3", "stopped early")]


def test_early_stopping_max_min_and_state():
    es = EarlyStopping(patience=2, mode="max")
    assert [es.step(v) for v in (0.1, 0.3, 0.2, 0.25)] == [False, False, False, True]
    assert es.best == 0.3 and es.best_at == 2 and es.stopped_at == 4
    es2 = EarlyStopping(patience=2, mode="min", min_delta=0.1)
    assert not es2.step(1.0, at=10) and es2.improved
    assert not es2.step(0.95, at=20) and not es2.improved  # within min_delta: no improvement
    assert es2.step(0.5, at=30) is False and es2.best == 0.5
    state = es2.state_dict()
    es3 = EarlyStopping()
    es3.load_state_dict(json.loads(json.dumps(state)))
    assert es3.state_dict() == state
    assert not EarlyStopping(patience=1).is_better(math.nan)
    warm = EarlyStopping(patience=1, min_steps=5)
    assert [warm.step(v) for v in (1, 0, 0, 0, 0)] == [False, False, False, False, True]
    with pytest.raises(ValueError):
        EarlyStopping(mode="up")
