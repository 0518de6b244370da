"""The mths command line: run, eval, baselines, port, replay, report, gen-instances, reproduce.
Heavy imports live inside the commands; every user mistake is one line on stderr, exit 2."""

from __future__ import annotations

import math
import sys
from functools import partial
from pathlib import Path

from icml26_shared import UserError, cli_entry
from icml26_shared.cli import (
    ArgumentParser,
    add_reproduce_arguments,
    nonneg_float,
    nonneg_int,
    positive_float,
    positive_int,
    reproduce_from_args,
)
from icml26_shared.io import (
    atomic_dir,
    atomic_write_text,
    check_replaceable,
    dumps_json,
    print_json,
    write_json,
)


def _task(text: str) -> str:
    from .tasks import get_task

    return get_task(text).name


_EXISTS = "--out {path} already exists (pass --resume to continue it, or choose another path)"


def _fresh_out(out: Path, resume: bool = False) -> Path:
    if out.exists() and not resume:
        raise UserError(_EXISTS.format(path=out))
    if resume:  # the run is swapped in at the end: refuse a folder no run wrote before any work
        check_replaceable(out)
    return out


#: write into a temporary sibling folder; rename onto --out only when the command succeeded,
#: replacing an earlier run's folder (--resume) but never one holding files no run wrote
_Staging = partial(atomic_dir, replace=True, exists_error=_EXISTS)


def _sandbox(args) -> str:
    """The sandbox level (resolved in ``main`` before any work), printed once on stderr at first use."""
    if not getattr(args, "_level_shown", False):
        args._level_shown = True
        print(f"mths: sandbox level {args._level}", file=sys.stderr)
    return args._level


def _llm(args, seed: int):
    from .llm import make_llm

    return make_llm(args.llm, seed=seed, model=args.model, base_url=args.base_url, api_key_env=args.api_key_env,
                    replay_log=args.model if args.llm == "replay" else None, temperature=args.temperature,
                    max_tokens=args.max_tokens, max_retries=args.max_retries)


def _train_instances(args, tasks):
    from .experiments import load_set
    from .tasks import get_task, load_instances

    if args.instances is None:
        return {t: load_set("quick", "train", t) for t in tasks}
    base = Path(args.instances)
    return {t: load_instances(get_task(t), base / t if (base / t).is_dir() else base) for t in tasks}


def cmd_run(args) -> int:
    from .config import SearchConfig
    from .llm import ReplayLLM, read_log
    from .pipeline import run_meta, run_search, save_run
    from .replay import run_results
    from .sandbox import Limits

    tasks = [_task(t) for t in args.tasks.split(",") if t]
    if not tasks:
        raise UserError("--tasks must name at least one task")
    if args.llm == "grammar":
        from .grammar import require_components

        require_components(tasks)
    out = _fresh_out(args.out, args.resume)
    if args.budget_calls <= 0:
        raise UserError("--budget-calls must be a positive integer")
    client = _llm(args, args.seed)
    if args.resume and out.exists():
        client = ReplayLLM(read_log(out / "calls.jsonl"), then=client)
    train = _train_instances(args, tasks)
    cfg = SearchConfig(pop=args.pop, eoh_pop=args.pop)
    lim = Limits(args.time_limit, args.steps, sandbox=_sandbox(args))
    search, llm, ev = run_search(args.method, tasks, train, client, args.budget_calls, lim, args.workers,
                                 args.seed, cfg)
    with _Staging(out) as tmp:
        meta = run_meta(args.method, tasks, args.budget_calls, lim, args.workers, args.seed, cfg, args.llm,
                        instances=None if args.instances is None else str(args.instances),
                        complete=search.stopped is None, stopped=search.stopped, endpoint_failures=llm.failures)
        save_run(tmp, search, llm, ev, meta)
        run_results(search, llm, ev, meta).to_json(tmp / "results.json")
    if search.stopped is not None:
        raise UserError(f"the run stopped after {llm.calls} calls: {search.stopped}; the incomplete run is in "
                        f"{out} (--resume continues it)")
    print(f"{args.method}: {llm.calls} calls, {ev.evaluations} evaluations, {search.invalid} invalid; "
          + ", ".join(f"{t} best train gap {-s:.4f}" for t, (s, _) in search.archive.items()))
    print(f"run written to {out}")
    return 0


