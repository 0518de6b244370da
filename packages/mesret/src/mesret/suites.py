"""Benchmark suites. ``wcci20`` [R]: the WCCI-2020 many-task construction — eight classic functions
(Sphere, Ellipsoid, Rastrigin, Ackley, Griewank, Rosenbrock, Schwefel, Weierstrass) on their usual
boxes, each task with a seeded shift and rotation; ``similarity`` sets how close the optima of
different tasks lie in the unified [0, 1] box (high: within 2% of one centre; mixed: within 15%;
low: anywhere in the central 80%). ``cec17-mix`` [C]: the 29 CEC-2017 single-objective functions
through opfunu (the ``mesret[cec]`` extra) at each of the given dimensions, one task per (function,
dimension), as MToP's ``MaT_CEC17_SO_Mix103050.m`` (87 tasks at D 10/30/50). User suites:
``FILE.py:FUNC`` returning ``TaskSpec``s."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from icml26_shared import UserError

from .tasks import TaskSpec, check_tasks

SIMILARITY = {"high": 0.02, "mixed": 0.15, "low": None}


def sphere(z):
    return np.sum(z**2, axis=1)


def ellipsoid(z):
    D = z.shape[1]
    return np.sum(np.arange(1, D + 1) * z**2, axis=1)


def rastrigin(z):
    return np.sum(z**2 - 10 * np.cos(2 * np.pi * z) + 10, axis=1)


def ackley(z):
    D = z.shape[1]
    return (-20 * np.exp(-0.2 * np.sqrt(np.sum(z**2, axis=1) / D))
            - np.exp(np.sum(np.cos(2 * np.pi * z), axis=1) / D) + 20 + np.e)


def griewank(z):
    i = np.sqrt(np.arange(1, z.shape[1] + 1))
    return 1 + np.sum(z**2, axis=1) / 4000 - np.prod(np.cos(z / i), axis=1)


def rosenbrock(z):
    z = z + 1.0  # optimum at z = 0
    return np.sum(100 * (z[:, 1:] - z[:, :-1] ** 2) ** 2 + (z[:, :-1] - 1) ** 2, axis=1)


def schwefel(z):
    y = z + 420.9687462275036
    yc = np.clip(y, -500.0, 500.0)  # outside ±500 a quadratic penalty (CEC-2014 style) [R]
    D = z.shape[1]
    return (418.9828872724339 * D - np.sum(yc * np.sin(np.sqrt(np.abs(yc))), axis=1)
            + np.sum((y - yc) ** 2, axis=1))


def weierstrass(z, a=0.5, b=3.0, kmax=20):
    k = np.arange(kmax + 1)
    ak, bk = a**k, b**k
    inner = np.sum(ak * np.cos(2 * np.pi * bk * (z[..., None] + 0.5)), axis=-1).sum(axis=1)
    return inner - z.shape[1] * np.sum(ak * np.cos(np.pi * bk))


# name -> (function, half-width of the box) (CEC-2017 MTSO boxes)
FUNCTIONS = {
    "sphere": (sphere, 100.0), "ellipsoid": (ellipsoid, 100.0), "rastrigin": (rastrigin, 50.0),
    "ackley": (ackley, 50.0), "griewank": (griewank, 100.0), "rosenbrock": (rosenbrock, 50.0),
    "schwefel": (schwefel, 500.0), "weierstrass": (weierstrass, 0.5),
}


def _rotation(rng, D):
    q, r = np.linalg.qr(rng.standard_normal((D, D)))
    return q * np.sign(np.diag(r))


class ShiftedRotated:
    """f(R (x − o)); picklable (a class, not a closure), so a process pool can evaluate it."""

    def __init__(self, base, shift, rot):
        self.base, self.shift, self.rot = base, shift, rot

    def __call__(self, X):
        return self.base((np.asarray(X, float) - self.shift) @ self.rot.T)


def wcci20(tasks: int = 50, dims=(10, 20, 30), similarity: str = "mixed", seed: int = 0) -> list[TaskSpec]:
    """The many-task suite: task i uses function i mod 8 and dimension dims[i mod len(dims)]."""
    if similarity not in SIMILARITY:
        raise UserError(f"unknown similarity {similarity!r} (choose from {', '.join(SIMILARITY)})")
    if not 1 <= int(tasks) <= 500:
        raise UserError(f"--tasks must be between 1 and 500, got {tasks}")
    dims = tuple(int(d) for d in dims)
    if not dims or min(dims) < 2:
        raise UserError(f"--dims must be integers >= 2, got {dims}")
    rng = np.random.default_rng(np.random.SeedSequence([int(seed), 20200]))
    names = list(FUNCTIONS)
    Dmax = max(dims)
    centre = rng.uniform(0.3, 0.7, size=Dmax)  # shared optimum location in the unit box
    out = []
    for i in range(int(tasks)):
        name = names[i % len(names)]
        fn, half = FUNCTIONS[name]
        D = dims[i % len(dims)]
        spread = SIMILARITY[similarity]
        if spread is None:
            u = rng.uniform(0.1, 0.9, size=D)
        else:
            u = np.clip(centre[:D] + rng.uniform(-spread, spread, size=D), 0.05, 0.95)
        shift = -half + 2 * half * u
        rot = np.eye(D) if name in ("schwefel",) else _rotation(rng, D)
        f = ShiftedRotated(fn, shift, rot)
        out.append(TaskSpec(D, f, -half, half, f_opt=float(f(shift[None])[0]), name=f"T{i + 1}-{name}-D{D}"))
    return out


CEC17_FUNCTIONS = 29  # opfunu's F1..F29 2017 (CEC-2017 without its dropped F2)
CEC17_BOX = 100.0  # every CEC-2017 function is searched on [-100, 100]^D
CEC17_DIMS = (2, 10, 20, 30, 50, 100)  # the dimensions opfunu ships shift/rotation/shuffle data for


class OpfunuFn:
    """A batch wrapper around one opfunu problem (its ``evaluate`` takes one point); picklable."""

    def __init__(self, problem):
        self.problem = problem

    def __call__(self, X):
        return np.array([self.problem.evaluate(x) for x in np.atleast_2d(np.asarray(X, float))])


def _opfunu_cec2017():
    import warnings

    try:
        with warnings.catch_warnings():  # opfunu imports pkg_resources, deprecated by setuptools
            warnings.simplefilter("ignore")
            from opfunu.cec_based import cec2017
    except ImportError:
        raise UserError("suite cec17-mix needs opfunu: pip install 'mesret[cec]'") from None
    return cec2017


def cec17_mix(dims=(10, 30, 50), functions=None) -> list[TaskSpec]:
    """The CEC-2017 many-task mix: every function in ``functions`` (default all 29, numbered 1..29
    as opfunu's ``F{i}2017``) at every dimension in ``dims``, on [-100, 100]^D (so the unit box
    maps to it linearly); ``f_opt`` is the function's ``f_global``. The shifts and rotations are
    CEC's own data files shipped with opfunu (no seed)."""
    cec2017 = _opfunu_cec2017()
    dims = tuple(int(d) for d in dims)
    if not dims or not set(dims) <= set(CEC17_DIMS):
        raise UserError(f"cec17-mix --dims must be among {', '.join(map(str, CEC17_DIMS))}, got {dims}")
    functions = tuple(range(1, CEC17_FUNCTIONS + 1)) if functions is None else tuple(int(i) for i in functions)
    bad = [i for i in functions if not 1 <= i <= CEC17_FUNCTIONS]
    if bad or not functions:
        raise UserError(f"cec17-mix functions must be in 1..{CEC17_FUNCTIONS}, got {list(functions)}")
    out = []
    for D in dims:
        for i in functions:
            prob = getattr(cec2017, f"F{i}2017")(ndim=D)
            out.append(TaskSpec(D, OpfunuFn(prob), -CEC17_BOX, CEC17_BOX, f_opt=float(prob.f_global),
                                name=f"T{len(out) + 1}-F{i}-D{D}"))
    return out


