"""A fake paper package, registered through a real entry point: a ``*.dist-info`` folder on
``sys.path`` is what importlib.metadata reads, exactly as for an installed wheel."""

import sys
import textwrap

import pytest

DEMO = '''
from pathlib import Path
from icml26_shared import Claim, ClaimCheck, MethodDescriptor, Paper, Results

CLAIM = Claim("beats", "demo beats baseline", "score", "higher", paper_value=2.0, source="Table 1")
CHECK = Claim("bytes", "demo stores 4 bytes a token", "bytes", "lower", paper_value=4.0,
              kind="check")
DESCRIPTOR = MethodDescriptor(name="icml26-demo", version="0.1.0", paper=Paper("A Demo Paper"),
                              claims=(CLAIM, CHECK), reproduce="icml26_demo:reproduce")


def reproduce(scale, out_dir, seed):
    if scale == "full":
        raise RuntimeError("boom")
    res = Results(package="icml26-demo", version="0.1.0", scale=scale, seed=seed)
    res.add("toy", "demo", "score", [2.0 + seed, 2.5 + seed], seeds=[seed, seed + 1])
    res.add("toy", "base", "score", 1.0)
    res.add("toy", "demo", "time_s", 0.1)
    res.claims.append(ClaimCheck.compare(CLAIM, 2.25 + seed, 1.0, "base"))
    res.claims.append(ClaimCheck.compare(CHECK, 4.0, threshold=4.0))
    steps = list(range(1, 11))
    res.add_curve("toy", "demo", "score", steps, [s / 10 for s in steps], "dev", seed)
    res.add_curve("toy", "base", "score", steps[:2], [0.3, 0.2], "dev", seed, budget=10,
                  stopped_at=2)
    return res


def main(argv=None):
    import argparse
    argparse.ArgumentParser(prog="icml26-demo").parse_args(argv)
    return 0
'''


@pytest.fixture(scope="session")
def demo_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    (site / "icml26_demo.py").write_text(textwrap.dedent(DEMO))
    info = site / "icml26_demo-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: icml26-demo\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[icml26.methods]\nicml26-demo = icml26_demo:DESCRIPTOR\n")
    return site


@pytest.fixture(scope="module")
def demo_package(demo_site):
    with pytest.MonkeyPatch.context() as mp:
        mp.syspath_prepend(str(demo_site))
        mp.setenv("PYTHONPATH", str(demo_site))
        yield "icml26-demo"
    sys.modules.pop("icml26_demo", None)
