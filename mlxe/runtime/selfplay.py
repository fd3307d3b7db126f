"""Self-play: a learner against a pool of its own past snapshots, with Elo ratings.

A two-player game played through :class:`mlxe.envs.turns.AgainstOpponent` gives the learner one seat
and an opponent the other; a team game played through :class:`mlxe.envs.teams.TeamAgainstTeam` gives
the learner one team and an opponent the other (a snapshot then plays a whole team, as the learner does). With ``selfplay.snapshot_every`` set, the opponent of each training game is
drawn at its start (:class:`PoolOpponent`): a snapshot of the learner's own published policy from the
pool with probability ``selfplay.share``, otherwise the environment's own opponent (``env.kwargs.opponent``,
e.g. the random player, which keeps the learner from forgetting how to beat simple play).

The pool lives in the run directory (``selfplay/``): one ``.npz`` file per snapshot (the flat weights
and the network's spec) and ``pool.json``, which the driver rewrites atomically and every
environment re-reads when it changes, so Executor processes and vector-env workers follow it without
a channel of their own. A snapshot is taken every ``snapshot_every`` env steps, before the weights
that follow it are published (a synchronous run stays reproducible); the newest ``keep`` are in play,
older ones stay on disk for ``mlxe eval --against``. Which snapshot a game draws (``sample``):
``latest``, ``uniform``, or ``prioritized`` (AlphaStar's prioritized fictitious self-play with its
"hard" weighting: ``(1 - score)^2``, the snapshots the learner beats least most often).

Ratings: at each evaluation the greedy learner plays ``selfplay.games`` games against each snapshot
in play (which samples from its policy, so games differ) beside the usual evaluation against the
environment's opponent. The learner's Elo rating is the maximum-likelihood rating given those scores
(win 1, draw 1/2, loss 0) and the opponents' ratings, with one virtual draw against each (a sweep
keeps a finite rating); the environment's opponent is anchored at 0 and a snapshot keeps the rating
the learner had when it was taken. ``selfplay/rating``, ``selfplay/score`` (the mean score against the
pool) and ``selfplay/pool`` are metrics columns; the run's ``rating.png`` draws the rating.

Snapshot opponents act in NumPy: networks with a NumPy mirror (an MLP over the flattened board, no
recurrent core, no observation filter).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import numpy as np

from mlxe.config import SELFPLAY_GAMES, Config, ConfigError
from mlxe.envs.turns import load_opponent
from mlxe.models.actor_critic import NetSpec, NumpyActorCritic
from mlxe.ops.distributions import MASKED_LOGIT

POOL_DIR, POOL_FILE = "selfplay", "pool.json"
ELO = 400.0  # a rating difference of 400 is 10:1 odds


# -- the files ---------------------------------------------------------------------------------------


def write_snapshot(path: Path, spec: NetSpec, weights: np.ndarray) -> None:
    """``weights`` [P] and ``spec`` to ``path`` (.npz), written whole or not at all."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        np.savez(f, weights=np.asarray(weights, np.float32), spec=np.array(json.dumps(asdict(spec))))
    os.replace(tmp, path)


def read_snapshot(path: str | Path) -> tuple[NetSpec, np.ndarray]:
    """(spec, weights [P]) of a snapshot file."""
    try:
        with np.load(path, allow_pickle=False) as data:
            fields = json.loads(str(data["spec"]))
            weights = data["weights"]
    except (OSError, KeyError, ValueError) as e:
        raise ValueError(f"{path}: not a self-play snapshot (.npz with weights and spec): {e}") from e
    return NetSpec(**{k: _tuples(v) for k, v in fields.items()}), weights


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value


def read_pool(directory: Path) -> dict:
    """The pool's ``pool.json`` ({"snapshots": [...]}); an empty pool where there is none yet."""
    try:
        return json.loads((Path(directory) / POOL_FILE).read_text())
    except FileNotFoundError:
        return {"snapshots": []}


def _write_pool(directory: Path, pool: dict) -> None:
    path = Path(directory) / POOL_FILE
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(pool, indent=1))
    os.replace(tmp, path)  # an environment reading it sees the old pool or the new, never half


# -- the opponents, in the environments ----------------------------------------------------------------


