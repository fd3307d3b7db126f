"""Self-play (mlxe.runtime.selfplay): the pool's files and opponents, the ratings, and a learner on
tic-tac-toe that trains against its own snapshots and beats a rule player it never met."""

import json
import subprocess
import sys

import numpy as np
import pytest

import mlxe
from mlxe.config import TWO_PLAYER_GAME, ConfigError
from mlxe.loading import load_config
from mlxe.models.actor_critic import NetSpec
from mlxe.runtime.selfplay import (
    POOL_FILE,
    PoolOpponent,
    SelfPlay,
    SnapshotOpponent,
    elo_rating,
    outcomes,
    read_pool,
    read_snapshot,
    scores,
    write_snapshot,
)

TICTACTOE = ["env.kwargs.game=pettingzoo.classic.tictactoe_v3", "run.progress=false", "run.tensorboard=false",
             "run.eval_after=0", "start_method=fork"]
SPEC = NetSpec(obs_shape=18, n_actions=9, trunk=(), policy_head=(8,), value_head=(8,), activation="tanh", action_mask=True)


def config(tmp_path, *overrides):
    return load_config("configs/connect_four_selfplay.yaml", [f"run.dir={tmp_path}", *TICTACTOE, *overrides])


def first_legal(observation, mask, rng) -> int:
    """A rule player: the first free cell."""
    return int(np.flatnonzero(mask)[0])


def creature_of_habit(observation, mask, rng) -> int:
    """A rule player: the first free cell half of the time, a random free cell otherwise."""
    legal = np.flatnonzero(mask)
    return int(legal[0] if rng.random() < 0.5 else rng.choice(legal))


def snapshot_preferring(path, cell: int) -> None:
    """A snapshot whose policy plays ``cell`` whenever it is legal (a large bias on its logit)."""
    weights = np.zeros(SPEC.num_params(), np.float32)
    weights[SPEC.obs_dim * 8 + 8 + 8 * 9 + cell] = 50.0  # the policy head's output bias of ``cell``
    write_snapshot(path, SPEC, weights)


# -- ratings -------------------------------------------------------------------------------------------


def test_the_rating_is_the_maximum_likelihood_elo_with_a_virtual_draw_each():
    assert elo_rating([(0.0, 0.5, 10)]) == pytest.approx(0.0, abs=1e-6)
    # 3:1 odds are 400 log10(3) = 190.85 Elo above the opponent; the virtual draw matters little in 10^6 games
    assert elo_rating([(100.0, 0.75, 1_000_000)]) == pytest.approx(100 + 400 * np.log10(3), abs=0.1)
    # a clean sweep of 10 games: 10.5 points of 11, a finite rating (odds 21:1)
    assert elo_rating([(0.0, 1.0, 10)]) == pytest.approx(400 * np.log10(21), abs=0.01)
    # two opponents: the rating where the expected points of both add up to the points scored
    r = elo_rating([(0.0, 0.8, 50), (300.0, 0.4, 50)])
    expected = sum(51 / (1 + 10 ** ((o - r) / 400)) for o in (0.0, 300.0))
    assert expected == pytest.approx(0.8 * 50 + 0.5 + 0.4 * 50 + 0.5, abs=1e-6)
    assert scores([1.0, 0.0, -1.0, 1.0]) == 0.625
    assert outcomes([1.0, 0.0, -1.0, 1.0]) == {"wins": 0.5, "draws": 0.25, "losses": 0.25}


# -- the files and the opponents ----------------------------------------------------------------------------


def test_a_snapshot_round_trips_and_plays_only_legal_moves_from_its_policy(tmp_path):
    snapshot_preferring(tmp_path / "s.npz", cell=4)
    spec, weights = read_snapshot(tmp_path / "s.npz")
    assert spec == SPEC and weights.shape == (SPEC.num_params(),)
    player, rng = SnapshotOpponent(str(tmp_path / "s.npz")), np.random.default_rng(0)
    board = {"observation": np.zeros((3, 3, 2), np.int8)}
    assert {player(board, np.ones(9, bool), rng) for _ in range(20)} == {4}
    mask = np.ones(9, bool)
    mask[4] = False  # the cell it prefers is taken: the others are equally likely, and only those
    moves = [player(board, mask, rng) for _ in range(4000)]
    assert 4 not in moves and np.bincount(moves, minlength=9)[mask].min() > 400
    (tmp_path / "bad.npz").write_bytes(b"not a snapshot")
    with pytest.raises(ValueError, match=r"bad.npz: not a self-play snapshot"):
        read_snapshot(tmp_path / "bad.npz")


