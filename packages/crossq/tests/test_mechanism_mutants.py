"""Tests that catch mutants of CrossQ's mechanism (tests/mutants.toml)."""

import torch


def test_listwise_kl_alone_trains_toward_the_teacher(corpus16):
    """With the margin and reconstruction terms off, the listwise KL alone still moves the codec:
    its KL to the teacher drops below the residual k-means start (a KL switched off leaves the
    start unchanged)."""
    from crossq.config import CrossQConfig
    from crossq.train import (
        build_training_set,
        fit_crossq,
        init_quantizer,
        pseudo_queries,
        ranking_kl,
    )

    X, off = corpus16
    Xt, offt = torch.from_numpy(X), torch.from_numpy(off)
    qs, pos = pseudo_queries(Xt, off, 30, 4, seed=0)
    data = build_training_set(qs, Xt, offt, 8, pos)
    cfg = CrossQConfig(bytes_per_token=1, steps=40, queries_per_step=8, w_margin=0.0, w_recon=0.0)

    assert (ranking_kl(fit_crossq(X, off, data, cfg, seed=0), Xt, off, data)
            < ranking_kl(init_quantizer(X, cfg, seed=0), Xt, off, data))
