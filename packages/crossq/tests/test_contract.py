from icml26_shared.testing import ContractTests


class TestContract(ContractTests):
    package = "crossq"
    json_commands = (("bench", "--tokens", "2000", "--queries", "2", "--repeats", "1", "--batch", "1024",
                      "--dim", "32"),)

    def test_smoke_reports_flip_diagnostics(self, smoke_runs):
        """The reproduction reports crossq.metrics per codec: winner flips for every method, code
        flips vs the greedy-RQ start for the CrossQ family, context flips where there is one."""
        rows = {(r.experiment, r.method, r.metric): r.value for r in smoke_runs[0].rows}
        for B in ("2 B/token", "4 B/token"):
            methods = {m for e, m, k in rows if e == B and k == "dev mrr@10"}
            assert {"pq", "rq-greedy", "tokenwise", "crossq"} <= methods
            for m in methods - {"crossq+ft"}:  # crossq+ft: crossq's index, another query head
                assert 0 <= rows[(B, m, "winner_flip_rate")] <= 1
            assert rows[(B, "rq-greedy", "code_flip_rate")] < 0.01  # only the fp16 rounding
            assert rows[(B, "crossq", "code_flip_rate (any byte)")] > 0
            assert (B, "crossq", "context_flip_rate") in rows
            assert (B, "tokenwise", "context_flip_rate") not in rows
            assert (B, "pq", "code_flip_rate") not in rows

    def test_storage_is_a_format_check_beside_the_real_corpus(self, smoke_runs):
        """Issue 59 item 4: the storage row holds by arithmetic on the layout, so it is a check
        (never counted as a claim), labelled so, with this corpus's real bytes per token."""
        res = smoke_runs[0]
        (st,) = [c for c in res.claims if c.claim_id == "storage_4B"]
        assert st.kind == "check"
        assert "not a result about CrossQ" in st.note and "this corpus's real index" in st.note
        assert "storage_4B" not in {c.claim_id for c in res.claim_checks("claim")}

    def test_smoke_saves_the_crossq_family_learning_curves(self, smoke_runs):
        """Issue 59 item 1: train loss, dev MRR@10, dev listwise KL and code flips vs the greedy
        start, per trained method, from step 0 (the start: no flips) to its last step."""
        curves = {(c.experiment, c.method, c.metric): c for c in smoke_runs[0].curves}
        for method in ("crossq", "tokenwise", "crossq-recon"):
            for metric in ("dev mrr@10", "dev listwise KL", "train loss", "code flip rate"):
                c = curves[("4 B/token training (seed 0)", method, metric)]
                assert c.steps[-1] == 4 and len(c.values) >= 2
            flips = curves[("4 B/token training (seed 0)", method, "code flip rate")]
            assert flips.steps[0] == 0 and flips.values[0] == 0.0
