"""A run's lineage as a graph: one node per individual (operator, task it rewrote, scores,
fitness, which archive elites it is), one edge per parent -> child. Written as
``RUN/lineage.json`` (networkx's node-link layout: ``networkx.node_link_graph(data, edges="edges")``
reads it) and ``RUN/lineage.dot`` (Graphviz: ``dot -Tsvg RUN/lineage.dot``). Plain Python: the
graph is a few hundred nodes, and networkx would need pydot/pygraphviz to write DOT anyway."""

from __future__ import annotations

import math
from collections import Counter

OP_COLOUR = {"init": "gray80", "eoh_init": "gray80", "crossover": "lightblue", "mutation": "lightskyblue",
             "refine": "palegreen", "keyfn": "khaki", "transfer": "orange",
             "e1": "lightblue", "e2": "lightblue", "m1": "palegreen", "m2": "khaki", "m3": "plum"}


def _num(x):
    return x if isinstance(x, (int, float)) and math.isfinite(x) else None


def build(lineage: list[dict], archive: dict[str, dict], best: int | None) -> dict:
    """``lineage``: the rows of ``lineage.jsonl``; ``archive``: task -> {"score", "individual"}."""
    elite_of: dict[int, list[str]] = {}
    for t, a in sorted(archive.items()):
        elite_of.setdefault(int(a["individual"]), []).append(t)
    nodes, edges = [], []
    for r in lineage:
        lin = r.get("lineage", {})
        nodes.append({"id": r["id"], "op": lin.get("op", "?"), "task": lin.get("task"), "donor": lin.get("donor"),
                      "fitness": _num(r.get("fitness")), "scores": {t: _num(s) for t, s in r.get("scores", {}).items()},
                      "elite_of": elite_of.get(r["id"], []), "best": r["id"] == best})
        for k, p in enumerate(lin.get("parents", [])):
            role = "donor" if lin.get("op") == "transfer" and k == 1 else "parent"
            edges.append({"source": int(p), "target": r["id"], "role": role})
    return {"directed": True, "multigraph": False, "graph": {"best": best}, "nodes": nodes, "edges": edges}


def to_dot(g: dict) -> str:
    lines = ["digraph lineage {", "  rankdir=LR;", '  node [shape=box, style=filled, fontsize=10];']
    for n in g["nodes"]:
        label = f"{n['id']} {n['op']}" + (f" {n['task']}" if n["task"] else "")
        if n["donor"]:
            label += f" <- {n['donor']}"
        if n["fitness"] is not None:
            label += f"\\nfit {n['fitness']:.3f}"
        if n["elite_of"]:
            label += "\\nelite: " + ",".join(n["elite_of"])
        extra = ", penwidth=3" if n["elite_of"] or n["best"] else ""
        lines.append(f'  n{n["id"]} [label="{label}", fillcolor="{OP_COLOUR.get(n["op"], "white")}"{extra}];')
    for e in g["edges"]:
        style = ' [style=dashed, color="darkorange"]' if e["role"] == "donor" else ""
        lines.append(f"  n{e['source']} -> n{e['target']}{style};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def ancestors(g: dict, node: int) -> set[int]:
    parents: dict[int, list[int]] = {}
    for e in g["edges"]:
        parents.setdefault(e["target"], []).append(e["source"])
    seen, todo = set(), [node]
    while todo:
        for p in parents.get(todo.pop(), []):
            if p not in seen:
                seen.add(p)
                todo.append(p)
    return seen


def summary(g: dict) -> dict:
    """Elites by the operator that made them, how many came from transfer, and how many have a
    transfer into the same task anywhere in their ancestry."""
    by_id = {n["id"]: n for n in g["nodes"]}
    elites = [(t, n) for n in g["nodes"] for t in n["elite_of"]]
    with_transfer = sum(n["op"] == "transfer" or any(by_id[a]["op"] == "transfer" and by_id[a]["task"] == t
                                                     for a in ancestors(g, n["id"]))
                        for t, n in elites)
    return {"individuals": len(g["nodes"]), "edges": len(g["edges"]),
            "operators": dict(sorted(Counter(n["op"] for n in g["nodes"]).items())),
            "elites": {t: {"individual": n["id"], "op": n["op"], "donor": n["donor"]} for t, n in elites},
            "elites_by_operator": dict(sorted(Counter(n["op"] for _, n in elites).items())),
            "elites_from_transfer": sum(n["op"] == "transfer" for _, n in elites),
            "elites_with_transfer_ancestor": int(with_transfer),
            "best": g["graph"].get("best")}
