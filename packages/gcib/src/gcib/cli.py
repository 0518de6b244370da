"""``gcib``: train / eval / recommend / noise / denoise-report / synth / reproduce.
Heavy imports (torch, pandas) live inside the commands, so ``--help`` stays fast."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import ArgumentParser as _Parser
from icml26_shared.cli import add_reproduce_arguments, reproduce_from_args
from icml26_shared.io import print_json

METHOD_NAMES = ("gcib", "lightgcn", "lightgcn-merged", "lightgcn-aux", "mbgcn", "cml", "gcib-no-gib", "gcib-no-cl", "cosine-prior",
                "gcib-s0", "gcib-no-gib-s0")


def _number(kind, low=None, low_open=False):
    def parse(text: str):
        try:
            v = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if isinstance(v, float) and not math.isfinite(v):
            raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
        if low is not None and (v <= low if low_open else v < low):
            raise argparse.ArgumentTypeError(f"must be {'>' if low_open else '>='} {low}, got {text}")
        return v
    return parse


def _load_data(path: Path, target: str):
    from . import io

    if path.is_dir():
        return io.read_cml_dir(path, target) if any(path.glob("trn_*")) else io.read_mbgcn_dir(path, target)
    if path.suffix == ".inter":
        return io.read_recbole_inter(path, target)
    return io.read_interactions(path, target)


def _device(name: str) -> str:
    import torch

    if name.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"--device {name}: CUDA is not available")
    if not (name == "cpu" or name.startswith("cuda")):
        raise UserError(f"--device must be cpu or cuda[:N], got {name!r}")
    return name


def _cmd_train(a: argparse.Namespace) -> int:
    from icml26_shared.io import check_replaceable

    from .io import check_new_output

    check_new_output(a.out, a.force)
    if a.force:
        check_replaceable(a.out)  # --force replaces only a run folder, before any work
    from .baselines import method_config
    from .config import TrainConfig
    from .data import leave_one_out, no_holdout
    from .io import save_run
    from .model import train

    data = _load_data(a.interactions, a.target)
    knobs = ("epochs", "dim", "layers", "lr", "batch_size", "patience", "reg", "mask_temp", "cl_temp",
             "scorer_init", "gib_weight", "cl_weight")
    try:
        over = {k: getattr(a, k) for k in knobs if getattr(a, k) is not None}
        cfg = method_config(a.method, TrainConfig(device=_device(a.device), seed=a.seed), **over)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if a.threads is not None:
        import torch

        torch.set_num_threads(a.threads)
    split = no_holdout(data) if a.all else leave_one_out(data)
    if len(split.test[0]) == 0 and not a.all:
        raise UserError(f"{a.interactions}: no user has 3 or more {a.target!r} interactions to hold out")
    if cfg.method == "random-prune" and not cfg.random_keep:
        raise UserError("random-prune needs keep rates: run it through `gcib reproduce` (GCIB's rates)")
    res = train(split, cfg, progress=None if a.quiet else
                lambda e, hr: print(f"\repoch {e}/{cfg.epochs} valid HR@10 {hr:.4f}", end="", file=sys.stderr))
    if not a.quiet:
        print(file=sys.stderr)
    save_run(a.out, res.model, split, res, force=a.force)
    if a.all:
        print(f"{cfg.method}: trained on every interaction for {res.epochs_run} epochs (nothing held out, "
              f"no selection), {res.seconds_per_epoch:.2f} s/epoch -> {a.out}")
        return 0
    print(f"{cfg.method}: best epoch {res.best_epoch}, valid HR@10 {res.valid['hr@10']:.4f}, test-time mask "
          f"{res.mask_mode}, {res.seconds_per_epoch:.2f} s/epoch -> {a.out}")
    return 0


def _cmd_eval(a: argparse.Namespace) -> int:
    import numpy as np

    from .io import load_run
    from .metrics import positives_csr, sample_negatives
    from .model import evaluate, kept_mask

    model, split, meta = load_run(a.dir)
    d = split.data
    if len(split.test[0]) == 0:
        raise UserError(f"{a.dir}: trained with --all, nothing was held out to evaluate (train without --all)")
    negs = None
    if a.protocol == "sampled99":
        if d.n_items < 100:
            raise UserError(f"{a.dir}: --protocol sampled99 needs at least 100 items besides a user's positives "
                            f"(the catalogue has {d.n_items}); use --protocol full")
        tu, ti = split.train[d.target]
        allpos = positives_csr(np.r_[tu, split.valid[0], split.test[0]], np.r_[ti, split.valid[1], split.test[1]],
                               d.n_users, d.n_items)
        try:
            negs = sample_negatives(split.test[0], allpos, d.n_items, 99, seed=meta["config"]["seed"])
        except ValueError as exc:
            raise UserError(f"{a.dir}: --protocol sampled99: {exc} (use --protocol full)") from None
    m = evaluate(model, split, "test", a.protocol, meta["mask_mode"], negs)
    out = {"protocol": a.protocol, "k": a.k, "hr": m.get(f"hr@{a.k}"), "ndcg": m.get(f"ndcg@{a.k}"),
           "users": int(len(split.test[0])), "method": meta["config"]["method"]}
    if model.aux and model.cfg.mask != "ones":
        out["keep_rate"] = {b: float(v.mean()) for b, v in kept_mask(model, meta["mask_mode"]).items()}
    if a.json:
        print_json(out, indent=None)
    else:
        print(f"{out['method']} test ({a.protocol}, {out['users']} users): HR@{a.k} {out['hr']:.4f}  "
              f"NDCG@{a.k} {out['ndcg']:.4f}" + (f"  keep rate {out['keep_rate']}" if "keep_rate" in out else ""))
    return 0


def _cmd_recommend(a: argparse.Namespace) -> int:
    import numpy as np
    import pandas as pd
    import torch

    from .io import atomic_write_text, check_new_output, load_run
    from .metrics import positives_csr, top_k

    check_new_output(a.out, a.force)
    model, split, meta = load_run(a.dir)
    d = split.data
    if a.all:
        users = np.arange(d.n_users)
    else:
        if not a.users.is_file():
            raise UserError(f"{a.users}: no such file")
        ids = [ln.strip() for ln in a.users.read_text().splitlines() if ln.strip()]
        ids = ids[1:] if ids and ids[0] == "user" else ids
        index = {u: k for k, u in enumerate(d.user_ids)}
        unknown = [u for u in ids if u not in index]
        if unknown or not ids:
            raise UserError(f"{a.users}: unknown user id {unknown[0]!r}" if unknown else f"{a.users}: no user ids")
        users = np.array([index[u] for u in ids])
    model.eval()
    with torch.no_grad():
        h = model.encode(meta["mask_mode"])[0]
    excl = positives_csr(*split.train[d.target], d.n_users, d.n_items)
    items, scores = top_k(h[: d.n_users], h[d.n_users:], users, excl, a.k)
    k = items.shape[1]
    frame = pd.DataFrame({"user": np.repeat(np.asarray(d.user_ids, dtype=object)[users], k),
                          "item": np.asarray(d.item_ids, dtype=object)[items.ravel()],
                          "rank": np.tile(np.arange(1, k + 1), len(users)), "score": scores.ravel()})
    atomic_write_text(a.out, frame.to_csv(index=False))
    print(f"{len(users)} users x top-{k} -> {a.out}")
    return 0


def _cmd_noise(a: argparse.Namespace) -> int:
    from .data import inject_noise
    from .io import check_new_output, read_interactions, write_interactions

    if a.out.resolve() == a.labels.resolve():
        raise UserError("--out and --labels must be different files")
    check_new_output(a.out, a.force)
    check_new_output(a.labels, a.force)
    beh = [b for b in a.behaviours.split(",") if b] if a.behaviours else None
    if a.target is None and not beh:
        raise UserError("pass --target (noise goes to every other behaviour) or --behaviours a,b")
    target = a.target
    if target is None:
        from .io import _read_table

        df = _read_table(a.interactions)
        if "behaviour" not in df.columns:
            raise UserError(f"{a.interactions}: missing column(s) behaviour")
        rest = [b for b in dict.fromkeys(df["behaviour"]) if b not in beh]
        if not rest:
            raise UserError("--behaviours names every behaviour; keep at least one clean (the target)")
        target = rest[0]
    data = read_interactions(a.interactions, target)
    try:
        noisy = inject_noise(data, a.rate, a.kind, beh, a.seed)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    write_interactions(a.out, noisy, a.labels)
    added = {b: int(noisy.noise[b].sum() - data.noise[b].sum()) for b in noisy.auxiliary}
    print(f"added fake edges {added} -> {a.out}; labels -> {a.labels}")
    return 0


def _cmd_denoise(a: argparse.Namespace) -> int:
    from .denoise import denoise_metrics, labels_for_split
    from .io import load_run, read_noise_labels

    model, split, meta = load_run(a.dir)
    if model.cfg.mask != "learned":
        raise UserError(f"{a.dir}: method {meta['config']['method']!r} learns no edge mask (train --method gcib)")
    labels = labels_for_split(split, read_noise_labels(a.noise_labels))
    rep = denoise_metrics(model, split, meta["mask_mode"], labels)
    if a.json:
        print_json(rep, indent=None)
    else:
        for b, m in rep.items():
            print(f"{b}: AUROC {m['auroc']:.3f}  noise removed {m['noise_removed']:.1%}  real kept "
                  f"{m['real_kept']:.1%}  keep rate {m['keep_rate']:.1%}  ({m['n_noise']} noise / {m['n_real']} real)")
    return 0


def _cmd_synth(a: argparse.Namespace) -> int:
    from .data import realistic
    from .io import check_new_output, write_interactions

    check_new_output(a.out, a.force)
    if a.labels:
        check_new_output(a.labels, a.force)
    try:
        data = realistic(a.users, a.items, views_per_user=a.views_per_user, noise_rate=a.noise_rate,
                         noise_kind=a.noise_kind, seed=a.seed)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    write_interactions(a.out, data, a.labels)
    print(f"synthetic {a.users} users x {a.items} items {data.counts()} -> {a.out}")
    return 0


def _cmd_tune(a: argparse.Namespace) -> int:
    from icml26_shared.io import write_json

    from .baselines import METHODS
    from .config import TrainConfig
    from .experiments import TUNE_GRID, tune
    from .io import check_new_output, load_ml100k

    check_new_output(a.out, a.force)
    methods = [m for m in a.methods.split(",") if m]
    unknown = [m for m in methods if m not in METHODS or m == "random-prune"]
    if unknown or not methods:
        raise UserError(f"--methods: unknown method {unknown[0]!r}" if unknown else "--methods: none given")
    grid = {k: tuple(getattr(a, k) or TUNE_GRID[k]) for k in TUNE_GRID}
    data = load_ml100k() if str(a.interactions) == "ml-100k" else _load_data(a.interactions, a.target)
    try:
        base = TrainConfig(epochs=a.epochs, patience=a.patience, dim=a.dim, layers=a.layers,
                           device=_device(a.device))
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if a.threads is not None:
        import torch

        torch.set_num_threads(a.threads)
    out = tune(data, methods, grid, tuple(a.seeds), base, progress=None if a.quiet else lambda r: print(
        f"{r['method']} lr={r['lr']:g} batch={r['batch_size']} reg={r['reg']:g} seed={r['seed']}: "
        f"valid HR@10 {r['valid_hr10']:.4f} at epoch {r['best_epoch']}", file=sys.stderr))
    write_json(a.out, out)
    for m, c in out["chosen"].items():
        print(f"{m}: lr {c['lr']:g}, batch {c['batch_size']}, reg {c['reg']:g}, ~{c['epochs']} epochs "
              f"(valid HR@10 {c['valid_hr10']:.4f})")
    print(f"-> {a.out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from .config import TrainConfig

    p = _Parser(prog="gcib", description="GCIB: multi-behaviour recommendation that prunes noisy "
                "auxiliary edges (graph information bottleneck) and contrasts behaviours; LightGCN backbone.")
    sub = p.add_subparsers(dest="command", required=True)
    pos_int, nonneg = _number(int, 1), _number(float, 0.0)

    t = sub.add_parser("train", help="train a method on an interaction log; writes model, config and split")
    t.add_argument("interactions", type=Path, help="CSV/TSV user,item,behaviour[,timestamp] (no timestamp: file order = time); a RecBole .inter; "
                   "or an MBGCN/CML folder")
    t.add_argument("--target", required=True, help="the behaviour to recommend (e.g. buy)")
    t.add_argument("--method", choices=METHOD_NAMES, default="gcib",
                   help="gcib, a baseline, or an ablation (random-prune runs only inside `reproduce`)")
    d = TrainConfig()
    t.add_argument("--epochs", type=pos_int, default=None, help=f"epoch budget (default {d.epochs})")
    t.add_argument("--patience", type=pos_int, default=None,
                   help=f"stop after this many epochs without a better valid HR@10 (default {d.patience})")
    t.add_argument("--dim", type=pos_int, default=None, help=f"embedding size (default {d.dim})")
    t.add_argument("--layers", type=_number(int, 0), default=None, help=f"LightGCN layers (default {d.layers})")
    t.add_argument("--lr", type=_number(float, 0.0, True), default=None, help=f"Adam learning rate (default {d.lr:g})")
    t.add_argument("--batch-size", type=pos_int, default=None, help=f"BPR triples per step (default {d.batch_size})")
    t.add_argument("--reg", type=nonneg, default=None, help=f"L2 on the batch's embeddings (default {d.reg:g})")
    t.add_argument("--mask-temp", type=_number(float, 0.0, True), default=None,
                   help=f"Gumbel-sigmoid temperature of the edge mask (default {d.mask_temp:g})")
    t.add_argument("--cl-temp", type=_number(float, 0.0, True), default=None,
                   help=f"InfoNCE temperature (default {d.cl_temp:g})")
    t.add_argument("--scorer-init", type=_number(float), default=None,
                   help=f"start weight of the scorer's cosine term; 0 = no cosine prior (default {d.scorer_init:g})")
    t.add_argument("--gib-weight", type=nonneg, default=None, help=f"λ₁ (default {d.gib_weight:g}; 0 = no GIB)")
    t.add_argument("--cl-weight", type=nonneg, default=None, help=f"λ₂ (default {d.cl_weight:g}; 0 = no contrast)")
    t.add_argument("--threads", type=pos_int, default=None, help="torch CPU threads (default: torch's)")
    t.add_argument("--all", action="store_true", help="deployment: train on every interaction, hold nothing "
                   "out, run the whole --epochs budget (no early stopping, no selection); `eval` refuses the run")
    t.add_argument("--device", default="cpu")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--force", action="store_true", help="replace --out")
    t.add_argument("--quiet", action="store_true")
    t.set_defaults(fn=_cmd_train)

    e = sub.add_parser("eval", help="HR@k / NDCG@k of a trained run on its test items")
    e.add_argument("dir", type=Path)
    e.add_argument("--protocol", choices=("full", "sampled99"), default="full")
    e.add_argument("--k", type=int, choices=(10, 20), default=10)
    e.add_argument("--json", action="store_true")
    e.set_defaults(fn=_cmd_eval)

    r = sub.add_parser("recommend", help="top-k items per user (training positives excluded) as CSV")
    r.add_argument("dir", type=Path)
    g = r.add_mutually_exclusive_group(required=True)
    g.add_argument("--users", type=Path, help="file with one user id per line")
    g.add_argument("--all", action="store_true")
    r.add_argument("--k", type=pos_int, default=10)
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--force", action="store_true")
    r.set_defaults(fn=_cmd_recommend)

    n = sub.add_parser("noise", help="add labelled fake auxiliary edges to an interaction log")
    n.add_argument("interactions", type=Path)
    n.add_argument("--rate", type=nonneg, required=True, help="fake edges per real auxiliary edge")
    n.add_argument("--kind", choices=("uniform", "popularity"), default="uniform")
    n.add_argument("--behaviours", default=None, help="comma-separated behaviours to corrupt")
    n.add_argument("--target", default=None, help="the clean target behaviour (default: not in --behaviours)")
    n.add_argument("--seed", type=int, default=0)
    n.add_argument("--out", type=Path, required=True)
    n.add_argument("--labels", type=Path, required=True)
    n.add_argument("--force", action="store_true")
    n.set_defaults(fn=_cmd_noise)

    dr = sub.add_parser("denoise-report", help="keep-probability AUROC, noise removed, real kept per behaviour")
    dr.add_argument("dir", type=Path)
    dr.add_argument("--noise-labels", type=Path, required=True)
    dr.add_argument("--json", action="store_true")
    dr.set_defaults(fn=_cmd_denoise)

    s = sub.add_parser("synth", help="write a synthetic view ⊇ cart ⊇ buy log with labelled noise")
    s.add_argument("--users", type=pos_int, default=1000)
    s.add_argument("--items", type=pos_int, default=1000)
    s.add_argument("--views-per-user", type=_number(float, 0.0, True), default=40.0,
                   help="median views per user (log-normal activity; default 40)")
    s.add_argument("--noise-rate", type=nonneg, default=1.0)
    s.add_argument("--noise-kind", choices=("uniform", "popularity"), default="popularity")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--labels", type=Path, default=None)
    s.add_argument("--force", action="store_true")
    s.set_defaults(fn=_cmd_synth)

    tu = sub.add_parser("tune", help="lr x batch x L2 grid per method on the valid item (tuning seeds "
                        "disjoint from the reported ones); writes a JSON table and the chosen points")
    tu.add_argument("interactions", type=Path, help="a log as for `train`, or the literal ml-100k")
    tu.add_argument("--target", default="like", help="the behaviour to recommend (ml-100k: like)")
    tu.add_argument("--methods", default="lightgcn,gcib", help="comma-separated methods")
    tu.add_argument("--lr", type=_number(float, 0.0, True), nargs="+", default=None, help="default 1e-2 1e-3")
    tu.add_argument("--batch-size", type=pos_int, nargs="+", default=None, help="default 8192 2048")
    tu.add_argument("--reg", type=nonneg, nargs="+", default=None, help="default 1e-4")
    tu.add_argument("--seeds", type=int, nargs="+", default=[100], help="tuning seeds (default 100)")
    tu.add_argument("--epochs", type=pos_int, default=300)
    tu.add_argument("--patience", type=pos_int, default=20)
    tu.add_argument("--dim", type=pos_int, default=32)
    tu.add_argument("--layers", type=_number(int, 0), default=2)
    tu.add_argument("--device", default="cpu")
    tu.add_argument("--threads", type=pos_int, default=None)
    tu.add_argument("--out", type=Path, required=True)
    tu.add_argument("--force", action="store_true")
    tu.add_argument("--quiet", action="store_true")
    tu.set_defaults(fn=_cmd_tune)

    rp = sub.add_parser("reproduce", help="run the laptop-scale reproduction")
    add_reproduce_arguments(rp)
    rp.set_defaults(fn=lambda x: reproduce_from_args(["gcib"], x))
    return p


@cli_entry("gcib")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
