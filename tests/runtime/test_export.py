"""``mlxe export``: the ONNX and TorchScript files of a trained run give ``predict``'s greedy actions
(and next recurrent states) on random observations of any batch size, for every kind of policy
head; a failed export names what failed and leaves the run directory as it was."""

import json

import numpy as np
import pytest
import torch
from torch import nn

import mlxe
from mlxe.cli import main
from mlxe.config import ConfigError
from mlxe.runtime.export import ExportedPolicy, ExportError, export_policy, random_inputs

onnxruntime = pytest.importorskip("onnxruntime")

QUIET = ["run.progress=false", "run.tensorboard=false", "run.plot=false", "run.eval_after=0", "start_method=fork",
         "stop.goal_episode_length=null", "stop.eval_return=null", "executors=1", "envs_per_executor=2"]
SMALL = ["rollout.steps=32", "model.trunk=[]", "model.policy_head=[16]", "model.value_head=[16]"]
PPO = "configs/zoo/ppo/CartPole-v1.yaml"
OFF = ["algo.learning_starts=100", "stop.max_env_steps=300"]

RUNS = {  # (config, overrides): a policy head of each kind and the preprocessing export folds in
    "ppo, mlp, observation filter": (PPO, [*SMALL, "filters.obs=true"]),
    "ppo, cnn on uint8 images": (PPO, [*SMALL, "env.id=tests.envs.catch:Catch", "env.max_episode_steps=20",
                                      "model.encoder=cnn", "model.conv=[[8,3,1]]"]),
    "ppo, lstm": (PPO, [*SMALL, "model.core=lstm", "model.core_size=16"]),
    "ppo, categorical parts": (PPO, [*SMALL, "env.id=tests.envs.parts:Parts", "filters.obs=false"]),
    "ppo, hybrid actions": (PPO, [*SMALL, "env.id=tests.envs.hybrid:Aim", "filters.obs=false"]),
    "ppo, masks": (PPO, [*SMALL, "env.id=tests.envs.masked:LegalMoves"]),
    "ppo, box": (PPO, [*SMALL, "env.id=Pendulum-v1", "filters.obs=false"]),
    "dqn, quantiles and masks": ("configs/zoo/dqn/CartPole-v1.yaml", [*OFF, "algo.distributional=qr", "algo.atoms=8",
                                                                     "env.id=tests.envs.masked:LegalMoves"]),
    "dqn, noisy branches": ("configs/zoo/dqn/CartPole-v1.yaml", [*OFF, "algo.distributional=none", "algo.noisy=true",
                                                                     "env.id=tests.envs.parts:Parts"]),
    "r2d2": ("configs/zoo/r2d2/CartPoleNoVel-v1.yaml", ["stop.max_env_steps=300"]),
    "sac": ("configs/zoo/sac/Pendulum-v1.yaml", OFF),
    "td3": ("configs/zoo/td3/Pendulum-v1.yaml", OFF),
    "a3c, lstm": ("configs/cartpole_novel_a3c_lstm.yaml", ["stop.max_env_steps=300"]),
}


def trained_run(tmp_path, config: str, *overrides: str, steps: int = 256) -> str:
    cfg = mlxe.load_config(config, [f"run.dir={tmp_path}", *QUIET, f"stop.max_env_steps={steps}", *overrides])
    return mlxe.train(cfg).summary["run_dir"]


def run_onnx(path):
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [x.name for x in session.get_inputs()]
    return lambda arrays: session.run(None, dict(zip(names, arrays)))


def run_torchscript(path):
    graph = torch.jit.load(str(path))

    def run(arrays):
        out = graph(*map(torch.from_numpy, arrays))
        return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]

    return run


