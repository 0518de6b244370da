"""``nbcg.NBCGClassifier``: any arm as a scikit-learn estimator on a feature matrix (dense or
sparse, e.g. TF-IDF) and a binary label-indicator matrix. ``fit`` carves a dev split inside
(``validation_fraction``, seeded by ``random_state``) on which the decision threshold, the maximum
coalition size and NBCG's coalition loss L* are chosen; the SEM threshold is chosen by the BIC of
the label SEM on the training labels. ``nbcg train`` and ``nbcg.pipeline.fit`` call ``fit_dev``
(the same code path, with the dev split they carved or were given).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin

from icml26_shared import UserError


def resolve_device(device: str) -> str:
    """``auto`` → ``cuda`` when a GPU is visible, else ``cpu``; ``cuda[:N]`` without that GPU →
    ``UserError`` (one line)."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        return device
    if device == "cuda" or (device.startswith("cuda:") and device[5:].isdigit()):
        if not torch.cuda.is_available():
            raise UserError(f"--device {device}: no CUDA device is available here (use --device cpu or auto)")
        idx = int(device[5:]) if ":" in device else 0
        if idx >= torch.cuda.device_count():
            raise UserError(f"--device {device}: only {torch.cuda.device_count()} CUDA device(s) here")
        return device
    raise UserError(f"--device {device!r}: expected auto, cpu, cuda or cuda:N")


def _dense(X) -> np.ndarray:
    from scipy import sparse

    X = X.toarray() if sparse.issparse(X) else np.asarray(X)
    if X.ndim != 2:
        raise UserError(f"X must be a 2-D feature matrix, got shape {X.shape}")
    X = X.astype(np.float32)
    if not np.isfinite(X).all():
        raise UserError("X contains NaN or infinite values")
    return X


def _indicator(Y) -> np.ndarray:
    from scipy import sparse

    Y = Y.toarray() if sparse.issparse(Y) else np.asarray(Y)
    if Y.ndim != 2 or not np.isin(Y, (0, 1)).all():
        raise UserError("Y must be a binary label-indicator matrix (n_samples × n_labels of 0/1)")
    return Y.astype(np.float32)


