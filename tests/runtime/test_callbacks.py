"""Callbacks (``mlxe.train(callbacks=...)``, ``run.callbacks``): each event told once, in order; a
callback that returns False stops the run with a checkpoint it resumes from; bad paths name the key."""

import json

import pytest

import mlxe
from mlxe.config import ConfigError
from mlxe.runtime.callbacks import Callback

RUN = ["stop.max_env_steps=3000", "stop.goal_episode_length=null", "stop.eval_return=10000", "stop.eval_every=2",
       "stop.eval_episodes=2", "run.checkpoint_every=3"]


class Recorder(Callback):
    """Every event with its argument, in order."""

    seen: list = []  # a run.callbacks instance's, read by the test (it is built by the run)

    def __init__(self) -> None:
        self.events = []
        Recorder.seen = self.events

    def on_start(self, run_dir, config):
        self.events.append(("start", run_dir))

    def on_iteration(self, metrics):
        self.events.append(("iteration", metrics))

    def on_evaluation(self, result):
        self.events.append(("evaluation", result))

    def on_checkpoint(self, path):
        self.events.append(("checkpoint", path.name))

    def on_end(self, summary):
        self.events.append(("end", summary))


class StopAtThree:
    """Not a Callback subclass: any object with some of the methods will do."""

    def on_iteration(self, metrics):
        return metrics["iteration"] < 3


def kinds(events, kind):
    return [arg for k, arg in events if k == kind]


def test_every_event_is_told_once_in_order(make_config):
    recorder = Recorder()
    result = mlxe.train(make_config(*RUN), callbacks=[recorder])
    events, summary = recorder.events, result.summary
    assert events[0] == ("start", result.run_dir) and events[-1] == ("end", summary)
    assert summary == json.loads((result.run_dir / "summary.json").read_text())
    iterations = kinds(events, "iteration")
    assert [m["iteration"] for m in iterations] == list(range(1, summary["iterations"] + 1))
    assert iterations[-1]["env_steps"] == summary["env_steps"]
    assert [e["iteration"] for e in kinds(events, "evaluation")] == list(range(2, summary["iterations"] + 1, 2))
    periodic = summary["iterations"] // 3
    assert kinds(events, "checkpoint").count("last.pt") == periodic + 1  # and the final one
    assert set(kinds(events, "checkpoint")) <= {"last.pt", "best.pt"}


def test_a_callback_returning_false_stops_the_run_resumably(make_config):
    result = mlxe.train(make_config(*RUN), callbacks=[StopAtThree()])
    assert (result.summary["stop_reason"], result.summary["iterations"]) == ("callback", 3)
    resumed = mlxe.train(resume=result.run_dir, overrides=["stop.max_env_steps=100000", "stop.max_episodes=10000"],
                         callbacks=[Recorder()])
    assert kinds(Recorder.seen, "iteration")[0]["iteration"] == 4 and resumed.summary["iterations"] > 4


def test_callbacks_named_in_the_config_are_built_and_told(make_config):
    result = mlxe.train(make_config(*RUN, "run.callbacks=[tests.runtime.test_callbacks:Recorder]"))
    assert Recorder.seen[-1] == ("end", result.summary)


@pytest.mark.parametrize("callbacks, match", [
    ("[notapath]", r"run.callbacks\[0\]: 'notapath' is not allowed; expected 'package.module:Class'"),
    ("[tests.runtime.test_callbacks:Recorder, no_such.module:Thing]", r"run.callbacks\[1\]: cannot load 'no_such.module:Thing'"),
])
def test_a_bad_callback_path_names_the_key(make_config, callbacks, match):
    with pytest.raises(ConfigError, match=match):
        mlxe.train(make_config(f"run.callbacks={callbacks}"))


def test_an_object_with_no_callback_method_is_an_error(make_config):
    with pytest.raises(ConfigError, match=r"callbacks: .* has none of the methods on_start, on_iteration"):
        mlxe.train(make_config(*RUN), callbacks=[object()])
