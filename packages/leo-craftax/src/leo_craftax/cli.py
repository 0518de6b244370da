"""``leo-craftax``: train, eval, goals, bench, reproduce. Heavy imports live inside the commands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import add_reproduce_arguments, reproduce_from_args

NAME = "leo-craftax"
ALGOS = ("leo", "pqn", "pqn_her", "ppo_gc", "dual_leo_pqn", "dual_leo_ppo")
ENVS = ("gridworld", "craftax-classic", "craftax")


def _num(text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"not a number: {text!r}") from None
    if value <= 0 or value != int(value):
        raise UserError(f"expected a positive integer, got {text!r}")
    return int(value)


def _check(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise UserError(f"unknown {name} {value!r} (choose one of {', '.join(choices)})")
    return value


def _config(args):
    from .config import EnvConfig, TrainConfig, gridworld_cpu

    _check("algo", args.algo, ALGOS)
    _check("env", args.env, ENVS)
    kw = {"total_timesteps": _num(args.steps), "num_evals": args.evals, "her_mode": args.her_mode}
    if args.num_envs:
        kw["num_envs"] = _num(args.num_envs)
    if args.devices > 1:
        kw["num_devices"] = args.devices
    if args.env == "gridworld":
        return gridworld_cpu(args.algo, env_size=args.size, **kw).validate()
    return TrainConfig(algo=args.algo, env=EnvConfig(args.env), **kw).validate()


def _cmd_train(args) -> int:
    from .experiments import enable_compile_cache

    cfg = _config(args)
    out = Path(args.out)
    if out.exists() and not args.force:
        raise UserError(f"{out} exists (use --force to overwrite)")
    import numpy as np

    from .io import save_checkpoint
    from .train import env_from_config, train_seeds

    enable_compile_cache()
    env = env_from_config(cfg)
    seeds = [args.seed + i for i in range(args.seeds)]
    result = train_seeds(cfg, seeds, env)
    success = np.asarray(result["success"])
    params = __import__("jax").tree.map(lambda x: x[0], result["params"])
    save_checkpoint(out, cfg, params, env.goal_set.names,
                    {"seed": seeds[0], "success": success[0, -1].tolist()})
    for i, s in enumerate(seeds):
        curve = " ".join(f"{v:.3f}" for v in success[i].mean(-1))
        print(f"seed {s}: success over {env.goal_set.num_goals} goals by eval point: {curve}")
    print(f"checkpoint (seed {seeds[0]}): {out}")
    return 0


def _cmd_eval(args) -> int:
    import jax

    from .algos import build_algo
    from .io import check_head, load_checkpoint
    from .train import env_from_config, evaluate

    cfg, params, _ = load_checkpoint(args.checkpoint)
    if args.env is not None and _check("env", args.env, ENVS) != cfg.env.name:
        raise UserError(f"checkpoint {args.checkpoint} was trained on {cfg.env.name!r}, "
                        f"not {args.env!r}")
    env = env_from_config(cfg)
    load_checkpoint(args.checkpoint, cfg, env.goal_set.names)
    check_head(params, env.goal_set.num_goals, env.num_actions)
    spec = build_algo(cfg, env.goal_set.num_goals, env.num_actions)
    success = jax.jit(lambda p, r: evaluate(spec, p, env, r, args.repeats,
                                            cfg.test_steps or env.max_steps))(
        params, jax.random.PRNGKey(args.seed))
    if args.per_goal:
        for name, s in zip(env.goal_set.names, success.tolist(), strict=True):
            print(f"{name}\t{s:.3f}")
    print(f"success over {env.goal_set.num_goals} goals: {float(success.mean()):.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(zip(env.goal_set.names, success.tolist(), strict=True))))
    return 0


def _cmd_goals(args) -> int:
    _check("env", args.env, ENVS)
    from .envs import make_env

    env = make_env(args.env, size=args.size)
    print("\n".join(env.goal_set.names))
    return 0


def _cmd_bench(args) -> int:
    try:
        ks = [int(k) for k in args.goals.split(",")]
    except ValueError:
        raise UserError(f"--goals must be comma-separated integers, got {args.goals!r}") from None
    if not ks or min(ks) < 1:
        raise UserError("--goals must list positive numbers of goals")
    from .bench import speed_table

    print(f"{'K':>6} {'LEO ms':>10} {'HER-all ms':>12} {'speed-up':>9}")
    for r in speed_table(ks, batch=args.batch, repeats=args.repeats):
        print(f"{r['K']:>6} {1e3 * r['leo_s']:>10.2f} {1e3 * r['her_all_s']:>12.2f} "
              f"{r['speedup']:>8.1f}x")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=NAME, description="LEO: goal-conditioned RL that learns every "
                                "goal at once (JAX), with PQN / HER / PPO / Dual LEO baselines.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train one algorithm (several seeds at once) and checkpoint it")
    t.add_argument("--algo", default="leo", help=f"one of {', '.join(ALGOS)}")
    t.add_argument("--env", default="gridworld", help=f"one of {', '.join(ENVS)}")
    t.add_argument("--steps", default="2e5", help="environment steps per seed (default %(default)s)")
    t.add_argument("--seeds", type=int, default=1, help="number of seeds, trained with vmap")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--size", type=int, default=10, help="gridworld side (default %(default)s)")
    t.add_argument("--num-envs", default=None, help="parallel environments")
    t.add_argument("--devices", type=int, default=1,
                   help="split the environments over this many devices (jax.sharding)")
    t.add_argument("--her-mode", default="mixed", help="pqn_her: random|positive|mixed|all")
    t.add_argument("--evals", type=int, default=1, help="evaluation points during training")
    t.add_argument("--out", default="leo-checkpoint.msgpack", help="checkpoint file")
    t.add_argument("--force", action="store_true", help="overwrite --out")
    t.set_defaults(fn=_cmd_train)
    e = sub.add_parser("eval", help="success over all goals of a checkpoint")
    e.add_argument("checkpoint")
    e.add_argument("--env", default=None, help="must match the checkpoint's environment")
    e.add_argument("--repeats", type=int, default=4, help="episodes per goal")
    e.add_argument("--seed", type=int, default=0)
    e.add_argument("--per-goal", action="store_true", help="print each goal's success")
    e.add_argument("--json", default=None, help="write per-goal success as JSON")
    e.set_defaults(fn=_cmd_eval)
    g = sub.add_parser("goals", help="list an environment's goals, one per line")
    g.add_argument("--env", default="gridworld", help=f"one of {', '.join(ENVS)}")
    g.add_argument("--size", type=int, default=10, help="gridworld side")
    g.set_defaults(fn=_cmd_goals)
    b = sub.add_parser("bench", help="time per update: LEO vs all-goals relabelling as K grows")
    b.add_argument("--goals", default="16,64,256,1024")
    b.add_argument("--batch", type=int, default=64)
    b.add_argument("--repeats", type=int, default=5)
    b.set_defaults(fn=_cmd_bench)
    r = sub.add_parser("reproduce", help="the registered reproduction")
    add_reproduce_arguments(r)
    r.set_defaults(fn=lambda a: reproduce_from_args([NAME], a))
    return p


@cli_entry(NAME)
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
