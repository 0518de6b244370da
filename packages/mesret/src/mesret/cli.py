"""``mesret``: bench / policy / report / reproduce. Heavy imports live inside the commands; every
user mistake is one ``mesret: error: ...`` line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import ArgumentParser as Parser
from icml26_shared.cli import (
    add_reproduce_arguments,
    positive_int,
    reproduce_from_args,
)
from icml26_shared.io import print_json

ALGO_NAMES = ("mesret", "smesret", "indep-cma", "indep-sepcma", "openai-es", "mfea", "mesret-norwe", "mesret-uniform",
              "mesret-tau0")


def _int_list(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or min(vals) < 2:
        raise argparse.ArgumentTypeError(f"dimensions must be integers >= 2, got {text!r}")
    return vals


def _names(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _load_suite(args) -> list:
    from .suites import cec17_mix, load_user_suite, wcci20

    if args.suite == "wcci20":
        return wcci20(args.tasks, args.dims or (10, 20, 30), args.similarity, seed=args.suite_seed)
    if args.suite == "cec17-mix":
        return cec17_mix(args.dims or (10, 30, 50))
    if args.suite == "gymnax":
        raise UserError("the policy suite runs through `mesret policy`")
    return load_user_suite(args.suite)


def _cmd_bench(args: argparse.Namespace) -> int:
    from icml26_shared import Results

    from .baselines import ALGOS, optimize
    from .bench import add_rows
    from .io import check_new_dir, summary_table, write_run_dir
    from .registry import DESCRIPTOR

    check_new_dir(args.out, args.force)
    algos = _names(args.algos)
    for a in algos:
        if a not in ALGOS:
            raise UserError(f"unknown algo {a!r} (choose from {', '.join(ALGOS)})")
    tasks = _load_suite(args)
    seeds = list(range(args.seed, args.seed + args.seeds))
    runs = _run_jobs(tasks, algos, seeds, args.fe_per_task, args.workers, optimize, args.popsize)
    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale="quick", seed=args.seed)
    add_rows(res, f"bench_{Path(args.suite).name}", tasks, runs, seeds, per_task=True)
    res.notes.append(f"mesret bench --suite {args.suite} --algos {','.join(algos)} --fe-per-task "
                     f"{args.fe_per_task} --seeds {args.seeds}"
                     + (f" --popsize {args.popsize}" if args.popsize else ""))
    path = write_run_dir(args.out, res, force=args.force)
    if args.json:
        print_json(res.to_dict(), indent=2)
    else:
        print(summary_table(res))
        print(f"results: {path}")
    return 0


def _arm_options(algo: str, popsize: int | None) -> dict:
    """``--popsize N``: λ of the CMA-ES arms and OpenAI-ES, MFEA's N per task."""
    if popsize is None:
        return {}
    return {"pop_per_task": popsize} if algo == "mfea" else {"popsize": popsize}


def _run_jobs(tasks, algos, seeds, fe, workers, optimize, popsize=None) -> dict:
    """``bench.run_arms`` over (algo, seed) jobs, each seeded on its own, so results do not depend
    on ``workers``; with workers the first job runs here first, so a user's mistake is one line."""
    from .bench import run_arms

    configs = {a: _arm_options(a, popsize) for a in algos}
    if workers > 1 and len(algos) * len(seeds) > 1:
        optimize(tasks, algos[0], fe_per_task=fe, seed=seeds[0], **configs[algos[0]])  # validate in-process
    return run_arms(tasks, algos, fe, seeds, configs, workers=workers)


