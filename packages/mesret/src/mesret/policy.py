"""Policy search across heterogeneous classic-control tasks [R].

``SemanticLayout`` is the authors' EMaT-Gym parameter alignment [C]: every policy is
obs → h → h → act with tanh, flattened as [b1 (h), W2 (h×h), b2 (h) | W1 (obs×h), W3 (h×act),
b3 (act)], so the first h + h² + h coordinates are the same hidden-layer parameters in every task;
``layout="naive"`` is the ordinary [W1, b1, W2, b2, W3, b3] flattening, where coordinate j means
different things in different tasks.

The environments are our NumPy re-implementations of four gymnasium classic-control tasks
(CartPole-v1, Acrobot-v1, Pendulum-v1, MountainCarContinuous-v0 dynamics), batched over the
population, with a fixed horizon and seeded start states (gymnax is not installed here) [R].
"""

from __future__ import annotations

import numpy as np

from .tasks import TaskSpec

ENVS = {  # obs, act, discrete, (return of a poor policy, return of a good one) for normalisation [R]
    "CartPole-v1": (4, 2, True, (0.0, 200.0)),
    "Acrobot-v1": (6, 3, True, (-200.0, -80.0)),
    "Pendulum-v1": (3, 1, False, (-1500.0, -150.0)),
    "MountainCarContinuous-v0": (2, 1, False, (-20.0, 90.0)),
}


class SemanticLayout:
    """Pack / unpack the flat parameter vector of an obs → h → h → act tanh MLP."""

    def __init__(self, obs: int, act: int, hidden: int = 8, layout: str = "semantic"):
        if layout not in ("semantic", "naive"):
            raise ValueError(f"layout must be semantic or naive, got {layout!r}")
        self.obs, self.act, self.h, self.layout = obs, act, hidden, layout
        h = hidden
        shapes = {"b1": (h,), "W2": (h, h), "b2": (h,), "W1": (obs, h), "W3": (h, act), "b3": (act,)}
        order = ["b1", "W2", "b2", "W1", "W3", "b3"] if layout == "semantic" else ["W1", "b1", "W2", "b2", "W3", "b3"]
        self.slices, start = {}, 0
        for name in order:
            size = int(np.prod(shapes[name]))
            self.slices[name] = (slice(start, start + size), shapes[name])
            start += size
        self.dim = start

    def unpack(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """``theta`` [..., dim] → parameter arrays with the same leading axes."""
        lead = theta.shape[:-1]
        return {k: theta[..., s].reshape(*lead, *shape) for k, (s, shape) in self.slices.items()}

    def pack(self, params: dict[str, np.ndarray]) -> np.ndarray:
        lead = params["b1"].shape[:-1]
        out = np.empty((*lead, self.dim))
        for k, (s, _) in self.slices.items():
            out[..., s] = params[k].reshape(*lead, -1)
        return out

    def act_fn(self, theta: np.ndarray, obs: np.ndarray) -> np.ndarray:
        p = self.unpack(theta)
        h1 = np.tanh(np.einsum("bo,boh->bh", obs, p["W1"]) + p["b1"])
        h2 = np.tanh(np.einsum("bh,bhk->bk", h1, p["W2"]) + p["b2"])
        return np.einsum("bh,bha->ba", h2, p["W3"]) + p["b3"]


def _reset(env: str, rng, n: int) -> np.ndarray:
    if env == "CartPole-v1":
        return rng.uniform(-0.05, 0.05, (n, 4))
    if env == "Acrobot-v1":
        return rng.uniform(-0.1, 0.1, (n, 4))
    if env == "Pendulum-v1":
        return np.stack([rng.uniform(-np.pi, np.pi, n), rng.uniform(-1, 1, n)], 1)
    return np.stack([rng.uniform(-0.6, -0.4, n), np.zeros(n)], 1)


def _obs(env: str, s: np.ndarray) -> np.ndarray:
    if env == "Acrobot-v1":
        return np.stack([np.cos(s[:, 0]), np.sin(s[:, 0]), np.cos(s[:, 1]), np.sin(s[:, 1]), s[:, 2], s[:, 3]], 1)
    if env == "Pendulum-v1":
        return np.stack([np.cos(s[:, 0]), np.sin(s[:, 0]), s[:, 1]], 1)
    return s


def _acrobot_dsdt(s, a):
    m1 = m2 = l1 = 1.0
    lc1 = lc2 = 0.5
    I1 = I2 = 1.0
    g = 9.8
    t1, t2, d1, d2 = s.T
    dd1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * np.cos(t2)) + I1 + I2
    dd2 = m2 * (lc2**2 + l1 * lc2 * np.cos(t2)) + I2
    phi2 = m2 * lc2 * g * np.cos(t1 + t2 - np.pi / 2)
    phi1 = (-m2 * l1 * lc2 * d2**2 * np.sin(t2) - 2 * m2 * l1 * lc2 * d2 * d1 * np.sin(t2)
            + (m1 * lc1 + m2 * l1) * g * np.cos(t1 - np.pi / 2) + phi2)
    ddt2 = (a + dd2 / dd1 * phi1 - m2 * l1 * lc2 * d1**2 * np.sin(t2) - phi2) / (m2 * lc2**2 + I2 - dd2**2 / dd1)
    ddt1 = -(dd2 * ddt2 + phi1) / dd1
    return np.stack([d1, d2, ddt1, ddt2], 1)


