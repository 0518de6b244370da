from icml26_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "mc2-bench"

    def test_smoke_runs_the_tiny_llava_through_the_adapter(self, smoke_runs):
        res, _, _ = smoke_runs
        rows = {(r.method, r.metric): r for r in res.rows if r.experiment == "tiny_llava"}
        assert {m for m, _ in rows} >= {"single", "base_image", "base_text", "icc", "diffmean"}
        assert rows[("single", "invalid_rate")].value == 0.0
        for a in ("-1", "+1"):  # the hook ran at layer 1 on every position of every steered prompt
            touched = rows[("diffmean", f"vision_ratio_alpha{a}")].extra["touched"]
            assert list(touched) == [1] and touched[1] > 0
        assert rows[("diffmean", "vision_ratio_alpha+0")].value == rows[("single", "vision_ratio")].value
