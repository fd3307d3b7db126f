"""``mlxe bench groups`` on a tiny budget."""

import json

from mlxe.cli import main


def test_groups_bench_times_each_grouping_and_gives_the_ratios(tmp_path, capsys):
    assert main(["bench", "groups", "--num-envs", "4", "--workers", "2", "--groups", "2", "--seconds", "0.3",
                 "--rounds", "1", "--out", str(tmp_path / "out"), "rollout.steps=8"]) == 0
    text = (tmp_path / "out" / "groups.md").read_text()
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert rows["one vector env"].endswith(" | 1.00x |")
    assert rows["2 groups in turn"].endswith("x |") and rows["2 groups ready first"].endswith("x |")
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["env"] == "mlxe.tools.bench.groups:JitterEnv"
    assert all(len(r) == 1 and r[0] > 0 for r in results["rates"].values())
