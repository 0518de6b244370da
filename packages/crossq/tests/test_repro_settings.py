"""Issue 59 item 3: the reproduction's baselines at faiss's defaults, all on one sample."""

import hashlib

import numpy as np
from crossq._faiss import load_faiss
from crossq.config import SCALES
from crossq.experiments import make_codec


def test_quick_faiss_settings_are_faiss_defaults():
    """Read from faiss's own objects, not restated: OPQ niter and training size, RQ beam, LSQ
    iterations; and make_codec passes them to the codecs unchanged."""
    faiss, rc, d, M = load_faiss(), SCALES["quick"], 128, 4
    opq = faiss.OPQMatrix(d, M)
    lsq = faiss.LocalSearchQuantizer(d, M, 8)
    assert (rc.opq_niter, rc.train_sample_tokens) == (opq.niter, opq.max_train_points)
    assert rc.rq_beam == faiss.ResidualQuantizer(d, M, 8).max_beam_size
    assert (rc.lsq_train_iters, rc.lsq_encode_ils_iters) == (lsq.train_iters, lsq.encode_ils_iters)
    assert make_codec("opq", d, M, rc).niter == opq.niter
    assert make_codec("rq", d, M, rc).params["beam"] == rc.rq_beam
    p = make_codec("lsq", d, M, rc).params
    assert (p["train_iters"], p["encode_ils_iters"]) == (lsq.train_iters, lsq.encode_ils_iters)


def test_every_quantizer_trains_on_the_same_sample(monkeypatch, tmp_path):
    """In the smoke reproduction, every baseline's fit and every residual k-means start (CrossQ's
    family) receive the same token sample (same SHA-256), the one the results name."""
    import crossq.sweep
    from crossq.codecs import Codec
    from crossq.experiments import reproduce

    seen: list[tuple[str, str]] = []
    fit, kmeans = Codec.fit, crossq.sweep.residual_kmeans

    def sha(X):
        return hashlib.sha256(np.ascontiguousarray(X, np.float32).tobytes()).hexdigest()

    def spy_fit(self, X, offsets, seed=0, training=None):
        if self.name not in ("crossq", "tokenwise", "fp16", "int8"):  # crossq: start below
            seen.append((self.name, sha(X)))
        return fit(self, X, offsets, seed, training)

    def spy_kmeans(X, *a, **k):
        seen.append(("residual k-means", sha(X)))
        return kmeans(X, *a, **k)

    monkeypatch.setattr(Codec, "fit", spy_fit)
    monkeypatch.setattr(crossq.sweep, "residual_kmeans", spy_kmeans)
    res = reproduce("smoke", tmp_path)
    named = res.get("training sample (every quantizer)", "all", "tokens").extra["sha256"]
    assert {n for n, _ in seen} >= {"pq", "opq", "rq", "lsq", "residual", "residual k-means"}
    assert {h for _, h in seen} == {named}


def test_slow_faiss_baselines_run_on_the_first_seed_only():
    from crossq.experiments import methods_at

    rc = SCALES["quick"]
    first, later = set(methods_at(4, rc, 0)), set(methods_at(4, rc, 1))
    assert first - later == set(rc.first_seed_only) == {"opq", "rq", "lsq"}
    assert {"crossq", "tokenwise", "crossq-recon", "rq-greedy", "pq"} <= later


def test_dev_chosen_training_reaches_the_codecs():
    """ReproConfig.tuned (chosen on dev by crossq.tuning) sets each trained method's steps / lr /
    queries per step; greedy RQ stays untrained."""
    rc = SCALES["quick"]
    for method, steps, lr, qps in rc.tuned:
        cfg = make_codec(method, 128, 4, rc).cfg
        assert (cfg.steps, cfg.lr, cfg.queries_per_step) == (steps, lr, qps)
    assert {m for m, *_ in rc.tuned} == {"crossq", "tokenwise", "crossq-recon"}
    assert make_codec("crossq-recon", 128, 4, rc).cfg.w_kl == 0.0
    assert make_codec("rq-greedy", 128, 4, rc).cfg.steps == 0
