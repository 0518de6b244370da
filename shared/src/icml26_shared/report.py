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
    return {True: "held", False: "NOT held", None: "n/a"}[c.held]


def ours_cell(c: ClaimCheck) -> str:
    """Our figure, with its 95% interval (of the difference to the baseline when there is one)."""
    s = fmt(c.ours)
    if c.interval is not None:
        lo, hi = c.interval
        what = "Δ " if c.baseline is not None else ""
        s += f" ({what}95% CI [{lo:.3g}, {hi:.3g}])"
    return s


def claim_counts(res: Results) -> tuple[int, int, int]:
    """(held, not held, not run) over the package's claims; a run that did not finish counts
    every declared claim as not run."""
    if res.status != "ok":
        return 0, 0, len(res.claims)
    held = sum(c.held is True for c in res.claims)
    not_held = sum(c.held is False for c in res.claims)
    return held, not_held, len(res.claims) - held - not_held


def _wall(res: Results) -> str:
    s = res.elapsed_s or 0.0
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"


def _status(res: Results) -> str:
    return {"ok": "ok", "skipped": "skipped", "failed": "FAILED"}.get(res.status, res.status)


def overview_rows(results: Sequence[Results], not_run: Sequence[str] = ()) -> list[tuple[str, ...]]:
    """One row per package: package, version, held, not held, not run, wall time, status, reason."""
    rows = []
    for res in results:
        h, nh, nr = claim_counts(res)
        rows.append((res.package, res.version, str(h), str(nh), str(nr), _wall(res), _status(res),
                     res.error or ""))
    rows += [(name, "", "", "", "", "", "not run", "interrupted before it started")
             for name in not_run]
    return rows


def overview_markdown(results: Sequence[Results], not_run: Sequence[str] = ()) -> str:
    head = ("| package | version | claims held | not held | not run | wall time | status | reason |\n"
            "|---|---|---|---|---|---|---|---|")
    body = ["| " + " | ".join(r) + " |" for r in overview_rows(results, not_run)]
    tot = [sum(claim_counts(r)[i] for r in results) for i in range(3)]
    wall = sum(r.elapsed_s or 0.0 for r in results)
    body.append(f"| **all** | | **{tot[0]}** | **{tot[1]}** | **{tot[2]}** | {wall / 60:.1f} min | | |")
    return "\n".join([head, *body])


def markdown_for(res: Results) -> str:
    lines = [f"## {res.package} {res.version} — scale `{res.scale}`, seed {res.seed}", ""]
    if res.status == "failed":
        lines += [f"**FAILED**: `{res.error}`", ""]
    elif res.status == "skipped":
        lines += [f"**skipped** at this scale: {res.error}", ""]
    if res.claims:
        lines += ["| claim | metric | paper | ours | baseline | held |",
                  "|---|---|---|---|---|---|"]
        for c in res.claims:
            base = f"{fmt(c.baseline)} ({c.baseline_name})" if c.baseline_name else fmt(c.baseline)
            lines.append(f"| {c.description} | {c.metric} | {fmt(c.paper_value)} | {ours_cell(c)} "
                         f"| {base} | {held_mark(c)} |")
        lines.append("")
        notes = [c for c in res.claims if c.note]
        lines += [f"- *{c.claim_id}*: {c.note}" for c in notes]
        if notes:
            lines.append("")
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
    scales = sorted({r.scale for r in results})
    parts = [f"# {title}", "", f"scale: {', '.join(scales) or '—'}", "",
             overview_markdown(results, not_run), "", "## Claims", "", summary_markdown(results), ""]
    parts += [markdown_for(r) for r in results]
    path = out / "REPORT.md"
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text("\n".join(parts))
    tmp.replace(path)
    return path


def summary_rows(results: Sequence[Results]) -> list[tuple[str, ...]]:
    rows = []
    for res in results:
        if res.status == "failed":
            rows.append((res.package, "(run failed)", "", "", "", "", "FAILED"))
            continue
        if res.status == "skipped":
            rows.append((res.package, f"(skipped: {res.error})", "", "", "", "", "n/a"))
            continue
        if not res.claims:
            rows.append((res.package, "(no claim checked)", "", "", "", "", "n/a"))
        for c in res.claims:
            rows.append((res.package, c.description, c.metric, fmt(c.paper_value), ours_cell(c),
                         f"{fmt(c.baseline)} {c.baseline_name}".strip(), held_mark(c)))
    return rows


def summary_markdown(results: Sequence[Results]) -> str:
    head = "| package | claim | metric | paper | ours | baseline | held |\n|---|---|---|---|---|---|---|"
    body = ["| " + " | ".join(r) + " |" for r in summary_rows(results)]
    return "\n".join([head, *body])


def print_summary(results: Sequence[Results], not_run: Sequence[str] = ()) -> None:
    import sys

    from rich.console import Console
    from rich.table import Table

    # a log file or a pipe is not 80 columns wide: give the tables room to stay readable there
    console = Console(width=None if sys.stdout.isatty() else 160)
    style = {"held": "green", "NOT held": "red", "FAILED": "bold red", "n/a": "yellow",
             "ok": "green", "skipped": "yellow", "not run": "yellow"}
    over = Table(title="icml26 reproduction: packages")
    for col in ("package", "version", "held", "not held", "not run", "wall", "status", "reason"):
        over.add_column(col, no_wrap=col != "reason", ratio=3 if col == "reason" else None)
    for row in overview_rows(results, not_run):
        over.add_row(*row[:6], f"[{style.get(row[6], '')}]{row[6]}", row[7])
    console.print(over)
    table = Table(title="icml26 reproduction: claims")
    for col in ("package", "claim", "metric", "paper", "ours", "baseline", "held"):
        table.add_column(col, no_wrap=col in ("package", "held"), ratio=3 if col == "claim" else None)
    for row in summary_rows(results):
        table.add_row(*row[:-1], f"[{style.get(row[-1], '')}]{row[-1]}")
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