def test_a_snapshot_plays_a_team_one_legal_move_per_agent(tmp_path):
    team = NetSpec(obs_shape=26, n_actions=8, trunk=(), policy_head=(8,), value_head=(8,), activation="tanh",
                   action_nvec=(4, 4), action_mask=True)
    weights = np.zeros(team.num_params(), np.float32)
    weights[26 * 8 + 8 + 8 * 8 + np.array([2, 4 + 1])] = 50.0  # agent 0 prefers cell 2, agent 1 cell 1
    write_snapshot(tmp_path / "team.npz", team, weights)
    player, rng = SnapshotOpponent(str(tmp_path / "team.npz")), np.random.default_rng(0)
    view = {"observation": np.zeros(26, np.float32)}
    assert player(view, [np.ones(4, bool), np.ones(4, bool)], rng).tolist() == [2, 1]
    moves = np.array([player(view, [np.array([1, 1, 0, 1], bool), np.ones(4, bool)], rng) for _ in range(300)])
    assert set(moves[:, 0]) == {0, 1, 3} and set(moves[:, 1]) == {1}


def test_the_pool_opponent_draws_by_the_pools_weights_and_follows_its_changes(tmp_path):
    for name, cell in (("a", 0), ("b", 8)):
        snapshot_preferring(tmp_path / f"{name}.npz", cell)

    def pool(weights, active=(True, True)):
        snapshots = [{"name": n, "weight": w, "active": a} for n, w, a in zip("ab", weights, active)]
        (tmp_path / POOL_FILE).write_text(json.dumps({"snapshots": snapshots}))

    opponent, rng = PoolOpponent(str(tmp_path), base="tests.runtime.test_selfplay:first_legal", share=1.0), np.random.default_rng(0)
    board = {"observation": np.zeros((3, 3, 2), np.int8)}
    mask = np.zeros(9, bool)
    mask[[0, 5, 8]] = True

    def firsts(games: int) -> list[int]:
        played = []
        for _ in range(games):
            opponent.new_game(rng)
            played.append(opponent(board, mask, rng))
        return played

    assert set(firsts(10)) == {0}  # no pool yet: the base player's first legal cell
    pool([1.0, 0.0])
    assert set(firsts(10)) == {0}  # only a: its cell 0
    pool([0.0, 1.0])
    assert set(firsts(10)) == {8}  # the file changed: only b
    pool([1.0, 1.0], active=(False, True))
    assert set(firsts(10)) == {8}  # a left play
    pool([1.0, 3.0])
    assert 0.65 < np.mean(np.array(firsts(2000)) == 8) < 0.85  # 3:1
    opponent.share = 0.5
    pool([0.0, 1.0])
    moves = np.array(firsts(2000))
    assert set(moves) == {0, 8} and 0.45 < np.mean(moves == 0) < 0.55  # half the games the base player


