from icml26_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "mc2-bench"
    json_commands = (("report", "{smoke_out}/per_item_toy_P0.5.jsonl", "--json"),)

    def test_json_output_writes_nan_as_null(self, tmp_path, capsys):
        """eval/report --json with no valid answer: the ratios are NaN, printed as null (strict
        JSON), never the token NaN (review finding)."""
        from mc2_bench.cli import main

        from icml26_shared.io import dumps_json
        from icml26_shared.testing import strict_json_loads

        per = tmp_path / "per.jsonl"
        per.write_text("".join(dumps_json({"id": f"i{k}", "modality_order0": None,
                                           "modality_order1": None}, indent=None) + "\n"
                                for k in range(3)))
        capsys.readouterr()
        assert main(["report", str(per), "--json"]) == 0
        out = capsys.readouterr().out
        assert "NaN" not in out
        got = strict_json_loads(out)
        assert got["vision_ratio"] is None and got["invalid_rate"] == 1.0

    def test_smoke_runs_the_tiny_llava_through_the_adapter(self, smoke_runs):
        res, _, _ = smoke_runs
        rows = {(r.method, r.metric): r for r in res.rows if r.experiment == "tiny_llava"}
        assert {m for m, _ in rows} >= {"single", "base_image", "base_text", "icc", "diffmean"}
        assert rows[("single", "invalid_rate")].value == 0.0
        for a in ("-1", "+1"):  # the hook ran at layer 1 on every position of every steered prompt
            touched = rows[("diffmean", f"vision_ratio_alpha{a}")].extra["touched"]
            assert list(touched) == [1] and touched[1] > 0
        assert rows[("diffmean", "vision_ratio_alpha+0")].value == rows[("single", "vision_ratio")].value
