"""Bad input: one clear line on stderr, exit 2, nothing written."""

import numpy as np
import pytest
from leo_craftax.cli import main
from leo_craftax.io import load_checkpoint, save_checkpoint, save_state


def _err(capsys, argv):
    rc = main(argv)
    err = capsys.readouterr().err.strip()
    assert rc == 2 and len(err.splitlines()) == 1 and err.startswith("leo-craftax: error:"), err
    return err


@pytest.mark.parametrize("argv, text", [
    (["train", "--env", "minecraft"], "unknown env"),
    (["train", "--algo", "dqn"], "unknown algo"),
    (["train", "--steps", "lots"], "positive integer"),
    (["train", "--norm", "groupnorm"], "invalid choice"),
    (["train", "--obs", "rgb"], "invalid choice"),
    (["train", "--obs", "pixels"], "pixel observations"),
    (["train", "--algo", "pqn_her", "--her-mode", "future"], "unknown HER mode"),
    (["goals", "--env", "atari"], "unknown env"),
    (["bench", "--goals", "16,x"], "--goals"),
    (["bench", "--preset", "huge"], "unknown preset"),
    (["train", "--test-steps", "0"], "positive integer"),
    (["train", "--eval-repeats", "nan"], "positive integer"),
    (["train", "--bogus"], "unrecognized arguments"),
    (["eval", "missing.msgpack"], "does not exist"),
    (["train", "--resume"], "nothing to resume"),
    (["train", "--checkpoint-every", "7"], "must divide the 195 updates"),
    (["train", "--steps", "10"], "--steps 10 is below one update: at least 1,024 (--num-steps 16"),
    (["train", "--steps", "1000", "--num-envs", "8", "--num-steps", "128"], "at least 1,024"),
    (["train", "--lr", "nan"], "--lr: must be a finite number"),
    (["train", "--lr", "0"], "must be a finite number > 0"),
    (["train", "--max-grad-norm", "-1"], "must be a finite number > 0"),
    (["train", "--gamma", "0"], "must be a number in (0, 1]"),
    (["train", "--gamma", "inf"], "must be a number in (0, 1]"),
    (["train", "--eps-start", "1.5"], "must be a number in [0, 1]"),
    (["train", "--eps-decay", "0"], "must be a number in (0, 1]"),
    (["train", "--epochs", "0"], "positive integer"),
    (["train", "--num-steps", "-2"], "positive integer"),
    (["train", "--minibatch-size", "300"], "not a multiple of the minibatch size 300"),
    (["train", "--algo", "ppo_gc", "--minibatch-size", "3000"], "minibatch size 3000"),
    (["train", "--algo", "pqn_her", "--her-granularity", "episode"], "unknown HER granularity"),
    (["train", "--her-random-proportion", "nan"], "must be a number in [0, 1]"),
    (["train", "--her-relabelled-goals", "0"], "positive integer"),
])
def test_bad_input_exits_2(capsys, tmp_path, argv, text):
    if argv[0] == "train":
        argv = [*argv, "--out", str(tmp_path / "ck.msgpack")]
    assert text in _err(capsys, argv)
    assert not (tmp_path / "ck.msgpack").exists()


def _smoke_leo(smoke_run):
    """Seed 0's variables from the session's LEO smoke run (no compile of its own)."""
    import jax
    from leo_craftax.experiments import smoke_config
    from leo_craftax.train import env_from_config

    cfg = smoke_config("leo")
    return cfg, jax.tree.map(lambda x: x[0], smoke_run("leo")["params"]), env_from_config(cfg)