def _step(env: str, s: np.ndarray, out: np.ndarray):
    """One batched step: ``(state, reward, done)`` given the policy outputs ``out``."""
    if env == "CartPole-v1":
        force = np.where(out[:, 1] > out[:, 0], 10.0, -10.0)  # greedy on the logits [R]
        x, xd, th, thd = s.T
        ct, st = np.cos(th), np.sin(th)
        temp = (force + 0.05 * thd**2 * st) / 1.1
        thacc = (9.8 * st - ct * temp) / (0.5 * (4.0 / 3.0 - 0.1 * ct**2 / 1.1))
        xacc = temp - 0.05 * thacc * ct / 1.1
        s = np.stack([x + 0.02 * xd, xd + 0.02 * xacc, th + 0.02 * thd, thd + 0.02 * thacc], 1)
        done = (np.abs(s[:, 0]) > 2.4) | (np.abs(s[:, 2]) > 12 * 2 * np.pi / 360)
        return s, np.ones(len(s)), done
    if env == "Acrobot-v1":
        a = np.argmax(out, axis=1) - 1.0
        dt = 0.2
        k1 = _acrobot_dsdt(s, a)
        k2 = _acrobot_dsdt(s + dt / 2 * k1, a)
        k3 = _acrobot_dsdt(s + dt / 2 * k2, a)
        k4 = _acrobot_dsdt(s + dt * k3, a)
        s = s + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        s[:, 0] = (s[:, 0] + np.pi) % (2 * np.pi) - np.pi
        s[:, 1] = (s[:, 1] + np.pi) % (2 * np.pi) - np.pi
        s[:, 2] = np.clip(s[:, 2], -4 * np.pi, 4 * np.pi)
        s[:, 3] = np.clip(s[:, 3], -9 * np.pi, 9 * np.pi)
        done = -np.cos(s[:, 0]) - np.cos(s[:, 1] + s[:, 0]) > 1.0
        return s, np.where(done, 0.0, -1.0), done
    if env == "Pendulum-v1":
        u = 2.0 * np.tanh(out[:, 0])
        th, thd = s.T
        cost = ((th + np.pi) % (2 * np.pi) - np.pi) ** 2 + 0.1 * thd**2 + 0.001 * u**2
        thd = np.clip(thd + (3 * 10.0 / 2 * np.sin(th) + 3.0 * u) * 0.05, -8, 8)
        return np.stack([th + thd * 0.05, thd], 1), -cost, np.zeros(len(s), bool)
    u = np.tanh(out[:, 0])
    pos, vel = s.T
    vel = np.clip(vel + u * 0.0015 - 0.0025 * np.cos(3 * pos), -0.07, 0.07)
    pos = np.clip(pos + vel, -1.2, 0.6)
    vel = np.where((pos <= -1.2) & (vel < 0), 0.0, vel)
    done = pos >= 0.45
    return np.stack([pos, vel], 1), -0.1 * u**2 + 100.0 * done, done


class PolicyTask:
    """Minimise −(mean return over the seeded start states) of a batch of flat parameter vectors."""

    def __init__(self, env: str, layout: SemanticLayout, horizon: int = 200, starts: int = 2, seed: int = 0):
        self.env, self.layout, self.horizon = env, layout, horizon
        self.starts = _reset(env, np.random.default_rng([seed, 99]), starts)
        self.steps = 0  # env steps spent (all rollouts)

    def returns(self, theta: np.ndarray) -> np.ndarray:
        n, k = len(theta), len(self.starts)
        th = np.repeat(theta, k, axis=0)
        s = np.tile(self.starts, (n, 1))
        total, alive = np.zeros(n * k), np.ones(n * k, bool)
        for _ in range(self.horizon):
            s, r, done = _step(self.env, s, self.layout.act_fn(th, _obs(self.env, s)))
            self.steps += int(alive.sum())
            total += r * alive
            alive &= ~done
            if not alive.any():
                break
        return total.reshape(n, k).mean(axis=1)

    def __call__(self, theta: np.ndarray) -> np.ndarray:
        return -self.returns(np.asarray(theta, float))


def normalised_return(env: str, ret: float) -> float:
    low, high = ENVS[env][3]
    return (ret - low) / (high - low)


def policy_suite(envs=tuple(ENVS), layout: str = "semantic", hidden: int = 8, horizon: int = 200,
                 seed: int = 0) -> list[TaskSpec]:
    """One ``TaskSpec`` per environment; parameters in [−5, 5] (the unified box mapped as in
    EMaT-Gym [C])."""
    out = []
    for env in envs:
        obs, act, _, _ = ENVS[env]
        lay = SemanticLayout(obs, act, hidden, layout)
        out.append(TaskSpec(lay.dim, PolicyTask(env, lay, horizon, seed=seed), -5.0, 5.0, name=env))
    return out
