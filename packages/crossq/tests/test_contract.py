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
