"""Users' end-to-end path: train any arm on a JSONL/CSV file (TF-IDF features), store the model
folder, predict, and read its label DAG and coalitions back. The folder holds ``model.pt`` (a
state dict, loaded with ``weights_only=True``), ``meta.json`` (labels, training counts, the
dev-chosen thresholds and coalition size, coalitions, the SEM adjacency and DAG) and
``features.json`` (TF-IDF vocabulary and idf, or the MiniLM name); a fine-tuned encoder is stored
as a Hugging Face folder ``encoder/`` with ``model.pt`` holding the head.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from icml26_shared import UserError
from icml26_shared.io import atomic_dir, dumps_json

_EXISTS = "{path} already exists; choose another --out (nothing was written)"

FORMAT = 2   # 2 (0.4.0): binary communication masks replace the gates of format 1


def _matrix(records: list[dict], index: dict[str, int]) -> np.ndarray:
    Y = np.zeros((len(records), len(index)), np.float32)
    for i, r in enumerate(records):
        for x in r["labels"]:
            if x in index:
                Y[i, index[x]] = 1
    return Y


def fit(train_recs: list[dict], valid_recs: list[dict] | None, method: str,
        max_coalition: int | None = None, epochs: int = 8, seed: int = 0, features: str = "tfidf",
        model_dir: Path | None = None, coalition_method: str = "components",
        sem_threshold: float | None = None, max_features: int = 5000, group=None,
        device: str = "cpu", threshold_mode: str = "auto") -> dict:
    """Train one arm. The decision threshold is chosen on ``valid_recs`` or, without it, on a 20%
    dev split carved from TRAIN by ``seed`` (the model then trains on the other 80%); the maximum
    coalition size and NBCG's coalition loss L*, when not given, are chosen on the same dev split
    (``nbcg.tuning``); the SEM threshold, when not given, by the BIC of the label SEM on TRAIN
    (a graph criterion). Frozen features go through ``nbcg.NBCGClassifier.fit_dev`` (one code
    path with the estimator); ``model_dir`` fine-tunes that encoder (max size 8, BCE for NBCG).
    ``threshold_mode`` (global, per-label, top-k, or auto = chosen on dev) is the decision rule
    ``predict`` applies; ``meta["dev_labels_per_doc"]`` compares its mean labels per dev document
    with the gold mean."""
    import torch

    from .baselines import get_arm
    from .core import COALITION_METHODS
    from .estimator import NBCGClassifier, resolve_device
    from .features import Featurizer

    try:
        arm = get_arm(method)
    except KeyError as exc:
        raise UserError(str(exc.args[0])) from None
    if coalition_method not in COALITION_METHODS:
        raise UserError(f"unknown --coalitions {coalition_method!r} (known: {', '.join(COALITION_METHODS)})")
    device = resolve_device(device)
    dev_source = "--valid"
    if valid_recs is None:
        if len(train_recs) < 10:
            raise UserError(f"need at least 10 training documents to carve a dev split, got {len(train_recs)}")
        perm = np.random.default_rng(seed).permutation(len(train_recs))
        n_dev = max(1, len(train_recs) // 5)
        valid_recs = [train_recs[i] for i in perm[:n_dev]]
        train_recs = [train_recs[i] for i in sorted(perm[n_dev:])]
        dev_source = f"20% of TRAIN (seed {seed})"
    labels = sorted({x for r in train_recs for x in r["labels"]})
    if len(labels) < 2:
        raise UserError(f"training data has {len(labels)} distinct label(s); need at least 2")
    index = {x: i for i, x in enumerate(labels)}
    Y, Ydev = _matrix(train_recs, index), _matrix(valid_recs, index)
    texts, dev_texts = [r["text"] for r in train_recs], [r["text"] for r in valid_recs]
    if device == "cpu":
        torch.set_num_threads(1)
    if model_dir is not None:
        return _fit_encoder(texts, dev_texts, Y, Ydev, labels, arm, method, max_coalition, epochs, seed,
                            Path(model_dir), coalition_method, sem_threshold, group, dev_source, device,
                            threshold_mode)
    feat = Featurizer(features, max_features).fit(texts)
    X, Xdev = feat.transform(texts), feat.transform(dev_texts)
    est = NBCGClassifier(method, max_coalition=max_coalition, coalitions=coalition_method,
                         sem_threshold=sem_threshold, epochs=epochs, device=device, random_state=seed,
                         threshold_mode=threshold_mode)
    est.fit_dev(X, Y, Xdev, Ydev, dev_source=dev_source, group=group)
    meta = {"format": FORMAT, "method": method, "loss": est.loss_, "masks": est.arm_.masks, "labels": labels,
            "counts": est.counts_.tolist(), "threshold": est.threshold_, "threshold_chosen_on": dev_source,
            "coalitions": est.coalitions_, "causal_coalitions": est.causal_coalitions_,
            "adjacency": est.adjacency_.tolist(), "dag": est.dag_.astype(int).tolist(),
            "sem_threshold": est.sem_threshold_, "max_coalition": est.max_coalition_,
            "chosen_on": est.chosen_on_, "tuning_grid": est.history_["tuning_grid"],
            "sem_grid": est.history_["sem_grid"], "coalition_method": coalition_method,
            "features": features, "hidden": est.hidden, "seed": seed, "epochs": epochs,
            "final_coalition_weights": est.history_["final_coalition_weights"],
            "decision": est.decision_, "dev_labels_per_doc": labels_per_doc(est.predict(Xdev), Ydev)}
    return {"model": est.model_.cpu(), "meta": meta, "features": feat.state(), "tokenizer": None,
            "estimator": est}


def labels_per_doc(P: np.ndarray, Y: np.ndarray) -> dict:
    """Mean labels per document predicted (P) and gold (Y)."""
    return {"predicted": round(float(np.asarray(P).sum(1).mean()), 3) if len(P) else 0.0,
            "gold": round(float(np.asarray(Y).sum(1).mean()), 3) if len(Y) else 0.0}


def _fit_encoder(texts, dev_texts, Y, Ydev, labels, arm, method, max_coalition, epochs, seed, model_dir,
                 coalition_method, sem_threshold, group, dev_source, device, threshold_mode="auto") -> dict:
    from dataclasses import replace

    from .config import NBCGConfig, SEMConfig
    from .core import (
        choose_sem_threshold,
        dag_from_adjacency,
        fit_label_sem,
        form_coalitions,
        random_coalitions,
    )
    from .finetune import encoder_scores, fit_encoder
    from .train import apply_decision, choose_decision
    from .tuning import SEM_THRESHOLDS

    counts = Y.sum(0)
    A = fit_label_sem(Y, SEMConfig(), seed=seed)
    chosen = {"sem_threshold": "given" if sem_threshold is not None else "BIC of the label SEM on TRAIN",
              "max_coalition": "given" if max_coalition is not None else "default (--model)"}
    sem_grid = []
    if sem_threshold is None:       # a graph criterion on TRAIN labels (no classifier, no dev)
        sem_threshold, sem_grid = choose_sem_threshold(A, Y, SEM_THRESHOLDS)
    max_c = max_coalition or 8
    causal = form_coalitions(dag_from_adjacency(A, sem_threshold), counts, max_c, coalition_method, weights=A)
    if arm.loss == "auto":      # fine-tuning an encoder: no loss search, BCE [R]
        arm = replace(arm, loss="bce")
        chosen["loss"] = "default (--model)"
    cfg = NBCGConfig(max_coalition=max_c, epochs=epochs)
    coal = {"causal": causal, "one": [list(range(len(labels)))],
            "random": random_coalitions([len(c) for c in causal], len(labels), seed + 1000)}[arm.partition]
    model, tok, log = fit_encoder(texts, Y, coal, arm, cfg, seed, model_dir, group=group, device=device)
    S_dev = encoder_scores(model, tok, dev_texts, device)
    decision = choose_decision(S_dev, Ydev, threshold_mode, seed)
    thr = decision["threshold"]
    chosen["threshold_mode"] = decision["chosen_by"]
    model = model.cpu()
    meta = {"format": FORMAT, "method": method, "loss": arm.loss, "masks": arm.masks, "labels": labels,
            "counts": counts.tolist(), "threshold": thr, "threshold_chosen_on": dev_source, "coalitions": coal,
            "causal_coalitions": causal, "adjacency": A.tolist(),
            "dag": dag_from_adjacency(A, sem_threshold).astype(int).tolist(),
            "sem_threshold": sem_threshold, "max_coalition": max_c, "chosen_on": chosen, "tuning_grid": None,
            "sem_grid": sem_grid, "coalition_method": coalition_method, "features": "encoder",
            "hidden": cfg.hidden, "seed": seed, "epochs": epochs,
            "final_coalition_weights": np.asarray(log.final_coef).tolist(),
            "decision": decision, "dev_labels_per_doc": labels_per_doc(apply_decision(S_dev, decision), Ydev)}
    return {"model": model, "meta": meta, "features": None, "tokenizer": tok}


def save(bundle: dict, out: Path) -> Path:
    """Write the folder atomically: a temporary sibling folder, renamed at the end."""
    import torch

    out = Path(out)
    if out.exists():
        raise UserError(_EXISTS.format(path=out))
    if not out.parent.is_dir():
        raise UserError(f"{out.parent}: no such folder")
    with atomic_dir(out, exists_error=_EXISTS) as tmp:
        model = bundle["model"]
        if bundle.get("tokenizer") is not None:      # a fine-tuned encoder: HF folder + head
            from .finetune import quiet

            quiet()
            model.encoder.save_pretrained(tmp / "encoder")
            bundle["tokenizer"].save_pretrained(tmp / "encoder")
            torch.save(model.head.state_dict(), tmp / "model.pt")
        else:
            torch.save(model.state_dict(), tmp / "model.pt")
            (tmp / "features.json").write_text(dumps_json(bundle["features"], indent=None))
        (tmp / "meta.json").write_text(dumps_json(bundle["meta"], indent=None))
    return out


def load_meta(folder: Path) -> dict:
    folder = Path(folder)
    try:
        meta = json.loads((folder / "meta.json").read_text())
    except FileNotFoundError:
        raise UserError(f"{folder}: not an nbcg model folder (no meta.json)") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise UserError(f"{folder}/meta.json: corrupt (not JSON)") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise UserError(f"{folder}/meta.json: not an nbcg model of format {FORMAT}")
    return meta


def load(folder: Path):
    """(scorer(texts) -> n×L scores, meta) from a folder written by ``save``; ``UserError`` when corrupt."""
    import torch

    from .train import CoalitionMLP, predict_scores

    folder = Path(folder)
    meta = load_meta(folder)
    try:
        state = torch.load(folder / "model.pt", map_location="cpu", weights_only=True)
        L = len(meta["labels"])
        if meta.get("features") == "encoder":
            from .finetune import EncoderClassifier, encoder_scores, load_encoder

            tok, enc = load_encoder(folder / "encoder")
            model = EncoderClassifier(enc, meta["hidden"], meta["coalitions"], L,
                                      masked=bool(meta.get("masks", True)))
            model.head.load_state_dict(state)
            model.eval()
            return (lambda texts: encoder_scores(model, tok, texts)), meta
        from .features import Featurizer

        feat = Featurizer.from_state(json.loads((folder / "features.json").read_text()))
        head = CoalitionMLP(state["enc.weight"].shape[1], meta["hidden"], meta["coalitions"], L,
                            masked=bool(meta.get("masks", True)))
        head.load_state_dict(state)
    except UserError:
        raise
    except FileNotFoundError as exc:
        raise UserError(f"{folder}: incomplete model folder ({Path(exc.filename).name} missing)") from None
    except Exception as exc:  # noqa: BLE001 - any corruption is the user's folder, not a bug
        raise UserError(f"{folder}: corrupt model folder ({type(exc).__name__})") from None
    return (lambda texts: predict_scores(head, feat.transform(texts))), meta


def predict(folder: Path, records: list[dict], threshold: float | None, top_k: int | None) -> list[dict]:
    score, meta = load(folder)
    S = score([r["text"] for r in records])
    from .train import apply_decision

    labels = meta["labels"]
    if top_k is not None:
        decision = {"mode": "top-k", "k": top_k}
    elif threshold is not None:
        decision = {"mode": "global", "threshold": threshold}
    else:       # the rule chosen at training (0.4.0 folders: their global threshold)
        decision = meta.get("decision") or {"mode": "global", "threshold": meta["threshold"]}
    P = apply_decision(S, decision) if len(S) else np.zeros((0, len(labels)), int)
    out = []
    for r, s, p in zip(records, S, P, strict=True):
        on = np.flatnonzero(p)
        out.append({"id": r["id"], "labels": [labels[j] for j in sorted(on, key=lambda j: -s[j])],
                    "scores": {labels[j]: round(float(s[j]), 6) for j in range(len(labels))}})
    return out


def dag_export(meta: dict, kind: str) -> str:
    """The stored DAG over training labels: JSON ``{"labels", "edges": [[parent, child, weight]]}``
    or Graphviz dot."""
    labels, A, D = meta["labels"], np.asarray(meta["adjacency"]), np.asarray(meta["dag"], bool)
    edges = [[labels[i], labels[j], round(float(A[i, j]), 6)] for i, j in np.argwhere(D)]
    if kind == "json":
        return dumps_json({"labels": labels, "edges": edges}, indent=None)
    lines = ["digraph nbcg {"] + [f"  {json.dumps(x)};" for x in labels]
    lines += [f"  {json.dumps(p)} -> {json.dumps(c)} [label=\"{w:.3f}\"];" for p, c, w in edges]
    return "\n".join(lines + ["}"])


def shift_partners(records: list[dict], rare_fraction: float = 0.3) -> dict[str, str]:
    """For each tail label (bottom ``rare_fraction`` by frequency), its highest-PMI head partner
    (a label in the top third by frequency that co-occurs with it) [R, issue 29]."""
    from collections import Counter

    n = len(records)
    freq = Counter(x for r in records for x in set(r["labels"]))
    order = sorted(freq, key=lambda x: (freq[x], x))
    tail = order[:int(round(rare_fraction * len(order)))]
    head = set(order[len(order) - max(1, len(order) // 3):])
    pair = Counter((a, b) for r in records for a in set(r["labels"]) for b in set(r["labels"]) if a != b)
    out = {}
    for t in tail:
        cands = [(np.log(pair[t, h] * n / (freq[t] * freq[h])), h) for h in sorted(head)
                 if h != t and pair[t, h] > 0]
        if cands:
            out[t] = max(cands, key=lambda c: (c[0], c[1]))[1]
    return out


def make_split(records: list[dict], kind: str, seed: int) -> tuple[dict[str, list[dict]], dict]:
    """``iid``: train/dev/test = 70/10/20% at random. ``shift``: every document carrying a tail
    label without that label's head partner goes to ``test_shift``; the rest split as ``iid``."""
    partners = shift_partners(records) if kind == "shift" else {}
    is_shift = [any(t in r["labels"] and h not in r["labels"] for t, h in partners.items())
                for r in records]
    rest = [r for r, s in zip(records, is_shift, strict=True) if not s]
    perm = np.random.default_rng(seed).permutation(len(rest))
    n_dev, n_test = len(rest) // 10, len(rest) // 5
    parts = {"train": sorted(perm[n_dev + n_test:]), "dev": sorted(perm[:n_dev]),
             "test": sorted(perm[n_dev:n_dev + n_test])}
    out = {k: [rest[i] for i in v] for k, v in parts.items()}
    if kind == "shift":
        out["test_shift"] = [r for r, s in zip(records, is_shift, strict=True) if s]
    clean = {k: [{"id": r["id"], "text": r["text"], "labels": r["labels"]} for r in v] for k, v in out.items()}
    info = {"kind": kind, "seed": seed, "partners": partners, "sizes": {k: len(v) for k, v in clean.items()}}
    return clean, info


def save_split(parts: dict[str, list[dict]], info: dict, out: Path) -> Path:
    out = Path(out)
    if out.exists():
        raise UserError(_EXISTS.format(path=out))
    if not out.parent.is_dir():
        raise UserError(f"{out.parent}: no such folder")
    with atomic_dir(out, exists_error=_EXISTS) as tmp:
        for k, recs in parts.items():
            (tmp / f"{k}.jsonl").write_text("".join(dumps_json(r, indent=None) + "\n" for r in recs))
        (tmp / "split.json").write_text(dumps_json(info, indent=1))
    return out