class SnapshotOpponent:
    """One snapshot as an opponent: it samples its move from its policy over the legal moves (a team's:
    one move per agent, from each agent's part of the factorized head)."""

    def __init__(self, snapshot: str) -> None:
        spec, weights = read_snapshot(snapshot)
        if not spec.numpy_acting or spec.recurrent:
            raise ValueError(f"{snapshot}: a snapshot opponent acts with an MLP without a recurrent core")
        self.net = NumpyActorCritic(spec, weights)

    def __call__(self, observation, mask, rng: np.random.Generator):
        board = observation["observation"] if isinstance(observation, dict) else observation
        logits = self.net.logits(np.asarray(board, np.float32).reshape(1, -1))[0].astype(np.float64)
        if not isinstance(mask, list):
            return _sample(logits, mask, rng)
        parts = np.split(logits, np.cumsum([len(m) for m in mask])[:-1])
        return np.array([_sample(part, m, rng) for part, m in zip(parts, mask)])


def _sample(logits: np.ndarray, mask: np.ndarray, rng: np.random.Generator) -> int:
    """An action drawn from softmax(logits) over the legal ones (``mask``)."""
    logits = np.where(mask, logits, MASKED_LOGIT)
    p = np.exp(logits - logits.max())
    return int(rng.choice(len(p), p=p / p.sum()))


class PoolOpponent:
    """The opponent of a self-play run's training games: drawn at the start of each game from the
    pool in ``pool`` (with probability ``share``, by the snapshots' weights in ``pool.json``) or the
    ``base`` opponent (as ``env.kwargs.opponent`` names it, made with ``base_kwargs``)."""

    def __init__(self, pool: str, base: str = "random", base_kwargs: dict | None = None, share: float = 0.8) -> None:
        self.directory, self.share = Path(pool), float(share)
        self.base = load_opponent(base, base_kwargs)
        self.players: dict[str, SnapshotOpponent] = {}
        self.names: list[str] = []
        self.weights = np.zeros(0)
        self.seen = None  # pool.json's (mtime, size) when last read
        self.current = self.base

    def _refresh(self) -> None:
        try:
            st = os.stat(self.directory / POOL_FILE)
        except FileNotFoundError:
            return
        if (st.st_mtime_ns, st.st_size) == self.seen:
            return
        self.seen = (st.st_mtime_ns, st.st_size)
        active = [s for s in read_pool(self.directory)["snapshots"] if s["active"]]
        self.names = [s["name"] for s in active]
        self.weights = np.array([s["weight"] for s in active], np.float64)
        self.players = {n: p for n, p in self.players.items() if n in self.names}

    def new_game(self, rng: np.random.Generator) -> None:
        self._refresh()
        if not self.names or rng.random() >= self.share:
            self.current = self.base
            return
        name = self.names[int(rng.choice(len(self.names), p=self.weights / self.weights.sum()))]
        if name not in self.players:
            self.players[name] = SnapshotOpponent(str(self.directory / f"{name}.npz"))
        self.current = self.players[name]

    def __call__(self, observation, mask: np.ndarray, rng: np.random.Generator) -> int:
        return self.current(observation, mask, rng)


# -- the configs -------------------------------------------------------------------------------------


def _with_opponent(cfg: Config, opponent: str, opponent_kwargs: dict | None) -> Config:
    kwargs = {k: v for k, v in cfg.env.kwargs.items() if k not in ("opponent", "opponent_kwargs")}
    kwargs["opponent"] = opponent
    if opponent_kwargs:
        kwargs["opponent_kwargs"] = opponent_kwargs
    return replace(cfg, env=replace(cfg.env, kwargs=kwargs))


def base_opponent(cfg: Config) -> tuple[str, dict | None]:
    """The environment's own opponent in ``cfg`` (before or after :func:`training_config`)."""
    kwargs = cfg.env.kwargs
    if kwargs.get("opponent") == f"{__name__}:PoolOpponent":
        own = kwargs["opponent_kwargs"]
        return own["base"], own.get("base_kwargs")
    return kwargs.get("opponent", "random"), kwargs.get("opponent_kwargs")


def training_config(cfg: Config, run_dir: Path) -> Config:
    """``cfg`` whose environments draw their opponent from the run's pool (``run_dir``/selfplay)."""
    check_selfplay(cfg)
    base, base_kwargs = base_opponent(cfg)
    pool = {"pool": str(Path(run_dir) / POOL_DIR), "base": base, "share": cfg.selfplay.share}
    if base_kwargs:
        pool["base_kwargs"] = base_kwargs
    return _with_opponent(cfg, f"{__name__}:PoolOpponent", pool)


