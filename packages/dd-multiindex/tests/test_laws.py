"""Item 2 of issue 54: fits that match the law, on synthetic rows planted from a known law."""

import numpy as np
import pytest
from dd_multiindex.laws import (
    CEILING_FLAG,
    LOG_R,
    fit_d_laws,
    fit_floor_power,
    fit_loglinear,
    fit_r_slopes_per_d,
    law_fits,
    observations,
)

R = (1, 2, 4, 8)


def _rows(law, ds=(64,), rs=R, seeds=3, noise=0.03, ceiling=None, seed=0):
    """Sweep-like rows with m₁* = law(r, d)·exp(noise·ε); a value above ``ceiling`` becomes a
    ceiling row (m1_star None, flagged), as the sweep writes it."""
    rng = np.random.default_rng(seed)
    rows = []
    for d in ds:
        for r in rs:
            for k in range(seeds):
                m = float(law(r, d) * np.exp(noise * rng.standard_normal()))
                hit = ceiling is not None and m > ceiling
                rows.append(dict(d=d, r=r, seed=k, m1_star=None if hit else m, m1_ceiling=ceiling,
                                 flags=[CEILING_FLAG] if hit else []))
    return rows


def test_floor_power_fit_recovers_the_planted_exponent_where_the_pure_power_fit_does_not():
    obs = observations(_rows(lambda r, d: 30 + r ** 2))
    fp = fit_floor_power(obs, n_resamples=0)
    assert fp.params["p"] == pytest.approx(2.0, abs=0.3)
    assert fp.params["a"] == pytest.approx(30.0, rel=0.15)
    pure = fit_r_slopes_per_d(obs, n_resamples=0)[64].params["r"]
    assert pure < 1.2  # the separable power fit, misspecified by the floor, reads far less


def test_floor_power_bootstrap_ci_covers_the_planted_exponent():
    fp = fit_floor_power(observations(_rows(lambda r, d: 30 + r ** 2)), n_resamples=40)
    lo, hi = fp.ci90["p"]
    assert lo <= 2.0 <= hi and hi - lo < 1.5


def test_power_and_polylog_d_laws_are_both_fitted_and_the_planted_one_wins():
    ds = (16, 32, 64, 128, 256, 512, 1024)
    power = fit_d_laws(observations(_rows(lambda r, d: 3 * r * d ** 0.8, ds=ds)), n_resamples=0)
    assert set(power) == {"power_d", "polylog_d"}
    assert power["power_d"].params["d"] == pytest.approx(0.8, abs=0.1)
    assert power["power_d"].params["r"] == pytest.approx(1.0, abs=0.1)
    assert power["power_d"].aic < power["polylog_d"].aic
    poly = fit_d_laws(observations(_rows(lambda r, d: 2 * r * np.log(d) ** 2.5, ds=ds)), n_resamples=0)
    assert poly["polylog_d"].params["log_d"] == pytest.approx(2.5, abs=0.3)
    assert poly["polylog_d"].aic < poly["power_d"].aic


def test_ceiling_rows_are_counted_as_censored_not_dropped():
    rows = _rows(lambda r, d: 4 * r ** 2, ceiling=200.0)  # r = 8: 256 > 200, all three seeds
    obs = observations(rows)
    assert obs.n_censored == 3 and len(obs.value) == len(rows) and obs.n_missing == 0
    assert np.all(obs.value[obs.censored] == 200.0)
    lf = law_fits(rows, n_resamples=0)
    assert lf["n_censored"] == 3 and lf["n_observed"] == len(rows) - 3
    assert lf["r_slope"][64].n_censored == 3 and lf["floor_power"][64].n_censored == 3
    assert lf["d_law"] == {}  # one d: no d-law, and it says so by absence


def _three_ways(rows, fit):
    """The fit with ceiling rows censored, dropped, and read as if the ceiling were their value."""
    kept = [r for r in rows if r["m1_star"] is not None]
    capped = [dict(r, m1_star=r["m1_ceiling"], flags=[]) if r["m1_star"] is None else r for r in rows]
    return fit(observations(rows)), fit(observations(kept)), fit(observations(capped))


