"""Claim checks of the steering experiment (paired over test items), kept apart from the runner."""

from __future__ import annotations

import numpy as np

from icml26_shared import ClaimCheck, Results
from icml26_shared.eval import paired_interval

from ..core import monotone_share
from ..registry import CLAIMS


def _claim(cid):
    return next(c for c in CLAIMS if c.id == cid)


def _at(rows, a):
    return next(r for r in rows if r["alpha"] == a)


def _iv(d):
    iv = paired_interval(np.asarray(d, float), n_resamples=1999)
    return iv.mean, (iv.low, iv.high)


def steering_claims(res: Results, sweeps: dict, uniform: dict, amps: dict, flip_a: float, layer: int,
                    contrast: str = "instruction", positions: str = "all") -> None:
    """``uniform``: the diffmean test row at its dev-chosen flip alpha; ``amps``: AMPS test rows at
    alpha 0 and at its own dev-chosen flip alpha ``flip_a`` (core.choose_flip_alpha on dev)."""
    dm, rnd = sweeps["diffmean"], sweeps["random"]
    perm = sweeps.get("permuted")
    flip = uniform["alpha"]
    lo, hi = dm[0]["alpha"], dm[-1]["alpha"]
    move = np.asarray(_at(dm, hi)["vision_scores"]) - np.asarray(_at(dm, lo)["vision_scores"])
    move_r = np.asarray(_at(rnd, hi)["vision_scores"]) - np.asarray(_at(rnd, lo)["vision_scores"])
    mono = monotone_share([r["vision_ratio"] for r in dm])
    res.add("steer_test", "diffmean", "monotone_share", mono)
    res.add("steer_test", "diffmean", "movement", float(move.mean()))
    res.add("steer_test", "random", "movement", float(move_r.mean()))
    m, iv = _iv(move)
    design = ("the late toy (0.2.3) was built so a step at the middle layers reaches the answer "
              "position's decision; the early toy of 0.2.2 moved only +0.245 over its sweep")
    res.claims.append(ClaimCheck.compare(
        _claim("sweep_movement"), m if mono == 1.0 else min(m, 0.0), threshold=0.8, interval=iv,
        note=f"vision ratio at alpha={hi:+g} minus at {lo:+g}, layer {layer}, {positions} positions, "
             f"{contrast} contrast (all three chosen on dev); "
             f"monotone share {mono:.2f} (a non-monotone sweep counts as 0); {design}"))
    def versus_null(claim_id: str, move_null, name: str, note: str) -> None:
        m, iv = _iv(move - 5.0 * move_null)
        chk = ClaimCheck.compare(_claim(claim_id), float(move.mean()), 5.0 * float(move_null.mean()),
                                 f"5 x {name}", interval=iv, note=note)
        if mono < 1.0 and chk.held:  # a non-monotone sweep does not steer, whatever its end points say
            chk.held = False
            chk.note += f"; diffmean sweep not monotone (share {mono:.2f}): not held"
        res.claims.append(chk)

    versus_null("sweep_vs_random", move_r, "random direction",
                "paired per item: movement(diffmean) - 5 x movement(random), same layer and alphas "
                "(per-item vision share; an invalid answer counts as not vision)")
    if perm is not None:  # the label null: same states, labels permuted
        move_p = np.asarray(_at(perm, hi)["vision_scores"]) - np.asarray(_at(perm, lo)["vision_scores"])
        res.add("steer_test", "permuted", "movement", float(move_p.mean()))
        versus_null("sweep_vs_permuted", move_p, "permuted-label direction",
                    "paired per item: movement(diffmean) - 5 x movement(diffmean of the same states "
                    "with the follow-image / follow-text labels permuted), same layer, positions and alphas")
    acc0 = np.asarray(_at(dm, 0.0)["accuracy_scores"])
    accf = np.asarray(uniform["accuracy_scores"])
    shift_u = uniform["vision_ratio"] - _at(dm, 0.0)["vision_ratio"]
    m, iv = _iv(accf - acc0)
    chk = ClaimCheck.compare(
        _claim("accuracy_at_flip"), m, threshold=-0.02, interval=iv,
        note=f"single-modality accuracy change at the dev-chosen flip alpha={flip:+g} (smallest alpha "
             f"shifting the dev vision ratio by >= 0.25 whose dev accuracy cost has a one-sided 95% "
             f"upper bound <= 2 points, else the smallest that shifts); test vision "
             f"ratio {_at(dm, 0.0)['vision_ratio']:.3f} -> {uniform['vision_ratio']:.3f}")
    if shift_u < 0.1 and chk.held:
        chk.held = False
        chk.note += "; the vision ratio did not move by 0.1 at this alpha (no flip): not held"
    res.claims.append(chk)
    loss_u = acc0 - accf
    loss_a = np.asarray(amps[0.0]["accuracy_scores"]) - np.asarray(amps[flip_a]["accuracy_scores"])
    shift_a = amps[flip_a]["vision_ratio"] - amps[0.0]["vision_ratio"]
    res.add("steer_test", "diffmean", "shift_at_flip", shift_u)
    res.add("steer_test", "diffmean_amps", "shift_at_flip", shift_a)
    res.add("steer_test", "diffmean", "accuracy_loss_at_flip", float(loss_u.mean()))
    res.add("steer_test", "diffmean_amps", "accuracy_loss_at_flip", float(loss_a.mean()))
    m, iv = _iv(loss_a - 0.5 * loss_u)
    same = shift_a >= shift_u - 0.05
    chk = ClaimCheck.compare(_claim("amps_vs_uniform"), float(loss_a.mean()), 0.5 * float(loss_u.mean()),
                             "0.5 x uniform accuracy loss", interval=iv,
                             note=f"each at its own dev-chosen alpha: amps alpha={flip_a:+g} shift "
                                  f"{shift_a:+.3f}, loss {float(loss_a.mean()):+.3f}; uniform alpha={flip:+g} "
                                  f"shift {shift_u:+.3f}, loss {float(loss_u.mean()):+.3f}"
                                  f"{'' if same else ' (amps shift smaller: not held)'}")
    flipped = shift_u >= 0.1
    if not flipped and chk.held:
        chk.held = False
        chk.note += "; uniform steering shifted the vision ratio by < 0.1 at the flip alpha (no flip): not held"
    if not same or float(loss_u.mean()) <= 0.0:
        chk.held = False if chk.held is not None else None
        if float(loss_u.mean()) <= 0.0:
            chk.note += "; uniform steering lost no accuracy, nothing to halve"
    res.claims.append(chk)
