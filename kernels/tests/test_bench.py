import csv

from icml26_kernels import bench


def test_bench_writes_long_format_csv(tmp_path):
    rows = list(bench.bench_token_logprobs(quick=True, shapes=[(1, 4, 50)]))
    path = tmp_path / "b.csv"
    assert bench.write_csv(rows, path) == len(rows) >= 2
    with path.open() as f:
        got = list(csv.DictReader(f))
    assert list(got[0]) == bench.FIELDS
    assert {r["provider"] for r in got} >= {"torch", "reference"}
    for r in got:
        assert float(r["p20"]) <= float(r["median"]) <= float(r["p80"])