def test_the_keeper_takes_snapshots_on_its_marks_keeps_the_newest_and_weights_them(tmp_path):
    cfg = config(tmp_path, "selfplay.snapshot_every=100", "selfplay.keep=2")
    keeper = SelfPlay(cfg, tmp_path, SPEC)
    weights = lambda: np.zeros(SPEC.num_params(), np.float32)  # noqa: E731
    for steps in (64, 128, 192, 256, 320):
        keeper.snapshot(steps, steps // 64, weights)
    pool = read_pool(tmp_path / "selfplay")
    assert [s["env_steps"] for s in pool["snapshots"]] == [128, 256, 320]  # past 100, 200, 300
    assert [s["active"] for s in pool["snapshots"]] == [False, True, True]
    assert all((tmp_path / "selfplay" / f"{s['name']}.npz").is_file() for s in pool["snapshots"])

    # ratings: the base player's games and each active snapshot's; prioritized weights (1 - score)^2
    played = []
    metrics = keeper.rate(lambda path: played.append(path.name) or [1.0, -1.0, -1.0, -1.0], [1.0] * 10)
    assert played == ["snapshot-000000000256.npz", "snapshot-000000000320.npz"]
    assert metrics["selfplay/pool"] == 2 and metrics["selfplay/score"] == 0.25
    assert metrics["selfplay/rating"] == pytest.approx(elo_rating([(0.0, 1.0, 10), (0.0, 0.25, 4), (0.0, 0.25, 4)]))
    pool = read_pool(tmp_path / "selfplay")
    assert [s["weight"] for s in pool["snapshots"] if s["active"]] == [0.5625, 0.5625]
    keeper.snapshot(400, 7, weights)  # rated at the learner's rating now
    assert read_pool(tmp_path / "selfplay")["snapshots"][-1]["rating"] == metrics["selfplay/rating"]

    # a resumed run from 256 env steps drops the snapshots taken after its checkpoint
    again = SelfPlay(cfg, tmp_path, SPEC, env_steps=256)
    assert [s["env_steps"] for s in again.snapshots] == [128, 256] and again.next_at == 300
    assert [s["active"] for s in again.snapshots] == [True, True]  # as they were at 256
    latest = SelfPlay(config(tmp_path, "selfplay.snapshot_every=100", "selfplay.sample=latest"), tmp_path, SPEC, 256)
    assert [s["weight"] for s in latest.active] == [0.0, 1.0]


# -- config errors --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        (["selfplay.snapshot_every=0", "selfplay.keep=3"], r"selfplay.keep: is set, but self-play is off"),
        (["selfplay.keep=0"], r"selfplay.keep: 0 is not allowed; expected an integer >= 1"),
        (["selfplay.share=1.5"], r"selfplay.share: 1.5 is not allowed; expected a probability"),
        (["selfplay.sample=best"], r"selfplay.sample"),
        (["backend=ray"], r"selfplay.snapshot_every: the pool's snapshots are files in the run directory"),
        (["stop.eval_return=null"], r"selfplay.snapshot_every: the ratings are measured at the evaluations"),
        (["env.id=CartPole-v1", "env.kwargs={}"], r"self-play plays a two-player game through env.id"),
        (["env.kwargs.flatten=false"], r"env.kwargs.flatten must be true"),
    ],
)
def test_bad_selfplay_settings_are_config_errors_naming_the_key(tmp_path, overrides, match):
    with pytest.raises(ConfigError, match=match):
        config(tmp_path, *overrides)


@pytest.mark.parametrize(
    ("overrides", "match"),
    [
        ("configs/zoo/dqn/CartPole-v1.yaml", r"algo.name 'dqn' has none"),
        ("filters.obs=true", r"filters.obs false"),
        ("model.core=lstm", r"no model.core"),
    ],
)
def test_a_run_that_cannot_self_play_stops_at_its_start_naming_the_key(tmp_path, overrides, match):
    game = [f"env.id={TWO_PLAYER_GAME}", "env.kwargs={game: pettingzoo.classic.tictactoe_v3}", "stop.eval_return=2",
            "selfplay.snapshot_every=256", "stop.max_env_steps=512"]
    with pytest.raises(ConfigError, match=match):
        if overrides.endswith(".yaml"):
            mlxe.train(load_config(overrides, [f"run.dir={tmp_path}", *game]))
        else:
            mlxe.train(config(tmp_path, *game, overrides))


# -- learning -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tictactoe_run(tmp_path_factory):
    cfg = load_config("configs/connect_four_selfplay.yaml", [
        f"run.dir={tmp_path_factory.mktemp('runs')}", *TICTACTOE, "arch=istb", "executors=1", "envs_per_executor=8",
        "rollout.steps=64", "algo.entropy_coef=0", "selfplay.snapshot_every=3072", "selfplay.keep=4",
        "selfplay.share=0.8", "stop.eval_every=6", "stop.max_env_steps=18432", "seed=0", "run.plot=true",
    ])
    return mlxe.train(cfg)


