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

FAST = {"xla_backend_optimization_level": 0}  # LLVM optimisation off: same values, faster compile


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


# one compiled step per (env, ratio) instead of one program per operation
_step = jax.jit(optimistic_reset_step, static_argnums=(0, 4))


def test_optimistic_resets_hand_fresh_states_to_ended_envs_only():
    env, e, ratio = _Counter(), 16, 4
    obs, st = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), e))
    action = jnp.array([1, 0] * 8)  # 8 envs end: more than the 4 fresh states
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
    few = jnp.zeros(e, jnp.int32).at[jnp.array([2, 5, 11])].set(1)
    _, _, st3, d3 = _step(env, jax.random.PRNGKey(1), st, few, ratio)
    assert len(set(np.asarray(st3["id"])[np.asarray(d3)].tolist())) == 3


def test_ratio_one_is_one_reset_per_env():
    env = Gridworld(size=5, wall_prob=0.2, map_seed=1, max_steps=3)
    e = 8
    _, st = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(0), e))
    st = {**st, "t": jnp.full(e, 2)}  # every env ends on this step
    action = jnp.zeros(e, jnp.int32)
    _, obs_act, st2, done = _step(env, jax.random.PRNGKey(3), st, action, 1)
    assert bool(done.all())
    assert len({tuple(p) for p in np.asarray(st2["pos"]).tolist()}) > 1  # independent resets
    ref = jax.eval_shape(jax.vmap(lambda r, s, a: auto_reset_step(env, r, s, a)),
                         jax.random.split(jax.random.PRNGKey(3), e), st, action)
    assert ref[1].shape == obs_act.shape


def test_chunked_and_factored_her_all_equal_k_goal_conditioned_passes():
    cfg = gridworld_cpu("pqn_her", her_mode="all", width=32, layers=3)
    net = gc_q_network(cfg, 12, 5)
    obs = jax.random.normal(jax.random.PRNGKey(0), (7, 20))
    v = init_vars(net, jax.random.PRNGKey(1), obs, jnp.zeros(7, jnp.int32))
    variants = [(4, False), (5, True)]  # chunked naive, chunked factored

    def ref(p):  # one goal-conditioned pass per goal, BatchRenorm in training mode
        one = lambda g: apply_train(net, {**v, "params": p}, obs, jnp.full(7, g))  # noqa: E731
        q, stats = jax.vmap(one, out_axes=(1, 0))(jnp.arange(12))
        return q, jax.tree.map(lambda s: s[0], stats)

    def all_values(p):  # every quantity compared below, in one compiled program
        out = {"ref": ref(p), "ref_grad": jax.grad(lambda p: (ref(p)[0] ** 2).sum())(p),
               "ref_eval": jax.vmap(lambda g: apply_eval(net, {**v, "params": p}, obs,
                                                         jnp.full(7, g)), out_axes=1)(jnp.arange(12))}
        for c, fa in variants:
            f = lambda p, c=c, fa=fa: her_all_q(net, {**v, "params": p}, obs, c, fa, train=True)  # noqa: E731
            out[f"{c}/{fa}"] = (f(p), jax.grad(lambda p, f=f: (f(p)[0] ** 2).sum())(p),
                          her_all_q(net, {**v, "params": p}, obs, c, fa)[0])
        return out

    got = jax.jit(all_values).lower(v["params"]).compile(FAST)(v["params"])
    want, s_want = got["ref"]
    assert float(jnp.abs(s_want["encoder"]["input_norm"]["brn"]["mean"]).max()) > 0
    for c, fa in variants:
        (q, stats), grad, q_eval = got[f"{c}/{fa}"]
        np.testing.assert_allclose(q, want, rtol=1e-5, atol=1e-6)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), stats, s_want)
        # the gradient through it too (chunks are rematerialised in the backward pass)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5),
                     grad, got["ref_grad"])
        # evaluation mode (targets): the running statistics
        np.testing.assert_allclose(q_eval, got["ref_eval"], rtol=1e-5, atol=1e-6)


def test_dual_leo_variants_differ_only_by_the_extra_goal():
    k, a = 9, 4
    mb = {"obs": jax.random.normal(jax.random.PRNGKey(0), (6, 10)),
          "action": jnp.arange(6) % a, "goal": jnp.arange(6) % k,
          "g_any": (jnp.arange(6) + 3) % k, "y": jnp.full(6, 0.5), "y_all": jnp.full((6, k), 0.5)}
    cmd = gridworld_cpu("dual_leo_pqn", width=16, layers=1)
    both = cmd.replace(distill_goals="commanded+random")
    s1, s2 = build_algo(cmd, k, a), build_algo(both, k, a)
    params = s1.init(jax.random.PRNGKey(1), mb["obs"][:1])
    same = {**mb, "g_any": mb["goal"]}  # the random goal is the commanded one: identical terms

    def distill(p):
        return [s.loss(p, b)[1][0]["distill"] for s in (s1, s2) for b in (mb, same)]

    d1, d1_same, d2, d2_same = map(float, jax.jit(distill).lower(params).compile(FAST)(params))
    assert d1 != pytest.approx(d2)
    assert d1_same == pytest.approx(d2_same, rel=1e-6)


def test_craftax_defaults_evaluate_512_steps_and_report_their_cost():
    cfg = TrainConfig(env=EnvConfig("craftax-classic"), total_timesteps=int(1e6), num_evals=1)
    assert cfg.eval_steps(10_000) == 512 and cfg.replace(test_steps=None).eval_steps(10_000) == 10_000
    per_point, per_segment = cfg.eval_cost(136, 10_000)
    assert per_point == 136 * 16 * 512 and per_segment == cfg.num_updates * 32 * 1024
    assert gridworld_cpu().eval_steps(200) == 200  # capped by the episode length


def test_cost_model_at_paper_sizes():
    m = cost_model(512, obs_dim=8268, width=1024, layers=4, num_actions=43, batch=512)
    assert 170 < m["flop_ceiling_her_all"] < 180  # the ≈176x the review computed
    assert m["flop_ceiling_her_all_factored"] < m["flop_ceiling_her_all"] / 2
    small = cost_model(512)
    assert small["flop_ceiling_her_all"] == pytest.approx(59.5, abs=1)
