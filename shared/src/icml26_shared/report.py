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


def markdown_for(res: Results) -> str:
    lines = [f"## {res.package} {res.version} — scale `{res.scale}`, seed {res.seed}", ""]
    if res.status != "ok":
        lines += [f"**FAILED**: `{res.error}`", ""]
    if res.claims:
        lines += ["| claim | metric | paper | ours | baseline | held |",
                  "|---|---|---|---|---|---|"]
        for c in res.claims:
            base = f"{fmt(c.baseline)} ({c.baseline_name})" if c.baseline_name else fmt(c.baseline)
            lines.append(f"| {c.description} | {c.metric} | {fmt(c.paper_value)} | {fmt(c.ours)} "
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
        lines += ["", f"<sub>python {e.python}, {e.cpu_count} CPUs, gpu {e.gpu or 'none'}, "
                      f"commit {(e.git_commit or 'unknown')[:10]}, {res.elapsed_s or 0:.1f} s</sub>"]
    return "\n".join(lines) + "\n"


def write_report(results: Sequence[Results], out_dir: str | Path, title: str = "icml26 reproduction") -> Path:
    """Write ``REPORT.md`` in ``out_dir`` (figures are referenced in each package's folder)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parts = [f"# {title}", "", summary_markdown(results), ""]
    parts += [markdown_for(r) for r in results]
    path = out / "REPORT.md"
    path.write_text("\n".join(parts))
    return path


def summary_rows(results: Sequence[Results]) -> list[tuple[str, ...]]:
    rows = []
    for res in results:
        if res.status != "ok":
            rows.append((res.package, "(run failed)", "", "", "", "", "FAILED"))
            continue
        if not res.claims:
            rows.append((res.package, "(no claim checked)", "", "", "", "", "n/a"))
        for c in res.claims:
            rows.append((res.package, c.description, c.metric, fmt(c.paper_value), fmt(c.ours),
                         f"{fmt(c.baseline)} {c.baseline_name}".strip(), held_mark(c)))
    return rows


def summary_markdown(results: Sequence[Results]) -> str:
    head = "| package | claim | metric | paper | ours | baseline | held |\n|---|---|---|---|---|---|---|"
    body = ["| " + " | ".join(r) + " |" for r in summary_rows(results)]
    return "\n".join([head, *body])


def print_summary(results: Sequence[Results]) -> None:
    import sys

    from rich.console import Console
    from rich.table import Table

    table = Table(title="icml26 reproduction summary")
    for col in ("package", "claim", "metric", "paper", "ours", "baseline", "held"):
        table.add_column(col, no_wrap=col in ("package", "held"), ratio=3 if col == "claim" else None)
    style = {"held": "green", "NOT held": "red", "FAILED": "bold red", "n/a": "yellow"}
    for row in summary_rows(results):
        table.add_row(*row[:-1], f"[{style.get(row[-1], '')}]{row[-1]}")
    # a log file or a pipe is not 80 columns wide: give the table room to stay readable there
    Console(width=None if sys.stdout.isatty() else 160).print(table)


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