def load_user_suite(spec: str, **kwargs) -> list[TaskSpec]:
    """``FILE.py:FUNC``: import FILE and call FUNC() (it must return a list of ``TaskSpec``)."""
    path_s, sep, func = spec.rpartition(":")
    if not sep or not path_s.endswith(".py") or not func:
        raise UserError(f"unknown suite {spec!r} (use wcci20 or FILE.py:FUNC; policy tasks run through `mesret policy`)")
    path = Path(path_s)
    if not path.is_file():
        raise UserError(f"suite file {path} does not exist")
    modname = f"_mesret_user_suite_{abs(hash(str(path.resolve())))}"
    try:
        spec_ = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec_)
        sys.modules[modname] = mod
        spec_.loader.exec_module(mod)
    except Exception as exc:  # a user's file can raise anything
        raise UserError(f"cannot import {path}: {type(exc).__name__}: {exc}") from None
    fn = getattr(mod, func, None)
    if not callable(fn):
        raise UserError(f"{path} has no function {func!r}")
    try:
        tasks = fn()
    except Exception as exc:
        raise UserError(f"{spec} raised {type(exc).__name__}: {exc}") from None
    if isinstance(tasks, TaskSpec):
        tasks = [tasks]
    if not isinstance(tasks, (list, tuple)):
        raise UserError(f"{spec} must return a list of mesret.TaskSpec, got {type(tasks).__name__}")
    return check_tasks(tasks)