def test_checkpoint_errors(capsys, tmp_path, smoke_run):
    cfg, params, env = _smoke_leo(smoke_run)
    head = params["params"]["head"]["dense"]
    wrong = {**params, "params": {**params["params"], "head": {"dense": {  # a head for 7 goals
        "kernel": np.zeros((head["kernel"].shape[0], 7 * 4), np.float32),
        "bias": np.zeros(7 * 4, np.float32)}}}}
    assert env.goal_set.num_goals != 7
    path = save_checkpoint(tmp_path / "k.msgpack", cfg, wrong, env.goal_set.names)
    assert "all-goals head has 28 outputs" in _err(capsys, ["eval", str(path)])
    assert "trained on 'gridworld'" in _err(capsys, ["eval", str(path), "--env", "craftax"])
    with pytest.raises(Exception, match="algo='leo'"):
        load_checkpoint(path, cfg.replace(algo="pqn"))
    junk = tmp_path / "junk.msgpack"
    junk.write_bytes(b"not msgpack")
    assert "not a leo-craftax checkpoint" in _err(capsys, ["eval", str(junk)])
    existing = tmp_path / "exists.msgpack"
    existing.write_text("keep")
    assert "exists" in _err(capsys, ["train", "--out", str(existing)])
    assert existing.read_text() == "keep"


def test_numbers_accept_scientific_notation():
    from leo_craftax.cli import _config, build_parser

    args = build_parser().parse_args(["train", "--env", "craftax-classic", "--steps", "1e6",
                                      "--norm", "none"])
    cfg = _config(args)
    assert cfg.total_timesteps == 1_000_000 and cfg.norm == "none"
    assert _config(build_parser().parse_args(["train", "--env", "craftax"])).norm == "batchrenorm"


def test_training_knobs_reach_the_config():
    from leo_craftax.cli import _config, build_parser

    knobs = ["--lr", "1e-4", "--minibatch-size", "2048", "--num-steps", "2", "--epochs", "1",
             "--gamma", "0.995", "--eps-start", "0.3", "--eps-finish", "0.02", "--eps-decay", "0.5",
             "--no-anneal-lr", "--max-grad-norm", "10", "--num-envs", "1024"]
    want = {"lr": 1e-4, "minibatch_size": 2048, "num_steps": 2, "num_epochs": 1, "gamma": 0.995,
            "eps_start": 0.3, "eps_finish": 0.02, "eps_decay": 0.5, "anneal_lr": False,
            "max_grad_norm": 10.0, "num_envs": 1024}
    for env in ("gridworld", "craftax-classic"):
        cfg = _config(build_parser().parse_args(["train", "--env", env, "--algo", "pqn", *knobs]))
        assert {f: getattr(cfg, f) for f in want} == want, env
    # unset: the algorithm's defaults
    base = _config(build_parser().parse_args(["train", "--env", "craftax-classic"]))
    assert (base.lr, base.minibatch_size, base.num_steps, base.anneal_lr) == (2e-4, 512, 32, True)
    # PPO's minibatch and discount for the PPO actors; a Dual LEO (PPO) run's LEO teacher too
    ppo = _config(build_parser().parse_args(["train", "--algo", "ppo_gc", "--minibatch-size",
                                             "512", "--gamma", "0.9"]))
    assert (ppo.ppo_minibatch_size, ppo.ppo_gamma) == (512, 0.9)
    dual = _config(build_parser().parse_args(["train", "--algo", "dual_leo_ppo", "--gamma", "0.9"]))
    assert (dual.gamma, dual.ppo_gamma) == (0.9, 0.9)
    # PQN + HER: the README command's defaults on Craftax [C], and its HER knobs
    her = _config(build_parser().parse_args(["train", "--env", "craftax-classic", "--algo",
                                             "pqn_her"]))
    assert (her.minibatch_size, her.lr, her.num_steps, her.gamma, her.her_rows) == (
        2048, 1e-4, 2, 0.995, 3)
    her = _config(build_parser().parse_args([
        "train", "--env", "craftax-classic", "--algo", "pqn_her", "--her-relabelled-goals", "4",
        "--her-random-proportion", "0.75", "--her-granularity", "trajectory"]))
    assert (her.her_relabelled_goals, her.her_random_proportion, her.her_granularity,
            her.her_split) == (4, 0.75, "trajectory", (3, 1))


