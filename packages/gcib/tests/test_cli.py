"""CLI: train → eval / recommend / denoise-report on a tiny log; every refusal is one line, exit 2,
nothing written."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from gcib.cli import main
from gcib.data import synthetic
from gcib.io import write_interactions

FAST = ["--epochs", "2", "--dim", "8", "--layers", "1", "--quiet"]


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    d = tmp_path_factory.mktemp("log")
    write_interactions(d / "log.csv", synthetic(60, 110, n_buy=5, n_cart=8, n_view=14, noise_rate=0.0, seed=0))
    return d / "log.csv"


@pytest.fixture(scope="module")
def noisy(log, tmp_path_factory):
    d = tmp_path_factory.mktemp("noisy")
    assert main(["noise", str(log), "--rate", "1", "--target", "buy", "--out", str(d / "n.csv"),
                 "--labels", str(d / "labels.csv")]) == 0
    return d / "n.csv", d / "labels.csv"


@pytest.fixture(scope="module")
def run(noisy, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "gcib"
    assert main(["train", str(noisy[0]), "--target", "buy", *FAST, "--out", str(out)]) == 0
    return out


def _last_json(capsys):
    out = capsys.readouterr().out
    return json.loads(out.strip().splitlines()[-1])


def test_noise_writes_labels_that_match(log, noisy):
    clean, (n, labels) = pd.read_csv(log), (pd.read_csv(noisy[0]), pd.read_csv(noisy[1]))
    assert len(n) - len(clean) == labels["is_noise"].sum() == (clean["behaviour"] != "buy").sum()
    assert set(labels["behaviour"]) == {"view", "cart"}


def test_train_eval_recommend_denoise(run, noisy, tmp_path, capsys):
    capsys.readouterr()
    assert main(["eval", str(run), "--json"]) == 0
    out = _last_json(capsys)
    assert {"hr", "ndcg", "keep_rate"} <= out.keys() and 0 <= out["hr"] <= 1
    assert main(["eval", str(run), "--protocol", "sampled99", "--k", "20", "--json"]) == 0
    s99 = _last_json(capsys)
    assert s99["hr"] >= 0 and s99["protocol"] == "sampled99"
    rec = tmp_path / "rec.csv"
    assert main(["recommend", str(run), "--all", "--k", "5", "--out", str(rec)]) == 0
    r = pd.read_csv(rec, dtype=str)
    assert list(r.columns) == ["user", "item", "rank", "score"] and len(r) == 60 * 5
    from gcib.io import load_run

    _, split, _ = load_run(run)
    d = split.data
    train_buy = {(d.user_ids[u], d.item_ids[i]) for u, i in zip(*split.train["buy"], strict=True)}
    assert not train_buy & set(zip(r.user, r.item))  # training positives are never recommended
    assert (r.groupby("user")["rank"].apply(lambda x: sorted(x.astype(int)) == [1, 2, 3, 4, 5])).all()
    assert main(["denoise-report", str(run), "--noise-labels", str(noisy[1]), "--json"]) == 0
    rep = _last_json(capsys)
    assert set(rep) == {"view", "cart"} and {"auroc", "noise_removed", "real_kept"} <= rep["view"].keys()
    assert rep["view"]["n_noise"] > 0


def _refused(capsys, args, match, tmp_path):
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gcib: error:") and match in err[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # nothing written


def test_refusals(log, run, tmp_path, capsys):
    out = str(tmp_path / "out")
    bad = tmp_path / "bad.csv"
    bad.write_text("user,item\na,b\n")
    _refused(capsys, ["train", str(bad), "--target", "buy", "--out", out], "missing column", tmp_path)
    _refused(capsys, ["train", str(log), "--target", "purchase", "--out", out], "unknown target", tmp_path)
    ts = tmp_path / "ts.csv"
    ts.write_text("user,item,behaviour,timestamp\na,b,buy,1\na,c,view,noon\n")
    _refused(capsys, ["train", str(ts), "--target", "buy", "--out", out], "line 3", tmp_path)
    ragged = tmp_path / "ragged.csv"
    ragged.write_text("user,item,behaviour,timestamp\na,b,buy,1\na,c\n")
    _refused(capsys, ["train", str(ragged), "--target", "buy", "--out", out],
             "line 3: missing field(s) behaviour, timestamp", tmp_path)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    _refused(capsys, ["train", str(empty), "--target", "buy", "--out", out], "empty", tmp_path)
    _refused(capsys, ["train", str(tmp_path / "nope.csv"), "--target", "buy", "--out", out], "no such file", tmp_path)
    _refused(capsys, ["train", str(log), "--target", "buy", "--gib-weight", "nan", "--out", out], "finite", tmp_path)
    _refused(capsys, ["train", str(log), "--target", "buy", "--epochs", "0", "--out", out], ">= 1", tmp_path)
    _refused(capsys, ["train", str(log), "--target", "buy", "--method", "magic", "--out", out], "invalid choice", tmp_path)
    _refused(capsys, ["train", str(log), "--target", "buy", "--out", str(run)], "already exists", tmp_path)
    _refused(capsys, ["noise", str(log), "--rate", "-1", "--target", "buy", "--out", out,
                      "--labels", str(tmp_path / "l.csv")], ">= 0", tmp_path)
    _refused(capsys, ["noise", str(log), "--rate", "1", "--behaviours", "buy,click", "--target", "buy",
                      "--out", out, "--labels", str(tmp_path / "l.csv")], "behaviour", tmp_path)
    _refused(capsys, ["eval", str(tmp_path)], "not a gcib run folder", tmp_path)
    users = tmp_path / "users.txt"
    users.write_text("ghost\n")
    _refused(capsys, ["recommend", str(run), "--users", str(users), "--out", out], "unknown user", tmp_path)
    keep = tmp_path / "keep.csv"
    keep.write_text("mine")
    _refused(capsys, ["recommend", str(run), "--all", "--out", str(keep)], "already exists", tmp_path)
    assert keep.read_text() == "mine"
    _refused(capsys, ["synth", "--items", "10", "--out", out], "free pairs", tmp_path)


def test_full_scale_fails_fast_without_its_needs(tmp_path, monkeypatch):
    import torch
    from gcib.experiments import reproduce

    from icml26_shared import UserError

    monkeypatch.delenv("GCIB_DATASETS", raising=False)
    with pytest.raises(UserError, match="CUDA" if not torch.cuda.is_available() else "GCIB_DATASETS"):
        reproduce("full", tmp_path, 0)
    assert not any(tmp_path.iterdir())


def test_a_log_without_timestamps_splits_like_row_ordered_timestamps(log, tmp_path):
    from gcib.data import leave_one_out
    from gcib.io import read_interactions

    df = pd.read_csv(log, dtype=str).sample(frac=1.0, random_state=0)  # a file order unlike time
    df.drop(columns="timestamp").to_csv(tmp_path / "no_ts.csv", index=False)
    df.assign(timestamp=range(len(df))).to_csv(tmp_path / "row_ts.csv", index=False)
    a = leave_one_out(read_interactions(tmp_path / "no_ts.csv", "buy"))
    b = leave_one_out(read_interactions(tmp_path / "row_ts.csv", "buy"))
    for x, y in ((a.valid, b.valid), (a.test, b.test), (a.train["buy"], b.train["buy"])):
        assert all(np.array_equal(p, q) for p, q in zip(x, y, strict=True))


def test_training_knobs_land_in_config_json_and_sampled99_refuses_a_small_catalogue(tmp_path, capsys):
    small = tmp_path / "small.csv"
    write_interactions(small, synthetic(40, 80, n_buy=5, n_cart=8, n_view=14, noise_rate=0.0, seed=0))
    out = tmp_path / "run"
    knobs = {"--lr": "0.003", "--batch-size": "256", "--patience": "7", "--reg": "0.001", "--mask-temp": "0.7",
             "--cl-temp": "0.3", "--scorer-init": "0", "--threads": "1"}
    assert main(["train", str(small), "--target", "buy", *FAST, *[x for kv in knobs.items() for x in kv],
                 "--out", str(out)]) == 0
    cfg = json.loads((out / "config.json").read_text())["config"]
    assert (cfg["lr"], cfg["batch_size"], cfg["patience"], cfg["reg"], cfg["mask_temp"], cfg["cl_temp"],
            cfg["scorer_init"]) == (0.003, 256, 7, 0.001, 0.7, 0.3, 0.0)
    capsys.readouterr()
    _refused(capsys, ["eval", str(out), "--protocol", "sampled99"], "sampled99 needs at least 100 items", tmp_path)


def test_tune_picks_a_grid_point_per_method_on_valid(log, tmp_path, capsys):
    out = tmp_path / "tune.json"
    assert main(["tune", str(log), "--target", "buy", "--methods", "lightgcn,cosine-prior", "--lr", "0.01", "0.001",
                 "--batch-size", "256", "--epochs", "2", "--patience", "2", "--dim", "8", "--layers", "1",
                 "--quiet", "--out", str(out)]) == 0
    t = json.loads(out.read_text())
    assert len(t["rows"]) == 4 and set(t["chosen"]) == {"lightgcn", "cosine-prior"}
    assert t["seeds"] == [100]  # disjoint from the reported seeds 0, 1, 2
    for m, c in t["chosen"].items():
        rows = [r for r in t["rows"] if r["method"] == m]
        assert c["valid_hr10"] == max(r["valid_hr10"] for r in rows)


def test_train_all_holds_nothing_out_and_eval_refuses_it(log, tmp_path, capsys):
    from gcib.io import load_run

    out = tmp_path / "all"
    assert main(["train", str(log), "--target", "buy", "--all", *FAST, "--out", str(out)]) == 0
    from gcib.io import read_interactions

    _, split, meta = load_run(out)
    assert len(split.test[0]) == len(split.valid[0]) == 0
    full = read_interactions(log, "buy").counts()
    assert {b: len(u) for b, (u, _) in split.train.items()} == full  # every edge trains
    assert meta["best_epoch"] == 2  # the whole budget, no selection
    capsys.readouterr()
    _refused(capsys, ["eval", str(out)], "trained with --all", tmp_path)
    assert main(["recommend", str(out), "--all", "--k", "3", "--out", str(tmp_path / "r.csv")]) == 0
