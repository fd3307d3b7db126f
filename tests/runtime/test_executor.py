import time

import numpy as np

from mlxe.envs.factory import env_dims
from mlxe.models.actor_critic import net_spec
from mlxe.runtime.executor import Executor
from mlxe.runtime.transport.weights import SharedWeights


def make_executor(cfg, seed=1):
    from mlxe.envs.factory import make_env_from_config

    env = make_env_from_config(cfg)
    spec = net_spec(cfg, *env_dims(env))
    weights = SharedWeights(spec.num_params())
    weights.publish(np.random.default_rng(0).normal(0, 0.1, spec.num_params()).astype(np.float32))
    return Executor(cfg, 0, weights, seed)


def test_long_episode_stores_only_its_last_steps(make_config):
    cfg = make_config("env.id=tests.envs.tiny_env:TinyEnv", "env.kwargs={length: 300}", "env.task.enabled=false",
                      "memory.keep_last_steps=100")
    episode = make_executor(cfg).run()
    assert episode.length == 300 and episode.failed
    assert len(episode.steps["obs"]) == 100
    # TinyEnv observes the step count: the stored window is steps 200..299, in order.
    np.testing.assert_array_equal(episode.steps["obs"][:, 0], np.arange(200, 300))
    np.testing.assert_array_equal(episode.steps["next_obs"][:, 0], np.arange(201, 301))
    assert episode.steps["done"][-1] == 1.0 and episode.steps["done"][:-1].sum() == 0
    # reward 1 per step, constant gamma 0.99, terminal: G[-1] = 1, G[-2] = 1.99
    assert np.isclose(episode.steps["ret"][-1], 1.0) and np.isclose(episode.steps["ret"][-2], 1.99)


def test_truncated_episode_bootstraps_from_value(make_config):
    cfg = make_config("env.max_episode_steps=20", "env.task.enabled=false")
    ex = make_executor(cfg)
    episode = None
    while episode is None or episode.failed:  # find an episode cut by the step cap
        episode = ex.run()
    v = ex.actor.value(episode.steps["next_obs"][-1])
    assert episode.length == 20 and episode.steps["done"].sum() == 0
    assert np.isclose(episode.steps["ret"][-1], episode.steps["reward"][-1] + 0.99 * v, atol=1e-5)


def test_pause_keeps_the_episode_and_resumes_it(make_config):
    cfg = make_config("env.id=tests.envs.tiny_env:TinyEnv", "env.kwargs={length: 500}", "env.task.enabled=false")
    ex = make_executor(cfg)
    calls = {"n": 0}

    def pause_once():
        calls["n"] += 1
        return calls["n"] == 2  # the second look (after 128 steps) asks to pause

    assert ex.run(pause_once) is None and ex.in_episode
    episode = ex.run()
    assert episode.length == 500  # the paused episode went on, not a new one


def test_state_dict_restores_the_random_streams(make_config):
    cfg = make_config()
    a = make_executor(cfg, seed=3)
    a.run()
    state = a.state_dict()
    first = [a.run().length for _ in range(3)]
    b = make_executor(cfg, seed=99)
    b.load_state_dict(state)
    assert [b.run().length for _ in range(3)] == first


class _FakeExecutor:
    def __init__(self, weights, version):
        self.weights, self.version, self.in_episode = weights, version, False


def test_oa_rate_limit_waits_for_the_learners_updates():
    import threading

    from mlxe.runtime.executor import _wait_for_learner

    weights = SharedWeights(2)
    for _ in range(3):
        weights.publish(np.zeros(2, np.float32))
    ex = _FakeExecutor(weights, version=3)
    assert _wait_for_learner(ex, 0, lambda: False)  # no limit
    def publish_slowly():
        for _ in range(4):
            time.sleep(0.02)
            weights.publish(np.zeros(2, np.float32))

    publisher = threading.Thread(target=publish_slowly)
    publisher.start()
    assert _wait_for_learner(ex, 4, lambda: False)
    assert weights.version >= 7  # returned only once 4 more versions were out
    publisher.join()
    # a command arriving while waiting interrupts the wait
    assert not _wait_for_learner(_FakeExecutor(weights, version=7), 100, lambda: True)
    # before training starts (version < 2) the Executor must not wait: the Learner needs its data
    assert _wait_for_learner(_FakeExecutor(SharedWeights(2), version=1), 100, lambda: False)
