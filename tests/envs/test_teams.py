"""A team game as one learner's environment: the team's view, the opponent team's moves, the team's
reward, sides, and errors naming the key."""

from __future__ import annotations

import numpy as np
import pytest

from mlxe.envs.teams import TeamAgainstTeam

GAME = "tests.envs.territory"


class Recorder:
    """An opponent team that plays agent i on cell i and keeps what it was shown."""

    def __init__(self) -> None:
        self.seen: list[tuple[np.ndarray, list[np.ndarray]]] = []
        self.games = 0

    def new_game(self, rng) -> None:
        self.games += 1

    def __call__(self, observation, masks, rng):
        self.seen.append((observation["observation"].copy(), masks))
        return np.arange(len(masks))


def test_the_learner_controls_a_team_against_the_opponent_team():
    env = TeamAgainstTeam(GAME, opponent="tests.envs.territory:habit", side="first")
    assert env.teams == [["red_0", "red_1"], ["blue_0", "blue_1"]]
    assert env.action_space.nvec.tolist() == [4, 4] and env.observation_space["observation"].shape == (26,)
    obs, _ = env.reset(seed=0)
    assert obs["action_mask"].tolist() == [1] * 8
    # four tokens on cell 0 against the habit's three, one each on cells 2 and 3: 3 cells won, 1 lost
    steps = [env.step(a) for a in ([0, 0], [0, 0], [2, 3])]
    assert [s[1] for s in steps] == [0.0, 0.0, 0.5]
    assert [s[2] for s in steps] == [False, False, True] and not any(s[3] for s in steps)


def test_the_opponent_sees_its_own_teams_view_and_a_new_game_each_reset():
    env = TeamAgainstTeam(GAME, opponent="tests.envs.test_teams:Recorder", side="second")
    env.reset(seed=0)
    obs, reward, terminated, truncated, _ = env.step([1, 1])
    shown, masks = env.choose.seen[0]
    # the opponent is red (the learner blue): its first agent sees an empty board in round 0, agent index 0
    assert len(masks) == 2 and all(m.all() for m in masks)
    np.testing.assert_array_equal(shown[:13], [0] * 8 + [1, 0, 0] + [1, 0])
    # after the round the learner (blue) sees its two tokens on cell 1 and red's on cells 0 and 1
    np.testing.assert_allclose(obs["observation"][:8], np.array([0, 2, 0, 0, 1, 1, 0, 0]) / 6)
    for _ in range(2):
        *_, terminated, truncated, _ = env.step([1, 1])
    assert terminated and not truncated and env.choose.games == 1
    env.reset(seed=1)
    assert env.choose.games == 2


def test_the_random_side_is_drawn_at_each_reset():
    env = TeamAgainstTeam(GAME, side="random")
    sides = set()
    for seed in range(20):
        env.reset(seed=seed)
        sides.add(env.learner[0])
    assert sides == {"red_0", "blue_0"}


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"side": "left"}, r"env.kwargs.side: 'left' is not one of"),
    ({"teams": [["red_0"], ["blue_0", "blue_1"]]}, r"env.kwargs.teams: .* are not two teams of the same size"),
    ({"teams": [["red_0", "red_9"], ["blue_0", "blue_1"]]}, r"env.kwargs.teams: \['red_9'\] are not agents"),
    ({"game": "tests.envs.catch"}, r"env.kwargs.game: cannot make 'tests.envs.catch'"),
])
def test_bad_input_names_the_key(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TeamAgainstTeam(**{"game": GAME, **kwargs})


def test_an_illegal_action_names_the_agent():
    env = TeamAgainstTeam(GAME, side="first")
    env.reset(seed=0)
    with pytest.raises(ValueError, match=r"the learner chose action 7 for red_1, which is not legal: \[0, 1, 2, 3\]"):
        env.step([0, 7])
