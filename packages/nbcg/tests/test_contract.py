from icml26_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "nbcg"
    # the reproduction records its wall times (wall_s, embed_wall_s) as rows
    nondeterministic_metrics = (*ContractTests.nondeterministic_metrics, "wall_s")

    def test_smoke_has_the_mechanism_block_anchors_and_curves(self, smoke_runs):
        """Issue 48: NBCG-L* against L* and its ablations with intervals, the two anchors, and a
        train-loss and dev-macro-F1 curve per arm and seed."""
        res = smoke_runs[0]
        rows = {(r.experiment, r.method, r.metric) for r in res.rows}
        for other in ("lstar", "causal-uniform", "random-nash", "nbcg-nomask"):
            assert ("synthetic_mechanism", f"nbcg-minus-{other}", "shift_rare_f1_diff") in rows
        assert {("synthetic_shift", a, "rare_f1") for a in ("prior", "logreg")} <= rows
        # the single-coalition baseline is its own training, not NBCG's per-loss winner
        val = {(r.experiment, r.method, r.metric): r.value for r in res.rows}
        assert val[("synthetic_iid", "bce", "macro_f1")] != val[("synthetic_iid", "nbcg-bce", "macro_f1")]
        curves = {(c.method, c.metric) for c in res.curves}
        assert {("nbcg", "dev_macro_f1"), ("nbcg", "train_loss"), ("db", "dev_macro_f1")} <= curves
