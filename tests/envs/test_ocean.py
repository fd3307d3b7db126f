import gymnasium
import numpy as np
import pytest

from mlxe.config import ConfigError
from mlxe.envs import ocean
from mlxe.envs.ocean import OceanVec
from mlxe.loading import load_config

PPO = "configs/zoo/ppo/CartPole-v1.yaml"


def _installed() -> bool:
    try:
        ocean._compiled_class("squared")
    except ConfigError:
        return False
    return True


needs_ocean = pytest.mark.skipif(not _installed(), reason=f"PufferLib's compiled Ocean games: {ocean.INSTALL}")


@needs_ocean
def test_squared_moves_under_its_actions_and_ends_its_episodes_in_c():
    """Always up from the centre of an 11x11 grid leaves it within 6 steps (or meets the target on
    the way): every episode ends, with -1 or +1. Loaded without RTLD_DEEPBIND the game's ``step``
    would be glibc's and nothing would ever end."""
    vec = OceanVec("puffer/squared", {}, 16, seed=0)
    try:
        obs = vec.reset()
        assert obs.shape == (16, 121) and obs.dtype == np.uint8 and vec.n_actions == 5
        assert vec.observation_space == gymnasium.spaces.Box(0, 2, (121,), np.uint8)
        assert (obs == 1).sum(axis=1).tolist() == [1] * 16 and (obs == 2).sum(axis=1).tolist() == [1] * 16
        returns = []
        for _ in range(60):
            obs, reward, terminated, truncated, final = vec.step(np.full(16, 2))  # 2: up
            returns += reward[terminated].tolist()
            assert not truncated.any() and (final is None) == (not terminated.any())
        assert vec.episodes == len(returns) >= 16 * 60 // 6 and set(returns) <= {-1.0, 1.0}
    finally:
        vec.close()


@needs_ocean
def test_a_seed_repeats_its_games_and_the_gymnasium_copy_plays_them_alike():
    def play(seed: int) -> np.ndarray:
        vec = OceanVec("puffer/squared", {"size": 7}, 4, seed=seed)
        rng = np.random.default_rng(1)
        try:
            return np.stack([vec.reset(), *(vec.step(rng.integers(0, 5, 4))[0] for _ in range(50))])
        finally:
            vec.close()

    np.testing.assert_array_equal(play(3), play(3))
    assert not np.array_equal(play(3), play(4))
    ocean.register()
    # one after the other: the games of a process share the C library's random stream
    actions = [1, 2, 3, 4, 0] * 4
    vec = OceanVec("puffer/squared", {"size": 7}, 1, seed=9)
    played = [(vec.reset()[0], 0.0, False)]
    played += [(obs[0], reward[0], terminated[0]) for obs, reward, terminated, *_ in (vec.step(np.array([a])) for a in actions)]
    vec.close()
    env = gymnasium.make("puffer/squared", size=7)
    replayed = [(env.reset(seed=9)[0], 0.0, False)] + [env.step(a)[:3] for a in actions]
    env.close()
    for (obs, reward, terminated), (obs2, reward2, terminated2) in zip(played, replayed, strict=True):
        np.testing.assert_array_equal(obs, obs2)
        assert (reward, terminated) == (reward2, terminated2)


@needs_ocean
def test_pong_reads_floats_and_a_resumed_vec_restarts_with_a_seed_of_its_own():
    vec = OceanVec("puffer/pong", {"max_score": 3}, 2, seed=0)
    try:
        assert vec.reset().dtype == np.float32 and vec.observation_space.shape == (8,) and vec.n_actions == 3
        state = vec.state_dict()
        vec.load_state_dict({**state, "episodes": 5})
        assert vec.episodes == 5 and vec.seed != 0
        with pytest.raises(ValueError, match="ocean checkpoint"):
            vec.load_state_dict([{"rng": {}}])
    finally:
        vec.close()


@needs_ocean
def test_ppo_trains_on_ocean_through_auto_and_through_a_gymnasium_copy(tmp_path):
    import mlxe
    from mlxe.runtime.rollout import make_vector_env

    overrides = [f"run.dir={tmp_path}", "run.progress=false", "run.tensorboard=false", "run.plot=false",
                 "run.eval_after=0", "env.id=puffer/squared", "env.kwargs={size: 5}", "executors=1",
                 "envs_per_executor=4", "rollout.steps=16", "stop.max_env_steps=256", "stop.goal_episode_length=null"]
    cfg = load_config(PPO, overrides)
    assert isinstance(make_vector_env(cfg, 2, 0), OceanVec)
    assert mlxe.train(cfg).summary["env_steps"] >= 256
    serial = load_config(PPO, [*overrides, "env.vector=serial"])
    assert not isinstance(make_vector_env(serial, 2, 0), OceanVec)
    assert mlxe.train(serial).summary["env_steps"] >= 256


@pytest.mark.parametrize(
    "overrides, key",
    [
        (["env.vector=ocean"], "env.vector"),  # CartPole-v1 is not an Ocean game
        (["env.id=puffer/squared", "env.vector=ocean", "env.max_episode_steps=10"], "env.max_episode_steps"),
        (["env.id=puffer/squared", "env.vector=ocean", "env.frame_stack=2"], "env.frame_stack"),
    ],
)
def test_settings_ocean_cannot_honour_are_config_errors(overrides, key):
    with pytest.raises(ConfigError, match=key):
        load_config(PPO, overrides)


@needs_ocean
def test_an_unknown_game_or_setting_names_it():
    with pytest.raises(ConfigError, match="'puffer/'.*'tetris'|tetris"):
        OceanVec("puffer/tetris", {}, 1, 0)
    with pytest.raises(ConfigError, match=r"env.kwargs: \['speed'\]"):
        OceanVec("puffer/squared", {"speed": 2}, 1, 0)


def test_without_pufferlib_the_error_names_the_install_command(monkeypatch):
    monkeypatch.setattr(ocean.sys, "path", [])
    monkeypatch.delitem(ocean.sys.modules, "pufferlib.ocean.pong.cy_pong", raising=False)
    with pytest.raises(ConfigError, match="pip install --no-deps pufferlib==2.0.2"):
        OceanVec("puffer/pong", {}, 1, 0)
