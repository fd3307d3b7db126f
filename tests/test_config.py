"""Tests for the typed run configuration (mlxe.config)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mlxe.config import AlgoConfig, Config, ConfigError, apply_overrides, parse_address, save_config, to_dict
from mlxe.loading import from_dict, load_config, load_run_config, policy_config

REPO_ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str, name: str = "cfg.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --------------------------------------------------------------------------- defaults / shipped file


def test_defaults_without_path():
    cfg = load_config()
    assert cfg == from_dict({})
    assert type(Config().algo) is AlgoConfig  # the schema's; the loaded section is the algorithm's own
    assert cfg.algo.lr == 1e-4 and cfg.algo.batch_size == 128


def test_shipped_cartpole_config_loads():
    cfg = load_config(REPO_ROOT / "configs" / "cartpole_a3c.yaml")
    assert cfg.name == "cartpole_a3c"
    assert cfg.arch == "is"
    assert cfg.executors == "auto"
    assert cfg.env.id == "CartPole-v1"
    assert cfg.env.task.enabled is True
    assert cfg.env.task.failure_reward == -10.0
    assert cfg.model.trunk == [128, 256, 128]
    assert cfg.algo.lr == 1e-4 and cfg.algo.lr_min == 1e-6
    assert cfg.algo.max_grad_norm is None
    assert cfg.stop.max_episodes == 2000
    assert cfg.stop.max_wall_seconds == 1800.0
    assert isinstance(cfg.stop.max_wall_seconds, float)
    assert cfg.run.eval_after == 5


# --------------------------------------------------------------------------- unknown keys


def test_unknown_top_level_key_suggests_nearest():
    with pytest.raises(ConfigError) as e:
        from_dict({"seeed": 1})
    msg = str(e.value)
    assert "'seeed'" in msg
    assert "'seed'" in msg


def test_unknown_nested_key_names_dotted_key_and_suggestion():
    with pytest.raises(ConfigError) as e:
        load_config(overrides=["algo.lrr=0.1"])
    assert str(e.value) == "algo.lrr: not a setting of algo.name 'a3c'; did you mean 'algo.lr'?"


def test_unknown_deeply_nested_key_in_file(tmp_path):
    path = write(tmp_path, "env:\n  task:\n    shaped_rewards: false\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    msg = str(e.value)
    assert str(path) in msg
    assert "'env.task.shaped_rewards'" in msg
    assert "'env.task.shaped_reward'" in msg


def test_unknown_key_without_close_match_lists_valid_keys():
    with pytest.raises(ConfigError) as e:
        from_dict({"memory": {"zzzzzz": 1}})
    msg = str(e.value)
    assert "'memory.zzzzzz'" in msg
    assert "capacity_per_executor" in msg and "keep_last_steps" in msg


# --------------------------------------------------------------------------- wrong types


def test_wrong_type_int_field():
    with pytest.raises(ConfigError) as e:
        load_config(overrides=["algo.batch_size=abc"])
    msg = str(e.value)
    assert "algo.batch_size" in msg and "'abc'" in msg and "int" in msg


def test_bool_rejected_for_float_field():
    with pytest.raises(ConfigError) as e:
        load_config(overrides=["algo.lr=true"])
    msg = str(e.value)
    assert "algo.lr" in msg and "True" in msg and "float" in msg


def test_bool_rejected_for_int_field():
    with pytest.raises(ConfigError, match="seed"):
        load_config(overrides=["seed=true"])


def test_scalar_rejected_for_list_field():
    with pytest.raises(ConfigError) as e:
        load_config(overrides=["model.trunk=5"])
    msg = str(e.value)
    assert "model.trunk" in msg and "5" in msg and "list of int" in msg


def test_wrong_list_item_names_index():
    with pytest.raises(ConfigError, match=r"model\.trunk\[1\]"):
        load_config(overrides=["model.trunk=[64,x]"])


def test_scalar_rejected_for_section():
    with pytest.raises(ConfigError, match="model"):
        from_dict({"model": 5})


def test_float_rejected_for_int_field():
    with pytest.raises(ConfigError, match="algo.batch_size"):
        from_dict({"algo": {"batch_size": 1.5}})


def test_bad_literal_lists_allowed_values():
    with pytest.raises(ConfigError) as e:
        load_config(overrides=["arch=xyz"])
    msg = str(e.value)
    assert "arch" in msg and "'xyz'" in msg
    for allowed in ("'istb'", "'is'", "'ia'", "'oa'"):
        assert allowed in msg


def test_bad_activation_literal():
    with pytest.raises(ConfigError, match="model.activation"):
        load_config(overrides=["model.activation=sigmoid"])


def test_executors_rejects_other_string_and_float():
    with pytest.raises(ConfigError, match="executors"):
        load_config(overrides=["executors=many"])
    with pytest.raises(ConfigError, match="executors"):
        load_config(overrides=["executors=2.5"])


# --------------------------------------------------------------------------- int -> float widening


def test_int_accepted_for_float_field_becomes_float():
    cfg = load_config(overrides=["algo.gamma=1", "stop.max_wall_seconds=60"])
    assert cfg.algo.gamma == 1.0 and type(cfg.algo.gamma) is float
    assert cfg.stop.max_wall_seconds == 60.0 and type(cfg.stop.max_wall_seconds) is float


def test_int_in_file_becomes_float(tmp_path):
    cfg = load_config(write(tmp_path, "algo:\n  value_coef: 2\n"))
    assert type(cfg.algo.value_coef) is float and cfg.algo.value_coef == 2.0


# --------------------------------------------------------------------------- files


def test_missing_file_names_path(tmp_path):
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(path) in str(e.value)


def test_non_mapping_yaml(tmp_path):
    path = write(tmp_path, "- a\n- b\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(path) in str(e.value) and "mapping" in str(e.value)


def test_invalid_yaml(tmp_path):
    path = write(tmp_path, "algo: [1, 2\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(path) in str(e.value) and "YAML" in str(e.value)


def test_empty_file_gives_defaults(tmp_path):
    assert load_config(write(tmp_path, "")) == from_dict({})


def test_from_dict_rejects_non_mapping():
    with pytest.raises(ConfigError, match="mapping"):
        from_dict([1, 2])


def test_yaml_1_1_exponent_in_file_is_float(tmp_path):
    cfg = load_config(write(tmp_path, "algo:\n  lr: 1e-4\n  lr_min: 5e-7\n"))
    assert cfg.algo.lr == pytest.approx(1e-4) and type(cfg.algo.lr) is float
    assert cfg.algo.lr_min == pytest.approx(5e-7)


def test_file_error_is_prefixed_with_path(tmp_path):
    path = write(tmp_path, "algo:\n  batch_size: 0\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: ")
    assert "algo.batch_size" in str(e.value)


# --------------------------------------------------------------------------- overrides


def test_override_sets_nested_value_over_file(tmp_path):
    path = write(tmp_path, "algo:\n  lr: 0.5\n  gamma: 0.9\n")
    cfg = load_config(path, ["algo.lr=0.25", "env.task.enabled=true"])
    assert cfg.algo.lr == 0.25
    assert cfg.algo.gamma == 0.9  # untouched sibling keeps the file's value
    assert cfg.env.task.enabled is True


@pytest.mark.parametrize(
    "item, expected",
    [
        ("algo.lr=3e-4", 3e-4),
        ("algo.lr=1e-4", 1e-4),
        ("algo.lr=0.003", 0.003),
        ("algo.lr=1.5e-3", 1.5e-3),
    ],
)
def test_override_float_forms(item, expected):
    cfg = load_config(overrides=[item])
    assert type(cfg.algo.lr) is float
    assert cfg.algo.lr == pytest.approx(expected, rel=1e-12)


def test_override_int_null_list_bool():
    cfg = load_config(
        overrides=[
            "algo.batch_size=64",
            "algo.max_grad_norm=null",
            "stop.goal_episode_length=null",
            "model.trunk=[64,64]",
            "model.value_head=[]",
            "run.progress=false",
            "env.task.enabled=true",
        ]
    )
    assert cfg.algo.batch_size == 64 and type(cfg.algo.batch_size) is int
    assert cfg.algo.max_grad_norm is None
    assert cfg.stop.goal_episode_length is None
    assert cfg.model.trunk == [64, 64]
    assert cfg.model.value_head == []
    assert cfg.run.progress is False
    assert cfg.env.task.enabled is True


def test_override_optional_float_set():
    cfg = load_config(overrides=["algo.max_grad_norm=0.5"])
    assert cfg.algo.max_grad_norm == 0.5


def test_override_string_fields_stay_strings():
    cfg = load_config(overrides=["env.id=CartPole-v1", "model.activation=elu", "start_method=forkserver", "name=my.run"])
    assert cfg.env.id == "CartPole-v1"
    assert cfg.model.activation == "elu"
    assert cfg.start_method == "forkserver"
    assert cfg.name == "my.run"


def test_override_value_may_contain_equals():
    data = apply_overrides({}, ["env.kwargs.note=a=b"])
    assert data == {"env": {"kwargs": {"note": "a=b"}}}


def test_apply_overrides_creates_sections_in_place():
    data = {"algo": {"gamma": 0.9}}
    out = apply_overrides(data, ["algo.lr=0.1", "memory.keep_last_steps=8", "seed=3"])
    assert out is data
    assert data == {"algo": {"gamma": 0.9, "lr": 0.1}, "memory": {"keep_last_steps": 8}, "seed": 3}


def test_override_without_equals_errors():
    with pytest.raises(ConfigError, match="key=value"):
        load_config(overrides=["algo.lr"])


def test_override_with_empty_key_errors():
    with pytest.raises(ConfigError, match="empty key"):
        load_config(overrides=["=3"])


def test_override_through_non_section_errors():
    with pytest.raises(ConfigError, match="'seed' is not a section"):
        apply_overrides({"seed": 1}, ["seed.x=2"])


# --------------------------------------------------------------------------- executors


def test_executors_auto_is_cpu_count(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert load_config(overrides=["arch=is"]).num_executors() == 8
    assert load_config(overrides=["arch=istb"]).num_executors() == 8


def test_executors_auto_oa_leaves_the_learner_a_core(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert load_config(overrides=["arch=oa", "executors=auto"]).num_executors() == 7


def test_executors_auto_oa_at_least_one(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert load_config(overrides=["arch=oa"]).num_executors() == 1
    monkeypatch.setattr(os, "cpu_count", lambda: 1)
    assert load_config(overrides=["arch=oa"]).num_executors() == 1


def test_executors_auto_unknown_cpu_count(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert load_config().num_executors() == 1


def test_executors_int_stays(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    cfg = load_config(overrides=["executors=3", "arch=oa"])
    assert cfg.executors == 3
    assert cfg.num_executors() == 3


# --------------------------------------------------------------------------- range checks


@pytest.mark.parametrize(
    "item, key",
    [
        ("algo.batch_size=0", "algo.batch_size"),
        ("algo.gamma=1.5", "algo.gamma"),
        ("algo.gamma=0", "algo.gamma"),
        ("algo.lr_decay=1.01", "algo.lr_decay"),
        ("algo.lr=-1e-3", "algo.lr"),
        ("executors=0", "executors"),
        ("torch_threads=0", "torch_threads"),
        ("stop.max_episodes=0", "stop.max_episodes"),
        ("run.window=-1", "run.window"),
    ],
)
def test_range_checks_name_key(item, key):
    with pytest.raises(ConfigError) as e:
        load_config(overrides=[item])
    assert str(e.value).startswith(key + ":")


def test_gamma_one_is_allowed():
    assert load_config(overrides=["algo.gamma=1"]).algo.gamma == 1.0


def test_keep_last_steps_above_capacity():
    with pytest.raises(ConfigError) as e:
        load_config(overrides=["memory.capacity_per_executor=100", "memory.keep_last_steps=101"])
    msg = str(e.value)
    assert msg.startswith("memory.keep_last_steps:")
    assert "memory.capacity_per_executor" in msg and "100" in msg


def test_keep_last_steps_equal_capacity_ok():
    cfg = load_config(overrides=["memory.capacity_per_executor=100", "memory.keep_last_steps=100"])
    assert cfg.memory.keep_last_steps == 100


@pytest.mark.parametrize("value", ["cpu", "cuda", "cuda:0", "cuda:12", "auto"])
def test_device_spellings_are_accepted(value):
    assert load_config(overrides=[f"device={value}"]).device == value


def test_device_defaults_to_cpu():
    assert Config().device == "cpu" and load_config().device == "cpu"


@pytest.mark.parametrize("value", ["gpu", "CUDA", "cuda:-1", "cuda:x", "cuda0", "cpu:0", "mps", ""])
def test_device_bad_spelling_names_key_value_and_allowed(value):
    with pytest.raises(ConfigError) as e:
        load_config(overrides=[f"device={value}"])
    msg = str(e.value)
    assert msg.startswith(f"device: {value!r} is not allowed")
    assert "'cpu', 'cuda', 'cuda:N' or 'auto'" in msg


def test_a_negative_seed_is_an_error_naming_seed():
    with pytest.raises(ConfigError, match=r"^seed: -3 is not allowed; expected an integer >= 0"):
        load_config(overrides=["seed=-3"])


# --------------------------------------------------------------------------- save / load


def test_save_load_round_trip_defaults(tmp_path):
    path = tmp_path / "saved.yaml"
    save_config(from_dict({}), path)
    assert load_config(path) == from_dict({})


def test_save_load_round_trip_non_defaults(tmp_path):
    cfg = load_config(
        overrides=[
            "name=exp",
            "seed=7",
            "arch=oa",
            "executors=3",
            "env.kwargs={render_mode: null, sutton_barto_reward: true}",
            "env.task.enabled=true",
            "model.trunk=[]",
            "model.policy_head=[16]",
            "model.activation=tanh",
            "algo.lr=3e-4",
            "algo.lr_min=1e-7",
            "algo.max_grad_norm=0.5",
            "stop.goal_episode_length=null",
            "stop.max_wall_seconds=12.5",
            "stop.eval_return=-1e3",
            "memory.keep_last_steps=8",
        ]
    )
    assert cfg.env.kwargs == {"render_mode": None, "sutton_barto_reward": True}
    path = tmp_path / "saved.yaml"
    save_config(cfg, path)
    again = load_config(path)
    assert again == cfg
    assert again.algo.lr_min == 1e-7 and type(again.algo.lr_min) is float


def test_algo_config_defaults_match_docstring_rule():
    algo = load_config().algo
    assert isinstance(algo, AlgoConfig) and algo.name == "a3c"
    assert (algo.lr, algo.lr_decay, algo.lr_min) == (1e-4, 0.998, 1e-6)
    assert (algo.value_coef, algo.entropy_coef) == (0.5, 0.01)


def test_quoted_float_like_string_stays_string(tmp_path):
    cfg = load_config(write(tmp_path, 'name: "1.5"\nenv:\n  id: "1e5"\n'))
    assert cfg.name == "1.5"
    assert cfg.env.id == "1e5"


def test_quoted_float_like_override_stays_string():
    assert load_config(overrides=['name="1.0"']).name == "1.0"


@pytest.mark.parametrize("name", ["ppo", "a2c", "pg", "dqn"])
def test_segment_algorithms_run_in_istb_is_and_oa_but_not_ia(name):
    for arch in ("istb", "is", "oa"):
        assert load_config(overrides=[f"algo.name={name}", f"arch={arch}"]).arch == arch
    with pytest.raises(ConfigError, match=f"arch: 'ia' is not allowed with algo.name '{name}'"):
        load_config(overrides=[f"algo.name={name}", "arch=ia"])


# --------------------------------------------------------------------------- one dataclass per algorithm


@pytest.mark.parametrize(
    "name, key, owners",
    [
        ("ppo", "td_n=3", "a3c"),
        ("a3c", "clip=0.1", "ppo, appo"),
        ("dqn", "gae_lambda=0.9", "ppo, appo, a2c, impala, trpo"),
        ("a2c", "epochs=3", "ppo, appo"),
        ("pg", "value_coef=0.5", "a3c, ppo, appo, a2c, impala"),
        ("ppo", "buffer_size=10", "dqn, rainbow, r2d2, ddpg, td3, sac, bc, td3_bc"),
        ("sac", "target_noise=0.1", "td3, td3_bc"),
    ],
)
def test_a_key_of_another_algorithm_is_an_error_naming_both(name, key, owners):
    with pytest.raises(ConfigError) as e:
        load_config(overrides=[f"algo.name={name}", f"algo.{key}"])
    assert str(e.value).startswith(
        f"algo.{key.split('=')[0]}: not a setting of algo.name '{name}' (it belongs to {owners})"
    )


def test_a_key_of_no_algorithm_is_an_error_with_a_suggestion():
    with pytest.raises(ConfigError, match=r"algo\.epoch: not a setting of algo\.name 'ppo'; did you mean 'algo\.epochs'"):
        load_config(overrides=["algo.name=ppo", "algo.epoch=3"])
    with pytest.raises(ConfigError, match=r"algo\.cilp: not a setting of algo\.name 'ppo'; did you mean 'algo\.clip'\?"):
        load_config(overrides=["algo.name=ppo", "algo.cilp=0.1"])
    with pytest.raises(ConfigError, match=r"algo\.name: 'trpo2' is not allowed; expected one of 'a3c', 'ppo'"):
        load_config(overrides=["algo.name=trpo2"])


@pytest.mark.parametrize("name", ["ppo", "a2c", "pg", "dqn", "ddpg", "td3", "sac"])
def test_every_algorithm_has_its_own_dataclass_with_its_defaults(name):
    from mlxe.algos import config_class

    cfg = load_config(overrides=[f"algo.name={name}"])
    assert type(cfg.algo) is config_class(name) and cfg.algo.name == name
    assert cfg.algo.lr == config_class(name)().lr


@pytest.mark.parametrize("key", ["memory.sampler=prioritized", "memory.priority.beta0=0.5"])
def test_the_episode_replay_sections_are_an_error_with_other_algorithms(key):
    with pytest.raises(ConfigError, match=f"{key.split('=')[0]}: not a setting of algo.name 'ppo'"):
        load_config(overrides=["algo.name=ppo", key])
    load_config(overrides=["algo.name=a3c", key])  # A3C's own


def test_algorithm_ranges_are_checked_by_the_algorithm():
    with pytest.raises(ConfigError, match=r"algo\.epochs: 0 is not allowed; expected a value > 0"):
        load_config(overrides=["algo.name=ppo", "algo.epochs=0"])
    with pytest.raises(ConfigError, match=r"algo\.tau: 1\.5 is not allowed"):
        load_config(overrides=["algo.name=dqn", "algo.tau=1.5"])
    with pytest.raises(ConfigError, match=r"algo\.gae_lambda: 2\.0 is not allowed"):
        load_config(overrides=["algo.name=a2c", "algo.gae_lambda=2.0"])
    with pytest.raises(ConfigError, match=r"algo\.lr_decay: 0\.0 is not allowed"):
        load_config(overrides=["algo.lr_decay=0.0"])


# --------------------------------------------------------------------------- the Ray backend


def test_ray_section_defaults_and_overrides():
    cfg = load_config(None, ["backend=ray", "ray.address=10.0.0.5:6379", "ray.mode=async_gradients", "ray.combine=average"])
    assert cfg.backend == "ray" and cfg.ray.address == "10.0.0.5:6379"
    assert cfg.ray.mode == "async_gradients" and cfg.ray.combine == "average" and cfg.ray.num_gradients == 4
    assert load_config(None).backend == "local" and load_config(None).ray.address is None


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["ray.mode=hogwild"], r"ray\.mode: 'hogwild' is not allowed; expected one of 'sync'"),
        (["ray.placement=scatter"], r"ray\.placement"),
        (["ray.combine=median"], r"ray\.combine"),
        (["ray.num_cpus=0"], r"ray\.num_cpus: 0\.0 is not allowed; expected a value > 0"),
        (["ray.max_lag=-1"], r"ray\.max_lag: -1 is not allowed"),
        (["ray.dc_lambda=-0.1"], r"ray\.dc_lambda"),
        (["ray.num_gradients=0"], r"ray\.num_gradients: 0 is not allowed"),
        (["ray.executors_per_node=0"], r"ray\.executors_per_node"),
        (["executors=2", "ray.min_finished_workers=3"], r"ray\.min_finished_workers: 3 is not allowed; expected <= executors \(2\)"),
        (["ray.mode=async_gradients", "arch=oa"], r"arch: 'oa' is not allowed with ray\.mode 'async_gradients'"),
        (["algo.name=ppo", "arch=istb"], r"arch: 'istb' is not allowed with backend 'ray'"),
        (["ray.mode=async_gradients", "algo.promote_best_every=5"], r"algo\.promote_best_every.*ray\.promote_best"),
    ],
)
def test_ray_settings_out_of_range_are_named(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, ["backend=ray", *overrides])


def test_a_ray_key_without_the_ray_backend_is_an_error_naming_it():
    """Issue 35: a ray key the local backend ignores (pendulum_da3c's async_gradients, trained
    synchronously with backend=local) is refused, naming it and both ways out."""
    with pytest.raises(ConfigError, match=r"ray\.num_cpus: a setting of the Ray backend, and backend is 'local'; "
                                          r"remove it, or set backend: ray"):
        load_config(None, ["arch=oa", "ray.num_cpus=0.5"])
    with pytest.raises(ConfigError, match=r"pendulum_da3c\.yaml: ray\.mode: a setting of the Ray backend"):
        load_config(REPO_ROOT / "configs" / "pendulum_da3c.yaml", ["backend=local"])
    assert load_config(None, ["ray.mode=sync"]).backend == "local"  # the default value changes nothing


@pytest.mark.parametrize(
    "overrides, key, by",
    [
        (["ray.combine=fifo"], "combine", "ray.mode 'async_gradients'"),
        (["ray.hogwild=true"], "hogwild", "ray.mode 'async_gradients'"),
        (["ray.max_lag=2"], "max_lag", "ray.mode 'async_experience', or 'async_gradients' with ray.combine 'average'"),
        (["ray.extra_recv_timeout=0.2"], "extra_recv_timeout", "ray.max_extra_recv_tries > 0"),
        (["ray.mode=async_experience", "ray.num_gradients=8"], "num_gradients", "ray.mode 'async_gradients'"),
        (["ray.mode=async_gradients", "ray.num_gradients=8"], "num_gradients", "ray.combine 'average'"),
        (["ray.mode=async_gradients", "ray.combine=average", "ray.dc_lambda=0.1"], "dc_lambda", "ray.combine 'dc'"),
        (["ray.mode=async_gradients", "ray.combine=fifo", "ray.dc_history=5"], "dc_history", "ray.promote_best"),
        (["ray.mode=async_gradients", "ray.max_lag=2"], "max_lag", "with ray.combine 'average'"),
    ],
)
def test_a_ray_key_the_chosen_mode_does_not_read_is_an_error_naming_it(overrides, key, by):
    with pytest.raises(ConfigError) as e:
        load_config(None, ["backend=ray", *overrides])
    message = str(e.value)
    assert message.startswith(f"ray.{key}: ") and "is not read by this run" in message and by in message, message


@pytest.mark.parametrize(
    "overrides",
    [
        ["ray.mode=async_experience", "ray.max_lag=2"],
        ["ray.mode=async_gradients", "ray.combine=average", "ray.num_gradients=8", "ray.max_lag=2", "ray.hogwild=true"],
        ["ray.mode=async_gradients", "ray.dc_lambda=0.1", "ray.dc_history=5"],
        ["ray.mode=async_gradients", "ray.combine=fifo", "ray.promote_best=true", "ray.dc_history=5"],
        ["ray.min_finished_workers=1", "ray.max_extra_recv_tries=1", "ray.extra_recv_timeout=0.2"],
    ],
)
def test_the_ray_keys_a_mode_reads_are_accepted(overrides):
    assert load_config(None, ["backend=ray", *overrides]).backend == "ray"


@pytest.mark.parametrize("path", sorted((REPO_ROOT / "configs").rglob("*.yaml")), ids=lambda p: str(p.relative_to(REPO_ROOT)))
def test_every_shipped_config_loads_with_its_own_settings(path):
    load_config(path)


# --------------------------------------------------------------------------- fuzzing


def _leaf_keys(data: dict, prefix: str = "") -> list[str]:
    keys = []
    for k, v in data.items():
        if isinstance(v, dict) and v:
            keys += _leaf_keys(v, f"{prefix}{k}.")
        else:
            keys.append(f"{prefix}{k}")
    return keys


def _config_keys() -> list[str]:
    from mlxe.config import to_dict

    keys = set()
    for path in sorted((REPO_ROOT / "configs").rglob("*.yaml")):  # every algorithm's own keys too
        keys.update(_leaf_keys(to_dict(load_config(path))))
    return sorted(keys)


_KEYS = _config_keys()
_VALUES = st.one_of(
    st.integers(min_value=-(10**12), max_value=10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["null", "true", "false", "[]", "{}", "[1, -2]", "{a: 1}", "''", "x", "nan", "-inf", "[[]]",
                     "{fake_key: 3}", "cuda:-1", "2e400", "0", "-1", "1.5"]),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12),
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_generated_bad_config_is_a_config_error_naming_its_key(data):
    """Any key of any shipped config set to any value: a valid config, or a ConfigError that names
    the key (or the part of it that is wrong), never another exception."""
    path = data.draw(st.sampled_from(sorted((REPO_ROOT / "configs").rglob("*.yaml"))))
    key = data.draw(st.sampled_from(_KEYS))
    value = data.draw(_VALUES)
    try:
        load_config(path, [f"{key}={value}"])
    except ConfigError as e:
        message = str(e)
        named = [key.rsplit(".", n)[0] for n in range(key.count(".") + 1)]
        assert any(k in message for k in named), message


@settings(max_examples=100, deadline=None)
@given(key=st.from_regex(r"[a-z_]{1,8}(\.[a-z_]{1,8}){0,2}", fullmatch=True))
def test_an_unknown_key_is_a_config_error_naming_it(key):
    if key.split(".")[0] in {"algo", "env", "model", "run", "stop", "ray", "rollout", "memory", "filters", "icm"}:
        return  # a section: its own unknown-key errors are tested above
    try:
        load_config(overrides=[f"{key}=1"])
    except ConfigError as e:
        assert key.split(".")[0] in str(e)


MULTI = ["env.id=mlxe.envs.twin_cartpole", "env.api=pettingzoo", "algo.name=ppo"]


@pytest.mark.parametrize("overrides, message", [
    (["policies={a: {}}"], "policies: a multi-agent setting, for env.api 'pettingzoo'"),
    ([*MULTI, "policies={a: {}}", "agent_to_policy={cart_0: b}"], "agent_to_policy.cart_0: unknown policy 'b'; policies: a"),
    ([*MULTI, "policies={a: {algo: {lr: -1}}}"], "policies.a.algo.lr: -1"),
    ([*MULTI, "policies={a: {algo: {clip: 0.1, name: dqn}}}"], "policies.a.algo.clip: not a setting of algo.name 'dqn'"),
    ([*MULTI, "policies={a: {model: {trunk: 3}}}"], "policies.a.model.trunk"),
    ([*MULTI, "policies={a: {rule: nope}}"], "policies.a.rule: 'nope' is not allowed; expected 'package.module:function'"),
    ([*MULTI, "policies={a: {rule: 'm:f', algo: {lr: 1}}}"], "policies.a.rule: a rule policy is never trained"),
    ([*MULTI, "policies={a: {algo: {name: a3c}}}"], "policies.a.algo.name: 'a3c' learns from whole episodes"),
    ([*MULTI[:2]], "policies.shared.algo.name: 'a3c' learns from whole episodes"),
    ([*MULTI, "env.max_episode_steps=100"], "env.max_episode_steps: not a setting of a PettingZoo environment"),
    ([*MULTI, "policies={a: 3}"], "policies.a: expected a mapping of PolicyConfig fields"),
    (["learner.placement=processes"], "learner.placement: 'processes' places the policies of a multi-agent run"),
    ([*MULTI, "learner.placement=ray"], "learner.placement: 'ray' puts each policy in a Ray actor; it needs backend: ray"),
    ([*MULTI, "policies={a: {num_gpus: 1}}"], "policies.a.num_gpus: 1.0 is not allowed; GPUs are reserved for a policy's Ray actor"),
])
def test_multi_agent_sections_name_the_bad_key(overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        load_config(None, overrides)


def test_a_policy_config_is_the_runs_with_its_own_keys():
    cfg = load_config(None, [*MULTI, "algo.lr=0.01", "policies={a: {algo: {epochs: 2}}, b: {algo: {name: a2c}}}"])
    a, b = policy_config(cfg, "a"), policy_config(cfg, "b")
    assert a.algo.name == "ppo" and a.algo.epochs == 2 and a.algo.lr == 0.01
    assert b.algo.name == "a2c" and b.algo.lr != 0.01  # another algorithm: its own defaults
    assert a.env.api == "gymnasium" and not a.policies  # a single-agent algorithm's config


@pytest.mark.parametrize("value", ["127.0.0.1:8765", "8765", "0.0.0.0:0", "localhost:80", "[::1]:9000"])
def test_run_serve_takes_host_and_port(value):
    assert str(load_config(None, [f"run.serve={value}"]).run.serve) == value


@pytest.mark.parametrize("value", ["host:", "host:port", "1.2.3.4:70000", "a b:1"])
def test_a_bad_run_serve_names_the_key(value):
    with pytest.raises(ConfigError, match="run.serve: .* is not allowed; expected 'HOST:PORT'"):
        load_config(None, [f"run.serve='{value}'"])


def test_a_run_directory_of_an_earlier_release_still_loads():
    cfg = from_dict({"ray": {"status_every": 0.5, "mode": "sync"}, "run": {"window": 5}})
    assert cfg.run.status_every == 0.5 and cfg.run.window == 5


# --------------------------------------------------------------------------- YAML aliases (D8)

BOMB = ", ".join(
    [
        "a: &a [x, x, x, x, x, x, x, x, x]",
        *(f"{b}: &{b} [{', '.join([f'*{a}'] * 9)}]" for a, b in zip("abcde", "bcdef")),
    ]
)  # each level 9 aliases of the one before: f expands to 9**6 items


def test_an_alias_bomb_in_an_override_is_refused_naming_the_key():
    with pytest.raises(ConfigError, match=r"^env\.kwargs\.f: 597,871 values once its YAML aliases are expanded; "
                                          r"expected at most 100,000"):
        load_config(REPO_ROOT / "configs" / "zoo" / "ppo" / "CartPole-v1.yaml", [f"env.kwargs={{{BOMB}}}"])


def test_an_alias_bomb_in_a_file_is_refused_naming_the_file_and_the_key(tmp_path):
    path = write(tmp_path, "env:\n  kwargs: {" + BOMB + "}\n")
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: env.kwargs.f: 597,871 values once its YAML aliases are expanded")


def test_a_merge_key_bomb_is_refused(tmp_path):
    levels = ["a: &a {x: 1, y: 2, z: 3}"]
    levels += [f"{b}: &{b} {{<<: [{', '.join([f'*{a}'] * 9)}]}}" for a, b in zip("abcdefg", "bcdefgh")]
    with pytest.raises(ConfigError, match=r"env\.kwargs\.\w\.<<: .* values once its YAML aliases are expanded"):
        load_config(write(tmp_path, "env:\n  kwargs: {" + ", ".join(levels) + "}\n"))


@pytest.mark.parametrize("value", ["&a [*a]", "{b: &a {c: [*a]}}"])
def test_a_recursive_alias_is_refused_naming_the_key(value):
    with pytest.raises(ConfigError, match=r"^env\.kwargs[.\w\[\]]*: a YAML alias refers to a collection that contains it"):
        load_config(None, [f"env.kwargs={value}"])


def test_a_value_nested_too_deeply_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^env\.kwargs: the value is nested too deeply to read"):
        load_config(None, ["env.kwargs={a: " + "[" * 5000 + "]" * 5000 + "}"])


def test_small_aliases_still_load(tmp_path):
    path = write(tmp_path, "model:\n  policy_head: &head [64, 64]\n  value_head: *head\n")
    cfg = load_config(path, ["env.kwargs={a: &a [1, 2], b: *a}"])
    assert cfg.model.value_head == [64, 64] and cfg.env.kwargs == {"a": [1, 2], "b": [1, 2]}


# --------------------------------------------------------------------------- NaN and inf (D9)


def _float_keys(cls, prefix: str = "") -> list[str]:
    """The dotted keys of ``cls`` whose type takes a float (alone, optional or in a list)."""
    import dataclasses
    import typing

    keys = []
    for f in dataclasses.fields(cls):
        tp = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(tp):
            keys += _float_keys(tp, f"{prefix}{f.name}.")
        elif "float" in str(tp):
            keys.append(f"{prefix}{f.name}")
    return keys


def _every_float_key() -> list[tuple[str, str]]:
    from mlxe.algos import ALGORITHMS, config_class

    pairs = [("a3c", key) for key in _float_keys(Config) if not key.startswith("algo.")]
    pairs += [(name, f"algo.{key}") for name in ALGORITHMS for key in _float_keys(config_class(name))]
    return pairs


@pytest.mark.parametrize("algo, key", _every_float_key())
def test_every_float_setting_refuses_nan_and_inf_naming_the_key(algo, key):
    refused = (".nan", "-.inf") if key == "stop.eval_return" else (".nan", ".inf", "-.inf", "2e400")  # .inf: never stop
    for value in refused:
        item = f"{key}=[{value}]" if key.startswith("env.remote.action_") else f"{key}={value}"
        with pytest.raises(ConfigError) as e:
            load_config(None, [f"algo.name={algo}", item])
        assert re.match(rf"{re.escape(key)}(\[0\])?: (nan|inf|-inf) is not allowed; expected a finite number", str(e.value)), str(e.value)


@pytest.mark.parametrize(
    "item, message",
    [
        ("algo.lr=.nan", "algo.lr: nan is not allowed; expected a finite number"),
        ("stop.max_wall_seconds=.nan", "stop.max_wall_seconds: nan is not allowed; expected a finite number or null"),
        ("algo.max_grad_norm=.inf", "algo.max_grad_norm: inf is not allowed; expected a finite number or null"),
        ("filters.clip=.nan", "filters.clip: nan is not allowed; expected a finite number"),
        ("run.status_every=.inf", "run.status_every: inf is not allowed; expected a finite number"),
        ("env.step_timeout=.nan", "env.step_timeout: nan is not allowed; expected a finite number or null"),
        ("env.step_timeout=.inf", "env.step_timeout: inf is not allowed; expected a finite number or null"),
        ("run.max_nonfinite=.nan", "run.max_nonfinite: expected int, got nan"),
        ("algo.lr=1" + "0" * 400, "algo.lr: 1000"),  # an integer beyond float range
        ("policies={a: {num_gpus: .nan}}", "policies.a.num_gpus: nan is not allowed; expected a finite number"),
    ],
)
def test_nan_and_inf_are_named(item, message):
    with pytest.raises(ConfigError) as e:
        load_config(REPO_ROOT / "configs" / "zoo" / "ppo" / "CartPole-v1.yaml", [item])
    assert message in str(e.value)


def test_the_range_helper_refuses_nan():
    from mlxe.config import check_positive

    with pytest.raises(ConfigError, match=r"^x: nan is not allowed; expected a value > 0"):
        check_positive("x", float("nan"))


# --------------------------------------------------------------------------- sizes and names (D10)


@pytest.mark.parametrize(
    "item, message",
    [
        ("rollout.steps=99999999999999999999", "rollout.steps: 99999999999999999999 is not allowed; expected an integer within +-(2**63 - 1)"),
        ("seed=99999999999999999999", "seed: 99999999999999999999 is not allowed"),
        ("rollout.steps=200000000", "rollout.steps: 200000000 is not allowed with envs_per_executor 1; expected at most 100,000,000 rows"),
        ("executors=100000", "executors: 100000 is not allowed; expected 'auto' or an integer in [1, 1024]"),
        ("torch_threads=5000", "torch_threads: 5000 is not allowed; expected at most 1,024"),
        (["algo.name=ppo", "learner.gradient_workers=2000"], "learner.gradient_workers: 2000 is not allowed; expected at most 1,024"),
        ("envs_per_executor=100000", "envs_per_executor: 100000 is not allowed; expected at most 65,536"),
        ("env.frame_stack=100000", "env.frame_stack: 100000 is not allowed; expected at most 65,536"),
        ("model.trunk=[64, 1000000]", "model.trunk: [64, 1000000] is not allowed; expected layer sizes in [1, 65,536]"),
        ("model.core_size=1000000", "model.core_size: 1000000 is not allowed; expected at most 65,536"),
        ("model.conv=[[1000000, 3, 1]]", "model.conv[0]: [1000000, 3, 1] is not allowed"),
        ("icm.hidden=1000000", "icm.hidden: 1000000 is not allowed; expected at most 65,536"),
        ("memory.capacity_per_executor=1000000000", "memory.capacity_per_executor: 1000000000 is not allowed; expected at most 100,000,000 rows"),
        ("run.status_every=1e9", "run.status_every: 1000000000.0 is not allowed; expected at most 31,536,000 seconds"),
        ("stop.max_wall_seconds=1e12", "stop.max_wall_seconds: 1000000000000.0 is not allowed; expected at most 31,536,000"),
        ("env.step_timeout=1e12", "env.step_timeout: 1000000000000.0 is not allowed; expected at most 31,536,000"),
    ],
)
def test_sizes_beyond_their_bound_name_the_key_and_the_bound(item, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, item if isinstance(item, list) else [item])
    assert str(e.value).startswith(message), str(e.value)


@pytest.mark.parametrize(
    "algo, key",
    [("dqn", "buffer_size"), ("dqn", "batch_size"), ("ddpg", "buffer_size"), ("sac", "batch_size"), ("ppo", "batch_size"),
     ("a3c", "batch_size"), ("a3c", "sequence_length"), ("trpo", "vf_batch_size")],
)
def test_an_algorithms_array_sizes_are_bounded(algo, key):
    with pytest.raises(ConfigError, match=rf"^algo\.{key}: 1000000000 is not allowed; expected at most 100,000,000 rows"):
        load_config(None, [f"algo.name={algo}", f"algo.{key}=1000000000"])


def test_the_bounds_themselves_are_allowed():
    cfg = load_config(None, ["executors=1024", "envs_per_executor=65536", "rollout.steps=1000", "model.trunk=[65536]"])
    assert cfg.executors == 1024 and cfg.envs_per_executor == 65536


@pytest.mark.parametrize("name", ["../../escape", "a/b", "..", ".hidden", "-x", "", "a b", "x" * 101, "é" * 51, "run\x00"])
def test_a_name_that_is_not_one_safe_file_name_is_refused(name):
    with pytest.raises(ConfigError, match=r"^name: .* is not allowed; expected up to 100 bytes of letters, digits"):
        load_config(None, [f"name={name!r}" if name else "name=''"])


@pytest.mark.parametrize("name", ["cartpole_ppo", "my.run", "1.5", "a2c-seed0", "x" * 100, "lr+clip", "é" * 50,
                                  "tests.envs.catch:catch_ppo"])
def test_file_name_safe_names_are_accepted(name):
    assert load_config(None, [f"name='{name}'"]).name == name


# --------------------------------------------------------------------------- model keys the network does not read


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.encoder=mlp", "model.conv=[[16, 3, 1]]"], "model.conv: [[16, 3, 1]] is not read: the encoder is 'mlp'"),
        (["model.encoder=onehot", "model.conv=[[16, 3, 1]]"], "model.conv: [[16, 3, 1]] is not read: the encoder is 'onehot'"),
        (["model.encoder=impala_cnn", "model.conv=[[16, 3, 1]]"], "model.conv: [[16, 3, 1]] is not read: the encoder is 'impala_cnn'"),
        (["model.impala_channels=[8]"], "model.impala_channels: [8] is not read: the encoder is 'auto'; set model.encoder: impala_cnn"),
        (["model.encoder=cnn", "model.impala_channels=[8]"], "model.impala_channels: [8] is not read: the encoder is 'cnn'"),
    ],
)
def test_a_model_key_the_configured_encoder_does_not_read_is_an_error(overrides, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, overrides)
    assert str(e.value).startswith(message), str(e.value)


def test_model_keys_the_configured_encoder_reads_are_accepted():
    assert load_config(None, ["model.encoder=impala_cnn", "model.impala_channels=[8]"]).model.impala_channels == [8]
    for encoder in ("auto", "cnn", "concat"):
        assert load_config(None, [f"model.encoder={encoder}", "model.conv=[[16, 3, 1]]"]).model.conv == [[16, 3, 1]]
    assert load_config(None, ["model.custom=m:Net", "model.encoder=mlp", "model.conv=[[16, 3, 1]]"]).model.custom == "m:Net"


def _spec(space, actions, *overrides):
    from mlxe.models.actor_critic import net_spec

    return net_spec(load_config(None, ["algo.name=ppo", *overrides]).model, space, actions)


@pytest.mark.parametrize(
    "observation, actions, overrides, message",
    [
        ("flat", 2, ["model.std=softplus"], "model.std: 'softplus' is not read: the actions are Discrete"),
        ("flat", 2, ["model.log_std_init=-1.0"], "model.log_std_init: -1.0 is not read: the actions are Discrete"),
        ("flat", 2, ["model.conv=[[16, 3, 1]]"],
         "model.conv: [[16, 3, 1]] is not read: the encoder is 'mlp', which model.encoder 'auto' picked for this observation space"),
        ("dict", 2, ["model.conv=[[16, 3, 1]]"], "model.conv: [[16, 3, 1]] is not read: the encoder is 'concat'"),
    ],
)
def test_a_model_key_the_environment_leaves_unread_is_an_error_when_the_network_is_made(observation, actions, overrides, message):
    gymnasium = pytest.importorskip("gymnasium")
    space = {
        "flat": gymnasium.spaces.Box(-1, 1, (4,)),
        "dict": gymnasium.spaces.Dict({"a": gymnasium.spaces.Box(-1, 1, (3,)), "b": gymnasium.spaces.Discrete(2)}),
    }[observation]
    with pytest.raises(ConfigError) as e:
        _spec(space, actions, *overrides)
    assert str(e.value).startswith(message), str(e.value)


def test_model_keys_the_environment_reads_are_accepted():
    import numpy as np

    gymnasium = pytest.importorskip("gymnasium")
    box = gymnasium.spaces.Box(-2, 2, (1,))
    assert _spec(gymnasium.spaces.Box(-1, 1, (3,)), box, "model.std=softplus", "model.log_std_init=-1.0").std == "softplus"
    image = gymnasium.spaces.Box(0, 255, (4, 10, 10), np.uint8)
    assert _spec(image, 2, "model.conv=[[16, 3, 1]]").encoder == "cnn"
    parts = gymnasium.spaces.Dict({"a": image, "b": gymnasium.spaces.Box(-1, 1, (3,))})
    assert _spec(parts, 2, "model.conv=[[16, 3, 1]]").encoder == "concat"


def test_stop_eval_return_may_be_inf_evaluations_that_never_stop_the_run():
    cfg = load_config("configs/zoo/ppo/CartPole-v1.yaml", ["stop.eval_return=.inf"])
    assert cfg.stop.eval_return == float("inf")
    with pytest.raises(ConfigError, match="stop.eval_return: -inf is not allowed"):
        load_config("configs/zoo/ppo/CartPole-v1.yaml", ["stop.eval_return=-.inf"])


def test_a_run_directory_written_with_a_key_its_algorithm_never_read_still_loads(tmp_path):
    """Earlier releases saved A2C's ``optimizer`` in every PPO run's config.yaml (PPO inherited it and
    never read it): the run directory loads without it, while a config that sets it is refused."""
    data = to_dict(load_config("configs/zoo/ppo/CartPole-v1.yaml"))
    data["algo"]["optimizer"] = "rmsprop"
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(data))
    cfg = load_run_config(tmp_path, ["algo.lr=0.01"])
    assert cfg.algo.name == "ppo" and cfg.algo.lr == 0.01 and not hasattr(cfg.algo, "optimizer")
    with pytest.raises(ConfigError, match="algo.optimizer: not a setting of algo.name 'ppo' .it belongs to a2c, impala."):
        load_config(tmp_path / "config.yaml")


def test_addresses():
    assert parse_address("127.0.0.1:8765") == ("127.0.0.1", 8765)
    assert parse_address("8765") == ("127.0.0.1", 8765)  # the port alone: loopback
    assert parse_address("[::1]:0") == ("::1", 0)
    assert parse_address("my-host.example:80") == ("my-host.example", 80)
    with pytest.raises(ConfigError, match=r"^env\.remote\.address: 'host:99999' is not allowed"):
        parse_address("host:99999", key="env.remote.address")
