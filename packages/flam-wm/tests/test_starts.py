"""Best-of-R starts (``TrainConfig.starts``) [R]: R initialisations trained ``start_steps`` steps on the same
stream, the one whose latents remove the largest share of its one-step error continued; a best start under
``start_floor`` replaced by one more candidate, up to ``start_max`` (issue 57 item 5)."""

from __future__ import annotations

import os
import signal

import numpy as np
import pytest
import torch
from flam_wm import train as tr
from flam_wm.cli import main
from flam_wm.config import ModelConfig, TrainConfig
from flam_wm.core import WorldModel
from flam_wm.sprites import generate
from flam_wm.train import CHECKPOINT, Interrupted, train


def _cfg(model="flam") -> ModelConfig:
    return ModelConfig(model=model, slots=3 if model == "flam" else 1, latent_dim=6, width=16, size=16, unroll=2)


TC = dict(steps=6, batch_size=3, window=4, seed=1, unroll_from=3)


@pytest.fixture(scope="module")
def video():
    return generate(2, 6, 5, size=16, seed=3)[0]


def _same(a, b) -> bool:
    sa, sb = a.state_dict(), b.state_dict()
    return sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


def _force(monkeypatch, winner: int, starts: int = 2) -> None:
    """Candidate ``winner`` scores 1, every other 0 (the score function sees each run's candidates in order)."""
    calls = iter(range(1000))
    monkeypatch.setattr(tr, "start_gap", lambda model, z: 1.0 if next(calls) % starts == winner else 0.0)


def _reference_093(cfg: ModelConfig, tc: TrainConfig, video) -> WorldModel:
    """0.9.3's loop (no checkpoint, one process), written out: ``starts=1`` must still be this."""
    torch.manual_seed(tc.seed)
    model = WorldModel(cfg)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=tc.lr)
    gen = torch.Generator().manual_seed(tc.seed + 1)
    rng = np.random.default_rng(tc.seed)
    z = model.tokenize(video)
    n, t = z.shape[:2]
    w = min(tc.window, t)
    for step in range(tc.steps):
        idx = rng.integers(0, n, tc.batch_size)
        off = int(rng.integers(0, t - w + 1))
        eps = torch.randn((tc.batch_size, w - 1, cfg.slots, cfg.slot_latent), generator=gen)
        loss, _ = model(z[torch.as_tensor(idx), off:off + w], eps, 1 if step < tc.unroll_from else None)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    return model.eval()


def test_one_start_is_the_093_loop(video):
    ref = _reference_093(_cfg(), TrainConfig(**TC), video)
    got = train(_cfg(), TrainConfig(**TC), video)
    assert _same(got, ref) and got.train_info == {"start": 0, "starts": 1, "losses": None}
    assert not _same(got, _reference_093(_cfg(), TrainConfig(**{**TC, "steps": 5}), video))


@pytest.mark.parametrize("model", ["flam", "lam"])
def test_when_candidate_0_wins_the_run_is_bit_identical_to_one_start(video, monkeypatch, model):
    one = train(_cfg(model), TrainConfig(**TC), video)
    _force(monkeypatch, 0, 3)
    three = train(_cfg(model), TrainConfig(**TC, starts=3, start_steps=2), video)
    assert three.train_info["start"] == 0 and three.train_info["starts"] == 3
    assert _same(one, three)


def test_the_lower_scoring_candidate_is_the_one_continued(video, monkeypatch):
    seen: dict[int, list] = {}

    def note(step, model, info):
        seen.setdefault(info.get("start", -1), []).append((step, model))

    _force(monkeypatch, 1)
    got = train(_cfg(), TrainConfig(**TC, starts=2, start_steps=2), video, on_step=note)
    assert got.train_info["start"] == 1
    assert [s for s, _ in seen[0]] == [1, 2] and [s for s, _ in seen[1]] == [1, 2]
    assert [s for s, _ in seen[-1]] == [3, 4, 5, 6]                      # only the winner goes on ...
    assert all(m is seen[1][0][1] for _, m in seen[-1]) and got is seen[1][0][1]   # ... and it is candidate 1
    assert seen[0][0][1] is not seen[1][0][1]
    assert not _same(got, train(_cfg(), TrainConfig(**TC), video))      # another init, another model
    # unforced: the record's scores are each candidate's relative latent-use gap, and the highest one won
    monkeypatch.undo()
    free = train(_cfg(), TrainConfig(**TC, starts=3, start_steps=2), video)
    assert free.train_info["start"] == int(np.argmax(free.train_info["gaps"]))
    assert len(set(free.train_info["gaps"])) == 3 and len(free.train_info["losses"]) == 3


