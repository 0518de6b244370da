"""The trainer: the learned mask separates injected noise (and would not with its sign flipped),
random pruning keeps the asked rate, LightGCN never sees auxiliary edges, seeds determine all."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gcib import core
from gcib.baselines import method_config
from gcib.config import TrainConfig
from gcib.data import inject_noise, leave_one_out, synthetic
from gcib.denoise import denoise_metrics
from gcib.model import GCIBModel, _losses, train

SMALL = TrainConfig(dim=16, layers=2, epochs=6, batch_size=512, patience=100)


@pytest.fixture(scope="module")
def noisy_split():
    torch.set_num_threads(1)
    return leave_one_out(synthetic(200, 150, n_buy=5, n_cart=8, n_view=20, noise_rate=1.0,
                                   noise_kind="uniform", seed=0))


@pytest.fixture(scope="module")
def gcib_run(noisy_split):
    return train(noisy_split, method_config("gcib", SMALL))


def test_learned_keep_probability_separates_injected_edges(noisy_split, gcib_run):
    dm = denoise_metrics(gcib_run.model, noisy_split, gcib_run.mask_mode)
    assert np.mean([v["auroc"] for v in dm.values()]) > 0.6
    # the same trainer with the scorer's sign flipped ranks noise above real edges
    flipped = train(noisy_split, method_config("gcib", SMALL, scorer_init=-4.0))
    dmf = denoise_metrics(flipped.model, noisy_split, flipped.mask_mode)
    assert np.mean([v["auroc"] for v in dmf.values()]) < 0.45


def test_training_is_deterministic_and_keeps_the_best_valid_epoch(noisy_split, gcib_run):
    again = train(noisy_split, method_config("gcib", SMALL))
    for k, v in gcib_run.model.state_dict().items():
        assert torch.equal(v, again.model.state_dict()[k]), k
    assert gcib_run.valid["hr@10"] >= max(gcib_run.history) - 1e-12 or gcib_run.mask_mode != "expected"
    assert gcib_run.history[gcib_run.best_epoch - 1] == max(gcib_run.history)


def test_gib_and_contrast_terms_enter_the_loss(noisy_split):
    cfg = method_config("gcib", SMALL)
    losses = {}
    for name, c in (("full", cfg), ("no_gib", method_config("gcib-no-gib", SMALL)),
                    ("no_cl", method_config("gcib-no-cl", SMALL))):
        m = GCIBModel(noisy_split, c)
        u, i = (torch.as_tensor(x[:256]) for x in noisy_split.train["buy"])
        j = torch.randint(0, m.I, (256,), generator=torch.Generator().manual_seed(0))
        loss = _losses(m, u, i, j, torch.Generator().manual_seed(1))
        losses[name] = loss.detach().item()
        if name == "full":
            loss.backward()
            assert m.scorer_w.grad.abs().sum() > 0  # the mask learner receives gradients
    assert losses["full"] != losses["no_gib"] and losses["full"] != losses["no_cl"]


def test_random_prune_keeps_the_requested_rate_and_cml_keeps_everything(noisy_split):
    m = GCIBModel(noisy_split, method_config("random-prune", SMALL, random_keep=(0.3, 0.8)))
    rates = [float(x.mean()) for x in m.random_masks]
    assert rates[0] == pytest.approx(0.3, abs=0.03) and rates[1] == pytest.approx(0.8, abs=0.03)
    c = GCIBModel(noisy_split, method_config("cml", SMALL))
    assert c.cfg.mask == "ones" and c.cfg.gib_weight == 0 and not c.random_masks


def test_lightgcn_never_sees_auxiliary_edges():
    clean = synthetic(100, 120, n_buy=5, n_cart=8, n_view=14, noise_rate=0.0, seed=1)
    cfg = method_config("lightgcn", SMALL, epochs=2)
    a = train(leave_one_out(clean), cfg)
    b = train(leave_one_out(inject_noise(clean, 1.0, seed=5)), cfg)
    assert torch.equal(a.model.emb, b.model.emb)
    merged = train(leave_one_out(clean), method_config("lightgcn-merged", SMALL, epochs=2))
    assert not torch.equal(a.model.emb, merged.model.emb)


def test_expected_mask_of_a_trained_model_is_not_all_ones(noisy_split, gcib_run):
    m = gcib_run.model
    z_t = core.propagate(m.adj_t, m.emb, m.cfg.layers).detach()
    p = torch.sigmoid(m.keep_logits(0, z_t))
    assert p.min() < 0.9 and p.std() > 0.01  # a mask that keeps every edge would be merged LightGCN
