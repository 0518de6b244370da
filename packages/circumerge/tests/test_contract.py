from icml26_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "circumerge"

    def test_smoke_results_hold_both_time_ratios_and_per_rule_claims(self, smoke_runs):
        res = smoke_runs[0]
        claims = {c.claim_id: c for c in res.claims}
        assert {c.claim_id for c in res.claims if c.kind == "claim"} == {
            "merge_time_vs_core_svd", "merge_time_vs_core",
            *(f"accuracy_vs_core_{r}" for r in ("ties", "magnitude_prune", "dare_linear", "dare_ties",
                                                  "tsv", "iso"))}
        assert {c.claim_id for c in res.claims if c.kind == "check"} == {
            "ta_exact", "circulant_none_equals_core", "fp32_shared_init"}
        assert claims["ta_exact"].ours <= 1e-4  # TA is exact by construction: a check, never a claim
        ratios = {r.method for r in res.rows if r.experiment.startswith("timing_claim")}
        assert ratios == {"circulant/core_svd", "circulant/core", "core/core_svd"}
        timed = {r.method for r in res.rows if r.metric == "merge_time_s"}
        assert {"core/ties", "core_svd/ties", "circulant/ties", "circulant@none/ties", "core/ta",
                "circulant/ta"} <= timed
