"""train / predict / dag / coalitions / split: the user's path end to end, and its refusals."""

import json

import numpy as np
import pytest
from nbcg.cli import main
from nbcg.core import is_acyclic
from nbcg.pipeline import make_split, shift_partners


def _err(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("nbcg: error:"), err
    return err[0]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    d = tmp_path_factory.mktemp("pipe")
    assert main(["synth", "--n", "150", "--seed", "0", "--out", str(d / "train.jsonl")]) == 0
    assert main(["synth", "--n", "60", "--seed", "5", "--shift", "--out", str(d / "test.jsonl")]) == 0
    assert main(["train", str(d / "train.jsonl"), "--epochs", "2", "--out", str(d / "m")]) == 0
    return d


def test_train_predict_eval_roundtrip(trained, capsys):
    d = trained
    meta = json.loads((d / "m" / "meta.json").read_text())
    train_labels = sorted({x for line in (d / "train.jsonl").read_text().splitlines()
                           for x in json.loads(line)["labels"]})
    assert meta["labels"] == train_labels and meta["method"] == "nbcg"
    assert "TRAIN" in meta["threshold_chosen_on"]           # chosen on the carved dev split
    # the max coalition size was chosen on that dev split; the SEM threshold by BIC on TRAIN labels
    assert meta["chosen_on"] == {"sem_threshold": "BIC of the label SEM on TRAIN",
                                 "max_coalition": meta["threshold_chosen_on"],
                                 "loss": meta["threshold_chosen_on"],    # L* on dev too
                                 "threshold_mode": "2-fold cross-fitted dev macro-F1"}
    assert meta["decision"]["mode"] in ("global", "per-label", "top-k")
    assert set(meta["dev_labels_per_doc"]) == {"predicted", "gold"}
    assert meta["loss"] in ("bce", "asl", "db") and meta["masks"] is True
    grid = meta["tuning_grid"]
    assert len(grid) > 1
    best = max(grid, key=lambda g: g["dev_macro_f1"])
    assert (meta["sem_threshold"], meta["max_coalition"]) == (best["threshold"], best["max_coalition"])
    sem = meta["sem_grid"]
    assert len(sem) > 1 and meta["sem_threshold"] == min(sem, key=lambda g: g["bic"])["threshold"]
    assert len(meta["coalitions"]) > 1                      # the mechanism is on
    flat = sorted(j for c in meta["coalitions"] for j in c)
    assert flat == list(range(len(train_labels))) and max(map(len, meta["coalitions"])) <= meta["max_coalition"]
    assert main(["predict", str(d / "m"), str(d / "test.jsonl"), "--out", str(d / "p.jsonl")]) == 0
    preds = [json.loads(x) for x in (d / "p.jsonl").read_text().splitlines()]
    assert len(preds) == 60 and all(set(p) == {"id", "labels", "scores"} for p in preds)
    dec = meta["decision"]
    for p in preds:   # labels are exactly those the stored dev-chosen decision rule gives
        if dec["mode"] == "top-k":
            want = set(sorted(p["scores"], key=lambda k: -p["scores"][k])[:dec["k"]])
        else:
            thr = dict(zip(meta["labels"], dec["thresholds"], strict=True)) if dec["mode"] == "per-label" \
                else dict.fromkeys(meta["labels"], meta["threshold"])
            want = {k for k, s in p["scores"].items() if s >= thr[k] - 1e-6}
        assert set(p["labels"]) == want
    assert main(["predict", str(d / "m"), str(d / "test.jsonl"), "--top-k", "2",
                 "--out", str(d / "p2.jsonl")]) == 0
    for line in (d / "p2.jsonl").read_text().splitlines():
        p = json.loads(line)
        top = sorted(p["scores"], key=lambda k: -p["scores"][k])[:2]
        assert len(p["labels"]) == 2 and set(p["labels"]) == set(top)
    capsys.readouterr()
    assert main(["eval", str(d / "p.jsonl"), str(d / "test.jsonl"), "--train", str(d / "train.jsonl"),
                 "--json"]) == 0
    by_file = json.loads(capsys.readouterr().out)
    assert 0 <= by_file["micro_f1"] <= 1
    # the model's stored counts (80% of TRAIN) instead of --train: at this seed every label is in
    # the carved 80%, so the label set and micro-F1 are the same
    assert main(["eval", str(d / "p.jsonl"), str(d / "test.jsonl"), "--model", str(d / "m"), "--json"]) == 0
    by_model = json.loads(capsys.readouterr().out)
    assert by_model["micro_f1"] == pytest.approx(by_file["micro_f1"])
    assert main(["eval", str(d / "p.jsonl"), str(d / "test.jsonl"), "--json"]) == 2
    assert "exactly one" in _err(capsys)


def test_dag_export_is_acyclic_over_training_labels(trained, capsys):
    capsys.readouterr()
    assert main(["dag", str(trained / "m"), "--export", "json"]) == 0
    g = json.loads(capsys.readouterr().out)
    meta = json.loads((trained / "m" / "meta.json").read_text())
    assert g["labels"] == meta["labels"]
    idx = {x: i for i, x in enumerate(g["labels"])}
    B = np.zeros((len(idx), len(idx)), bool)
    for p, c, w in g["edges"]:
        B[idx[p], idx[c]] = True
        assert abs(w) > meta["sem_threshold"]                   # the dev-chosen SEM threshold
    assert B.any() and is_acyclic(B)
    assert main(["dag", str(trained / "m"), "--export", "dot"]) == 0
    assert capsys.readouterr().out.startswith("digraph")
    assert main(["coalitions", str(trained / "m")]) == 0
    assert capsys.readouterr().out.count("coalition ") == len(meta["causal_coalitions"])


def test_refusals_write_nothing(trained, tmp_path, capsys):
    d = trained
    keep = tmp_path / "keep"
    keep.mkdir()
    before = sorted(p.name for p in d.iterdir())
    assert main(["train", str(d / "train.jsonl"), "--out", str(d / "m")]) == 2   # existing --out
    assert "already exists" in _err(capsys)
    assert main(["train", str(d / "train.jsonl"), "--model", str(keep), "--out", str(tmp_path / "x")]) == 2
    assert "no config.json" in _err(capsys)
    assert main(["train", str(d / "train.jsonl"), "--method", "nope", "--out", str(tmp_path / "x")]) == 2
    _err(capsys)
    assert main(["predict", str(keep), str(d / "test.jsonl"), "--out", str(tmp_path / "y.jsonl")]) == 2
    assert "not an nbcg model" in _err(capsys)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "meta.json").write_text("{corrupt")
    assert main(["predict", str(bad), str(d / "test.jsonl"), "--out", str(tmp_path / "y.jsonl")]) == 2
    assert "corrupt" in _err(capsys)
    assert main(["predict", str(d / "m"), str(d / "test.jsonl"), "--threshold", "nan",
                 "--out", str(tmp_path / "y.jsonl")]) == 2
    _err(capsys)
    assert main(["predict", str(d / "m"), str(d / "test.jsonl"), "--out", str(d / "train.jsonl")]) == 2
    assert "already exists" in _err(capsys)
    assert main(["split", str(d / "train.jsonl"), "--kind", "shift", "--out", str(keep)]) == 2
    _err(capsys)
    assert sorted(p.name for p in d.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad", "keep"]


def _recs():
    rng = np.random.default_rng(0)
    recs = []
    for i in range(400):   # head h0..h3 frequent; tail t0, t1 tied to h0 / h1 (90%)
        labs = [f"h{j}" for j in range(4) if rng.random() < 0.4]
        for t, h in (("t0", "h0"), ("t1", "h1")):
            if rng.random() < 0.06:
                labs.append(t)
                if rng.random() < 0.9 and h not in labs:
                    labs.append(h)
        labs += [f"m{j}" for j in range(3) if rng.random() < 0.15]
        recs.append({"id": str(i), "text": "w" * (i % 7 + 1), "labels": labs})
    return recs


def test_shift_split_breaks_the_tie_and_is_deterministic():
    recs = _recs()
    partners = shift_partners(recs)
    assert partners["t0"] == "h0" and partners["t1"] == "h1"    # highest-PMI head partner
    parts, info = make_split(recs, "shift", seed=3)
    again, _ = make_split(recs, "shift", seed=3)
    assert parts == again
    assert parts["test_shift"]
    for r in parts["test_shift"]:       # each carries a tail label without its partner
        assert any(t in r["labels"] and h not in r["labels"] for t, h in partners.items())
    for k in ("train", "dev", "test"):  # and no IID document does
        for r in parts[k]:
            assert not any(t in r["labels"] and h not in r["labels"] for t, h in partners.items())
    ids = [r["id"] for v in parts.values() for r in v]
    assert sorted(ids) == sorted(r["id"] for r in recs)         # a partition of the documents
    iid, _ = make_split(recs, "iid", seed=3)
    assert "test_shift" not in iid and sum(map(len, iid.values())) == len(recs)


def test_cli_methods_are_the_trainer_arms():
    from nbcg.baselines import ARMS
    from nbcg.cli import METHODS

    assert set(METHODS) == set(ARMS)


def test_db_loss_rebalances_towards_rare_and_tolerates_negatives():
    import torch
    from nbcg.baselines import LOSSES, bce

    counts = torch.tensor([1000.0, 10.0])
    y = torch.tensor([[1.0, 1.0]])                   # an instance with a head and a rare label
    db = LOSSES["db"](torch.zeros(1, 2), y, counts)
    assert db[0, 1] > db[0, 0] * 3.0                 # the rare label's positive weighs more
    # negative-tolerant (λ = 5): an already-low negative logit costs almost nothing, unlike BCE
    zn = torch.tensor([[0.0, -1.0]])
    yn = torch.tensor([[1.0, 0.0]])
    assert LOSSES["db"](zn, yn, counts)[0, 1] < 0.2 * bce(zn, yn, counts)[0, 1]


def test_label_aware_resampling_balances_labels():
    from nbcg.baselines import ARMS, label_aware_weights

    Y = np.zeros((110, 2))
    Y[:100, 0] = 1          # a head label on 100 documents, a tail label on 10
    Y[100:, 1] = 1
    p = label_aware_weights(Y)
    assert p.sum() == pytest.approx(1.0)
    assert p[Y[:, 0] > 0].sum() == pytest.approx(0.5) and p[Y[:, 1] > 0].sum() == pytest.approx(0.5)
    assert ARMS["resample"].sampling == "label-aware" and ARMS["bce"].sampling == "uniform"


def test_resample_arm_draws_rare_documents_more_often(monkeypatch):
    import torch
    from nbcg import train as tr
    from nbcg.baselines import ARMS
    from nbcg.config import NBCGConfig

    drawn = []
    real = torch.multinomial

    def spy(*a, **k):
        out = real(*a, **k)
        drawn.append(out)
        return out

    monkeypatch.setattr(torch, "multinomial", spy)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 5)).astype(np.float32)
    Y = np.zeros((200, 2), np.float32)
    Y[:180, 0] = 1
    Y[180:, 1] = 1
    tr.train(X, Y, [[0, 1]], ARMS["resample"], NBCGConfig(epochs=2, batch_size=50), seed=0)
    idx = torch.cat(drawn).numpy()
    assert len(drawn) == 2 and (idx >= 180).mean() > 0.3     # tail docs are 10% of the data
