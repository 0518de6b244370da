"""`python -m crossq.tuning --summarize`: the dev choice read back from sweeps' curves (no training)."""

from __future__ import annotations

from crossq.tuning import main, summarize

from icml26_shared import Results

EXP = "tuning at 4 B/token (seed 0, dev)"


def _sweep(runs: dict[tuple[str, int, float], list[float]]) -> Results:
    res = Results(package="crossq", version="0", scale="smoke", seed=0)
    for (method, steps, lr), mrr in runs.items():
        pts = [steps * i // (len(mrr) - 1) for i in range(len(mrr))]
        name = f"{method} steps={steps} lr={lr:g} qps=4"
        for metric in ("dev mrr@10", "dev listwise KL", "code flip rate"):
            res.add_curve(EXP, name, metric, pts, mrr if metric == "dev mrr@10" else [0.1] * len(mrr), "dev")
        res.add_curve(EXP, name, "train loss", pts[1:], [0.3] * (len(mrr) - 1), "train")
    return res


def test_summary_chooses_on_the_grid_every_method_ran():
    a = _sweep({("crossq", 300, 1e-4): [0.50, 0.53, 0.51], ("tokenwise", 300, 1e-4): [0.50, 0.49, 0.52]})
    b = _sweep({("crossq", 3000, 1e-4): [0.50, 0.51, 0.52], ("tokenwise", 3000, 1e-4): [0.50, 0.55, 0.48],
                ("crossq", 1000, 1e-4): [0.50, 0.90]})  # only crossq ran 1000: outside the grid
    table = summarize([a, b]).splitlines()
    assert "| crossq | 1000 | 0.0001 | 4 | 1000 | 0.9000 | 0.1000 | 0.1000 | 0.3000 |" in table
    assert any("[(300, 0.0001, 4), (3000, 0.0001, 4)]" in line for line in table)
    assert ("| crossq | 0.5000 | 0.5200 (steps 3000, lr 0.0001; +0.0200) | "
            "0.5300 (step 150 of 300, lr 0.0001; +0.0300) |") in table
    assert ("| tokenwise | 0.5000 | 0.5200 (steps 300, lr 0.0001; +0.0200) | "
            "0.5500 (step 1500 of 3000, lr 0.0001; +0.0500) |") in table


def test_summarize_refuses_a_file_that_is_not_a_sweep(tmp_path, capsys):
    (tmp_path / "x.json").write_text("{not json")
    assert main(["--summarize", str(tmp_path / "x.json")]) == 2
    assert "not a readable results.json" in capsys.readouterr().err
    Results(package="crossq", version="0", scale="smoke", seed=0).to_json(tmp_path / "empty.json")
    assert main(["--summarize", str(tmp_path / "empty.json")]) == 2
    assert "no tuning curves" in capsys.readouterr().err
    assert main([]) == 2  # neither --out nor --summarize
    assert "--out is required" in capsys.readouterr().err
