"""Optimistic resets, the chunked / factored all-goals relabelling, Dual LEO's two variants and
the evaluation-cost arithmetic."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from leo_craftax.algos import build_algo, gc_q_network
from leo_craftax.baselines import her_all_q
from leo_craftax.bench import cost_model
from leo_craftax.config import EnvConfig, TrainConfig, gridworld_cpu
from leo_craftax.envs import Gridworld, auto_reset_step, optimistic_reset_step
from leo_craftax.norm import apply_eval, apply_train, init_vars
from leo_craftax.train import FAST_COMPILE as FAST  # same values, a fraction of the compile time
from leo_craftax.train import extra_eval_keys, final_success


class _Counter:
    """Episodes end after one step; reset hands out a state naming the reset key's draw."""

    max_steps = 1

    def reset(self, rng, start_time=None):
        v = jax.random.randint(rng, (), 0, 1 << 20)  # exact in float32
        return jnp.stack([v, 0]).astype(jnp.float32), {"id": v, "t": jnp.int32(0)}

    def step(self, rng, state, action):
        t = state["t"] + 1
        done = action > 0  # action 1 ends the episode, 0 continues
        return jnp.stack([state["id"], t]).astype(jnp.float32), {"id": state["id"], "t": t}, done


# one compiled step per (env, ratio) instead of one program per operation; numpy out
_step_jit = jax.jit(optimistic_reset_step, static_argnums=(0, 4), compiler_options=FAST)


def _step(*args):
    return jax.tree.map(np.asarray, _step_jit(*args))


def _resets(env, e: int):
    """``e`` fresh states (one compiled program)."""
    keys = jax.random.split(jax.random.PRNGKey(0), e)
    return jax.tree.map(np.asarray, jax.jit(jax.vmap(env.reset), compiler_options=FAST)(keys))


def test_optimistic_resets_hand_fresh_states_to_ended_envs_only():
    env, e, ratio = _Counter(), 16, 4
    obs, st = _resets(env, e)
    action = np.array([1, 0] * 8, np.int32)  # 8 envs end: more than the 4 fresh states
    nxt, obs_act, st2, done = _step(env, jax.random.PRNGKey(1), st, action, ratio)
    assert np.array_equal(np.asarray(done), np.asarray(action > 0))
    np.testing.assert_array_equal(nxt[:, 1], np.ones(e))            # the true next observation
    ids = np.asarray(st2["id"])
    assert np.array_equal(ids[~np.asarray(done)], np.asarray(st["id"])[~np.asarray(done)])
    fresh = ids[np.asarray(done)]
    assert len(set(fresh.tolist())) == e // ratio                   # 4 fresh starts, shared
    assert not set(fresh.tolist()) & set(np.asarray(st["id"]).tolist())
    np.testing.assert_array_equal(np.asarray(st2["t"])[np.asarray(done)], 0)
    np.testing.assert_array_equal(obs_act[:, 0], ids)
    # at most E/ratio ended: every ended env gets its own fresh start
    few = np.zeros(e, np.int32)
    few[[2, 5, 11]] = 1
    _, _, st3, d3 = _step(env, jax.random.PRNGKey(1), st, few, ratio)
    assert len(set(np.asarray(st3["id"])[np.asarray(d3)].tolist())) == 3


def test_ratio_one_is_one_reset_per_env():
    env = Gridworld(size=5, wall_prob=0.2, map_seed=1, max_steps=3)
    e = 8
    _, st = _resets(env, e)
    st = {**st, "t": np.full(e, 2, np.int32)}  # every env ends on this step
    action = np.zeros(e, np.int32)
    _, obs_act, st2, done = _step(env, jax.random.PRNGKey(3), st, action, 1)
    assert bool(done.all())
    assert len({tuple(p) for p in np.asarray(st2["pos"]).tolist()}) > 1  # independent resets
    ref = jax.eval_shape(jax.vmap(lambda r, s, a: auto_reset_step(env, r, s, a)),
                         jax.random.split(jax.random.PRNGKey(3), e), st, action)
    assert ref[1].shape == obs_act.shape