def test_candidates_differ_only_in_their_init_and_share_the_stream(video, monkeypatch):
    inits, batches = {}, {}
    real = tr.WorldModel.forward

    def spy(self, z, eps, *a, **k):
        batches.setdefault(id(self), []).append((z.clone(), eps.clone()))
        return real(self, z, eps, *a, **k)

    monkeypatch.setattr(tr.WorldModel, "forward", spy)
    train(_cfg(), TrainConfig(**TC, starts=2, start_steps=2), video,
          on_step=lambda s, m, i: inits.setdefault(i.get("start"), m))
    a, b = (batches[id(inits[r])] for r in (0, 1))
    assert all(torch.equal(x[0], y[0]) and torch.equal(x[1], y[1]) for x, y in zip(a[:2], b[:2], strict=True))
    assert tr.start_seed(1, 0) == 1 and tr.start_seed(1, 1) != 2     # no candidate is another seed's init


def test_resume_after_the_choice_is_exact(video, tmp_path, monkeypatch):
    _force(monkeypatch, 1)
    tc = TrainConfig(**TC, starts=2, start_steps=2)
    ref = train(_cfg(), tc, video, run_dir=tmp_path / "ref", every=100)

    def kill_at_4(step, model, info):
        if step == 4 and "start" not in info:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Interrupted) as exc:
        train(_cfg(), tc, video, run_dir=tmp_path / "run", every=100, on_step=kill_at_4)
    assert exc.value.step == 4 and exc.value.saved
    assert tr.checkpoint_start(tmp_path / "run" / CHECKPOINT)["start"] == 1
    monkeypatch.undo()  # the resumed run does not choose again: the checkpoint says candidate 1
    _force(monkeypatch, 0)
    steps = []
    resumed = train(_cfg(), tc, video, run_dir=tmp_path / "run", every=100, on_step=lambda s, m, i: steps.append(s))
    assert steps == [5, 6] and resumed.train_info["start"] == 1 and _same(resumed, ref)


def test_a_stop_while_the_candidates_run_writes_nothing_and_starts_again(video, tmp_path):
    tc = TrainConfig(**TC, starts=2, start_steps=2)
    ref = train(_cfg(), tc, video)

    def kill(step, model, info):
        if info.get("start") == 1 and step == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Interrupted) as exc:
        train(_cfg(), tc, video, run_dir=tmp_path / "run", on_step=kill)
    assert not exc.value.saved and not (tmp_path / "run" / CHECKPOINT).exists()
    again = train(_cfg(), tc, video, run_dir=tmp_path / "run")
    assert _same(again, ref) and again.train_info == ref.train_info


@pytest.mark.parametrize("kw, msg", [(dict(starts=0), "starts must be"), (dict(starts=2), "0 < start_steps"),
                                     (dict(starts=2, start_steps=6), "0 < start_steps"),
                                     (dict(start_steps=-1), "start_steps must"), (dict(starts=1.5), "starts must"),
                                     (dict(start_max=-1), "start_max must"), (dict(start_floor=1.0), "start_floor must"),
                                     (dict(start_floor=float("nan")), "start_floor must")])
def test_bad_values_are_refused(kw, msg):
    with pytest.raises(ValueError, match=msg):
        TrainConfig(steps=6, **kw)
    TrainConfig(steps=6, starts=1, start_steps=3)  # unused without starts: allowed


