"""``mlxe bench architectures``: the MLxE study's comparison of ISTB, IS, IA and OA on CartPole.

Each architecture trains the same config with N seeds until the 50,000-step goal (or the config's
budget). ``oa-apart`` is the study's OA as it ran it: the Memorizer and the Learner in processes of
their own (``learner.memorizer: process``), lr 1e-3, batches of 512. Writes ``architectures.md``,
``results.json`` and ``architectures.png`` (wall seconds).
"""

from __future__ import annotations

from pathlib import Path

from mlxe.tools.bench.compare import bench_dir, markdown_table, median_of, run_variants, wall_chart

# an architecture's overrides beyond arch=<name>
VARIANTS = {"oa-apart": ["arch=oa", "learner.memorizer=process", "algo.lr=1e-3", "algo.batch_size=512"]}


def speedups(results: dict[str, list[dict]], baseline: str = "ISTB") -> dict[str, float]:
    """Median wall time of ``baseline`` over each other architecture's (successful runs only)."""
    base = median_of(results, baseline, "wall_s")
    return {arch: base / median_of(results, arch, "wall_s") for arch in results if arch != baseline}


def bench_architectures(
    config: str | Path = "configs/cartpole_a3c.yaml",
    seeds: int = 5,
    archs: list[str] | None = None,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """Run the comparison; returns the path of the markdown report."""
    from mlxe.loading import load_config

    archs = archs or ["istb", "is", "ia", "oa"]
    out = bench_dir("architectures", out_dir)
    variants = [(a.upper(), VARIANTS.get(a, [f"arch={a}"])) for a in archs]
    results = run_variants(config, variants, seeds, out, overrides)
    baseline = archs[0].upper()
    cfg = load_config(config, overrides)
    goal = f"{cfg.stop.goal_episode_length:,}-step episode"
    report = [
        f"# Architectures to a {goal} ({cfg.env.id}, {seeds} seeds)",
        "",
        "Median [min-max] over the successful runs.",
        "",
        markdown_table(results, "arch"),
        "",
        *(
            f"- {arch} is {r:.2f}x as fast as {baseline} in median wall time to the goal"
            if r == r
            else f"- {arch}: no comparison (no successful run on one side)"
            for arch, r in speedups(results, baseline).items()
        ),
        "",
    ]
    path = out / "architectures.md"
    path.write_text("\n".join(report))
    wall_chart(results, out / "architectures.png", f"{cfg.env.id}: wall time to a {goal}")
    return path