def test_censored_rows_pull_the_exponent_up_toward_the_planted_one():
    # noisy seeds, the ceiling at the top cell's median: about half of r = 8 is censored, so dropping
    # those rows keeps only the lucky (small) draws and biases the exponent down
    slope = lambda o: fit_loglinear(o, {"r": LOG_R}, "power_r", n_resamples=0).params["r"]  # noqa: E731
    runs = []
    for seed in range(4):
        rows = _rows(lambda r, d: 4 * r ** 2, seeds=20, noise=0.3, ceiling=256.0, seed=seed)
        assert 5 <= observations(rows).n_censored <= 15
        runs.append(_three_ways(rows, slope))
        assert max(runs[-1][1:]) < runs[-1][0]
    censored, dropped, _ = np.mean(runs, axis=0)
    assert censored == pytest.approx(2.0, abs=0.05) and abs(censored - 2.0) < abs(dropped - 2.0)

    p = lambda o: fit_floor_power(o, n_resamples=0).params["p"]  # noqa: E731
    censored, dropped, at_cap = _three_ways(_rows(lambda r, d: 30 + 4 * r ** 2, seeds=20, noise=0.3,
                                                  ceiling=286.0), p)
    assert max(dropped, at_cap) < censored and dropped < censored - 0.2
    assert censored == pytest.approx(2.0, abs=0.3)


def test_a_ceiling_row_without_a_known_ceiling_is_refused_and_others_are_counted():
    rows = [dict(d=32, r=1, m1_star=None, flags=[CEILING_FLAG]), dict(d=32, r=2, m1_star=None, flags=[])]
    with pytest.raises(ValueError, match="ceiling"):
        observations(rows)
    obs = observations(rows, ceiling=256)
    assert obs.n_censored == 1 and obs.n_missing == 1 and obs.value.tolist() == [256.0]


def _planted_run(path, spec):
    import json

    path.mkdir()
    (path / "spec.json").write_text(json.dumps(spec))
    rows = _rows(lambda r, d: 30 + 2 * r ** 2 * d / 32, ds=(32, 64), ceiling=120.0)
    for row in rows:
        row.update(L=256, stages="12")
        del row["m1_ceiling"]  # as in a run written before 0.1.3: the ceiling comes from spec.json
    (path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_cli_law_fits_count_the_ceiling_rows_from_the_run_spec(tmp_path, capsys):
    import json

    from dd_multiindex.cli import main

    rows = _planted_run(tmp_path / "run", {"search": {"m1_max": 120}})
    assert main(["fit-slopes", str(tmp_path / "run"), "--law", "--resamples", "5", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    n_cens = sum(r["m1_star"] is None for r in rows)
    assert n_cens >= 3 and out["n_censored"] == n_cens and out["n_observed"] == len(rows) - n_cens
    assert set(out["floor_power"]) == {"32", "64"} and set(out["d_law"]) == {"power_d", "polylog_d"}
    assert main(["fit-slopes", str(tmp_path / "run"), "--law", "--resamples", "0"]) == 0
    assert "censored at the ceiling" in capsys.readouterr().out


def test_cli_law_fits_refuse_a_ceiling_row_with_no_known_ceiling(tmp_path, capsys):
    _planted_run(tmp_path / "run", {})
    assert main_exit(["fit-slopes", str(tmp_path / "run"), "--law", "--resamples", "0"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "ceiling" in err and "Traceback" not in err


def main_exit(argv):
    from dd_multiindex.cli import main

    try:
        return main(argv)
    except SystemExit as exc:
        return exc.code


def test_a_diverged_floor_power_fit_is_a_value_error_not_an_overflow(monkeypatch):
    """An optimiser that runs off (log a = 800) raises ValueError, which the bootstrap skips and
    law_fits reports as an absent fit; it used to crash the quick run with OverflowError."""
    import numpy as np
    from dd_multiindex import laws

    obs = laws.Observations(np.array([1.0, 2.0, 4.0]), np.array([64.0] * 3), np.array([30.0, 34.0, 46.0]),
                            np.zeros(3, bool))
    monkeypatch.setattr(laws, "_mle", lambda mean, starts, o: (np.array([800.0, 0.0, 2.0]), -1.0))
    with pytest.raises(ValueError, match="diverged"):
        laws.fit_floor_power(obs, n_resamples=0)


def test_cli_law_fits_can_leave_out_the_rows_whose_reference_misses_the_target(tmp_path, capsys):
    import json

    from dd_multiindex.cli import main

    rows = _planted_run(tmp_path / "run", {"search": {"m1_max": 120}})
    for i, row in enumerate(rows):
        row["ref_meets_target"] = i % 3 != 0
    (tmp_path / "run" / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["fit-slopes", str(tmp_path / "run"), "--law", "--reference-met", "--resamples", "0", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    left_out = sum(not r["ref_meets_target"] for r in rows)
    assert out["n_reference_missed"] == left_out > 0
    assert out["n_observed"] + out["n_censored"] + out["n_missing"] == len(rows) - left_out
    assert main_exit(["fit-slopes", str(tmp_path / "run"), "--reference-met"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--law" in err