class NBCGClassifier(ClassifierMixin, BaseEstimator):
    """NBCG (or any arm of ``nbcg.baselines.ARMS``) on features X and a label-indicator matrix Y.

    ``method``: an arm (``nbcg`` = Nash bargaining over the loss L* chosen on dev among bce, asl,
    db); ``loss``: force the coalition loss (any registered loss) instead; ``max_coalition``: None =
    chosen on dev from 4, 8, 16; ``epochs``: the most epochs (early stopping on dev macro-F1 with
    patience 2 returns the best-dev epoch); ``threshold_mode``: ``global``, ``per-label``, ``top-k`` or
    ``auto`` (the rule of the best 2-fold cross-fitted dev macro-F1, ``train.choose_decision``).
    Fitted: ``model_``, ``coalitions_`` (the arm's partition), ``causal_coalitions_``, ``dag_``,
    ``adjacency_``, ``loss_``, ``decision_`` (the rule ``predict`` applies), ``threshold_`` (the
    dev-chosen global threshold), ``history_``."""

    def __init__(self, method: str = "nbcg", loss: str | None = None, max_coalition: int | None = None,
                 coalitions: str = "components", sem_threshold: float | None = None, epochs: int = 8,
                 hidden: int = 64, lr: float = 1e-2, batch_size: int = 64, validation_fraction: float = 0.2,
                 threshold_mode: str = "auto", device: str = "auto", random_state: int = 0):
        self.method = method
        self.loss = loss
        self.max_coalition = max_coalition
        self.coalitions = coalitions
        self.sem_threshold = sem_threshold
        self.epochs = epochs
        self.hidden = hidden
        self.lr = lr
        self.batch_size = batch_size
        self.validation_fraction = validation_fraction
        self.threshold_mode = threshold_mode
        self.device = device
        self.random_state = random_state

    def fit(self, X, Y) -> NBCGClassifier:
        X, Y = _dense(X), _indicator(Y)
        if len(X) != len(Y):
            raise UserError(f"X has {len(X)} rows but Y has {len(Y)}")
        if not 0 < self.validation_fraction < 1:
            raise UserError(f"validation_fraction must be in (0, 1), got {self.validation_fraction!r}")
        n = len(X)
        n_dev = max(1, int(n * self.validation_fraction + 1e-9))
        if n < 10 or n - n_dev < 2:
            raise UserError(f"need at least 10 training rows to carve a dev split, got {n}")
        perm = np.random.default_rng(self.random_state).permutation(n)
        dev, tr = perm[:n_dev], np.sort(perm[n_dev:])
        return self.fit_dev(X[tr], Y[tr], X[dev], Y[dev],
                            dev_source=f"{self.validation_fraction:g} of the training rows "
                                       f"(random_state {self.random_state})")

    def fit_dev(self, X, Y, Xdev, Ydev, dev_source: str = "the given dev split", group=None) -> NBCGClassifier:
        """Fit on (X, Y), choosing the thresholds, the coalition size and L* on (Xdev, Ydev)."""
        from .baselines import LOSSES, get_arm
        from .config import NBCGConfig, SEMConfig
        from .core import (
            COALITION_METHODS,
            choose_sem_threshold,
            dag_from_adjacency,
            fit_label_sem,
            form_coalitions,
            random_coalitions,
        )
        from .train import THRESHOLD_MODES, choose_decision, predict_scores, train
        from .tuning import MAX_SIZES, SEM_THRESHOLDS, choose_on_dev

        X, Y, Xdev, Ydev = _dense(X), _indicator(Y), _dense(Xdev), _indicator(Ydev)
        try:
            arm = get_arm(self.method)
        except KeyError as exc:
            raise UserError(str(exc.args[0])) from None
        if self.loss is not None:
            if self.loss not in LOSSES:
                raise UserError(f"unknown loss {self.loss!r} (known: {', '.join(LOSSES)})")
            arm = replace(arm, loss=self.loss)
        if self.coalitions not in COALITION_METHODS:
            raise UserError(f"unknown coalitions {self.coalitions!r} (known: {', '.join(COALITION_METHODS)})")
        if self.threshold_mode not in (*THRESHOLD_MODES, "auto"):
            raise UserError(f"unknown threshold_mode {self.threshold_mode!r} "
                            f"(known: auto, {', '.join(THRESHOLD_MODES)})")
        if Y.shape[1] < 2:
            raise UserError(f"need at least 2 labels, got {Y.shape[1]}")
        device = resolve_device(self.device)
        seed = int(self.random_state)
        counts = Y.sum(0)
        A = fit_label_sem(Y, SEMConfig(), seed=seed)
        chosen = {"sem_threshold": "given" if self.sem_threshold is not None else "BIC of the label SEM on TRAIN",
                  "max_coalition": "given" if self.max_coalition is not None else dev_source}
        sem_t, sem_grid = (float(self.sem_threshold), []) if self.sem_threshold is not None else \
            choose_sem_threshold(A, Y, SEM_THRESHOLDS)
        cfg = NBCGConfig(max_coalition=self.max_coalition or 8, epochs=self.epochs, hidden=self.hidden,
                         lr=self.lr, batch_size=self.batch_size)
        grid = None
        tune = arm.partition != "one" and (self.max_coalition is None or arm.loss == "auto")
        if tune:
            from .baselines import ARMS

            # random coalitions mirror the causal sizes: those (and L*) are chosen with NBCG itself
            sel_arm = arm if arm.partition == "causal" else replace(ARMS["nbcg"], loss=arm.loss)
            sizes = MAX_SIZES if self.max_coalition is None else (self.max_coalition,)
            best = choose_on_dev(A, counts, X, Y, Xdev, Ydev, sel_arm, cfg, seed, self.coalitions,
                                 (sem_t,), sizes, device=device)
            max_c, causal, grid = best["max_coalition"], best["coalitions"], best["grid"]
            if arm.loss == "auto":
                chosen["loss"] = dev_source
            arm = replace(arm, loss=best["loss"])
        else:
            max_c = self.max_coalition or 8
            causal = form_coalitions(dag_from_adjacency(A, sem_t), counts, max_c, self.coalitions, weights=A)
        cfg = replace(cfg, max_coalition=max_c)
        coal = {"causal": causal, "one": [list(range(Y.shape[1]))],
                "random": random_coalitions([len(c) for c in causal], Y.shape[1], seed + 1000)}[arm.partition]
        if tune and arm.partition == "causal":
            model, log = best["model"], best["log"]     # the dev winner itself, not retrained
        else:
            model, log = train(X, Y, coal, arm, cfg, seed, group=group, device=device, dev=(Xdev, Ydev))
        self.model_, self.arm_, self.loss_ = model, arm, arm.loss
        S_dev = predict_scores(model, Xdev)
        self.decision_ = choose_decision(S_dev, Ydev, self.threshold_mode, seed)
        self.threshold_ = self.decision_["threshold"]
        chosen["threshold_mode"] = self.decision_["chosen_by"]
        self.coalitions_, self.causal_coalitions_ = coal, causal
        self.adjacency_, self.dag_ = A, dag_from_adjacency(A, sem_t)
        self.sem_threshold_, self.max_coalition_ = sem_t, max_c
        self.counts_, self.n_labels_, self.n_features_in_ = counts, Y.shape[1], X.shape[1]
        self.classes_ = np.arange(Y.shape[1])       # multilabel: one binary output per label
        self.chosen_on_, self.device_ = chosen, device
        self.history_ = {"tuning_grid": grid, "sem_grid": sem_grid, "curve": log.curve,
                         "final_coalition_weights": np.asarray(log.final_coef).tolist()}
        return self

    def predict_proba(self, X) -> np.ndarray:
        from sklearn.utils.validation import check_is_fitted

        from .train import predict_scores

        check_is_fitted(self, "model_")
        X = _dense(X)
        if X.shape[1] != self.n_features_in_:
            raise UserError(f"X has {X.shape[1]} features; the model was fitted on {self.n_features_in_}")
        return predict_scores(self.model_, X)

    def predict(self, X) -> np.ndarray:
        from .train import apply_decision

        return apply_decision(self.predict_proba(X), self.decision_)