def test_config_refuses_a_run_below_one_update():
    from leo_craftax.config import TrainConfig

    from icml26_shared import UserError

    with pytest.raises(UserError, match="below one update: at least num_steps x num_envs = 32,768"):
        TrainConfig(total_timesteps=1000).validate()
    with pytest.raises(UserError, match="lr must be a finite number"):
        TrainConfig(lr=float("nan")).validate()


def test_goals_lists_names(capsys):
    assert main(["goals", "--env", "gridworld", "--size", "4"]) == 0
    lines = capsys.readouterr().out.split()
    assert lines and all(n.startswith("cell/") for n in lines)


def test_goals_in_a_closed_pipe_ends_quietly(capsys, monkeypatch):
    """``leo-craftax goals | head -1``: the reader leaves, the writer ends with 141 (SIGPIPE's
    status), nothing on stderr, no traceback."""

    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            raise BrokenPipeError(32, "Broken pipe")

        def fileno(self):
            raise ValueError("no file")

    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert main(["goals", "--env", "gridworld", "--size", "4"]) == 141
    assert capsys.readouterr().err == ""


def test_altered_checkpoint_is_refused(capsys, tmp_path, smoke_run):
    cfg, params, env = _smoke_leo(smoke_run)
    path = save_checkpoint(tmp_path / "k.msgpack", cfg, params, env.goal_set.names)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01  # one bit in the middle of the parameters' bytes
    bad = tmp_path / "bad.msgpack"
    bad.write_bytes(bytes(data))
    assert "corrupt" in _err(capsys, ["eval", str(bad)])
    assert load_checkpoint(path)[2]["seeds"] == [0]  # the intact one still loads


def test_compile_cache_is_scoped_to_its_block(tmp_path, monkeypatch):
    """``reproduce`` / ``train`` use JAX's persistent cache inside ``compile_cache()`` only: after
    the block the settings are back and new compiles write nothing there (0.3.1 left it on)."""
    import jax
    import jax.numpy as jnp
    from leo_craftax.experiments import compile_cache

    monkeypatch.setenv("ICML26_CACHE", str(tmp_path))
    before = jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs
    with compile_cache():
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.jit(lambda x: jnp.tanh(x) * 3)(jnp.ones(7)).block_until_ready()
    inside = set((tmp_path / "jax").iterdir())
    assert inside  # the block's compile was cached
    assert (jax.config.jax_compilation_cache_dir,
            jax.config.jax_persistent_cache_min_compile_time_secs) == before
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    try:
        jax.jit(lambda x: jnp.exp(x) * 5 - 2)(jnp.ones(11)).block_until_ready()
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", before[1])
    assert set((tmp_path / "jax").iterdir()) == inside


def test_resume_refuses_another_run_or_an_altered_state(capsys, tmp_path, smoke_run):
    """``train --resume`` continues only the run its state was written by: other flags or seeds,
    an altered file, or a fresh run over an existing state exit 2 before anything is trained."""
    from leo_craftax.experiments import smoke_config

    run = smoke_run("leo")
    out = tmp_path / "ck.msgpack"
    state = save_state(tmp_path / "ck.msgpack.state", smoke_config("leo"), run["seeds"],
                       run["states"][0])
    same = ["train", "--size", "5", "--steps", str(smoke_config("leo").total_timesteps),
            "--out", str(out)]
    assert "differs in total_timesteps" in _err(capsys, [*same[:3], "--steps", "49152", *same[-2:],
                                                         "--seeds", "2", "--resume"])
    assert "holds seeds [0, 1], not [0]" in _err(capsys, [*same, "--resume"])
    assert "written every 8 updates, not 4" in _err(
        capsys, [*same, "--seeds", "2", "--resume", "--checkpoint-every", "4"])
    assert "use --resume" in _err(capsys, [*same, "--seeds", "2", "--checkpoint-every", "8"])
    data = bytearray(state.read_bytes())
    data[len(data) // 2] ^= 0x01
    state.write_bytes(bytes(data))
    assert "corrupt" in _err(capsys, [*same, "--seeds", "2", "--resume"])
    assert not out.exists()