def against(cfg: Config, snapshot: str | Path | None = None) -> Config:
    """``cfg`` whose environments play the snapshot file ``snapshot``, or (None) the environment's own opponent."""
    if snapshot is None:
        return _with_opponent(cfg, *base_opponent(cfg))
    return _with_opponent(cfg, f"{__name__}:SnapshotOpponent", {"snapshot": str(snapshot)})


def check_selfplay(cfg: Config) -> None:
    """What a self-play run needs of its network and algorithm (config.py checks the game): ConfigErrors
    naming the key."""
    from mlxe.algos.on_policy import OnPolicy
    from mlxe.policies.manager import algorithm_class
    from mlxe.runtime.setup import problem_spec

    if not issubclass(algorithm_class(cfg), OnPolicy):
        raise ConfigError(
            f"selfplay.snapshot_every: a snapshot plays its policy's distribution; algo.name {cfg.algo.name!r} has "
            "none (self-play runs PPO, APPO, A2C, IMPALA, PG and TRPO)"
        )
    spec = problem_spec(cfg)
    if not spec.numpy_acting or spec.recurrent or cfg.filters.obs:
        raise ConfigError(
            "selfplay.snapshot_every: snapshots act with the NumPy mirror of an MLP over the observation as the game "
            "gives it: no model.core, model.encoder 'mlp', no model.custom, filters.obs false"
        )


# -- the pool's keeper, in the driver ------------------------------------------------------------------


def elo_rating(results: list[tuple[float, float, int]]) -> float:
    """The maximum-likelihood rating from ``(opponent rating, mean score, games)`` triples, each with
    one virtual draw added (a clean sweep keeps a finite rating)."""
    ratings = np.array([r for r, _, _ in results], np.float64)
    points = np.array([s * n + 0.5 for _, s, n in results], np.float64)
    games = np.array([n + 1 for _, _, n in results], np.float64)
    lo, hi = ratings.min() - 4000.0, ratings.max() + 4000.0
    for _ in range(60):  # expected points rise with the rating: bisection
        mid = (lo + hi) / 2
        expected = games / (1.0 + 10.0 ** ((ratings - mid) / ELO))
        lo, hi = (mid, hi) if expected.sum() < points.sum() else (lo, mid)
    return (lo + hi) / 2


def scores(returns: list[float]) -> float:
    """The mean score of games whose returns are +1 (win), 0 (draw), -1 (loss): 1, 1/2, 0."""
    return float(np.mean((np.clip(returns, -1.0, 1.0) + 1.0) / 2.0))


