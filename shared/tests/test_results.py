import json
import math

import pytest

from icml26_shared import Claim, ClaimCheck, Results, mean_spread


def _results():
    res = Results(package="demo", version="0.1.0", scale="smoke", seed=0)
    res.add("exp", "ours", "acc", [0.5, 0.7, 0.6], seeds=[0, 1, 2])
    res.add("exp", "base", "acc", 0.4)
    return res


def test_mean_spread_is_mean_and_sample_std():
    m, s = mean_spread([1.0, 2.0, 3.0])
    assert m == 2.0 and s == pytest.approx(1.0)
    assert mean_spread(5.0) == (5.0, None)
    assert mean_spread([4.0]) == (4.0, None)
    with pytest.raises(ValueError):
        mean_spread([])


def test_json_round_trip(tmp_path):
    res = _results()
    res.claims.append(ClaimCheck.compare(Claim("c", "ours beats base", "acc"), 0.6, 0.4, "base"))
    path = res.to_json(tmp_path / "r" / "results.json")
    back = Results.from_json(path)
    back.validate()
    assert back.to_dict() == json.loads(path.read_text())
    assert back.get("exp", "ours", "acc").spread == pytest.approx(0.1)


def test_nan_is_written_as_null(tmp_path):
    res = _results()
    res.add("exp", "x", "m", float("nan"))
    path = res.to_json(tmp_path / "r.json")
    data = json.loads(path.read_text())
    assert data["rows"][-1]["value"] is None
    back = Results.from_json(path)
    back.validate()
    assert math.isnan(back.rows[-1].value)
    assert back.to_dict() == data


@pytest.mark.parametrize("direction,ours,base,margin,held", [
    ("higher", 0.6, 0.5, 0.0, True), ("higher", 0.6, 0.5, 0.2, False),
    ("lower", 1.0, 2.0, 0.0, True), ("lower", 3.0, 2.0, 0.0, False),
])
def test_claim_check_direction(direction, ours, base, margin, held):
    c = Claim("c", "d", "m", direction=direction)
    assert ClaimCheck.compare(c, ours, base, "b", margin=margin).held is held


def test_claim_check_threshold_and_missing():
    c = Claim("c", "d", "ratio", direction="lower")
    assert ClaimCheck.compare(c, 0.4, threshold=0.5).held is True
    assert ClaimCheck.compare(c, 0.6, threshold=0.5).held is False
    assert ClaimCheck.compare(c, None, 1.0).held is None
    assert ClaimCheck.compare(c, math.nan, 1.0).held is None


def test_validate_rejects_bad_results():
    with pytest.raises(ValueError, match="scale"):
        Results(package="d", version="0", scale="huge", seed=0, rows=_results().rows).validate()
    with pytest.raises(ValueError, match="at least one row"):
        Results(package="d", version="0", scale="smoke", seed=0).validate()
