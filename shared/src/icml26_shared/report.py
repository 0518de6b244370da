"""Reports: a Markdown file with tables and PNG plots, and a rich summary table in the terminal.

matplotlib and rich are imported inside the functions, so importing this module stays cheap.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from .results import ClaimCheck, Results


def fmt(x: float | None, spread: float | None = None, digits: int = 4) -> str:
    if x is None:
        return "—"
    s = f"{x:.{digits}g}"
    if spread is not None:
        s += f" ± {spread:.2g}"
    return s


def held_mark(c: ClaimCheck) -> str:
    """A claim's verdict (``held``, ``NOT held``, ``not evaluated``, ``not run``), or a check's
    (``ok``, ``FAILED``, ...)."""
    st = c.status
    if c.kind == "check":
        return {"held": "ok", "not held": "FAILED"}.get(st, st)
    return "NOT held" if st == "not held" else st


def ours_cell(c: ClaimCheck) -> str:
    """Our figure, with its 95% interval (of the difference to the baseline when there is one)."""
    s = fmt(c.ours)
    if c.interval is not None:
        lo, hi = c.interval
        what = "Δ " if c.baseline is not None else ""
        s += f" ({what}95% CI [{lo:.3g}, {hi:.3g}])"
    return s


def statuses_by_id(rows: Sequence[tuple[str, str]]) -> dict[str, str]:
    """One status per claim id from its verdict rows ``(id, status)``: a claim checked against
    several baselines or conditions is ``held`` only when every row holds, ``not held`` when any
    row does not, ``not evaluated`` otherwise."""
    by_id: dict[str, list[str]] = {}
    for cid, st in rows:
        by_id.setdefault(cid, []).append(st)
    return {cid: "held" if all(s == "held" for s in sts)
            else "not held" if any(s == "not held" for s in sts) else "not evaluated"
            for cid, sts in by_id.items()}


def _counts(res: Results, kind: str) -> tuple[int, int, int]:
    st = statuses_by_id([(c.claim_id, c.status) for c in res.claims if c.kind == kind])
    if res.status != "ok":
        return 0, 0, len(st)
    held = sum(s == "held" for s in st.values())
    not_held = sum(s == "not held" for s in st.values())
    return held, not_held, len(st) - held - not_held


def claim_counts(res: Results) -> tuple[int, int, int]:
    """(held, not held, not evaluated or not run) over the package's claims (one per claim id, see
    ``statuses_by_id``), checks excluded; a run that did not finish counts every claim as not run."""
    return _counts(res, "claim")


def check_counts(res: Results) -> tuple[int, int, int]:
    """(ok, failed, not evaluated or not run) over the package's checks."""
    return _counts(res, "check")


def _checks_cell(res: Results) -> str:
    ok, failed, rest = check_counts(res)
    n = ok + failed + rest
    if not n:
        return "—"
    return f"{ok}/{n} ok" + (f", {failed} FAILED" if failed else "")


def _wall(res: Results) -> str:
    s = res.elapsed_s or 0.0
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"


def _status(res: Results) -> str:
    return {"ok": "ok", "skipped": "skipped", "failed": "FAILED"}.get(res.status, res.status)


def overview_rows(results: Sequence[Results], not_run: Sequence[str] = ()) -> list[tuple[str, ...]]:
    """One row per package: package, version, claims held, not held, not evaluated, wall time,
    checks, status, reason."""
    rows = []
    for res in results:
        h, nh, nr = claim_counts(res)
        rows.append((res.package, res.version, str(h), str(nh), str(nr), _wall(res),
                     _checks_cell(res), _status(res), res.error or ""))
    rows += [(name, "", "", "", "", "", "", "not run", "interrupted before it started")
             for name in not_run]
    return rows


def curve_rows(res: Results) -> list[tuple[str, ...]]:
    """One row per curve: experiment, method, metric, split, seed, budget, best at, stopped at,
    flags."""
    rows = []
    for c in res.curves:
        budget = c.budget if c.budget is not None else (max(c.steps) if c.steps else None)
        best = c.best_step()
        rows.append((c.experiment, c.method, c.metric, c.split,
                     "" if c.seed is None else str(c.seed), fmt(budget), fmt(best),
                     fmt(c.stopped_at), ", ".join(c.flags()) or "—"))
    return rows


