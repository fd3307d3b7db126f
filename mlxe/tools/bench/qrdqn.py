"""``mlxe bench qrdqn``: QR-DQN beside sb3-contrib's QR-DQN, the greedy return after one env-step budget.

Both sides train QR-DQN with the settings of ``configs/minatar_breakout_qrdqn.yaml`` (MinAtar's
Breakout): its network, quantiles, learning rate, replay, warm-up, one gradient step per
1 / ``algo.updates_per_step`` env steps, the target's period (MLxE counts it in gradient steps,
sb3-contrib in env steps: the same moment), the epsilon schedule and gradient clipping. Each trains
for the config's ``stop.max_env_steps`` and then plays ``run.eval_after`` greedy episodes; the wall
time is the training's alone. The sb3-contrib side is :mod:`mlxe.tools.bench.qrdqn_runner` in the
``--sb3-python`` interpreter, right after MLxE's runs of the same seed.

Beside the shared settings MLxE also trains with its own (``own``, default
``configs/minatar_breakout_qrdqn_fast.yaml``: the same network and quantiles, other update and acting
settings) for the same env steps, so that the report shows both what the same settings cost and what
MLxE reaches in its own way within the budget.

Writes ``qrdqn.md`` and ``results.json``.
"""

from __future__ import annotations

import json
from pathlib import Path

from mlxe.tools.bench.budget import budget_table, train_budget
from mlxe.tools.bench.compare import QUIET, bench_dir, import_optimizer_machinery
from mlxe.tools.bench.solve import peer

RUNNER = Path(__file__).with_name("qrdqn_runner.py")
CONFIG = "configs/minatar_breakout_qrdqn.yaml"
OWN = "configs/minatar_breakout_qrdqn_fast.yaml"


def peer_settings(cfg) -> dict:
    """sb3-contrib QR-DQN's arguments for the settings of MLxE's config ``cfg``."""
    a = cfg.algo
    if a.distributional != "qr" or a.double or a.dueling or a.n_step != 1 or a.prioritized or a.noisy:
        raise ValueError(f"{cfg.name}: the side-by-side is QR-DQN's (algo.distributional qr; no double, dueling, "
                         "n-step, prioritized replay or noise, which sb3-contrib's QR-DQN has not)")
    train_freq = round(1 / a.updates_per_step)
    return {
        "atoms": a.atoms, "learning_rate": a.lr, "buffer_size": a.buffer_size, "learning_starts": a.learning_starts,
        "batch_size": a.batch_size, "gamma": a.gamma, "train_freq": train_freq,
        "target_update_interval": a.target_period * train_freq, "exploration_steps": a.exploration_steps,
        "epsilon_start": a.epsilon_start, "epsilon_end": a.epsilon_end, "max_grad_norm": a.max_grad_norm,
    }


def bench_qrdqn(config: str | Path = CONFIG, seeds: int = 3, sb3_python: str | None = None,
                overrides: list[str] | None = None, out_dir: str | Path | None = None,
                own: str | Path | None = OWN) -> Path:
    """Run the benchmark; returns the path of the markdown report. ``own``: MLxE's own config for
    the same env and budget, trained beside the shared settings (None: the shared settings only)."""
    from mlxe.loading import load_config

    out = bench_dir("qrdqn", out_dir)
    cfg = load_config(config, list(overrides or []))
    settings, steps, episodes = peer_settings(cfg), cfg.stop.max_env_steps, cfg.run.eval_after
    if not steps or not episodes:
        raise ValueError(f"{config}: the side-by-side needs stop.max_env_steps and run.eval_after")
    base = [*(overrides or []), *QUIET, f"run.dir={out / 'runs'}", "stop.eval_return=null", f"run.eval_after={episodes}"]
    configs = {"mlxe": config}
    if own is not None:
        own_cfg = load_config(own, list(overrides or []))
        if own_cfg.env.id != cfg.env.id:
            raise ValueError(f"{own}: MLxE's own config trains {own_cfg.env.id}, the shared settings {cfg.env.id}")
        configs["own"] = own
    results: dict[str, list[dict]] = {**{side: [] for side in configs}, "qrdqn": []}
    import_optimizer_machinery()
    for seed in range(seeds):
        line = f"seed {seed}:"
        for side, path in configs.items():
            mine = train_budget(path, [*base, f"stop.max_env_steps={steps}"], seed, f"qrdqn-{side}")
            results[side].append(mine)
            line += f" MLxE ({Path(path).name}) return {mine['return']:.2f} in {mine['train_s']:.1f} s;"
        if sb3_python:
            theirs = peer(sb3_python, RUNNER, "QR-DQN", f"--env={cfg.env.id}", f"--settings={json.dumps(settings)}",
                          f"--seed={seed}", f"--steps={steps}", f"--eval-episodes={episodes}")
            results["qrdqn"].append(theirs)
            line += f" sb3-contrib return {theirs['return']:.2f} in {theirs['train_s']:.1f} s"
        print(line, flush=True)
        (out / "results.json").write_text(json.dumps({"settings": settings, **results}, indent=2))

    version = results["qrdqn"][0]["version"] if results["qrdqn"] else ""
    names = {"mlxe": f"MLxE, the same settings (arch {cfg.arch})", "qrdqn": f"sb3-contrib {version} QR-DQN"}
    if own is not None:
        names = {"mlxe": names["mlxe"], "own": f"MLxE, its own settings (arch {own_cfg.arch})", "qrdqn": names["qrdqn"]}
    lines = [
        f"# QR-DQN on {cfg.env.id}: greedy return after {steps:,} env steps, {seeds} seeds",
        "",
        f"Settings on both sides ({config}): {json.dumps(settings)}."
        + (f" MLxE's own settings: {own}." if own is not None else "")
        + f" Mean of {episodes} greedy episodes after training; wall time of the training alone. Median [min-max].",
        "",
        *budget_table(results, names, "qrdqn" if sb3_python else None, "sb3-contrib"),
    ]
    path = out / "qrdqn.md"
    path.write_text("\n".join(lines) + "\n")
    return path
