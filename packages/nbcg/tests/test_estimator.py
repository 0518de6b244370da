"""nbcg.NBCGClassifier: a scikit-learn estimator (clone, params, Pipeline + GridSearchCV on sparse
TF-IDF, pickle), the same code path as ``nbcg train``, and its ``loss``/``device`` options."""

import json
import pickle

import numpy as np
import pytest
from nbcg import NBCGClassifier
from sklearn.base import clone

from icml26_shared import UserError

FAST = dict(epochs=2, max_coalition=4, hidden=16, batch_size=32, sem_threshold=0.3)


def _texts(n=120, seed=0):
    rng = np.random.default_rng(seed)
    words = [f"w{i}" for i in range(30)]
    texts, Y = [], np.zeros((n, 4), int)
    for i in range(n):
        on = rng.random(4) < np.array([0.5, 0.4, 0.25, 0.15])
        Y[i] = on
        toks = list(rng.choice(words[8:], 6)) + [words[2 * j + int(rng.random() < 0.5)] for j in np.flatnonzero(on)]
        texts.append(" ".join(toks))
    return texts, Y


def test_clone_get_params_and_pickle(tmp_path):
    est = NBCGClassifier(method="nbcg-db", loss=None, random_state=3, **FAST)
    p = est.get_params()
    assert p["method"] == "nbcg-db" and p["random_state"] == 3 and p["device"] == "auto"
    c = clone(est)
    assert c.get_params() == p and c is not est
    c.set_params(loss="asl")
    assert c.loss == "asl" and est.loss is None
    X = np.random.default_rng(0).normal(size=(80, 5))
    Y = (X[:, :3] > 0.2).astype(int)
    est.set_params(device="cpu").fit(X, Y)
    assert {"model_", "coalitions_", "dag_", "threshold_", "history_"} <= set(vars(est))
    back = pickle.loads(pickle.dumps(est))
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))


def test_pipeline_and_gridsearch_on_sparse_tfidf():
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline

    texts, Y = _texts(80)
    pipe = Pipeline([("tfidf", TfidfVectorizer()), ("nbcg", NBCGClassifier(method="bce", device="cpu", **FAST))])
    gs = GridSearchCV(pipe, {"nbcg__loss": ["bce", "asl"]}, scoring="f1_macro", cv=2)
    gs.fit(texts, Y)
    assert gs.best_params_["nbcg__loss"] in ("bce", "asl") and np.isfinite(gs.best_score_)
    P = gs.predict(texts)
    assert P.shape == Y.shape and set(np.unique(P)) <= {0, 1}


def test_fit_uses_the_loss_it_is_given():
    X = np.random.default_rng(1).normal(size=(80, 5))
    Y = (X[:, :3] > 0.3).astype(int)
    a = NBCGClassifier(method="nbcg", loss="db", device="cpu", **FAST).fit(X, Y)
    b = NBCGClassifier(method="nbcg", loss="bce", device="cpu", **FAST).fit(X, Y)
    assert a.loss_ == "db" and b.loss_ == "bce" and a.arm_.loss == "db"
    assert np.abs(a.predict_proba(X) - b.predict_proba(X)).max() > 1e-3


def test_predictions_equal_nbcg_train(tmp_path, capsys):
    """``nbcg train`` fits through the estimator: the same data, split and seed → the same scores."""
    from nbcg.cli import main
    from nbcg.features import Featurizer
    from nbcg.pipeline import _matrix, load

    texts, Y = _texts(100)
    labels = ["a", "b", "c", "d"]
    recs = [{"id": str(i), "text": t, "labels": [labels[j] for j in np.flatnonzero(y)]}
            for i, (t, y) in enumerate(zip(texts, Y, strict=True))]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "m"
    assert main(["train", str(data), "--method", "nbcg-asl", "--epochs", "2", "--max-coalition", "4",
                 "--device", "cpu", "--out", str(out)]) == 0
    score, _ = load(out)
    perm = np.random.default_rng(0).permutation(len(recs))     # the CLI's carved dev split
    dev, tr = [recs[i] for i in perm[:20]], [recs[i] for i in sorted(perm[20:])]
    feat = Featurizer("tfidf", 5000).fit([r["text"] for r in tr])
    index = {x: i for i, x in enumerate(labels)}
    est = NBCGClassifier(method="nbcg-asl", max_coalition=4, epochs=2, device="cpu", random_state=0)
    est.fit_dev(feat.transform([r["text"] for r in tr]), _matrix(tr, index),
                feat.transform([r["text"] for r in dev]), _matrix(dev, index))
    np.testing.assert_allclose(score(texts), est.predict_proba(feat.transform(texts)), atol=1e-6)


def test_bad_inputs_and_cuda_without_a_gpu(tmp_path, capsys):
    import torch
    from nbcg.cli import main

    with pytest.raises(UserError, match="binary label-indicator"):
        NBCGClassifier().fit(np.zeros((20, 3)), np.full((20, 2), 2))
    with pytest.raises(UserError, match="auto, cpu, cuda"):
        NBCGClassifier(device="tpu").fit(np.zeros((20, 3)), np.eye(20, 2, dtype=int))
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible")
    data = tmp_path / "d.jsonl"
    data.write_text('{"id": "1", "text": "a b", "labels": ["x"]}\n')
    assert main(["train", str(data), "--device", "cuda", "--out", str(tmp_path / "m")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no CUDA device" in err[0] and not (tmp_path / "m").exists()


@pytest.mark.gpu
def test_one_epoch_on_cuda():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    X = np.random.default_rng(0).normal(size=(80, 5))
    Y = (X[:, :3] > 0.2).astype(int)
    est = NBCGClassifier(method="nbcg-bce", device="cuda", epochs=1, max_coalition=4).fit(X, Y)
    assert next(est.model_.parameters()).is_cuda and est.predict(X).shape == Y.shape