def test_self_play_on_tictactoe_beats_a_rule_player_it_never_met(tictactoe_run, tmp_path):
    """PPO trained against its snapshots (and the random player in 20% of the games) beats a player
    of habits it never met. Its score there (win 1, draw 1/2) after 18,432 env steps on seeds 0-4:
    0.90 / 0.86 / 0.82 / 0.94 / 0.76; a random player's: 0.46 (2,000 games)."""
    habit = config(tmp_path, "env.kwargs.opponent=tests.runtime.test_selfplay:creature_of_habit")
    trained = mlxe.evaluate(tictactoe_run.run_dir, episodes=200, config=habit, last=True)
    assert trained["wins"] + trained["draws"] / 2 >= 0.7, trained


def test_the_run_rates_itself_against_its_pool_and_draws_the_rating(tictactoe_run):
    from mlxe.telemetry.metrics import read_csv

    run_dir = tictactoe_run.run_dir
    metrics = read_csv(run_dir / "metrics.csv")
    rated = np.isfinite(metrics["selfplay/rating"])
    # an evaluation every 6 iterations of 512 env steps, a snapshot every 3,072 env steps just before it
    assert metrics["selfplay/pool"][rated].tolist() == [1, 2, 3, 4, 4, 4]  # snapshots in play: 4 at most
    assert metrics["selfplay/rating"][rated][-1] > 200  # 3:1 odds on the random player and its old self
    assert (run_dir / "rating.png").stat().st_size > 1000
    pool = read_pool(run_dir / "selfplay")
    assert len(pool["snapshots"]) == 6 and sum(s["active"] for s in pool["snapshots"]) == 4


def test_mlxe_eval_plays_one_snapshot_or_run_against_another(tictactoe_run, tmp_path):
    run_dir = tictactoe_run.run_dir
    first = sorted((run_dir / "selfplay").glob("snapshot-*.npz"))[0]
    out = subprocess.run([sys.executable, "-m", "mlxe", "eval", str(run_dir), "--last", "--against", str(first),
                          "--episodes", "100", "--json"], capture_output=True, text=True, check=True).stdout
    result = json.loads(out)
    assert result["against"] == str(first) and result["wins"] + result["draws"] + result["losses"] == 1.0
    assert result["wins"] > result["losses"]  # against its first snapshot
    itself = mlxe.evaluate(run_dir, episodes=50, last=True, against=run_dir)  # its best.pt, sampling
    assert 0 < itself["wins"] + itself["draws"] and len(itself["returns"]) == 50
    with pytest.raises(FileNotFoundError, match=r"--against: no snapshot, run directory or checkpoint at"):
        mlxe.evaluate(run_dir, episodes=5, against=tmp_path / "nothing")


TERRITORY = ["env.id=mlxe.envs.teams:TeamAgainstTeam", "run.plot=false"]


def territory(tmp_path, opponent: str, *overrides: str):
    return config(tmp_path, *TERRITORY, f"env.kwargs={{game: tests.envs.territory, opponent: '{opponent}', side: random}}",
                  *overrides)


def test_team_self_play_exploits_the_rule_team_it_trains_beside(tmp_path):
    """PPO controlling a team of Territory (tests/envs/territory.py) against snapshots of itself (80% of
    the games) and the habit team (20%): its greedy score against the habit team after 18,432 env
    steps on seeds 0-4: 0.50 / 0.50 / 0.50 / 0.25 / 0.50 (0.5 is the best there is); a random team's:
    0.01 (2,000 games)."""
    habit = "tests.envs.territory:habit"
    run = mlxe.train(territory(tmp_path, habit, "arch=istb", "executors=1", "envs_per_executor=8", "rollout.steps=32",
                               "algo.lr=1e-3", "algo.entropy_coef=0", "selfplay.snapshot_every=3072", "selfplay.keep=4",
                               "stop.eval_every=12", "stop.eval_episodes=50", "stop.max_env_steps=18432", "seed=0"))
    pool = read_pool(run.run_dir / "selfplay")
    assert len(pool["snapshots"]) == 6 and sum(s["active"] for s in pool["snapshots"]) == 4
    result = mlxe.evaluate(run.run_dir, episodes=200, config=territory(tmp_path, habit), last=True)
    assert np.mean(result["returns"]) >= 0.25, result
    assert 0 < result["wins"] and result["wins"] + result["draws"] + result["losses"] == 1.0
