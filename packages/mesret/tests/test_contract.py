import pytest

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

    def test_bench_force_keeps_the_old_run_when_the_write_fails(self, tmp_path, monkeypatch, capsys):
        from mesret.cli import main

        from icml26_shared import Results

        out = tmp_path / "run"
        assert main([*BENCH, "--out", str(out)]) == 0
        before = (out / "results.json").read_bytes()

        def boom(self, path):
            raise OSError("disk full")

        monkeypatch.setattr(Results, "to_json", boom)
        with pytest.raises(OSError, match="disk full"):
            main([*BENCH, "--seeds", "1", "--out", str(out), "--force"])
        assert (out / "results.json").read_bytes() == before  # the earlier run is intact
        assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]  # no half-written sibling left
