"""Issue 56: strict JSON on a model whose answers never parse, intervals on the ratio's basis
(M2), held-out steering fits by default (M3), saved directions that round-trip exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from mc2_bench.cli import main
from mc2_bench.core import MC2Item, preference_metrics, ratio_intervals
from mc2_bench.protocol import split_fit_eval

from icml26_shared.io import dumps_json


def _strict(text: str):
    def no_constant(name):
        raise AssertionError(f"non-standard JSON constant {name}")
    return json.loads(text, parse_constant=no_constant)


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("ws56")
    assert main(["digits-items", "--out", str(root / "dev"), "--n", "6", "--split", "dev"]) == 0
    assert main(["digits-items", "--out", str(root / "test"), "--n", "6"]) == 0
    assert main(["toy", "--vision-preference", "0.5", "--out", str(root / "toy"), "--steps", "2"]) == 0
    assert main(["toy", "--vision-preference", "0.5", "--out", str(root / "toy_late"), "--steps", "2",
                 "--arch", "late"]) == 0
    return root


def _data(ws, split="test"):
    return ["--data", str(ws / split / "items.json"), "--images", str(ws / split)]


# --- M2: the interval on the ratio's basis -------------------------------------------------------

def _per_item_half_invalid(path, n=8):
    """Half the items invalid in both orders, every valid answer vision: ratio 1.0, interval [1, 1]."""
    recs = [{"id": f"i{k}", "task": "t", "mode": "single", "follow": None,
             "modality_order0": "vision" if k % 2 else None,
             "modality_order1": "vision" if k % 2 else None} for k in range(n)]
    path.write_text("".join(dumps_json(r, indent=None) + "\n" for r in recs))
    return path


def test_report_interval_is_on_the_ratio_basis(tmp_path, capsys):
    per = _per_item_half_invalid(tmp_path / "per.jsonl")
    assert main(["report", str(per), "--json"]) == 0
    got = _strict(capsys.readouterr().out)
    assert got["vision_ratio"] == 1.0 and got["n_valid"] == 8 and got["invalid_rate"] == 0.5
    assert got["vision_ratio_ci"] == [1.0, 1.0]
    assert got["text_ratio_ci"] == [0.0, 0.0]
    assert got["order_consistency_ci"] == [1.0, 1.0]
    assert got["per_task"]["t"]["vision_ratio_ci"] == [1.0, 1.0]
    # a resample of 8 items is all-invalid with probability 1/256: dropped and counted (~8 of 1999)
    assert 0 < got["resamples_dropped"]["ratios"] < 30


@pytest.mark.parametrize("seed", range(5))
def test_intervals_contain_their_ratios(seed):
    rng = np.random.default_rng(seed)
    choices = np.array(["vision", "text", None], dtype=object)
    n = int(rng.integers(5, 40))
    m0 = list(rng.choice(choices, n, p=[0.5, 0.3, 0.2]))
    m1 = list(rng.choice(choices, n, p=[0.4, 0.3, 0.3]))
    met, iv = preference_metrics(m0, m1), ratio_intervals(m0, m1)
    for k in ("vision_ratio", "text_ratio", "order_consistency"):
        lo, hi = iv[f"{k}_ci"]
        assert lo <= met[k] <= hi, (k, lo, met[k], hi)


def test_no_valid_answer_gives_null_ratio_and_interval():
    iv = ratio_intervals([None] * 4, [None] * 4, n_resamples=99)
    assert all(np.isnan(iv["vision_ratio_ci"])) and iv["resamples_dropped"]["ratios"] == 99


# --- item 1: strict JSON when nothing parses -----------------------------------------------------

class NeverParses:
    """A toy adapter whose generated answers never name an option (the random-init LLaVA's
    "::::::::"): every answer invalid, hidden states and hooks as the toy's."""

    def __init__(self, inner):
        self.inner = inner
        self.kind = "stub"

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def answer(self, items, mode, order, answer_mode="letter", follow=None):
        return [{**r, "letter": None, "text": "::::::::"}
                for r in self.inner.answer(items, mode, order, answer_mode, follow)]


@pytest.fixture
def never_parses(ws, monkeypatch):
    import mc2_bench.cli as cli

    real = cli._load_model
    monkeypatch.setattr(cli, "_load_model", lambda p, *a: NeverParses(real(p, *a)))


