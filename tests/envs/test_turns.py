"""A two-player PettingZoo game against an opponent (mlxe.envs.turns), on connect four."""

import numpy as np
import pytest

from mlxe.envs.turns import AgainstOpponent


def play(env: AgainstOpponent, games: int, seed: int = 0) -> list[float]:
    """Returns of ``games`` games of a uniform masked player."""
    rng, returns = np.random.default_rng(seed), []
    for game in range(games):
        obs, _ = env.reset(seed=seed + game)
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(rng.choice(np.flatnonzero(obs["action_mask"])))
            total, done = total + reward, terminated or truncated
        returns.append(total)
    return returns


def test_a_random_player_wins_about_half_against_a_random_opponent():
    env = AgainstOpponent()
    assert env.observation_space["observation"].shape == (84,) and env.action_space.n == 7
    returns = np.array(play(env, 100))
    assert set(np.unique(returns)) <= {-1.0, 0.0, 1.0}
    assert 0.3 < (returns == 1).mean() < 0.7


@pytest.mark.parametrize(("seat", "pieces"), [("first", 0), ("second", 1)])
def test_the_learner_moves_first_or_after_the_opponent(seat, pieces):
    obs, _ = AgainstOpponent(seat=seat).reset(seed=0)
    assert obs["observation"].sum() == pieces  # the opponent's first move is made in reset


def test_an_illegal_move_loses_the_game():
    env = AgainstOpponent(seat="first", opponent="tests.envs.test_turns:leftmost")
    env.reset(seed=0)
    for _ in range(3):  # both players fill column 0
        obs, reward, terminated, _, _ = env.step(0)
    assert not obs["action_mask"][0] and not terminated
    obs, reward, terminated, _, _ = env.step(0)
    assert (reward, terminated) == (-1.0, True)


def leftmost(observation, mask, rng) -> int:
    return int(np.flatnonzero(mask)[0])


def always_zero(observation, mask, rng) -> int:
    return 0


def test_bad_opponents_seats_and_games_are_errors_naming_the_key():
    env = AgainstOpponent(seat="first", opponent="tests.envs.test_turns:always_zero")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"the opponent \(tests.envs.test_turns:always_zero\) chose action 0, which is not legal"):
        for column in (0, 0, 0, 1):  # the third reply fills column 0; the fourth is illegal
            env.step(column)
    with pytest.raises(ValueError, match="env.kwargs.seat: 'middle'"):
        AgainstOpponent(seat="middle")
    with pytest.raises(ValueError, match="env.kwargs.game: cannot make 'nowhere.game'"):
        AgainstOpponent(game="nowhere.game")
    with pytest.raises(ValueError, match="env.kwargs.opponent: cannot load 'nowhere:player'"):
        AgainstOpponent(opponent="nowhere:player")
    with pytest.raises(ValueError, match=r"env.kwargs.opponent_kwargs: 'tests.envs.test_turns:leftmost' is a function"):
        AgainstOpponent(opponent="tests.envs.test_turns:leftmost", opponent_kwargs={"depth": 2})
    with pytest.raises(ValueError, match=r"env.kwargs.opponent_kwargs: cannot make 'tests.envs.test_turns:Counting'"):
        AgainstOpponent(opponent="tests.envs.test_turns:Counting", opponent_kwargs={"depth": 2})


class Counting:
    """An opponent with state: the games it was told of, and the leftmost legal move."""

    def __init__(self, start: int = 0) -> None:
        self.games = start

    def new_game(self, rng) -> None:
        self.games += 1

    def __call__(self, observation, mask, rng) -> int:
        return leftmost(observation, mask, rng)


def test_an_opponent_class_is_made_with_its_kwargs_and_told_of_each_game_before_its_first_move():
    env = AgainstOpponent(seat="second", opponent="tests.envs.test_turns:Counting", opponent_kwargs={"start": 10})
    for game in range(3):
        obs, _ = env.reset(seed=game)
        assert env.choose.games == 11 + game
        assert obs["observation"].reshape(6, 7, 2)[5, 0, 1] == 1  # its first move: the leftmost column
