"""What every schedule sets up first: one seed per role, the network spec, the process context."""

from __future__ import annotations

import multiprocessing as mp
from dataclasses import dataclass

import numpy as np

from mlxe import algos
from mlxe.config import Config, ConfigError
from mlxe.envs.factory import env_spaces, make_env_from_config
from mlxe.envs.masks import supplies_mask
from mlxe.models.actor_critic import NetSpec, net_spec


@dataclass
class Seeds:
    """Independent seeds for every role, derived from ``cfg.seed``."""

    learner: int
    executors: list[int]
    evaluation: int
    inference: int  # the policy-inference process's policy (rollout.inference: server)

    @classmethod
    def derive(cls, seed: int, executors: int) -> Seeds:
        children = np.random.SeedSequence(seed).spawn(executors + 3)
        ints = [int(c.generate_state(1)[0]) for c in children]
        return cls(ints[0], ints[2:-1], ints[1], ints[-1])


def replacement_seed(seed: int, restarts: int) -> int:
    """The seed of an Executor (first seeded with ``seed``) after ``restarts`` replacements: a
    stream of its own, since replaying the failed one's would repeat its episodes."""
    return seed if restarts == 0 else int(np.random.SeedSequence([seed, restarts]).generate_state(1)[0])


def problem_spec(cfg: Config) -> NetSpec:
    """The network spec of ``cfg`` (builds one environment to read its spaces and whether it supplies
    action masks; a multi-agent run's is the spec of its vector env's rows; remote simulators' is what
    ``env.remote`` declares). A ConfigError where the environment's masks cannot be used."""
    if cfg.env.api == "remote":
        from mlxe.envs.remote import remote_spaces

        spec = net_spec(cfg.model, *remote_spaces(cfg.env.remote))
    elif cfg.env.api == "pettingzoo" or cfg.env.vector in ("envpool", "ocean", "numpy") or (
        cfg.env.vector == "auto" and cfg.env.plain_cartpole
    ):  # the spaces of the rows the Executors step
        from mlxe.runtime.rollout import make_vector_env

        probe = make_vector_env(cfg, 1, 0)
        probe.close()
        masked = getattr(probe, "action_mask", None) is not None
        spec = net_spec(cfg.model, probe.observation_space, probe.n_actions, masked)
    else:
        env = make_env_from_config(cfg.env)
        try:
            spec = net_spec(cfg.model, *env_spaces(env), supplies_mask(env, cfg.env.action_mask, cfg.env.id))
        finally:
            env.close()
    check_masks(cfg, spec)
    return spec


def check_masks(cfg: Config, spec: NetSpec) -> None:
    """A ConfigError where ``env.action_mask: true`` finds no mask, or the algorithm cannot use the
    masks the environment supplies."""
    if cfg.env.action_mask and not spec.action_mask:
        raise ConfigError(
            f"env.action_mask: true, but the environments of {cfg.env.id!r} (env.api {cfg.env.api!r}, env.vector "
            f"{cfg.env.vector!r}) supply no action mask"
        )
    if not spec.action_mask:
        return
    if cfg.env.api == "pettingzoo":
        from mlxe.policies.mapping import cached_plans

        named = [(f"policies.{p.name}.algo.name", p.cfg.algo.name) for p in cached_plans(cfg)[0] if p.rule is None]
    else:
        named = [("algo.name", cfg.algo.name)]
    for key, name in named:
        if not algos.algorithm(name).action_masks:
            raise ConfigError(
                f"{key}: {name!r} does not use action masks, and {cfg.env.id!r} supplies them; use "
                f"algo.name {algos.able(lambda a: a.action_masks)}, or set env.action_mask: false to ignore the masks"
            )


def context(cfg: Config, autograd: bool = False):
    """The multiprocessing context of ``cfg.start_method``; ``autograd``: for processes that compute
    gradients (policies in processes, gradient workers).

    On a machine with CUDA, PyTorch's autograd engine starts threads at its first backward pass, and
    a process forked after that cannot run one (https://github.com/pytorch/pytorch/wiki/Autograd-and-Fork):
    that combination is refused up front instead of failing in the child part-way through a run.
    """
    if autograd and cfg.start_method == "fork":
        import torch

        if torch.cuda.is_available():
            raise ConfigError(
                "start_method: 'fork' cannot start processes that compute gradients on a machine with CUDA "
                "(PyTorch's autograd threads do not survive a fork); use spawn or forkserver"
            )
    return mp.get_context(cfg.start_method)