def test_every_json_is_strict_when_nothing_parses(ws, tmp_path, never_parses, capsys):
    per = tmp_path / "per.jsonl"
    model = ["--model", str(ws / "toy")]
    assert main(["eval", *model, *_data(ws), "--json", "--per-item", str(per)]) == 0
    ev = _strict(capsys.readouterr().out)
    assert ev["n_valid"] == 0 and ev["invalid_rate"] == 1.0
    assert ev["vision_ratio"] is None and ev["vision_ratio_ci"] == [None, None]
    assert ev["order_consistency"] is None and ev["per_task"]["digit_recognition"]["text_ratio"] is None
    assert main(["report", str(per), "--json"]) == 0
    assert _strict(capsys.readouterr().out)["vision_ratio"] is None
    assert main(["report", str(per)]) == 0
    assert "n/a (0 valid answers)" in capsys.readouterr().out
    assert main(["eval", *model, *_data(ws), "--mode", "icc", "--json"]) == 0
    assert _strict(capsys.readouterr().out)["follow_vision"]["vision_ratio"] is None
    assert main(["steer", *model, *_data(ws), "--layers", "1", "--alpha-grid=-1,0,1", "--json",
                 "--control", "random"]) == 0
    st = _strict(capsys.readouterr().out)
    assert all(r["vision_ratio"] is None for rows in st["sweeps"].values() for r in rows)
    assert main(["probe", *model, *_data(ws), "--json"]) == 0
    _strict(capsys.readouterr().out)


# --- M3: held-out fits by default ----------------------------------------------------------------

def _steer(ws, *extra, model="toy"):
    return main(["steer", "--model", str(ws / model), *_data(ws), "--alpha-grid=-1,0,1", "--json",
                 "--answer-mode", "letter-logprob", *extra])


def test_steer_fits_and_sweeps_disjoint_items_by_default(ws, capsys):
    assert _steer(ws, "--layers", "1-2") == 0
    out = _strict(capsys.readouterr().out)
    ids = [it["id"] for it in json.loads((ws / "test" / "items.json").read_text())]
    assert out["in_sample"] is False and out["fit_ids"] and out["eval_ids"]
    assert not set(out["fit_ids"]) & set(out["eval_ids"])
    assert sorted(out["fit_ids"] + out["eval_ids"]) == sorted(ids)
    assert _steer(ws, "--layers", "1-2", "--fit-on-eval") == 0
    ins = _strict(capsys.readouterr().out)
    assert ins["in_sample"] is True and ins["fit_ids"] == ins["eval_ids"] == ids


def test_split_is_stratified_by_task_and_seeded():
    items = [MC2Item(f"i{k}", "a" if k < 6 else "b", "q", "one", "two", "c") for k in range(10)]
    fit, ev = split_fit_eval(items, 0.5, seed=3)
    assert sum(it.task == "a" for it in fit) == 3 and sum(it.task == "b" for it in fit) == 2
    assert [it.id for it in fit] == [it.id for it in split_fit_eval(items, 0.5, seed=3)[0]]
    assert {it.id for it in fit} | {it.id for it in ev} == {it.id for it in items}


def test_steer_alpha_zero_equals_eval_on_the_swept_items(ws, tmp_path, capsys):
    assert _steer(ws, "--layers", "1") == 0
    out = _strict(capsys.readouterr().out)
    items = json.loads((ws / "test" / "items.json").read_text())
    (tmp_path / "eval.json").write_text(json.dumps([it for it in items if it["id"] in out["eval_ids"]]))
    assert main(["eval", "--model", str(ws / "toy"), "--data", str(tmp_path / "eval.json"), "--images",
                 str(ws / "test"), "--json", "--answer-mode", "letter-logprob"]) == 0
    ev = _strict(capsys.readouterr().out)
    zero = next(r for r in out["sweeps"]["diffmean"] if r["alpha"] == 0)
    assert zero["vision_ratio"] == ev["vision_ratio"]


# --- item 4: saved directions ---------------------------------------------------------------------

def test_save_load_sweep_equals_fit_sweep_and_another_model_is_refused(ws, tmp_path, capsys):
    f = tmp_path / "dir.safetensors"
    fit = ["--fit-data", str(ws / "dev" / "items.json"), "--fit-images", str(ws / "dev"), "--layers", "1-2", "--adaptive", "amps"]
    assert _steer(ws, *fit, "--save-direction", str(f)) == 0
    a = _strict(capsys.readouterr().out)
    assert f.is_file()
    assert _steer(ws, "--load-direction", str(f), "--adaptive", "amps") == 0
    b = _strict(capsys.readouterr().out)
    assert b["layers"] == [1, 2] and b["in_sample"] is False and b["fit_ids"] == a["fit_ids"]
    assert a["sweeps"] == b["sweeps"]
    from mc2_bench.direction import SteeringDirection

    d = SteeringDirection.load(f)
    assert d.layers == [1, 2] and d.method == "diffmean" and set(d.amps) == {1, 2}
    assert _steer(ws, *fit, "--save-direction", str(f)) == 2  # never overwritten
    assert "already exists" in capsys.readouterr().err
    assert _steer(ws, "--load-direction", str(f), model="toy_late") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("another model" in err[0] or "layers" in err[0]), err
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"not a safetensors file")
    assert _steer(ws, "--load-direction", str(bad)) == 2
    assert "not a direction" in capsys.readouterr().err
