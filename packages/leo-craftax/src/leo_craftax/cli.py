"""``leo-craftax``: train, eval, goals, bench, reproduce. Heavy imports live inside the commands."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import (
    ArgumentParser,
    add_reproduce_arguments,
    float_in,
    positive_float,
    positive_int,
    reproduce_from_args,
)
from icml26_shared.io import atomic_write_text, dumps_json, write_json

NAME = "leo-craftax"
ALGOS = ("leo", "leo_commanded", "pqn", "pqn_her", "ppo_gc", "dual_leo_pqn", "dual_leo_ppo")
ENVS = ("gridworld", "craftax-classic", "craftax")
NORMS = ("batchrenorm", "none")
COMPILING = ("train", "eval", "bench", "reproduce")  # commands whose stderr XLA may litter (quiet.py)


def _test_steps(text: str) -> int | None:
    """``full`` (whole episodes) or a positive number of steps."""
    return None if text == "full" else positive_int(text)


def _check(name: str, value: str, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise UserError(f"unknown {name} {value!r} (choose one of {', '.join(choices)})")
    return value


# the training knobs: (flag's attribute, config field); ``--minibatch-size`` and ``--gamma``
# reach the fields of the algorithm's own learner (``_learner_fields``)
KNOBS = (("num_envs", "num_envs"), ("eval_repeats", "test_repeats"),
         ("interim_repeats", "interim_repeats"), ("reset_ratio", "reset_ratio"), ("width", "width"),
         ("layers", "layers"), ("lr", "lr"), ("num_steps", "num_steps"), ("epochs", "num_epochs"),
         ("eps_start", "eps_start"), ("eps_finish", "eps_finish"), ("eps_decay", "eps_decay"),
         ("max_grad_norm", "max_grad_norm"), ("her_relabelled_goals", "her_relabelled_goals"),
         ("her_random_proportion", "her_random_proportion"),
         ("her_granularity", "her_granularity"))
PPO_ALGOS = ("ppo_gc", "dual_leo_ppo")


def _learner_fields(algo: str) -> dict[str, tuple[str, ...]]:
    """Which config fields ``--minibatch-size`` and ``--gamma`` set for ``algo``: PPO's minibatch
    for the PPO actors; the discount of every learner in the run (PPO's, and the Q-learners':
    LEO, PQN, PQN + HER and the Dual LEO teachers)."""
    return {"minibatch_size": ("ppo_minibatch_size",) if algo in PPO_ALGOS else ("minibatch_size",),
            "gamma": {"ppo_gc": ("ppo_gamma",), "dual_leo_ppo": ("gamma", "ppo_gamma")}.get(
                algo, ("gamma",))}


def _config(args):
    from .config import craftax_config, gridworld_cpu

    _check("algo", args.algo, ALGOS)
    _check("env", args.env, ENVS)
    kw = {"total_timesteps": args.steps, "num_evals": args.evals, "her_mode": args.her_mode,
          "distill_goals": args.distill_goals, "norm": args.norm}
    for flag, field in KNOBS:
        if getattr(args, flag) is not None:
            kw[field] = getattr(args, flag)
    for flag, fields in _learner_fields(args.algo).items():
        if getattr(args, flag) is not None:
            kw.update(dict.fromkeys(fields, getattr(args, flag)))
    if args.no_anneal_lr:
        kw["anneal_lr"] = False
    if args.test_steps is not None:
        kw["test_steps"] = args.test_steps
    if args.devices > 1:
        kw["num_devices"] = args.devices
    if args.env == "gridworld":
        if args.obs != "symbolic":
            raise UserError("pixel observations exist for craftax-classic and craftax only")
        cfg = gridworld_cpu(args.algo, env_size=args.size, **kw)
    else:
        cfg = craftax_config(args.algo, env_name=args.env, env_obs=args.obs, **kw)
    batch = cfg.num_steps * cfg.num_envs
    if cfg.total_timesteps < batch:
        raise UserError(f"--steps {cfg.total_timesteps:,} is below one update: at least "
                        f"{batch:,} (--num-steps {cfg.num_steps} x --num-envs {cfg.num_envs})")
    return cfg.validate()


def _cmd_train(args) -> int:
    from .experiments import compile_cache

    cfg = _config(args)
    out = Path(args.out)
    if out.exists() and not args.force:
        raise UserError(f"{out} exists (use --force to overwrite)")
    state_path = Path(args.state) if args.state else out.with_name(out.name + ".state")
    if args.resume and not state_path.is_file():
        raise UserError(f"run state {state_path} does not exist (nothing to resume)")
    if args.checkpoint_every and not args.resume and state_path.exists() and not args.force:
        raise UserError(f"{state_path} exists (use --resume to continue that run, or --force)")
    import numpy as np

    from .io import load_state, save_checkpoint, save_state
    from .train import env_from_config, run_shapes, train_seeds

    seeds = [args.seed + i for i in range(args.seeds)]
    start = None
    if args.resume:
        start = load_state(state_path, cfg, seeds, run_shapes(cfg, len(seeds)))
        if args.checkpoint_every and args.checkpoint_every != start["chunk"]:
            raise UserError(f"run state {state_path} was written every {start['chunk']} updates, "
                            f"not {args.checkpoint_every}")
        print(f"resuming {state_path}: {start['updates']} of {cfg.num_updates} updates done",
              flush=True)
    print(f"configuration ({cfg.num_updates:,} updates of {cfg.num_steps * cfg.num_envs:,} env "
          f"steps; stored in the checkpoint): {dumps_json(cfg.to_dict(), indent=None)}", flush=True)
    env = env_from_config(cfg)
    k = env.goal_set.num_goals
    per_point, per_segment = cfg.eval_cost(k, env.max_steps)
    total = cfg.eval_cost_total(k, env.max_steps)
    print(f"evaluation: {k} goals x {cfg.test_repeats} repeats x {cfg.eval_steps(env.max_steps)} "
          f"steps = {per_point:,} env steps at the final point, {cfg.eval_chunk} repeats at the "
          f"{cfg.num_evals} before it; {total:,} env steps in all against "
          f"{per_segment * cfg.num_evals:,} training steps (evaluation/training = "
          f"{total / (per_segment * cfg.num_evals):.2f}; --test-steps, --eval-repeats, "
          f"--interim-repeats, --evals set it)", flush=True)
    def on_chunk(state):
        save_state(state_path, cfg, seeds, state)
        print(f"run state after {state['updates']} of {cfg.num_updates} updates: {state_path}",
              flush=True)

    every = args.checkpoint_every or 0
    with compile_cache():
        result = train_seeds(cfg, seeds, chunk=every, start=start, fast_compile=args.fast_compile,
                             on_chunk=on_chunk if every or start is not None else None)
    success = np.asarray(result["success"])
    live = np.asarray(result["metrics"]["live_success"])  # [seeds, updates]
    tm = result["timings"]
    save_checkpoint(out, cfg, result["params"], env.goal_set.names,
                    {"success": success[:, -1].tolist(), "live_success": live.tolist(),
                     "timings": tm}, seeds=seeds)
    if (every or start is not None) and state_path.is_file():
        state_path.unlink()  # the run is complete: --out holds its result
    for i, s in enumerate(seeds):
        curve = " ".join(f"{v:.3f}" for v in success[i].mean(-1))
        print(f"seed {s}: success over {k} goals by eval point: {curve}; live success (the "
              f"authors' training metric) after the last update: {live[i, -1]:.3f}")
    run_cpu, run_wall = tm["train_cpu_s"] + tm["eval_cpu_s"], tm["train_s"] + tm["eval_s"]
    print(f"time: compile {tm['compile_s']:.1f} s ({tm['compile_cpu_s']:.1f} CPU-s); training "
          f"{tm['train_s']:.1f} s ({tm['train_cpu_s']:.1f} CPU-s); evaluation {tm['eval_s']:.1f} s "
          f"({tm['eval_cpu_s']:.1f} CPU-s) = {100 * tm['eval_cpu_s'] / max(run_cpu, 1e-9):.1f}% of "
          f"training + evaluation CPU time ({100 * tm['eval_s'] / max(run_wall, 1e-9):.1f}% wall)")
    print(f"checkpoint (seeds {', '.join(map(str, seeds))}): {out}")
    return 0


def _cmd_eval(args) -> int:
    import jax

    from .algos import build_algo
    from .io import check_head, load_checkpoint
    from .train import env_from_config, evaluate

    cfg, params, meta = load_checkpoint(args.checkpoint, seed=args.run_seed)
    if args.env is not None and _check("env", args.env, ENVS) != cfg.env.name:
        raise UserError(f"checkpoint {args.checkpoint} was trained on {cfg.env.name!r}, "
                        f"not {args.env!r}")
    env = env_from_config(cfg)
    load_checkpoint(args.checkpoint, cfg, env.goal_set.names, seed=meta["seed"])
    check_head(params, env.goal_set.num_goals, env.num_actions)
    spec = build_algo(cfg, env.goal_set.num_goals, env.num_actions)
    steps = cfg.eval_steps(env.max_steps) if args.test_steps is None else (
        env.max_steps if args.test_steps == "full" else min(positive_int(args.test_steps),
                                                            env.max_steps))
    success = jax.jit(lambda p, r: evaluate(spec, p, env, r, args.repeats, steps,
                                            cfg.eval_reset_batch))(
        params, jax.random.PRNGKey(args.seed))
    if args.per_goal:
        for name, s in zip(env.goal_set.names, success.tolist(), strict=True):
            print(f"{name}\t{s:.3f}")
    print(f"success over {env.goal_set.num_goals} goals (trained seed {meta['seed']}, "
          f"{steps} steps): {float(success.mean()):.4f}")
    if args.json:
        atomic_write_text(args.json, dumps_json(dict(zip(env.goal_set.names, success.tolist(),
                                                          strict=True)), indent=None))
    return 0


def _cmd_export(args) -> int:
    from .io import result_record

    out = Path(args.out)
    if out.suffix != ".json":
        raise UserError(f"--out {out} must end in .json (compare reads result files by suffix)")
    if out.exists() and not args.force:
        raise UserError(f"{out} exists (use --force to overwrite)")
    rec = result_record(args.checkpoint, args.run_seed)
    write_json(out, rec, indent=1)
    print(f"{out}: {rec['algo']} seed {rec['seed']}, success over {len(rec['goal_names'])} goals "
          f"{sum(rec['success_per_goal']) / len(rec['goal_names']):.4f}")
    return 0


def _cmd_compare(args) -> int:
    from .compare import check_comparable, compare_live, compare_runs, report, report_live
    from .io import load_runs

    a, b = load_runs(args.a), load_runs(args.b)
    check_comparable(a, b)
    fig = compare_runs(a["success"], b["success"], n_resamples=args.resamples)
    d = a["describe"]
    env = d["env"]["name"] + (f" {d['env']['size']}x{d['env']['size']}"
                              if d["env"]["name"] == "gridworld" else "")
    steps = "full episodes" if d["test_steps"] is None else f"up to {d['test_steps']} steps"
    what = (f"{env}, {fig['num_goals']} goals, {d['env_steps']:,} env steps per seed, final point "
            f"{d['test_repeats']} episodes per goal of {steps}")
    print("\n".join(report(fig, a["describe"]["label"], b["describe"]["label"], what)))
    live = None
    if a["live_success"] is not None and b["live_success"] is not None:
        live = compare_live(a["live_success"], b["live_success"], fig["seeds"])
        print("\n".join(report_live(live)))
    else:
        print("live success: not stored in these runs (checkpoints before 0.4.3)")
    if args.json:
        out = {"experiment": {k: d[k] for k in ("env", "env_steps", "test_steps", "test_repeats")},
               "seeds": fig["seeds"], "num_goals": fig["num_goals"]}
        for m, run in (("a", a), ("b", b)):
            out[m] = {"label": run["describe"]["label"], "checkpoints": run["paths"],
                      "per_seed": fig["per_seed"][m], **fig[m]}
        out.update({k: fig[k] for k in ("diff_over_seeds", "diff_over_goals")})
        out["live_success"] = live
        atomic_write_text(args.json, dumps_json(out, indent=1))
    return 0


def _cmd_goals(args) -> int:
    _check("env", args.env, ENVS)
    from .envs import make_env

    env = make_env(args.env, size=args.size)
    print("\n".join(env.goal_set.names))
    return 0


def _int_list(flag: str, text: str) -> list[int]:
    try:
        ks = [int(k) for k in text.split(",")]
    except ValueError:
        raise UserError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not ks or min(ks) < 1:
        raise UserError(f"{flag} must list positive numbers")
    return ks


def _cmd_bench(args) -> int:
    from .bench import ARMS, PRESETS, STEP_PAPER, speed_table, train_step_table

    if args.preset not in PRESETS:
        raise UserError(f"unknown preset {args.preset!r} (choose one of {', '.join(PRESETS)})")
    ks = None if args.goals is None else _int_list("--goals", args.goals)
    sides = [] if args.sides == "none" else _int_list("--sides", args.sides)
    if sides and min(sides) < 2:
        raise UserError("--sides must be gridworld sides >= 2")
    over = {} if args.batch is None else {"batch": args.batch}
    p = {**PRESETS[args.preset], **over}
    print(f"preset {args.preset}: batch {p['batch']}, obs {p['obs_dim']}, {p['layers']}x{p['width']} "
          f"MLP, {p['num_actions']} actions; HER-all = K goal-conditioned passes (recomputed in the "
          f"backward pass), factored = its first layer's observation part shared", flush=True)
    print("per-update time (targets + one gradient step on one minibatch; no acting, no other "
          "minibatch): ratio = HER-all / LEO")
    print(f"{'K':>6} {'LEO ms':>9} {'HER-all ms':>11} {'ratio':>7} {'FLOP ceil':>9} "
          f"{'bytes ceil':>10} {'factored ms':>11} {'ratio':>7} {'no-remat ms':>11} "
          f"{'recompute':>9}")
    rows = speed_table(ks, preset=args.preset, repeats=args.repeats, arms=ARMS, **over)
    for r in rows:
        print(f"{r['K']:>6} {1e3 * r['leo_s']:>9.2f} {1e3 * r['her_all_s']:>11.2f} "
              f"{r['per_update_ratio_her_all']:>6.1f}x {r['flop_ceiling_her_all']:>8.1f}x "
              f"{r['bytes_ceiling_her_all']:>9.1f}x {1e3 * r['her_all_factored_s']:>11.2f} "
              f"{r['per_update_ratio_her_all_factored']:>6.1f}x "
              f"{1e3 * r['her_all_no_remat_s']:>11.2f} {r['recompute_cost']:>8.2f}x")
    steps = []
    if sides:
        step_over = STEP_PAPER if args.preset == "paper" else {}
        print("whole training step (acting + targets + every minibatch and epoch) on an NxN "
              "gridworld, K = N^2; ratio = HER-all time / LEO time", flush=True)
        print(f"{'K':>6} {'env steps':>9} {'LEO steps/s':>12} {'HER-all steps/s':>16} {'ratio':>7}")
        steps = train_step_table(sides, repeats=args.repeats, **step_over)
        for r in steps:
            print(f"{r['K']:>6} {r['env_steps_per_update']:>9} {r['env_steps_per_s_leo']:>12.0f} "
                  f"{r['env_steps_per_s_her_all']:>16.0f} {r['step_ratio']:>6.1f}x")
    if args.json:
        atomic_write_text(args.json, dumps_json({"per_update": rows, "train_step": steps},
                                                indent=1))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = ArgumentParser(prog=NAME, description="LEO: goal-conditioned RL that learns every "
                                "goal at once (JAX), with PQN / HER / PPO / Dual LEO baselines.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train one algorithm (several seeds at once) and checkpoint it")
    t.add_argument("--algo", default="leo", help=f"one of {', '.join(ALGOS)}")
    t.add_argument("--env", default="gridworld", help=f"one of {', '.join(ENVS)}")
    t.add_argument("--steps", type=positive_int, default="2e5", help="environment steps per seed (default %(default)s; at least one update: --num-steps x --num-envs)")
    t.add_argument("--seeds", type=positive_int, default="1", help="number of seeds, trained with vmap; every "
                   "seed's parameters are saved")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--size", type=int, default=10, help="gridworld side (default %(default)s)")
    t.add_argument("--num-envs", type=positive_int, default=None, help="parallel environments")
    t.add_argument("--devices", type=positive_int, default="1",
                   help="split the environments over this many devices (jax.sharding)")
    t.add_argument("--her-mode", default="mixed", help="pqn_her: random|positive|mixed (appended "
                   "goals) or all (every goal; the speed benchmark's HER-all)")
    # the training knobs (default: the algorithm's; ``train`` prints the resolved configuration)
    t.add_argument("--lr", type=positive_float, default=None, help="learning rate (RAdam)")
    t.add_argument("--minibatch-size", type=positive_int, default=None, help="transitions per "
                   "gradient step; must divide --num-steps x --num-envs (PPO's for ppo_gc and "
                   "dual_leo_ppo)")
    t.add_argument("--num-steps", type=positive_int, default=None, help="rollout length per "
                   "update")
    t.add_argument("--epochs", type=positive_int, default=None, help="passes over each rollout")
    t.add_argument("--gamma", type=float_in(0, 1, low_open=True), default=None,
                   help="discount of every learner in the run (PPO's too)")
    t.add_argument("--eps-start", type=float_in(0, 1), default=None, help="ε-greedy start")
    t.add_argument("--eps-finish", type=float_in(0, 1), default=None, help="ε-greedy end")
    t.add_argument("--eps-decay", type=float_in(0, 1, low_open=True), default=None,
                   help="fraction of the updates over which ε decays linearly")
    t.add_argument("--no-anneal-lr", action="store_true", help="a constant learning rate "
                   "(default: annealed linearly to ~0)")
    t.add_argument("--max-grad-norm", type=positive_float, default=None, help="global-norm "
                   "gradient clipping")
    t.add_argument("--her-relabelled-goals", type=positive_int, default=None, help="pqn_her: "
                   "goals appended to each transition's commanded goal (default 2)")
    t.add_argument("--her-random-proportion", type=float_in(0, 1), default=None, help="pqn_her "
                   "mixed: share of the appended goals drawn among the goals seen so far, "
                   "rounded as numpy does (the rest: achieved at s; default 0.5)")
    t.add_argument("--her-granularity", default=None, help="pqn_her: transition (default) or "
                   "trajectory (every step gets the rollout's last-step goals)")
    t.add_argument("--evals", type=positive_int, default="1", help="evaluation points during training (plus one "
                   "before)")
    t.add_argument("--test-steps", type=_test_steps, default=None, help="steps per evaluation episode, or 'full' "
                   "(default 512 capped by the episode length: Craftax episodes last 10k / 100k)")
    t.add_argument("--eval-repeats", type=positive_int, default=None, help="evaluation episodes per goal (default "
                   "16 on Craftax, 2 on the gridworld)")
    t.add_argument("--interim-repeats", type=int, default=None, help="evaluation episodes per "
                   "goal at the points before the last (default 4; 0 = --eval-repeats)")
    t.add_argument("--distill-goals", default="commanded", help="Dual LEO: commanded (the "
                   "paper's) or commanded+random (ours)")
    t.add_argument("--reset-ratio", type=positive_int, default=None, help="optimistic resets: envs per fresh start "
                   "state (default 16 on Craftax, 1 on the gridworld)")
    t.add_argument("--width", type=positive_int, default=None, help="MLP width (default 1024 on Craftax)")
    t.add_argument("--layers", type=positive_int, default=None, help="MLP layers (default 4 on Craftax)")
    t.add_argument("--norm", default="batchrenorm", choices=NORMS, help="input normalisation of "
                   "the Q networks: batchrenorm (the paper's) or none")
    t.add_argument("--obs", default="symbolic", choices=("symbolic", "pixels"), help="Craftax "
                   "observations: symbolic (the paper's) or pixels (a conv encoder)")
    t.add_argument("--out", default="leo-checkpoint.msgpack", help="checkpoint file")
    t.add_argument("--checkpoint-every", type=positive_int, default=None, help="write the whole "
                   "run state (every seed's network, optimiser, environments and RNG) to --state "
                   "every N updates; N must divide the updates between evaluation points")
    t.add_argument("--state", default=None, help="run state file (default: --out + '.state')")
    t.add_argument("--resume", action="store_true", help="continue the run saved in --state "
                   "(same flags; the result equals an uninterrupted run's)")
    t.add_argument("--fast-compile", action="store_true", help="compile with LLVM's optimisation "
                   "off (the same values; a fraction of the compile time, slower steps: for short "
                   "runs and tests)")
    t.add_argument("--force", action="store_true", help="overwrite --out")
    t.set_defaults(fn=_cmd_train)
    e = sub.add_parser("eval", help="success over all goals of a checkpoint")
    e.add_argument("checkpoint")
    e.add_argument("--env", default=None, help="must match the checkpoint's environment")
    e.add_argument("--repeats", type=positive_int, default="4", help="episodes per goal")
    e.add_argument("--test-steps", default=None, help="steps per episode or 'full' (default: the "
                   "checkpoint's)")
    e.add_argument("--run-seed", type=int, default=None, help="which trained seed to evaluate "
                   "(default: the first)")
    e.add_argument("--seed", type=int, default=0, help="evaluation RNG seed")
    e.add_argument("--per-goal", action="store_true", help="print each goal's success")
    e.add_argument("--json", default=None, help="write per-goal success as JSON")
    e.set_defaults(fn=_cmd_eval)
    g = sub.add_parser("goals", help="list an environment's goals, one per line")
    g.add_argument("--env", default="gridworld", help=f"one of {', '.join(ENVS)}")
    g.add_argument("--size", type=int, default=10, help="gridworld side")
    g.set_defaults(fn=_cmd_goals)
    b = sub.add_parser("bench", help="LEO vs all-goals relabelling as K grows: time per update "
                       "and env steps/s of a whole training step")
    b.add_argument("--preset", default="cpu", help="cpu (width 128, seconds) or paper (Craftax "
                   "sizes: obs 8268, 4x1024, 43 actions, minibatch 512; for a GPU)")
    b.add_argument("--goals", default=None, help="comma-separated K (default: the preset's)")
    b.add_argument("--batch", type=positive_int, default=None, help="minibatch (default: the preset's)")
    b.add_argument("--repeats", type=positive_int, default="5")
    b.add_argument("--sides", default="4,12,23", help="gridworld sides N of the whole-step table "
                   "(K = N^2; default %(default)s: K 16, 144, 529); none: skip it")
    b.add_argument("--json", default=None, help="write the rows as JSON")
    b.set_defaults(fn=_cmd_bench)
    x = sub.add_parser("export", help="one trained seed's final per-goal success as a JSON "
                       "result file (what compare reads beside checkpoints)")
    x.add_argument("checkpoint")
    x.add_argument("--out", required=True, help="the .json file to write")
    x.add_argument("--run-seed", type=int, default=None, help="which trained seed (required for "
                   "a checkpoint of several seeds)")
    x.add_argument("--force", action="store_true", help="overwrite --out")
    x.set_defaults(fn=_cmd_export)
    c = sub.add_parser("compare", help="final success of method A vs method B: per seed, mean "
                       "± std over seeds, paired 95%% intervals of A - B over seeds and over goals")
    c.add_argument("-a", nargs="+", required=True, metavar="CHECKPOINT", help="method A's "
                   "checkpoints (single-seed runs and / or stacked multi-seed runs) or result "
                   "files (.json, from export)")
    c.add_argument("-b", nargs="+", required=True, metavar="CHECKPOINT", help="method B's")
    c.add_argument("--resamples", type=positive_int, default="9999", help="bootstrap resamples "
                   "of each interval (default %(default)s)")
    c.add_argument("--json", default=None, help="write the figures as JSON")
    c.set_defaults(fn=_cmd_compare)
    r = sub.add_parser("reproduce", help="the registered reproduction")
    add_reproduce_arguments(r)
    r.set_defaults(fn=lambda a: reproduce_from_args([NAME], a))
    return p


@cli_entry(NAME)
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if argv is None and args.command in COMPILING:  # the console entry, before JAX loads
        from .quiet import quiet_stderr

        quiet_stderr()
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
