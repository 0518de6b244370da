from icml26_shared.testing import ContractTests

BENCH = ("bench", "--tasks", "2", "--dims", "3", "--algos", "mesret", "--fe-per-task", "80",
         "--seeds", "2")


class TestContract(ContractTests):
    package = "mesret"
    json_commands = ((*BENCH, "--out", "{tmp}/run", "--json"),)

    def test_bench_force_replaces_only_a_run_folder(self, tmp_path, capsys):
        """``bench --force`` used to delete the whole --out folder, files it never wrote included."""
        from mesret.cli import main

        out = tmp_path / "run"
        out.mkdir()
        (out / "notes.txt").write_text("mine")
        assert main([*BENCH, "--out", str(out), "--force"]) == 2
        assert "no run wrote (notes.txt)" in capsys.readouterr().err
        assert [p.name for p in out.iterdir()] == ["notes.txt"]
        (out / "notes.txt").unlink()
        assert main([*BENCH, "--out", str(out), "--force"]) == 0  # an empty folder
        assert main([*BENCH, "--out", str(out), "--force"]) == 0  # the run's own folder
        assert (out / "results.json").is_file()
        assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
