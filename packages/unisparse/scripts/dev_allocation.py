"""Dev diagnosis (0.3.4): where does UniSparse lose the needle that the row-budget oracle keeps?
Every layer sparse (SmolLM2, 1,024 tokens, block 32, density 0.25, row budgets) on DEV needle
documents (offset 300; test documents use 900, MInference's dev 500). Hybrid arms swap the
oracle's exact block mass into UniSparse's scores — in some query-block rows (the last ones) or in
a group of layers — under the same selection rule and budget, so each arm's density is equal.
Per arm: greedy pass-key accuracy and the log-probability of the key's first token at the last
prompt position (a continuous proxy).
Usage: uv run python packages/unisparse/scripts/dev_allocation.py N_DOCS [ARM ...]
(0.3.4's runs: ``1 uni oracle uni+oracle_last1 uni+oracle_L0-9 uni+oracle_L10-19
uni+oracle_L20-29`` (plus the reverse with one row, then named oracle+uni_last1); ``3 uni oracle uni+oracle_rows_pre
uni+oracle_rows_needle uni+oracle_rows_post``; ``6 uni oracle uni+oracle_last2
uni+oracle_last3 oracle+uni_last2``.)"""
import sys
import time

import torch
from unisparse import core
from unisparse.baselines import register
from unisparse.e2e import correct, documents
from unisparse.fidelity import arm_config
from unisparse.io import load_model, patch, unpatch
from unisparse.needle import prefill_decode

torch.set_num_threads(1)
LAST = {"n": 1}
ROWS = {"sel": None}  # bool [NQ] of the rows that take the oracle's mass ("dev_oracle_rows")


@register("dev_oracle_rows")
def oracle_rows(q, k, cfg):
    """UniSparse's scores with the rows in ROWS["sel"] replaced by the true mass."""
    bs = cfg.block_size
    sc = core.unisparse_scores(q, k, bs, cfg.grans)
    valid = core.causal_block_valid(q.shape[2], k.shape[2], bs, q.device)
    orc = core.normalize_rows(core.block_attention_mass(q, k, bs), valid)
    sel = ROWS["sel"][: sc.shape[-2]]
    sc[..., sel, :] = orc[..., sel, :]
    return sc


@register("dev_uni_oracle_last")
def uni_oracle_last(q, k, cfg):
    """UniSparse's scores with the last LAST["n"] query-block rows replaced by the true mass."""
    sc = core.unisparse_scores(q, k, cfg.block_size, cfg.grans)
    n, bs = LAST["n"], cfg.block_size
    t = q.shape[2]
    q0 = max(0, (core.n_blocks(t, bs) - n) * bs)
    mass = core.block_attention_mass(q[:, :, q0:], k, bs)
    valid = core.causal_block_valid(t, k.shape[2], bs, q.device)
    sc[..., -n:, :] = core.normalize_rows(mass[..., -n:, :], valid[-n:])
    return sc


@register("dev_oracle_uni_last")
def oracle_uni_last(q, k, cfg):
    """The reverse: the true mass everywhere but UniSparse's scores in the last rows."""
    bs, n = cfg.block_size, LAST["n"]
    valid = core.causal_block_valid(q.shape[2], k.shape[2], bs, q.device)
    sc = core.normalize_rows(core.block_attention_mass(q, k, bs), valid)
    sc[..., -n:, :] = core.unisparse_scores(q, k, bs, cfg.grans)[..., -n:, :]
    return sc


def arms(block, dens, n_layers=30):
    # "uni": 0.3.3's rule (no answer-row pass), which the hybrids start from; "uni_answer64" is
    # 0.3.4's default (the answer rows hold the last 64 queries: here the last 3 rows)
    uni = arm_config("unisparse", block, dens).with_(answer_queries=0)
    orc = arm_config("oracle", block, dens)
    out = {"dense": None, "uni": (uni, None), "oracle": (orc, None),
           "uni_answer64": (uni.with_(answer_queries=64), None),
           "uni+oracle_last1": (uni.with_(method="dev_uni_oracle_last"), 1),
           "uni+oracle_last2": (uni.with_(method="dev_uni_oracle_last"), 2),
           "uni+oracle_last3": (uni.with_(method="dev_uni_oracle_last"), 3),
           "oracle+uni_last2": (uni.with_(method="dev_oracle_uni_last"), 2)}
    for part in ("pre", "needle", "post"):
        out[f"uni+oracle_rows_{part}"] = (uni.with_(method="dev_oracle_rows"), part)
    for g0 in range(0, n_layers, 10):
        out[f"uni+oracle_L{g0}-{g0 + 9}"] = (uni, {i: orc for i in range(g0, g0 + 10)})
    return out


def main():
    n = int(sys.argv[1])
    block, dens = 32, 0.25
    model, tok = load_model("smollm2")
    docs = documents(tok, 1024, n, 0, offset=300)
    A = arms(block, dens)
    if len(sys.argv) > 2:
        A = {k: v for k, v in A.items() if k in sys.argv[2:] or k == "dense"}
    res = {a: {"acc": [], "lp": []} for a in A}
    t0 = time.process_time()
    for ids, key, span in docs:
        first = tok(" " + key, add_special_tokens=False)["input_ids"][0]
        for name, spec in A.items():
            if spec is not None:
                cfg, layer_cfgs = spec
                if isinstance(layer_cfgs, str):  # a row set: before / at / after the needle
                    nb = core.n_blocks(len(ids), block)
                    b0, b1 = span[0] // block, (span[1] - 1) // block
                    r = torch.arange(nb)
                    ROWS["sel"] = {"pre": r < b0, "needle": (r >= b0) & (r <= b1),
                                   "post": r > b1}[layer_cfgs]
                    layer_cfgs = None
                elif isinstance(layer_cfgs, int):  # the last n query-block rows
                    LAST["n"], layer_cfgs = layer_cfgs, None
                patch(model, method=cfg.method, cfg=cfg, density=cfg.density,
                      min_seq_len=2 * block, layer_cfgs=layer_cfgs)
            try:
                logits, gen = prefill_decode(model, ids, 6)
            finally:
                unpatch(model)
            res[name]["acc"].append(int(correct(tok, gen, key)))
            res[name]["lp"].append(float(torch.log_softmax(logits[-1], -1)[first]))
        print(span, {a: r["acc"][-1] for a, r in res.items()},
              f"{time.process_time() - t0:.0f} CPU-s", flush=True)
    for a, r in res.items():
        print(f"{a:24s} acc {sum(r['acc'])}/{n}  mean log p(first key token) "
              f"{sum(r['lp']) / n:+.2f}")


if __name__ == "__main__":
    main()
