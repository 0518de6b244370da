"""Where the decoding loop's CPU time goes on SmolLM2 (one regime's test prompts as one batch).

    OMP_NUM_THREADS=1 uv run python packages/esp-decode/scripts/profile_loop.py [--regime open] \
        [--tokens 48] [--arms ar,esp]

Per arm: CPU seconds (``time.process_time``) in all, inside the decoder's ``forward``, inside the LM
head, and the rest (drafting, masks, verification, rollback), plus how many items went through the
head. ESP at the 0.2.4 quick run's dev choice (``vocab_mean``, top-K (16, 4, 2, 2), masks on the
best path). Timing only: losslessness is checked by the reproduction.
"""

from __future__ import annotations

import argparse
import time

import torch
from esp_decode import smol
from esp_decode.config import ESPConfig, LADEConfig
from esp_decode.decode import stack_caches


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--regime", default="open")
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--arms", default="ar,esp")
    args = ap.parse_args()
    torch.set_num_threads(1)
    p = smol._setup(dict(n_dev=1, n_test=4))
    model, eos = p["model"], p["eos"]
    prompts = p["test"][args.regime]
    base, head = model.get_decoder(), model.get_output_embeddings()
    acc = {"fwd": 0.0, "head": 0.0, "rows": 0}
    of, oh = base.forward, head.forward

    def fwd(*a, **k):
        t = time.process_time()
        out = of(*a, **k)
        acc["fwd"] += time.process_time() - t
        return out

    def hd(x):
        t = time.process_time()
        out = oh(x)
        acc["head"] += time.process_time() - t
        acc["rows"] += x.shape[0]
        return out

    base.forward, head.forward = fwd, hd
    stacked = stack_caches(model, [smol.prefill(model, q) for q in prompts])
    kw = {"esp": ESPConfig(attach="top", mask_init="vocab_mean", topk=(16, 4, 2, 2)),
          "lade": LADEConfig(ngram=3, window=4, guesses=5), "seed": 0}
    for arm in args.arms.split(","):
        acc.update(fwd=0.0, head=0.0, rows=0)
        t = time.process_time()
        _, stats, _ = smol._decode(model, prompts, arm, args.tokens, eos, kw, stacked)
        total = time.process_time() - t
        items = sum(sum(s["items"]) for s in stats)
        print(f"{arm}: total {total:.2f} CPU-s, forward {acc['fwd']:.2f}, head {acc['head']:.2f}, rest "
              f"{total - acc['fwd'] - acc['head']:.2f}; head on {acc['rows']} of {items} items; "
              f"calls {max(s['model_calls'] for s in stats)}", flush=True)


if __name__ == "__main__":
    main()