def cmd_llm_row(args) -> int:
    """A real LLM's replies, classified, in a small search from a grammar-initialised population
    on the shipped quick train / held-out sets (what quick reports for SmolLM2)."""
    from .config import SearchConfig
    from .experiments import load_set
    from .grammar import require_components
    from .llmrow import FAILURES, real_llm_search
    from .pipeline import norm_scores
    from .sandbox import Limits

    if args.llm == "grammar":
        raise UserError("llm-row measures a real LLM: use --llm openai|hf|replay")
    tasks = [_task(t) for t in args.tasks.split(",") if t]
    if not tasks:
        raise UserError("--tasks must name at least one task")
    require_components(tasks)  # the population comes from the grammar operator
    out = _fresh_out(args.out)
    client = _llm(args, args.seed)
    train = {t: load_set("quick", "train", t) for t in tasks}
    test = {t: load_set("quick", "test", t) for t in tasks}
    lt = Limits(args.time_limit, args.steps, sandbox=_sandbox(args))
    le = Limits(args.test_time_limit, args.test_steps, sandbox=lt.sandbox)
    norm = norm_scores(tasks, train, lt, args.workers)
    row = real_llm_search(client, tasks, train, test, args.calls, lt, le, args.workers, args.seed,
                          SearchConfig(pop=args.pop), norm)
    summary = {k: v for k, v in row.items() if k != "log"}
    with _Staging(out) as tmp:
        atomic_write_text(tmp / "calls.jsonl", "".join(
            dumps_json({**r, "outcome": c["outcome"]}, indent=None, sort_keys=True) + "\n"
            for r, c in zip(row["log"], row["per_call"])))
        write_json(tmp / "row.json", summary, indent=1, sort_keys=True)
    if row["stopped"] is not None:
        raise UserError(f"the LLM endpoint failed after {row['calls']} calls: {row['stopped']} (replies so far in {out})")
    if args.json:
        print_json(summary)
    else:
        best = row["best_test_gap_any"]
        print(f"{row['model']}: {row['calls']} calls, {row['parsable']} parsable, {row['valid']} valid; failures: "
              + ", ".join(f"{k} {row['failures'][k]}" for k in FAILURES)
              + (f"; best held-out gap {best:.4f}" if math.isfinite(best) else "; no valid program"))
        print(f"row written to {out}")
    return 0


def _eval_rows(task, src, args):
    from .pipeline import evaluate
    from .sandbox import Limits
    from .tasks import get_task, load_instances

    insts = load_instances(get_task(task), args.instances, args.references, {"rounding": args.rounding})
    return insts, evaluate(task, src, insts, Limits(args.time_limit, args.steps, sandbox=_sandbox(args)),
                           args.workers)


def _summary(rows) -> dict:
    rows = [{k: v for k, v in r.items() if k != "solution"} for r in rows]
    gaps = [r["gap"] for r in rows]
    ok = all(g is not None and math.isfinite(g) for g in gaps)
    return {"instances": rows, "mean_gap": (sum(gaps) / len(gaps)) if ok and gaps else None}


def _print_rows(name, rows) -> None:
    for r in rows:
        gap = "n/a" if r["gap"] is None else f"{r['gap']:+.4%}"
        print(f"{name:<22} {r['instance']:<22} cost {r['cost']:>12.6g}  ref {r['reference'] or float('nan'):>10.6g}"
              f"  gap {gap}  {'ok' if r['feasible'] else 'INFEASIBLE: ' + str(r['error'])}")


def cmd_eval(args) -> int:
    from .tasks import get_task

    try:
        src = Path(args.program).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read program {args.program}: {exc}") from None
    task = get_task(args.task)
    if args.save_solutions:
        _fresh_out(Path(args.save_solutions))
    insts, rows = _eval_rows(args.task, src, args)
    if args.save_solutions:
        with _Staging(Path(args.save_solutions)) as tmp:
            for inst, r in zip(insts, rows):
                if r["feasible"]:
                    task.write(inst, r["solution"], tmp)
    out = {"sandbox": _sandbox(args), **_summary(rows)}
    if args.json:
        print_json(out, indent=1, default=lambda x: None)
    else:
        _print_rows(Path(args.program).name, rows)
        print(f"mean gap: {'n/a' if out['mean_gap'] is None else format(out['mean_gap'], '+.4%')}")
    return 0


