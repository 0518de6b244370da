"""Workspace invariants that keep every member installable, registered and releasable."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

from icml26_shared import registry

ROOT = Path(__file__).resolve().parent.parent
MEMBERS = [ROOT / "shared", ROOT / "kernels",
           *sorted(p for p in (ROOT / "packages").glob("*") if (p / "pyproject.toml").is_file())]
PAPERS = [m for m in MEMBERS if m.parent.name == "packages"]


def _project(member: Path) -> dict:
    return tomllib.loads((member / "pyproject.toml").read_text())["project"]


def test_root_depends_on_every_member():
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    deps = {re.split(r"[\[<>=!~ ]", d)[0] for d in root["project"]["dependencies"]}
    sources = set(root["tool"]["uv"]["sources"])
    for m in MEMBERS:
        name = _project(m)["name"]
        assert name in deps, f"{name} missing from the root dependencies: `uv run` would not install it"
        assert name in sources, f"{name} missing from [tool.uv.sources]"


@pytest.mark.parametrize("member", MEMBERS, ids=lambda p: p.name)
def test_member_layout(member):
    proj = _project(member)
    name = proj["name"]
    assert name not in ("shared", "kernels"), "bare names belong to unrelated PyPI projects"
    assert re.fullmatch(r"\d+\.\d+\.\d+", proj["version"]), "static SemVer version"
    assert proj["requires-python"] == ">=3.11"
    mod = "icml26_" + member.name if member.parent == ROOT else name.replace("-", "_")
    src = member / "src" / mod
    assert (src / "__init__.py").is_file() and (src / "py.typed").is_file()
    for f in ("README.md", "CHANGELOG.md"):
        assert (member / f).is_file(), f"{name}: {f} missing"
    assert proj["version"] in (member / "CHANGELOG.md").read_text(), "CHANGELOG lacks the current version"
    assert metadata.version(name) == proj["version"], "installed version differs: run uv sync"


@pytest.mark.parametrize("member", PAPERS, ids=lambda p: p.name)
def test_paper_package_is_registered_with_its_cli(member):
    proj = _project(member)
    name = proj["name"]
    assert proj.get("scripts", {}).get(name), f"{name} needs a console script named after it"
    eps = proj.get("entry-points", {}).get("icml26.methods", {})
    assert name in eps, f"{name} must register under the icml26.methods entry point"
    desc = registry.get(name)
    assert desc.version == proj["version"]
    assert desc.claims and all(c.description for c in desc.claims)
    assert (member / "tests").is_dir()


@pytest.mark.parametrize("member", PAPERS, ids=lambda p: p.name)
def test_paper_package_has_a_readme_row_and_declares_its_scales(member):
    proj = _project(member)
    name = proj["name"]
    row = next((line for line in (ROOT / "README.md").read_text().splitlines()
                if line.startswith(f"| [{name}](packages/{member.name}/)")), None)
    assert row is not None, f"{name}: no row in the root README's package table"
    assert row.rstrip().endswith(f"| {proj['version']} |"), f"{name}: README row shows another version"
    desc = registry.get(name)
    assert desc.quick_minutes and desc.quick_minutes > 0, f"{name}: declare quick_minutes"
    assert {"smoke", "quick", "full"} <= set(desc.scales), f"{name}: describe every scale"


def test_readme_package_table_is_generated():
    """Each row's status (stage, claims held at the last recorded quick run) and version are
    what `python CI/readme-table` generates from the registry and packages/*/results/quick.json."""
    import runpy

    script = runpy.run_path(str(ROOT / "CI" / "readme-table"))
    stale = script["expected_rows"]((ROOT / "README.md").read_text())
    assert not stale, "README rows are stale: run `uv run python CI/readme-table`\n" + "\n".join(
        f"is:     {old}\nshould: {new}" for old, new in stale.items())


def test_recorded_quick_results_match_the_declared_claims():
    """Every committed results/quick.json is a quick run of its package naming declared claims."""
    import json

    for member in PAPERS:
        record = member / "results" / "quick.json"
        if not record.is_file():
            continue
        data = json.loads(record.read_text())
        name = _project(member)["name"]
        assert data["package"] == name and data["scale"] == "quick", record
        declared = {c.id for c in registry.get(name).claims}
        recorded = {v["id"] for v in data["verdicts"] if v["kind"] == "claim"}
        assert recorded <= declared, f"{name}: quick.json names undeclared claims {recorded - declared}"
