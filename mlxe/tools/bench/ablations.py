"""``mlxe bench ablations``: the MLxE study's ablation of the A3C improvements, on CartPole with IS.

Variants are cumulative where the study's were: the baseline (uniform replay, N // batch + 1
updates), + the minimum-updates rule (MMUF), + MMUF with prioritized replay by each factor, each pair
and all three, + reversed epsilon-greedy, then single options on top of the study's best combination:
NoisyNets, TD(n), truncated importance weights (and with them the task's mirrored batches, the
default), V-trace, prioritized-replay importance weights.
Reports success rate and median [min-max] episodes, model updates, env steps and wall seconds to
the 50,000-step goal, as ``ablations.md`` and ``ablations.png``.
"""

from __future__ import annotations

from pathlib import Path

from mlxe.tools.bench.compare import bench_dir, markdown_table, run_variants, wall_chart

BASELINE = ["arch=is", "memory.sampler=uniform", "algo.min_updates=0", "algo.exploration.name=softmax",
            "algo.td_n=null", "algo.off_policy=none", "model.noisy_policy=false", "algo.max_grad_norm=null",
            "memory.priority.importance_weights=false", "algo.promote_best_every=null", "env.task.mirror=false"]
MMUF = ["algo.min_updates=64"]


def per(*factors: str) -> list[str]:
    return ["memory.sampler=prioritized", f"memory.priority.factors=[{','.join(factors)}]"]


SEED_BEST = [*MMUF, *per("age", "risk", "td"), "algo.exploration.name=reversed_epsilon_greedy"]

VARIANTS: list[tuple[str, list[str]]] = [
    ("baseline", []),
    ("+MMUF", MMUF),
    ("+MMUF +PER(age)", [*MMUF, *per("age")]),
    ("+MMUF +PER(risk)", [*MMUF, *per("risk")]),
    ("+MMUF +PER(td)", [*MMUF, *per("td")]),
    ("+MMUF +PER(age,risk)", [*MMUF, *per("age", "risk")]),
    ("+MMUF +PER(age,td)", [*MMUF, *per("age", "td")]),
    ("+MMUF +PER(risk,td)", [*MMUF, *per("risk", "td")]),
    ("+MMUF +PER(all)", [*MMUF, *per("age", "risk", "td")]),
    ("+MMUF +PER(all) +REG", SEED_BEST),
    ("+REG only", ["algo.exploration.name=reversed_epsilon_greedy"]),
    ("seed best +NoisyNet", [*SEED_BEST, "model.noisy_policy=true"]),
    ("seed best +TD(1)", [*SEED_BEST, "algo.td_n=1"]),
    ("seed best +truncated IS", [*SEED_BEST, "algo.off_policy=truncated_is"]),
    ("seed best +truncated IS +mirror (default)", [*SEED_BEST, "algo.off_policy=truncated_is", "env.task.mirror=true"]),
    ("baseline +truncated IS", ["algo.off_policy=truncated_is"]),
    ("baseline +grad clip 1", ["algo.max_grad_norm=1.0"]),
    ("seed best +V-trace", [*SEED_BEST, "algo.off_policy=vtrace"]),
    ("seed best +PER IS weights", [*SEED_BEST, "memory.priority.importance_weights=true"]),
]


def bench_ablations(
    config: str | Path = "configs/cartpole_a3c.yaml",
    seeds: int = 5,
    only: list[str] | None = None,
    overrides: list[str] | None = None,
    out_dir: str | Path | None = None,
) -> Path:
    """Run the ablation study (``only``: a subset of variant labels); returns the markdown report."""
    from mlxe.config import ConfigError
    from mlxe.loading import load_config

    known = [label for label, _ in VARIANTS]
    unknown = [label for label in only or [] if label not in known]
    if unknown:
        raise ConfigError(f"--only: unknown variant {unknown[0]!r}; known: {'; '.join(known)}")
    variants = [(label, [*BASELINE, *v]) for label, v in VARIANTS if only is None or label in only]
    out = bench_dir("ablations", out_dir)
    results = run_variants(config, variants, seeds, out, overrides)
    cfg = load_config(config, overrides)
    report = [
        f"# A3C ablations to a {cfg.stop.goal_episode_length:,}-step episode (IS, {cfg.env.id}, {seeds} seeds)",
        "",
        "Median [min-max] over the successful runs; success = the goal reached within the budget.",
        "",
        markdown_table(results),
        "",
    ]
    path = out / "ablations.md"
    path.write_text("\n".join(report))
    wall_chart(results, out / "ablations.png", "A3C ablations: wall time to the goal")
    return path