def _cmd_policy(args: argparse.Namespace) -> int:
    import numpy as np

    from icml26_shared import Results

    from .baselines import ALGOS, optimize
    from .io import check_new_dir, summary_table, write_run_dir
    from .policy import ENVS, normalised_return, policy_suite
    from .registry import DESCRIPTOR

    check_new_dir(args.out, args.force)
    envs = _names(args.envs)
    for e in envs:
        if e not in ENVS:
            raise UserError(f"unknown env {e!r} (choose from {', '.join(ENVS)})")
    algos = _names(args.algos)
    for a in algos:
        if a not in ALGOS:
            raise UserError(f"unknown algo {a!r} (choose from {', '.join(ALGOS)})")
    fe = args.env_steps // (args.horizon * 2)  # 2 rollouts of up to `horizon` steps per evaluation
    if fe < 2:
        raise UserError(f"--env-steps {args.env_steps} is below two evaluations ({4 * args.horizon} steps)")
    res = Results(package=DESCRIPTOR.name, version=DESCRIPTOR.version, scale="quick", seed=args.seed)
    seeds = list(range(args.seed, args.seed + args.seeds))
    for a in algos:
        scores, steps = [], []
        for s in seeds:
            tasks = policy_suite(envs, args.layout, args.hidden, args.horizon, seed=args.seed + 1000)
            r = optimize(tasks, a, fe_per_task=fe, seed=s)
            scores.append([normalised_return(t.name, -f) for t, f in zip(tasks, r.best_f, strict=True)])
            steps.append(sum(t.fn.steps for t in tasks))
        scores = np.array(scores)
        res.add(f"policy_{args.layout}", a, "normalised_return", list(scores.mean(axis=1)), seeds=seeds)
        res.add(f"policy_{args.layout}", a, "env_steps", [float(x) for x in steps], seeds=seeds)
        for i, e in enumerate(envs):
            res.add(f"policy_{args.layout}", a, "normalised_return", list(scores[:, i]), seeds=seeds, task=e)
    path = write_run_dir(args.out, res, force=args.force)
    print(summary_table(res))
    print(f"results: {path}")
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from .io import read_run_dir, summary_table

    res = read_run_dir(args.dir)
    print(summary_table(res))
    for c in res.claims:
        print(f"[{'held' if c.held else 'not held' if c.held is not None else 'n/a'}] {c.description}: "
              f"{c.ours if c.ours is None else f'{c.ours:.4g}'} {c.note}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="mesret", description="MES-RET: many-task evolution strategy with reward-weighted "
               "evaluation and transfer (ICML 2026), with its baselines and benchmark suites.")
    sub = p.add_subparsers(dest="command", required=True)
    b = sub.add_parser("bench", help="run algorithms on a many-task suite, write DIR/results.json")
    b.add_argument("--suite", default="wcci20",
                   help="wcci20, cec17-mix (needs mesret[cec]) or FILE.py:FUNC returning TaskSpecs")
    b.add_argument("--tasks", type=positive_int, default=50, help="wcci20: number of tasks (default 50)")
    b.add_argument("--dims", type=_int_list, default=None,
                   help="dimensions, e.g. 10,20,30 (default: wcci20 10,20,30; cec17-mix 10,30,50)")
    b.add_argument("--similarity", choices=("high", "mixed", "low"), default="mixed")
    b.add_argument("--suite-seed", type=int, default=1000, help="wcci20 instance (default 1000 = the test instance)")
    b.add_argument("--algos", default="mesret,indep-cma", help=f"comma-separated: {', '.join(ALGO_NAMES)}")
    b.add_argument("--popsize", type=positive_int, default=None,
                   help="N for every arm (CMA-ES λ, OpenAI-ES, MFEA per task); default: Hansen's λ, MFEA 100")
    b.add_argument("--fe-per-task", type=positive_int, default=2000, help="evaluations per task (budget = N x T)")
    b.add_argument("--seeds", type=positive_int, default=3, help="number of seeds")
    b.add_argument("--seed", type=int, default=0, help="first seed")
    b.add_argument("--workers", type=positive_int, default=1, help="processes over (algo, seed) runs")
    b.add_argument("--out", type=Path, required=True, help="output folder (must not exist)")
    b.add_argument("--force", action="store_true", help="replace --out if it exists")
    b.add_argument("--json", action="store_true", help="print the results as JSON")
    b.set_defaults(fn=_cmd_bench)
    q = sub.add_parser("policy", help="policy search on classic-control tasks (semantic or naive layout)")
    q.add_argument("--envs", default="CartPole-v1,Acrobot-v1,Pendulum-v1,MountainCarContinuous-v0")
    q.add_argument("--layout", choices=("semantic", "naive"), default="semantic")
    q.add_argument("--algos", default="smesret,indep-sepcma")
    q.add_argument("--hidden", type=positive_int, default=8)
    q.add_argument("--horizon", type=positive_int, default=100)
    q.add_argument("--env-steps", type=positive_int, default=120_000, help="env-step budget per task")
    q.add_argument("--seeds", type=positive_int, default=1)
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--out", type=Path, required=True)
    q.add_argument("--force", action="store_true")
    q.set_defaults(fn=_cmd_policy)
    r = sub.add_parser("report", help="print the tables and claim checks of a results folder")
    r.add_argument("dir", type=Path)
    r.set_defaults(fn=_cmd_report)
    rp = sub.add_parser("reproduce", help="run the laptop-scale reproduction")
    add_reproduce_arguments(rp)
    rp.set_defaults(fn=lambda a: reproduce_from_args(["mesret"], a))
    return p


@cli_entry("mesret")
def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
