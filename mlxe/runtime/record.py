"""``mlxe record``: episodes of a trained run's policy written as a Minari dataset, the offline-RL
format of the Farama Foundation (D4RL's successor), for behaviour cloning and offline RL
(``data:`` in a config) or any library that reads Minari.

The episodes are played on the run's environment (its wrappers and frame stack included) by
``mlxe.load(run).predict``: greedy by default, sampled from the policy with ``sample``, or mixed
with uniform random actions at a rate ``epsilon`` per step (``policy="random"``: every step), the
usual ways to make datasets of several qualities (D4RL's "expert", "medium" and "random").
Minari writes the dataset (``create_dataset_from_buffers``): observations, actions, rewards,
terminations and truncations of each episode, under ``dataset_id`` in Minari's datasets folder
(``MINARI_DATASETS_PATH``, else ``~/.minari/datasets``; ``root`` chooses another). The episodes are
kept in memory and written once all are played, so a record that fails while playing writes
nothing; the run directory is only read.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np

from mlxe.config import ConfigError
from mlxe.memory.datasets import datasets_root, import_minari
from mlxe.runtime.trained import load_policy

POLICIES = ("greedy", "sample", "random")


def record_dataset(
    source: str | Path, dataset_id: str, episodes: int, *, policy: str = "greedy", epsilon: float = 0.0,
    seed: int = 0, last: bool = False, root: str | Path | None = None,
) -> dict:
    """Play ``episodes`` episodes of ``source``'s policy (a run directory or a checkpoint in one) and
    write them as the Minari dataset ``dataset_id``; returns {"dataset", "path", "episodes", "steps",
    "mean_return", "returns"}. Episode i resets with seed ``seed + i``. A ConfigError names a bad
    argument, an existing dataset id or a policy that needs action masks (not recorded)."""
    minari = import_minari()

    from mlxe.envs.factory import make_env_from_config

    if policy not in POLICIES:
        raise ConfigError(f"--policy: {policy!r} is not one of {', '.join(POLICIES)}")
    if not 0.0 <= epsilon <= 1.0:
        raise ConfigError(f"--epsilon: {epsilon!r} is not a probability in [0, 1]")
    if episodes < 1:
        raise ConfigError(f"--episodes: {episodes!r}; expected at least 1")
    trained = load_policy(source, last)
    if trained.spec.action_mask:
        raise ConfigError(f"{source}: a policy trained with action masks; recording its episodes is not supported")
    with datasets_root(root):
        if dataset_id in minari.list_local_datasets():
            raise ConfigError(f"--out: the dataset {dataset_id!r} exists in {minari.storage.get_dataset_path()}; "
                              "choose another id or delete it (minari delete ID)")
        env = make_env_from_config(trained.config.env, training=False)
        env.action_space.seed(seed)
        rng = np.random.default_rng(seed)
        played = [play(env, trained, seed + i, policy, epsilon, rng) for i in range(episodes)]
        with warnings.catch_warnings():  # Minari's advice to name an author and a code link
            warnings.simplefilter("ignore", UserWarning)
            minari.create_dataset_from_buffers(
                dataset_id, [buffer for buffer, _ in played], env=env, data_format="arrow",
                algorithm_name=f"mlxe {trained.config.algo.name} ({policy}, epsilon {epsilon})",
                description=f"{episodes} episodes of {trained.checkpoint} on {trained.config.env.id}",
            )
        path = minari.storage.get_dataset_path(dataset_id)
        env.close()
    returns = [total for _, total in played]
    return {"dataset": dataset_id, "path": str(path), "episodes": episodes, "steps": sum(len(b.rewards) for b, _ in played),
            "mean_return": float(np.mean(returns)), "returns": returns}


def play(env, trained, seed: int, policy: str, epsilon: float, rng: np.random.Generator):
    """One episode from ``reset(seed=seed)``: (its Minari ``EpisodeBuffer``, its return)."""
    from minari.data_collector import EpisodeBuffer

    obs, _ = env.reset(seed=seed)
    observations, actions, rewards, terminations, truncations = [obs], [], [], [], []
    state, done = None, False
    while not done:
        action, state = trained.predict(obs, state, deterministic=policy == "greedy")
        if policy == "random" or rng.random() < epsilon:
            action = env.action_space.sample()
        obs, reward, terminated, truncated, _ = env.step(action)
        observations.append(obs)
        actions.append(action)
        rewards.append(float(reward))
        terminations.append(bool(terminated))
        truncations.append(bool(truncated))
        done = terminated or truncated
    buffer = EpisodeBuffer(id=None, seed=seed, observations=np.stack(observations), actions=np.stack(actions),
                           rewards=rewards, terminations=terminations, truncations=truncations, infos={})
    return buffer, float(sum(rewards))