def test_chunked_and_factored_her_all_equal_k_goal_conditioned_passes():
    cfg = gridworld_cpu("pqn_her", her_mode="all", width=32, layers=2)  # a per-goal layer after the first
    net = gc_q_network(cfg, 12, 5)
    variants = [(4, False), (5, True)]  # chunked naive, chunked factored

    def all_values(r_obs, r_init):  # every quantity compared below, in one compiled program
        obs = jax.random.normal(r_obs, (7, 20))
        v = init_vars(net, r_init, obs, jnp.zeros(7, jnp.int32))

        def ref(p):  # one goal-conditioned pass per goal, BatchRenorm in training mode
            one = lambda g: apply_train(net, {**v, "params": p}, obs, jnp.full(7, g))  # noqa: E731
            q, stats = jax.vmap(one, out_axes=(1, 0))(jnp.arange(12))
            return q, jax.tree.map(lambda s: s[0], stats)

        p = v["params"]
        out = {"ref": ref(p), "ref_grad": jax.grad(lambda p: (ref(p)[0] ** 2).sum())(p),
               "ref_eval": jax.vmap(lambda g: apply_eval(net, {**v, "params": p}, obs,
                                                         jnp.full(7, g)), out_axes=1)(jnp.arange(12))}
        for c, fa in variants:
            f = lambda p, c=c, fa=fa: her_all_q(net, {**v, "params": p}, obs, c, fa, train=True)  # noqa: E731
            out[f"{c}/{fa}"] = (f(p), jax.grad(lambda p, f=f: (f(p)[0] ** 2).sum())(p),
                          her_all_q(net, {**v, "params": p}, obs, c, fa)[0])
        return out

    got = jax.jit(all_values, compiler_options=FAST)(jax.random.PRNGKey(0), jax.random.PRNGKey(1))
    want, s_want = got["ref"]
    assert float(jnp.abs(s_want["encoder"]["input_norm"]["brn"]["mean"]).max()) > 0
    for c, fa in variants:
        (q, stats), grad, q_eval = got[f"{c}/{fa}"]
        np.testing.assert_allclose(q, want, rtol=1e-5, atol=1e-6)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7), stats,
                     s_want)
        # the gradient through it too (chunks are rematerialised in the backward pass)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                     grad, got["ref_grad"])
        # evaluation mode (targets): the running statistics
        np.testing.assert_allclose(q_eval, got["ref_eval"], rtol=1e-5, atol=1e-6)


def test_dual_leo_variants_differ_only_by_the_extra_goal():
    k, a = 9, 4
    idx = np.arange(6)
    mb = {"action": idx % a, "goal": idx % k, "g_any": (idx + 3) % k,
          "y": np.full(6, 0.5, np.float32), "y_all": np.full((6, k), 0.5, np.float32)}
    cmd = gridworld_cpu("dual_leo_pqn", width=16, layers=1)
    both = cmd.replace(distill_goals="commanded+random")
    s1, s2 = build_algo(cmd, k, a), build_algo(both, k, a)

    def distill(r_obs, r_init):  # one compiled program
        b = {**mb, "obs": jax.random.normal(r_obs, (6, 10))}
        params = s1.init(r_init, b["obs"][:1])
        same = {**b, "g_any": b["goal"]}  # the random goal is the commanded one: identical terms
        return [s.loss(params, x)[1][0]["distill"] for s in (s1, s2) for x in (b, same)]

    d1, d1_same, d2, d2_same = map(float, jax.jit(distill, compiler_options=FAST)(
        jax.random.PRNGKey(0), jax.random.PRNGKey(1)))
    assert d1 != pytest.approx(d2)
    assert d1_same == pytest.approx(d2_same, rel=1e-6)


def test_craftax_defaults_evaluate_512_steps_and_report_their_cost():
    cfg = TrainConfig(env=EnvConfig("craftax-classic"), total_timesteps=int(1e6), num_evals=1)
    assert cfg.eval_steps(10_000) == 512 and cfg.replace(test_steps=None).eval_steps(10_000) == 10_000
    per_point, per_segment = cfg.eval_cost(136, 10_000)
    assert per_point == 136 * 16 * 512 and per_segment == cfg.num_updates * 32 * 1024
    assert gridworld_cpu().eval_steps(200) == 200  # capped by the episode length