def cmd_baselines(args) -> int:
    from . import baselines

    res = {}
    for name, src in baselines.programs(args.task).items():
        _, rows = _eval_rows(args.task, src, args)
        res[name] = _summary(rows)
        if not args.json:
            _print_rows(name, rows)
    if args.json:
        print_json({"sandbox": _sandbox(args), **res}, indent=1, default=lambda x: None)
    else:
        for name, s in res.items():
            print(f"{name:<22} mean gap {'n/a' if s['mean_gap'] is None else format(s['mean_gap'], '+.4%')}")
    return 0


def cmd_port(args) -> int:
    from .io import atomic_write
    from .pipeline import port
    from .sandbox import Limits
    from .tasks import get_task, load_instances

    try:
        mh = Path(args.metaheuristic).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read metaheuristic {args.metaheuristic}: {exc}") from None
    if "ALGORITHM" not in mh:
        raise UserError(f"{args.metaheuristic}: not a metaheuristic (no 'ALGORITHM' line)")
    out = _fresh_out(args.out)
    if args.llm == "grammar":
        from .grammar import require_components

        require_components([args.task])
    insts = load_instances(get_task(args.task), args.instances, args.references, {"rounding": args.rounding})
    src, rows, llm = port(mh, args.task, _llm(args, args.seed), insts,
                          Limits(args.time_limit, args.steps, sandbox=_sandbox(args)), args.workers, args.seed)
    with _Staging(out) as tmp:
        if src:
            atomic_write(tmp / f"{args.task}.py", src)
        atomic_write(tmp / "calls.jsonl", "".join(dumps_json(r, indent=None, sort_keys=True) + "\n"
                                                  for r in llm.log))
        write_json(tmp / "eval.json", _summary(rows), indent=1, default=lambda x: None)
    s = _summary(rows)
    if args.json:
        print_json({"program": None if src is None else str(out / f"{args.task}.py"), "sandbox": _sandbox(args), **s},
                   indent=1, default=lambda x: None)
    else:
        print("no usable program in the reply (invalid)" if src is None else f"program: {out / (args.task + '.py')}")
        print(f"mean gap: {'n/a' if s['mean_gap'] is None else format(s['mean_gap'], '+.4%')}")
    return 0


def cmd_replay(args) -> int:
    from .replay import replay

    print(replay(Path(args.run), _fresh_out(args.out), _Staging))
    return 0


def cmd_report(args) -> int:
    from .replay import report

    print(report(Path(args.run)))
    return 0


def cmd_gen(args) -> int:
    from .generate import generate

    out = _fresh_out(args.out)
    with _Staging(out) as tmp:
        files = generate(args.task, args.n, args.count, args.seed, tmp, args.kind, machines=args.machines)
    print(f"wrote {len(files)} file(s) and references.json to {out}")
    return 0


def _common(p, instances_required: bool = True) -> None:
    p.add_argument("--instances", type=Path, required=instances_required, help="folder of instance files")
    p.add_argument("--references", type=Path, default=None, help="JSON stem -> reference cost")
    p.add_argument("--time-limit", type=positive_float, default=0.5, help="CPU s per instance")
    p.add_argument("--steps", type=positive_int, default=30, help="main-loop steps per instance")
    p.add_argument("--workers", type=positive_int, default=1)
    p.add_argument("--rounding", choices=("nint", "exact"), default="nint", help="CVRPLIB distances")
    _sandbox_arg(p)
    _plugin_arg(p)


def _plugin_arg(p) -> None:
    p.add_argument("--plugin", action="append", default=[], metavar="FILE.py|MODULE",
                   help="load a task plugin (repeatable; it calls mths.tasks.register)")


def _sandbox_arg(p) -> None:
    p.add_argument("--sandbox", choices=("auto", "bwrap", "unshare", "process"), default="auto",
                   help="isolation of LLM-written programs (auto: the strongest available here)")