def test_cli_refuses_bad_starts_in_one_line(tmp_path, capsys):
    data = tmp_path / "data"
    assert main(["gen-data", "sprites", "--entities", "1", "--clips", "3", "--frames", "4", "--size", "16",
                 "--seed", "1", "--out", str(data)]) == 0
    capsys.readouterr()
    base = ["train", "--data", str(data), "--size", "16", "--model", "lam", "--latent-dim", "4", "--batch-size", "2",
            "--steps", "3", "--out", str(tmp_path / "run")]
    assert main([*base, "--starts", "2", "--start-steps", "3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "start_steps" in err[0] and not (tmp_path / "run").exists()
    assert main([*base, "--starts", "2", "--start-steps", "1"]) == 0
    import json

    assert json.loads((tmp_path / "run" / "config.json").read_text())["train"]["starts"] == 2


def test_a_run_written_before_starts_resumes_and_refuses_other_starts(tmp_path, capsys):
    import json

    data = tmp_path / "data"
    assert main(["gen-data", "sprites", "--entities", "1", "--clips", "3", "--frames", "4", "--size", "16",
                 "--seed", "1", "--out", str(data)]) == 0
    run = tmp_path / "run"
    base = ["train", "--data", str(data), "--size", "16", "--model", "lam", "--latent-dim", "4", "--batch-size", "2",
            "--out", str(run)]
    assert main([*base, "--steps", "2"]) == 0
    cfg = json.loads((run / "config.json").read_text())
    del cfg["train"]["starts"], cfg["train"]["start_steps"]          # as 0.9.3 wrote it
    (run / "config.json").write_text(json.dumps(cfg))
    assert main([*base, "--steps", "3"]) == 0                          # one start: the same config, resumes
    capsys.readouterr()
    assert main([*base, "--steps", "4", "--starts", "2", "--start-steps", "1"]) == 2
    err = capsys.readouterr().err
    assert "another config" in err and "train.start" in err


def test_the_start_is_chosen_without_labels(tmp_path):
    """Issue 57 item 5: the best-of-R choice reads frames only -- a data folder with its actions files removed
    trains the same chosen start and bit-identical weights (CLI, the path a user takes)."""
    import json
    import shutil

    from safetensors.torch import load_file

    data = tmp_path / "data"
    assert main(["gen-data", "sprites", "--entities", "2", "--clips", "6", "--frames", "5", "--size", "16",
                 "--out", str(data)]) == 0
    bare = tmp_path / "bare"
    shutil.copytree(data, bare)
    removed = [p for p in bare.rglob("*actions*.npy")]
    assert removed
    for p in removed:
        p.unlink()
    runs = []
    for d in (data, bare):
        out = tmp_path / f"run-{d.name}"
        assert main(["train", "--data", str(d), "--size", "16", "--slots", "3", "--latent-dim", "6", "--width", "16",
                     "--steps", "4", "--batch-size", "3", "--starts", "2", "--start-steps", "2", "--out", str(out)]) == 0
        runs.append(out)
    w = [load_file(str(r / "model.safetensors")) for r in runs]
    assert w[0].keys() == w[1].keys() and all(torch.equal(w[0][k], w[1][k]) for k in w[0])
    starts = [tr.checkpoint_start(r / CHECKPOINT) for r in runs]
    assert starts[0] == starts[1] and starts[0]["starts"] == 2
    assert json.loads((runs[0] / "metrics.json").read_text()).keys() == json.loads((runs[1] / "metrics.json").read_text()).keys()


def test_the_score_is_the_relative_latent_use_gap_on_the_first_training_clips(video, monkeypatch):
    from flam_wm.evaluate import latent_use_gap

    seen = []
    real = tr.start_gap

    def spy(model, z):
        score, training = real(model, z), model.training   # the training mode is given back
        seen.append((score, latent_use_gap(model.eval(), z, relative=True), z.shape[0], training))
        model.train()
        return seen[-1][0]

    monkeypatch.setattr(tr, "start_gap", spy)
    got = train(_cfg(), TrainConfig(**TC, starts=2, start_steps=2), video)
    assert [round(g, 6) for g, *_ in seen] == got.train_info["gaps"]
    assert all(a == b and n == min(tr.GAP_CLIPS, len(video)) and training for a, b, n, training in seen)


@pytest.mark.parametrize("gaps, floor, most, run, pick, met", [
    ((0.02, 0.05, 0.3, 0.9), 0.1, 4, 3, 2, True),     # under the floor: replaced until one meets it
    ((0.02, 0.05, 0.06, 0.9), 0.1, 3, 3, 2, False),   # at most start_max candidates; the best of them goes on
    ((0.5, 0.05, 0.9, 0.9), 0.1, 4, 2, 0, True),      # the floor met by the first R: no replacement
    ((0.02, 0.05, 0.3, 0.9), 0.1, 0, 2, 1, False),    # start_max 0: no replacement
])
def test_a_start_under_the_floor_is_replaced(video, monkeypatch, gaps, floor, most, run, pick, met):
    calls = iter(gaps)
    monkeypatch.setattr(tr, "start_gap", lambda model, z: next(calls))
    seen = set()
    got = train(_cfg(), TrainConfig(**TC, starts=2, start_steps=2, start_floor=floor, start_max=most), video,
                on_step=lambda s, m, i: seen.add(i.get("start")))
    info = got.train_info
    assert info["starts"] == run and info["start"] == pick and info["met"] is met and info["floor"] == floor
    assert info["gaps"] == list(gaps[:run]) and seen == set(range(run)) | {None}


def test_cli_start_floor_reaches_the_run_and_a_bad_one_is_one_line(tmp_path, capsys):
    import json

    data = tmp_path / "data"
    assert main(["gen-data", "sprites", "--entities", "1", "--clips", "3", "--frames", "4", "--size", "16",
                 "--seed", "1", "--out", str(data)]) == 0
    base = ["train", "--data", str(data), "--size", "16", "--model", "lam", "--latent-dim", "4", "--batch-size", "2",
            "--steps", "3", "--starts", "2", "--start-steps", "1"]
    capsys.readouterr()
    assert main([*base, "--start-floor", "2", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "start_floor" in err[0] and not (tmp_path / "bad").exists()
    assert main([*base, "--start-floor", "0.99", "--start-max", "3", "--out", str(tmp_path / "run")]) == 0
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())["train"]
    start = json.loads((tmp_path / "run" / "metrics.json").read_text())["start"]
    assert cfg["start_floor"] == 0.99 and cfg["start_max"] == 3
    assert start["starts"] == 3 and start["floor"] == 0.99 and start["met"] is False and len(start["gaps"]) == 3