def curve_figure_name(experiment: str) -> str:
    slug = "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in experiment).strip("-")
    return f"curves-{slug or 'experiment'}.png"


def draw_curves(res: Results, out_dir: str | Path) -> list[str]:
    """One PNG per experiment: the dev split (or, for an experiment without dev curves, every
    split it has), one colour per method and metric, seeds overlaid in it, a cross where early
    stopping fired; a flagged curve is named in the legend. Returns the file names written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_exp: dict[str, list] = {}
    for c in res.curves:
        by_exp.setdefault(c.experiment, []).append(c)
    written = []
    for exp, curves in by_exp.items():
        shown = [c for c in curves if c.split == "dev"] or curves
        groups: dict[tuple[str, str, str], list] = {}
        for c in shown:
            groups.setdefault((c.method, c.metric, c.split), []).append(c)
        metrics = sorted({c.metric for c in shown})
        fig, ax = plt.subplots(figsize=(6.4, 4), dpi=110)
        colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
        for k, ((method, metric, split), group) in enumerate(groups.items()):
            colour = colours[k % len(colours)]
            flagged = sorted({f for c in group for f in c.flags()})
            label = method + (f" {metric}" if len(metrics) > 1 else "") \
                + (f" ({split})" if split != "dev" else "") + (f", {len(group)} seeds"
                                                               if len(group) > 1 else "") \
                + (f" [{', '.join(flagged)}]" if flagged else "")
            for i, c in enumerate(group):
                ax.plot(c.steps, c.values, color=colour, lw=1.2, alpha=0.85,
                        label=label if i == 0 else None)
                if c.stopped_at is not None and c.steps:
                    ax.plot([c.steps[-1]], [c.values[-1]], "x", color=colour, ms=6)
        ax.set_xlabel("step (x: early stopping fired)")
        ax.set_ylabel(", ".join(metrics))
        ax.set_title(f"{res.package}: {exp}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        fig.tight_layout()
        name = curve_figure_name(exp)
        path = Path(out_dir) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
        plt.close(fig)
        written.append(name)
    return written


def overview_markdown(results: Sequence[Results], not_run: Sequence[str] = ()) -> str:
    head = ("| package | version | claims held | not held | not evaluated | wall time | checks "
            "| status | reason |\n|---|---|---|---|---|---|---|---|---|")
    body = ["| " + " | ".join(r) + " |" for r in overview_rows(results, not_run)]
    tot = [sum(claim_counts(r)[i] for r in results) for i in range(3)]
    wall = sum(r.elapsed_s or 0.0 for r in results)
    body.append(f"| **all** | | **{tot[0]}** | **{tot[1]}** | **{tot[2]}** | {wall / 60:.1f} min "
                "| | | |")
    return "\n".join([head, *body])


def markdown_for(res: Results) -> str:
    lines = [f"## {res.package} {res.version} — scale `{res.scale}`, seed {res.seed}", ""]
    if res.status == "failed":
        lines += [f"**FAILED**: `{res.error}`", ""]
    elif res.status == "skipped":
        lines += [f"**skipped** at this scale: {res.error}", ""]
    for kind, title in (("claim", ""), ("check", "Checks — properties the design guarantees "
                                                   "(arithmetic, an oracle, a toy trained to have "
                                                   "them): not counted as claims")):
        items = [c for c in res.claims if c.kind == kind]
        if not items:
            continue
        if title:
            lines += [f"**{title}**", ""]
        lines += [f"| {kind} | metric | paper | ours | baseline | {'held' if kind == 'claim' else 'status'} |",
                  "|---|---|---|---|---|---|"]
        for c in items:
            base = f"{fmt(c.baseline)} ({c.baseline_name})" if c.baseline_name else fmt(c.baseline)
            lines.append(f"| {c.description} | {c.metric} | {fmt(c.paper_value)} | {ours_cell(c)} "
                         f"| {base} | {held_mark(c)} |")
        lines.append("")
        notes = [c for c in items if c.note]
        lines += [f"- *{c.claim_id}*: {c.note}" for c in notes]
        if notes:
            lines.append("")
    if res.curves:
        lines += ["**Learning curves** — *still improving*: best point in the last 10% of the "
                  "budget; *stopped early*: early stopping fired, or kept its best point, before "
                  "25% of it", "",
                  "| experiment | method | metric | split | seed | budget | best at | stopped at "
                  "| flags |", "|---|---|---|---|---|---|---|---|---|"]
        lines += ["| " + " | ".join(r) + " |" for r in curve_rows(res)]
        lines.append("")
        for exp in dict.fromkeys(c.experiment for c in res.curves):
            lines += [f"![curves {exp}]({res.package}/{curve_figure_name(exp)})", ""]
    if res.rows:
        lines += ["| experiment | method | metric | value | seeds | unit |",
                  "|---|---|---|---|---|---|"]
        for r in res.rows:
            lines.append(f"| {r.experiment} | {r.method} | {r.metric} | {fmt(r.value, r.spread)} "
                         f"| {len(r.seeds) or ''} | {r.unit} |")
        lines.append("")
    for fig in res.figures:
        lines += [f"![{Path(fig).stem}]({res.package}/{fig})", ""]
    lines += [f"- {n}" for n in res.notes]
    if res.env is not None:
        e = res.env
        dirty = " (dirty)" if e.git_dirty else ""
        lines += ["", f"<sub>python {e.python}, {e.cpu_count} CPUs, gpu {e.gpu or 'none'}, "
                      f"commit {(e.git_commit or 'unknown')[:10]}{dirty}, {res.elapsed_s or 0:.1f} s</sub>"]
    return "\n".join(lines) + "\n"


def write_report(results: Sequence[Results], out_dir: str | Path, title: str = "icml26 reproduction",
                 not_run: Sequence[str] = ()) -> Path:
    """Write ``REPORT.md`` in ``out_dir`` (figures are referenced in each package's folder): the
    overview table first, then every claim, then each package's section."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for res in results:
        if res.curves:
            draw_curves(res, out / res.package)
    scales = sorted({r.scale for r in results})
    parts = [f"# {title}", "", f"scale: {', '.join(scales) or '—'}", "",
             overview_markdown(results, not_run), "", "## Claims", "", summary_markdown(results), ""]
    if any(c.kind == "check" for r in results for c in r.claims):
        parts += ["## Checks", "", "Properties the design guarantees (arithmetic, an oracle, a toy "
                  "trained to have them): they prove the code, not the paper, and never count as "
                  "claims.", "", summary_markdown(results, kind="check"), ""]
    flagged = [(r.package, row) for r in results for row in curve_rows(r) if row[-1] != "—"]
    if flagged:
        parts += ["## Learning curves to read before comparing", "",
                  "| package | experiment | method | metric | split | seed | flags |",
                  "|---|---|---|---|---|---|---|"]
        parts += [f"| {pkg} | {row[0]} | {row[1]} | {row[2]} | {row[3]} | {row[4]} | {row[8]} |"
                  for pkg, row in flagged]
        parts.append("")
    parts += [markdown_for(r) for r in results]
    path = out / "REPORT.md"
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text("\n".join(parts))
    tmp.replace(path)
    return path


def summary_rows(results: Sequence[Results], kind: str = "claim") -> list[tuple[str, ...]]:
    """One row per claim (``kind="claim"``) or per check (``kind="check"``)."""
    rows = []
    for res in results:
        items = [c for c in res.claims if c.kind == kind]
        if kind == "claim" and res.status == "failed":
            rows.append((res.package, "(run failed)", "", "", "", "", "FAILED"))
            continue
        if kind == "claim" and res.status == "skipped":
            rows.append((res.package, f"(skipped: {res.error})", "", "", "", "", "not run"))
            continue
        if kind == "claim" and not items:
            rows.append((res.package, "(no claim checked)", "", "", "", "", "n/a"))
        if res.status != "ok":
            continue
        for c in items:
            rows.append((res.package, c.description, c.metric, fmt(c.paper_value), ours_cell(c),
                         f"{fmt(c.baseline)} {c.baseline_name}".strip(), held_mark(c)))
    return rows


def summary_markdown(results: Sequence[Results], kind: str = "claim") -> str:
    last = "held" if kind == "claim" else "status"
    head = (f"| package | {kind} | metric | paper | ours | baseline | {last} |\n"
            "|---|---|---|---|---|---|---|")
    body = ["| " + " | ".join(r) + " |" for r in summary_rows(results, kind)]
    return "\n".join([head, *body])


def print_summary(results: Sequence[Results], not_run: Sequence[str] = ()) -> None:
    import sys

    from rich.console import Console
    from rich.table import Table

    # a log file or a pipe is not 80 columns wide: give the tables room to stay readable there
    console = Console(width=None if sys.stdout.isatty() else 160)
    style = {"held": "green", "NOT held": "red", "FAILED": "bold red", "n/a": "yellow",
             "ok": "green", "skipped": "yellow", "not run": "yellow", "not evaluated": "yellow"}
    over = Table(title="icml26 reproduction: packages")
    for col in ("package", "version", "held", "not held", "not eval.", "wall", "checks", "status",
                "reason"):
        over.add_column(col, no_wrap=col != "reason", ratio=3 if col == "reason" else None)
    for row in overview_rows(results, not_run):
        over.add_row(*row[:7], f"[{style.get(row[7], '')}]{row[7]}", row[8])
    console.print(over)
    for kind in ("claim", "check"):
        rows = summary_rows(results, kind)
        if not rows:
            continue
        last = "held" if kind == "claim" else "status"
        table = Table(title=f"icml26 reproduction: {kind}s"
                      + (" (properties the design guarantees, not claims)" if kind == "check" else ""))
        for col in ("package", kind, "metric", "paper", "ours", "baseline", last):
            table.add_column(col, no_wrap=col in ("package", last),
                             ratio=3 if col == kind else None)
        for row in rows:
            table.add_row(*row[:-1], f"[{style.get(row[-1], '')}]{row[-1]}")
        console.print(table)
    flagged = [(r.package, row) for r in results for row in curve_rows(r) if row[-1] != "—"]
    if flagged:
        table = Table(title="learning curves to read before comparing")
        for col in ("package", "experiment", "method", "metric", "split", "seed", "flags"):
            table.add_column(col)
        for pkg, row in flagged:
            table.add_row(pkg, *row[:5], f"[yellow]{row[8]}")
        console.print(table)


def line_plot(path: str | Path, series: Mapping[str, tuple[Sequence[float], Sequence[float]]
                                                   | tuple[Sequence[float], Sequence[float], Sequence[float]]],
              *, xlabel: str, ylabel: str, title: str = "", logx: bool = False,
              logy: bool = False) -> Path:
    """Plot named series ``(x, y)`` or ``(x, y, yerr)`` (yerr drawn as a band) to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4), dpi=110)
    for name, s in series.items():
        x, y = list(s[0]), list(s[1])
        ax.plot(x, y, marker="o", ms=3, label=name)
        if len(s) == 3:
            err = list(s[2])  # type: ignore[misc]
            ax.fill_between(x, [a - b for a, b in zip(y, err)], [a + b for a, b in zip(y, err)],
                            alpha=0.2)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def bar_plot(path: str | Path, values: Mapping[str, float], errors: Mapping[str, float] | None = None,
             *, ylabel: str, title: str = "") -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(values)
    fig, ax = plt.subplots(figsize=(max(4, 0.8 * len(names) + 2), 4), dpi=110)
    err = [errors.get(n, 0.0) or 0.0 for n in names] if errors else None
    ax.bar(names, [values[n] for n in names], yerr=err, capsize=3)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def progress(iterable, total: int | None = None, description: str = "", disable: bool | None = None):
    """A rich progress bar over ``iterable`` (hidden when stderr is not a terminal)."""
    import sys

    if disable is None:
        disable = not sys.stderr.isatty()
    if disable:
        yield from iterable
        return
    from rich.progress import track

    yield from track(iterable, total=total, description=description, transient=True)