def test_interim_points_evaluate_fewer_episodes_the_final_point_all():
    """Craftax defaults: 4 episodes per goal at the points before the last, all 16 at the last
    (4 calls of 4 on fresh keys); the gridworld's 2 repeats are one call everywhere."""
    cfg = TrainConfig(env=EnvConfig("craftax-classic"), total_timesteps=int(1e6), num_evals=1)
    assert (cfg.eval_chunk, cfg.test_repeats // cfg.eval_chunk) == (4, 4)
    assert cfg.eval_cost_total(136, 10_000) == 136 * 512 * (4 + 16)  # was 136 * 512 * 32
    assert cfg.replace(interim_repeats=0).eval_chunk == 16
    assert cfg.replace(test_repeats=6).eval_chunk == 2
    assert gridworld_cpu().eval_chunk == gridworld_cpu().test_repeats == 2

    def fake_eval(params, r):  # a distinct "success" per key
        return jnp.full(3, jax.random.uniform(r)) + params

    key = jax.random.PRNGKey(5)
    got = jax.jit(lambda k: final_success(fake_eval, 0.0, k, fake_eval(0.0, k), 4),
                  compiler_options=FAST)(key)
    draws = [float(fake_eval(0.0, k)[0]) for k in [key, *extra_eval_keys(key, 4)]]
    assert len(set(draws)) == 4  # four calls on four different keys
    np.testing.assert_allclose(got, np.mean(draws), rtol=1e-6)


def test_train_seeds_final_point_is_the_same_mean(monkeypatch):
    """``train_seeds`` (the three compiled programs, timed) averages the final point's calls on
    the keys ``make_train``'s ``final_success`` uses; the points before it make one call."""
    import leo_craftax.train as tr

    cfg = gridworld_cpu("leo", env_size=5, total_timesteps=64 * 16 * 2, num_evals=2,
                        test_repeats=8, interim_repeats=2)
    calls = []

    def fake_eval(params, r):
        return jnp.full(3, jax.random.uniform(r))

    def evaluate(params, keys):  # vmapped over seeds, as the compiled program is
        calls.append(keys)
        return jnp.stack([fake_eval(None, k) for k in keys])

    parts = (lambda rngs: ((np.zeros(len(rngs)),), rngs),
             lambda carry: (carry, {"loss": np.zeros((len(carry[0]), 1))}), evaluate)
    monkeypatch.setattr(tr, "compiled_parts", lambda *a: parts)
    out = tr.train_seeds(cfg, [0, 1])
    assert len(calls) == 1 + 2 + 3  # before training, after segment 1, 4 calls at the last
    for i, s in enumerate((0, 1)):
        r_eval = jax.random.PRNGKey(s)
        last = jax.random.split(r_eval, 2)[-1]
        want = tr.final_success(fake_eval, None, last, fake_eval(None, last), 4)
        np.testing.assert_allclose(out["success"][i, -1], want, rtol=1e-6)
        np.testing.assert_allclose(out["success"][i, 0], fake_eval(None, r_eval), rtol=1e-6)


def test_cost_model_at_paper_sizes():
    m = cost_model(512, obs_dim=8268, width=1024, layers=4, num_actions=43, batch=512)
    assert 170 < m["flop_ceiling_her_all"] < 180  # the ≈176x the review computed
    assert m["flop_ceiling_her_all_factored"] < m["flop_ceiling_her_all"] / 2
    small = cost_model(512)
    assert small["flop_ceiling_her_all"] == pytest.approx(59.5, abs=1)


def test_smoke_reports_both_speed_units(smoke_reproduction):
    """The per-update ratio, HER-all's recompute cost and the whole-step env steps/s are rows
    of their own, each named with its unit."""
    res, _ = smoke_reproduction
    got = {(r.experiment, r.metric): r for r in res.rows}
    for metric in ("per_update_ratio", "her_all_recompute_cost"):
        row = got[("speed", metric)]
        assert np.isfinite(row.value) and row.value > 0
    assert "per update" in got[("speed", "per_update_ratio")].extra["note"]
    for metric in ("env_steps_per_s_leo", "env_steps_per_s_her_all", "step_ratio"):
        row = got[("speed (whole training step)", metric)]
        assert np.isfinite(row.value) and row.value > 0
    assert got[("speed (whole training step)", "env_steps_per_s_leo")].unit == "env steps/s"