@pytest.mark.parametrize("kind", RUNS)
def test_exported_files_act_as_predict_does(tmp_path, kind):
    config, overrides = RUNS[kind]
    run = trained_run(tmp_path, config, *overrides)
    policy = mlxe.load(run)
    spec = policy.spec
    rng = np.random.default_rng(7)
    for fmt, runner in (("onnx", run_onnx), ("torchscript", run_torchscript)):
        path = export_policy(run, fmt)
        meta = json.loads(path.with_suffix(".json").read_text())
        assert [x["name"] for x in meta["inputs"]][0] == "obs" and meta["inputs"][0]["shape"][1:] == list(spec.obs_shape)
        act = runner(path)
        for rows in (1, 33):  # the batch axis is not the one traced
            arrays = random_inputs(spec, rows, rng)
            state = dict(zip(spec.state_shapes(), arrays[-len(spec.state_shapes()):])) if spec.recurrent else None
            mask = arrays[1] if spec.action_mask else None
            expected, next_state = policy.predict(arrays[0], state, action_mask=mask)
            got = act(arrays)
            assert got[0].shape == expected.shape and got[0].dtype == expected.dtype, fmt
            np.testing.assert_allclose(got[0], expected, atol=1e-5, rtol=0, err_msg=f"{kind} {fmt}")
            for k, value in zip(spec.state_shapes() if spec.recurrent else (), got[1:]):
                np.testing.assert_allclose(value, next_state[k], atol=1e-5, rtol=0, err_msg=f"{kind} {fmt} {k}")


def test_the_json_names_inputs_outputs_and_the_action_space(tmp_path):
    run = trained_run(tmp_path, PPO, *SMALL, "env.id=Pendulum-v1", "filters.obs=false", steps=64)
    path = export_policy(run, "onnx", out=tmp_path / "pendulum.onnx")
    meta = json.loads((tmp_path / "pendulum.json").read_text())
    assert path == tmp_path / "pendulum.onnx" and meta["format"] == "onnx" and meta["algo"] == "ppo"
    assert meta["inputs"] == [{"name": "obs", "shape": ["batch", 3], "dtype": "float32"}]
    assert meta["outputs"] == [{"name": "action", "shape": ["batch", 1], "dtype": "float32"}]
    assert meta["action_space"] == {"kind": "box", "shape": [1], "low": [-2.0], "high": [2.0]}


def files(path):
    return sorted((p.relative_to(path), p.stat().st_mtime_ns) for p in path.rglob("*"))


def test_an_export_that_does_not_act_as_predict_is_refused_and_writes_nothing(tmp_path, monkeypatch):
    run = trained_run(tmp_path, PPO, *SMALL, "filters.obs=true", steps=128)
    before = files(tmp_path)
    monkeypatch.setattr(ExportedPolicy, "forward", lambda self, obs: self.greedy(obs)[0])  # the filter left out
    for fmt in ("onnx", "torchscript"):
        with pytest.raises(ExportError, match="parity check: the exported action differs from predict's in"):
            export_policy(run, fmt)
    assert files(tmp_path) == before


class Bessel(nn.Module):
    """An encoder with an operation the ONNX exporter has no function for."""

    def __init__(self, spec):
        super().__init__()
        self.layer = nn.Linear(spec.obs_shape[0], 8)

    def forward(self, obs):
        return torch.special.bessel_j0(self.layer(obs))


def test_a_layer_onnx_cannot_express_is_named(tmp_path):
    run = trained_run(tmp_path, PPO, *SMALL, f"model.custom_encoder={__name__}:Bessel", steps=64)
    before = files(tmp_path)
    with pytest.raises(ExportError, match=r"onnx export failed: .*No ONNX function found for .*bessel_j0"):
        export_policy(run, "onnx")
    assert files(tmp_path) == before
    assert export_policy(run, "torchscript").is_file()  # tracing records the operation as it is


def test_bad_format_and_source_are_errors(tmp_path, capsys):
    with pytest.raises(ConfigError, match="--format: 'tflite' is not an export format; expected one of onnx, torchscript"):
        export_policy(tmp_path, "tflite")
    with pytest.raises(ConfigError, match="not a run directory or a checkpoint in one"):
        export_policy(tmp_path, "onnx")
    assert main(["export", str(tmp_path)]) == 2
    assert "not a run directory" in capsys.readouterr().err


def test_the_cli_writes_the_default_files(tmp_path, capsys):
    run = trained_run(tmp_path, PPO, *SMALL, steps=64)
    assert main(["export", run, "--format", "torchscript", "--last"]) == 0
    assert "checked against predict" in capsys.readouterr().out
    assert next(tmp_path.glob("*/export/policy.pt")).is_file() and next(tmp_path.glob("*/export/policy.json")).is_file()


def test_onnx_without_its_extra_names_it(tmp_path, monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails as if it were not installed
    with pytest.raises(ConfigError, match=r"--format onnx needs the onnx extra: pip install 'mlxe\[onnx\]'"):
        export_policy(tmp_path, "onnx")