def _llm_args(p) -> None:
    p.add_argument("--llm", choices=("grammar", "openai", "hf", "replay"), default="grammar")
    p.add_argument("--base-url", default=None)
    p.add_argument("--model", default=None, help="model name (openai), folder or 'smollm2' (hf), calls.jsonl (replay)")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="variable holding the API key")
    p.add_argument("--temperature", type=nonneg_float, default=None,
                   help="sampling temperature (openai default 1.0; hf default 0 = greedy)")
    p.add_argument("--max-tokens", type=positive_int, default=None, help="reply length cap (hf default 384)")
    p.add_argument("--max-retries", type=nonneg_int, default=3,
                   help="retries with backoff on 429 / 5xx / timeouts before the run stops")
    p.add_argument("--seed", type=int, default=0)


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(prog="mths", description="MTHS: Multi-Task Hierarchical Search for heuristic design")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="search: MTHS, MTHS without transfer, or EoH")
    p.add_argument("--tasks", default="tsp,cvrp,fssp")
    p.add_argument("--method", choices=("mths", "mths-notransfer", "eoh", "random"), default="mths",
                   help="random: a fresh program per call, tasks in turn (the anchor any search must beat)")
    _llm_args(p)
    p.add_argument("--budget-calls", type=int, required=True)
    p.add_argument("--pop", type=positive_int, default=4)
    p.add_argument("--instances", type=Path, default=None, help="folder (with tsp/ cvrp/ fssp/ subfolders or files)")
    p.add_argument("--time-limit", type=positive_float, default=0.2)
    p.add_argument("--steps", type=positive_int, default=12)
    p.add_argument("--workers", type=positive_int, default=1)
    _sandbox_arg(p)
    _plugin_arg(p)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--resume", action="store_true")
    p.set_defaults(fn=cmd_run)
    p = sub.add_parser("eval", help="score a program on instance files")
    p.add_argument("program")
    p.add_argument("--task", type=_task, required=True)
    _common(p)
    p.add_argument("--save-solutions", default=None)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_eval)
    p = sub.add_parser("baselines", help="classic heuristics and OR-Tools GLS on instance files")
    p.add_argument("--task", type=_task, required=True)
    _common(p)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_baselines)
    p = sub.add_parser("port", help="instantiate a metaheuristic on a new task")
    p.add_argument("metaheuristic")
    p.add_argument("--task", type=_task, required=True)
    _llm_args(p)
    _common(p)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_port)
    p = sub.add_parser("llm-row", help="a real LLM's replies classified, in a small search from a "
                                       "grammar-initialised population (shipped quick sets)")
    p.add_argument("--tasks", default="tsp,cvrp,fssp")
    _llm_args(p)
    p.add_argument("--calls", type=positive_int, default=12, help="LLM calls (one program each)")
    p.add_argument("--pop", type=positive_int, default=4, help="grammar-initialised population")
    p.add_argument("--time-limit", type=positive_float, default=0.2, help="CPU s per train instance")
    p.add_argument("--steps", type=positive_int, default=12, help="main-loop steps per train instance")
    p.add_argument("--test-time-limit", type=positive_float, default=0.5, help="CPU s per held-out instance")
    p.add_argument("--test-steps", type=positive_int, default=30)
    p.add_argument("--workers", type=positive_int, default=1)
    _sandbox_arg(p)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_llm_row)
    p = sub.add_parser("replay", help="rerun a recorded run from its call log and compare")
    p.add_argument("run")
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(fn=cmd_replay)
    p = sub.add_parser("report", help="summarise a run folder")
    p.add_argument("run")
    p.set_defaults(fn=cmd_report)
    p = sub.add_parser("gen-instances", help="write an instance set with references")
    p.add_argument("--task", type=_task, required=True)
    p.add_argument("--n", type=positive_int, required=True)
    p.add_argument("--count", type=positive_int, required=True)
    p.add_argument("--kind", choices=("uniform", "clustered"), default="uniform")
    p.add_argument("--machines", type=positive_int, default=5, help="flow shop machines")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.set_defaults(fn=cmd_gen)
    p = sub.add_parser("reproduce", help="reproduce the paper's claims at laptop scale")
    add_reproduce_arguments(p)
    p.set_defaults(fn=lambda a: reproduce_from_args(["mths"], a))
    return parser


def _load_plugins(argv: list[str]) -> None:
    """Tasks from the ``mths.tasks`` entry points and ``--plugin`` exist before ``--task`` is parsed."""
    import argparse

    from .tasks import load_entry_points, load_plugin

    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--plugin", action="append", default=[])
    known, _ = pre.parse_known_args(argv)
    load_entry_points()
    for spec in known.plugin:
        load_plugin(spec)


@cli_entry("mths")
def main(argv: list[str] | None = None) -> int:
    _load_plugins(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if getattr(args, "sandbox", None) is not None:  # a level not available here: one line, exit 2
        from .sandbox import resolve_level

        args._level = resolve_level(args.sandbox)
    return args.fn(args)


if __name__ == "__main__":
    sys.exit(main())