class SelfPlay:
    """The pool's keeper in the driver: snapshots, sampling weights and ratings (see the module doc).
    ``env_steps``: where a resumed run starts (snapshots taken after its checkpoint are dropped)."""

    def __init__(self, cfg: Config, run_dir: Path, spec: NetSpec, env_steps: int = 0) -> None:
        self.s, self.spec = cfg.selfplay, spec
        self.directory = Path(run_dir) / POOL_DIR
        self.directory.mkdir(parents=True, exist_ok=True)
        pool = read_pool(self.directory)
        self.snapshots = [s for s in pool["snapshots"] if s["env_steps"] <= env_steps]
        self.rating = float(pool.get("rating", 0.0)) if len(self.snapshots) == len(pool["snapshots"]) else self._last_rating()
        for i, s in enumerate(self.snapshots):  # in play as at the checkpoint: the newest ``keep``
            s["active"] = i >= len(self.snapshots) - self.s.keep
        self.next_at = (env_steps // self.s.snapshot_every + 1) * self.s.snapshot_every
        self._write()

    def _last_rating(self) -> float:
        return self.snapshots[-1]["rating"] if self.snapshots else 0.0

    @property
    def active(self) -> list[dict]:
        return [s for s in self.snapshots if s["active"]]

    def snapshot(self, env_steps: int, iteration: int, weights) -> None:
        """Add the policy ``weights()`` to the pool if ``env_steps`` passed the next snapshot's mark."""
        if env_steps < self.next_at:
            return
        self.next_at = (env_steps // self.s.snapshot_every + 1) * self.s.snapshot_every
        name = f"snapshot-{env_steps:012d}"
        write_snapshot(self.directory / f"{name}.npz", self.spec, weights())
        self.snapshots.append(
            {"name": name, "env_steps": env_steps, "iteration": iteration, "rating": self.rating, "score": None,
             "games": 0, "weight": 1.0, "active": True}
        )
        for s in self.snapshots[: -self.s.keep]:
            s["active"] = False
        self._write()

    def rate(self, play, base_returns: list[float]) -> dict[str, float]:
        """Play each snapshot in the pool (``play(snapshot file) -> returns``), rate the learner from
        that and ``base_returns`` (the evaluation against the environment's opponent); the metrics."""
        results = [(0.0, scores(base_returns), len(base_returns))]
        for s in self.active:
            returns = play(self.directory / f"{s['name']}.npz")
            s["score"], s["games"] = scores(returns), len(returns)
            results.append((s["rating"], s["score"], len(returns)))
        self.rating = elo_rating(results)
        self._write()
        pool = [s["score"] for s in self.active]
        return {"selfplay/rating": self.rating, "selfplay/score": float(np.mean(pool)) if pool else float("nan"),
                "selfplay/pool": float(len(pool))}

    def _weights(self) -> None:
        active = self.active
        for i, s in enumerate(active):
            if self.s.sample == "latest":
                s["weight"] = float(i == len(active) - 1)
            elif self.s.sample == "uniform":
                s["weight"] = 1.0
            else:  # prioritized: the snapshots the learner beats least, most often (unrated: an even score)
                s["weight"] = max((1.0 - (0.5 if s["score"] is None else s["score"])) ** 2, 1e-3)

    def _write(self) -> None:
        self._weights()
        _write_pool(self.directory, {"rating": self.rating, "snapshots": self.snapshots})


# -- two players, one against the other ---------------------------------------------------------------


def play_against(cfg: Config, policy, opponent: Path, games: int, seed: int) -> dict:
    """``policy`` (greedy, of the run of ``cfg``) against ``opponent``: a snapshot file, or a run
    directory (its ``best.pt``) or checkpoint file of the same game; the evaluation's
    result with the shares of ``wins``, ``draws`` and ``losses``."""
    import tempfile

    from mlxe.loading import load_run_config
    from mlxe.runtime.checkpoints import checkpoint_file, load_checkpoint, run_identity
    from mlxe.runtime.evaluation import evaluate_vectorized
    from mlxe.runtime.setup import problem_spec

    if cfg.env.id not in SELFPLAY_GAMES or cfg.filters.obs:
        raise ConfigError(f"--against plays a game through env.id {' or '.join(map(repr, SELFPLAY_GAMES))} without "
                          f"filters.obs; the run has env.id {cfg.env.id!r}" + (" and filters.obs" if cfg.filters.obs else ""))
    if not opponent.exists():
        raise FileNotFoundError(f"--against: no snapshot, run directory or checkpoint at {opponent}")
    with tempfile.TemporaryDirectory() as tmp:
        if opponent.suffix == ".npz":
            snapshot = opponent
        else:  # another run's checkpoint, as a snapshot file for the game's opponent to read
            other = load_run_config(opponent if opponent.is_dir() else opponent.parent.parent)
            if other.env.id != cfg.env.id or other.env.kwargs.get("game") != cfg.env.kwargs.get("game") or other.filters.obs:
                raise ConfigError(f"--against: {opponent} is a run of env.id {other.env.id!r} "
                                  f"{other.env.kwargs.get('game')!r}" + (" with filters.obs" if other.filters.obs else "")
                                  + f"; expected {cfg.env.id!r} {cfg.env.kwargs.get('game')!r} without filters.obs")
            spec = problem_spec(other)
            path = checkpoint_file(opponent)
            snapshot = Path(tmp) / "opponent.npz"
            write_snapshot(snapshot, spec, load_checkpoint(path, expect=run_identity(other, spec))["weights"].numpy())
        result = evaluate_vectorized(against(cfg, snapshot), policy, games, seed)
    return result | {"against": str(opponent)} | outcomes(result["returns"])


def outcomes(returns: list[float]) -> dict[str, float]:
    """The shares of ``wins`` (return > 0), ``draws`` (0) and ``losses`` (< 0) of a game's episodes."""
    r = np.asarray(returns)
    return {"wins": float(np.mean(r > 0)), "draws": float(np.mean(r == 0)), "losses": float(np.mean(r < 0))}
