"""Encoders, the composed network, acting over the flat vector, and the model config's errors."""

import dataclasses

import gymnasium
import numpy as np
import pytest
import torch

from mlxe.config import ConfigError
from mlxe.loading import load_config
from mlxe.models.actor_critic import NetSpec, NumpyActorCritic, flat_weights, net_spec
from mlxe.models.encoders import ConvEncoder, as_float
from mlxe.models.network import acting_network, build_torch
from mlxe.models.torch_modules import FlatActorCritic

IMAGE = dict(obs_shape=(4, 20, 20), obs_dtype="uint8", trunk=(16,), policy_head=(), value_head=())
SPECS = {
    "mlp": NetSpec(5, 3, (8,), (8,), (8,)),
    "onehot": NetSpec((), 3, (8,), (), (), obs_dtype="int64", obs_categories=7, encoder="onehot"),
    "cnn": NetSpec(**IMAGE, n_actions=3, encoder="cnn", conv=((8, 4, 2, 0), (8, 3, 1, 1))),
    "impala_cnn": NetSpec(**IMAGE, n_actions=3, encoder="impala_cnn", impala_channels=(4, 8)),
    "cnn, channels last": NetSpec(
        (20, 20, 2), 3, (16,), (), (), obs_dtype="uint8", encoder="cnn", conv=((8, 4, 2, 0),), channels_last=True
    ),
    "cnn, Gaussian": NetSpec(
        **IMAGE, n_actions=2, encoder="cnn", conv=((8, 4, 2, 0),), action_low=(-1.0, -2.0), action_high=(1.0, 2.0)
    ),
}


def observations(spec: NetSpec, lead: tuple[int, ...], seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if spec.obs_categories:
        return rng.integers(spec.obs_categories, size=lead)
    if spec.obs_dtype == "uint8":
        return rng.integers(0, 256, size=(*lead, *spec.obs_shape), dtype=np.uint8)
    return rng.standard_normal((*lead, *spec.obs_shape)).astype(np.float32)


@pytest.mark.parametrize("name", SPECS)
def test_shapes_and_parameter_count_of_every_encoder(name):
    spec = SPECS[name]
    model = build_torch(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.num_params()
    assert model.encoder(torch.as_tensor(observations(spec, (2,)))).shape == (2, spec.features())
    policy, value = model(torch.as_tensor(observations(spec, (3, 2))))  # leading axes [T, B] pass through
    assert value.shape == (3, 2)
    for part in policy if spec.continuous else (policy,):
        assert part.shape == (3, 2, spec.n_actions)


@pytest.mark.parametrize("name", SPECS)
def test_acting_over_the_flat_vector_matches_the_module(name):
    spec = SPECS[name]
    torch.manual_seed(1)
    model = build_torch(spec)
    flat = flat_weights(model)
    net = acting_network(spec, np.zeros_like(flat))
    assert isinstance(net, NumpyActorCritic if spec.numpy_acting else FlatActorCritic)
    np.copyto(net.flat, flat)  # the acting network reads its vector by reference
    obs = observations(spec, (6,))
    policy, value = net(obs)
    with torch.no_grad():
        expected_policy, expected_value = model(torch.as_tensor(obs))
    np.testing.assert_allclose(value, expected_value.numpy(), rtol=1e-5, atol=1e-6)
    for got, want in zip(policy if spec.continuous else (policy,), expected_policy if spec.continuous else (expected_policy,)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(net.value(obs), value, rtol=1e-6)
    assert net.logits(obs).shape == (6, spec.head_size())


def test_uint8_images_are_scaled_in_the_network():
    spec = SPECS["cnn"]
    model = build_torch(spec)
    obs = observations(spec, (2,))
    with torch.no_grad():
        as_bytes = model.encoder(torch.as_tensor(obs))
        as_floats = model.encoder(torch.as_tensor(obs.astype(np.float32) / 255))
    torch.testing.assert_close(as_bytes, as_floats)


def test_uint8_flat_observations_are_scaled_alike_in_numpy_and_torch():
    spec = NetSpec(6, 2, (8,), (8,), (8,), obs_dtype="uint8")
    torch.manual_seed(0)
    model = build_torch(spec)
    obs = observations(spec, (4,))
    with torch.no_grad():
        expected = model(torch.as_tensor(obs))[1].numpy()
    np.testing.assert_allclose(NumpyActorCritic(spec, flat_weights(model)).value(obs), expected, rtol=1e-5, atol=1e-6)


def test_uint8_observations_are_scaled_by_their_spaces_bound_not_their_dtype():
    """A grid of 0..3 cells in bytes spans [0, 1] as an image of 0..255 does: the scale is the space's."""
    grid = gymnasium.spaces.Box(0, 3, (6,), np.uint8)
    spec = spec_of(grid, "model.trunk=[8]")
    assert spec.obs_scale == pytest.approx(1 / 3) and spec_of(gymnasium.spaces.Box(0, 255, (6,), np.uint8)).obs_scale == 1 / 255
    torch.manual_seed(0)
    model = build_torch(spec)
    obs = np.random.default_rng(0).integers(0, 4, (5, 6), dtype=np.uint8)
    with torch.no_grad():
        as_bytes = model(torch.as_tensor(obs))[1].numpy()
        as_floats = model(torch.as_tensor(obs.astype(np.float32) / 3))[1].numpy()
    np.testing.assert_allclose(as_bytes, as_floats, rtol=1e-6)
    np.testing.assert_allclose(NumpyActorCritic(spec, flat_weights(model)).value(obs), as_bytes, rtol=1e-5, atol=1e-6)
    assert spec_of(grid, "model.obs_scale=0.5").obs_scale == 0.5  # the config's, where it gives one
    parts = gymnasium.spaces.Dict({"cells": grid, "camera": gymnasium.spaces.Box(0, 255, (2, 12, 12), np.uint8)})
    assert [scale for _, _, scale in spec_of(parts, "model.conv=[[4,3,2]]").obs_parts] == [1 / 255, pytest.approx(1 / 3)]


@pytest.mark.parametrize(
    "space, override, match",
    [
        (gymnasium.spaces.Box(-1, 1, (6,)), "model.obs_scale=0.5", "model.obs_scale: 0.5 is not read: no observation is uint8"),
        (gymnasium.spaces.Box(0, 3, (6,), np.uint8), "model.obs_scale=0", r"model.obs_scale: 0(\.0)? is not allowed"),
        (gymnasium.spaces.Box(0, 3, (6,), np.uint8), "model.obs_scale=-2", r"model.obs_scale: -2(\.0)? is not allowed; expected a finite"),
    ],
)
def test_an_obs_scale_that_cannot_apply_is_named(space, override, match):
    with pytest.raises(ConfigError, match=match):
        spec_of(space, override)


def test_channels_last_images_read_as_their_channels_first_transpose():
    last = SPECS["cnn, channels last"]
    first = NetSpec((2, 20, 20), 3, (16,), (), (), obs_dtype="uint8", encoder="cnn", conv=((8, 4, 2, 0),))
    assert last.image_shape() == first.image_shape() and last.num_params() == first.num_params()
    weights = flat_weights(build_torch(first))
    obs = observations(last, (3,))
    got = FlatActorCritic(last, weights.copy())(obs)[1]
    want = FlatActorCritic(first, weights.copy())(np.ascontiguousarray(obs.transpose(0, 3, 1, 2)))[1]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_noisy_acting_draws_the_numpy_mirrors_noise():
    spec = NetSpec((4, 20, 20), 2, (16,), (8,), (), obs_dtype="uint8", encoder="cnn", conv=((8, 4, 2, 0),),
                   noisy_policy=True)
    net = FlatActorCritic(spec, flat_weights(build_torch(spec)))
    obs = observations(spec, (3,))
    mean = net.logits(obs)
    net.reset_noise(np.random.default_rng(0))
    noisy = net.logits(obs)
    net.reset_noise(np.random.default_rng(0))
    np.testing.assert_array_equal(net.logits(obs), noisy)  # the same draws from the same stream
    assert not np.allclose(noisy, mean)
    net.noise_off()
    np.testing.assert_array_equal(net.logits(obs), mean)


# --------------------------------------------------------------------------- from the config


def spec_of(space, *overrides, actions=3):
    return net_spec(load_config(None, list(overrides)).model, space, actions)


def test_auto_encoder_by_observation_space():
    assert spec_of(gymnasium.spaces.Box(-1, 1, (4,))).encoder == "mlp"
    onehot = spec_of(gymnasium.spaces.Discrete(500))
    assert (onehot.encoder, onehot.obs_shape, onehot.obs_dtype, onehot.features()) == ("onehot", (), "int64", 500)
    atari = spec_of(gymnasium.spaces.Box(0, 255, (4, 84, 84), np.uint8), "model.trunk=[512]")
    assert (atari.encoder, atari.obs_dtype, atari.channels_last, atari.features()) == ("cnn", "uint8", False, 3136)
    minatar = spec_of(gymnasium.spaces.Box(0, 1, (10, 10, 4), bool), "model.conv=[[16,3,1]]")
    assert (minatar.obs_dtype, minatar.channels_last, minatar.image_shape(), minatar.features()) == (
        "bool", True, (4, 10, 10), 16 * 8 * 8
    )
    relaax_conv = "model.conv=[[32,3,2,1],[32,3,2,1],[32,3,2,1],[32,3,2,1]]"
    relaax = spec_of(gymnasium.spaces.Box(0, 255, (4, 42, 42), np.uint8), relaax_conv, "model.activation=elu")
    assert relaax.features() == 288  # RELAAX DA3C's 42x42 input through 4 SAME convolutions of stride 2
    assert spec_of(gymnasium.spaces.Box(0, 255, (3, 64, 64), np.uint8), "model.encoder=impala_cnn").features() == 2048


def test_float64_boxes_are_stored_as_float32():
    assert spec_of(gymnasium.spaces.Box(-1, 1, (3,), np.float64)).obs_dtype == "float32"


@pytest.mark.parametrize(
    "space, overrides, match",
    [
        (gymnasium.spaces.Box(0, 255, (4, 84, 84), np.uint8), ["model.encoder=mlp"],
         r"model.encoder: 'mlp' cannot read the observation space Box\(0, 255, \(4, 84, 84\), uint8\); set model.encoder to cnn"),
        (gymnasium.spaces.Box(-1, 1, (4,)), ["model.encoder=cnn"], "model.encoder: 'cnn' cannot read .* set model.encoder to mlp"),
        (gymnasium.spaces.Discrete(5), ["model.encoder=mlp"], "set model.encoder to onehot"),
        (gymnasium.spaces.Box(-1, 1, (3, 3)), [], "FlattenObservation"),
        (gymnasium.spaces.MultiDiscrete([2, 3]), [], "MultiDiscrete.* is not supported"),
        (gymnasium.spaces.Dict({"a": gymnasium.spaces.Discrete(2)}), ["model.encoder=cnn"], "set model.encoder to concat"),
        (gymnasium.spaces.Box(0, 255, (1, 8, 8), np.uint8), [], r"model.conv: .* shrink a \(1, 8, 8\) observation"),
        (gymnasium.spaces.Box(0, 9, (4,), np.int32), [], "dtype int32"),
    ],
)
def test_observations_a_model_cannot_encode_name_the_key(space, overrides, match):
    with pytest.raises(ConfigError, match=match):
        spec_of(space, *overrides).num_params()


@pytest.mark.parametrize(
    "override, match",
    [
        ("model.conv=[[32,8]]", r"model.conv\[0\]: \[32, 8\] is not allowed"),
        ("model.conv=[[32,8,0]]", r"model.conv\[0\]"),
        ("model.impala_channels=[0]", "model.impala_channels"),
        ("model.trunk=[0]", "model.trunk"),
        ("model.custom=notamodule", "model.custom: 'notamodule' is not allowed; expected 'package.module:Class'"),
        ("model.encoder=resnet", "model.encoder: 'resnet' is not allowed"),
    ],
)
def test_bad_model_keys_are_named(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [override])


# --------------------------------------------------------------------------- a user's module


class TinyNet(torch.nn.Module):
    """A custom network as the docs describe it: ``Class(spec)``, forward -> (head, value)."""

    def __init__(self, spec: NetSpec) -> None:
        super().__init__()
        self.body = torch.nn.Linear(int(np.prod(spec.obs_shape)), 8)
        self.head = torch.nn.Linear(8, spec.head_size())
        self.value = torch.nn.Linear(8, 1)

    def forward(self, obs):
        h = torch.relu(self.body(obs.float().flatten(1)))
        return self.head(h), self.value(h).squeeze(-1)


class WrongHead(TinyNet):
    def forward(self, obs):
        head, value = super().forward(obs)
        return head[:, :1], value


def test_a_custom_module_is_the_network_and_acts_over_the_flat_vector():
    spec = spec_of(gymnasium.spaces.Box(-1, 1, (5,)), f"model.custom={__name__}:TinyNet")
    assert not spec.mlp_only and spec.num_params() == 5 * 8 + 8 + 8 * 3 + 3 + 8 + 1
    model = build_torch(spec)
    net = acting_network(spec, flat_weights(model))
    obs = observations(spec, (4,))
    with torch.no_grad():
        np.testing.assert_allclose(net(obs)[0], model(torch.as_tensor(obs))[0].numpy(), rtol=1e-5, atol=1e-6)


def test_a_custom_module_of_the_wrong_output_shape_names_both_shapes():
    spec = spec_of(gymnasium.spaces.Box(-1, 1, (5,)), f"model.custom={__name__}:WrongHead")
    with pytest.raises(ConfigError, match=r"model.custom: .*WrongHead's forward .* gives \(\(2, 1\), \(2,\)\), "
                       r"3 Discrete actions need \(head, value\) of shapes \(\(2, 3\), \(2,\)\)"):
        build_torch(spec)


def test_a_custom_module_that_does_not_load_names_the_key():
    spec = spec_of(gymnasium.spaces.Box(-1, 1, (5,)), "model.custom=no_such_package.mod:Net")
    with pytest.raises(ConfigError, match="model.custom: cannot load 'no_such_package.mod:Net'"):
        build_torch(spec)


class NatureCopy(torch.nn.Module):
    """A user's encoder (``model.custom_encoder``) that is the built-in CNN of the config's layers."""

    def __init__(self, spec: NetSpec) -> None:
        super().__init__()
        self.cnn = ConvEncoder(dataclasses.replace(spec, encoder="cnn", custom_encoder=None))

    def forward(self, obs):
        return self.cnn(obs)


class SmallConv(torch.nn.Module):
    """A user's encoder written from scratch: one 3x3 convolution of 8 channels over a channels-first image."""

    def __init__(self, spec: NetSpec) -> None:
        super().__init__()
        self.scale = spec.obs_scale
        self.conv = torch.nn.Conv2d(spec.obs_shape[0], 8, 3)

    def forward(self, obs):
        return torch.relu(self.conv(as_float(obs, self.scale))).flatten(1)


class ReadsValues(SmallConv):
    def forward(self, obs):
        return super().forward(obs) * float(obs.sum().item() > 0)


class Unflattened(torch.nn.Module):
    def __init__(self, spec: NetSpec) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(spec.obs_shape[0], 2, 3)

    def forward(self, obs):
        return self.conv(obs.float())


IMAGE = gymnasium.spaces.Box(0, 255, (2, 36, 36), np.uint8)  # the smallest the Nature CNN reads


def test_a_user_encoder_takes_the_encoders_place_with_the_trunk_and_heads_after_it():
    built_in = spec_of(IMAGE, "model.trunk=[16]")
    mine = spec_of(IMAGE, f"model.custom_encoder={__name__}:NatureCopy", "model.trunk=[16]")
    assert (mine.encoder, mine.features(), mine.num_params()) == ("custom", built_in.features(), built_in.num_params())
    # built on the meta device to measure it: sizing the network draws nothing from torch's generator
    torch.manual_seed(0)
    mine.num_params()
    drawn = torch.rand(1)
    torch.manual_seed(0)
    assert torch.equal(torch.rand(1), drawn)
    models = []
    for spec in (built_in, mine):
        torch.manual_seed(0)
        models.append(build_torch(spec))
    np.testing.assert_array_equal(flat_weights(models[0]), flat_weights(models[1]))
    obs = observations(mine, (4,))
    net = acting_network(mine, flat_weights(models[1]))  # what an Executor acts with
    with torch.no_grad():
        np.testing.assert_allclose(net(obs)[0], models[0](torch.as_tensor(obs))[0].numpy(), rtol=1e-5, atol=1e-6)


def test_a_user_encoder_reads_a_recurrent_cores_sequences_one_batch_at_a_time():
    spec = spec_of(IMAGE, f"model.custom_encoder={__name__}:NatureCopy", "model.core=gru", "model.core_size=8")
    encoder = build_torch(spec).encoder
    obs = torch.as_tensor(observations(spec, (3, 2)))  # [T, B, ...]
    with torch.no_grad():
        assert torch.equal(encoder(obs), encoder(obs.flatten(0, 1)).unflatten(0, (3, 2)))


@pytest.mark.parametrize(
    "overrides, match",
    [
        ([f"model.custom_encoder={__name__}:Unflattened"], r"model.custom_encoder: .*Unflattened'.s forward on "
         r"observations of shape \(2, 2, 36, 36\) gives a \(2, 2, 34, 34\) torch.float32 tensor; an encoder gives float "
         r"features \[B, F\]"),
        (["model.custom_encoder=no_such_package.mod:Net"], "model.custom_encoder: cannot load 'no_such_package.mod:Net'"),
        ([f"model.custom_encoder={__name__}:ReadsValues"], r"model.custom_encoder: .*ReadsValues'.s forward on "
         r"observations of shape \(2, 2, 36, 36\) failed on the meta device"),
    ],
)
def test_a_user_encoder_that_gives_no_features_names_the_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        spec_of(IMAGE, *overrides).num_params()


@pytest.mark.parametrize(
    "overrides, match",
    [
        (["model.custom_encoder=nota module"], "model.custom_encoder: 'nota module' is not allowed"),
        (["model.custom_encoder=m:Enc", "model.custom=m:Net"], "model.custom_encoder: a model.custom module replaces"),
        (["model.custom_encoder=m:Enc", "model.encoder=cnn"], "model.encoder: 'cnn' is not read: model.custom_encoder"),
        (["model.custom_encoder=m:Enc", "model.conv=[[4, 3, 2]]"], r"model.conv: \[\[4, 3, 2\]\] is not read: the encoder is 'custom'"),
        (["model.custom_encoder=m:Enc", "algo.name=trpo", "model.trunk=[]"], "model.custom_encoder or CNN encoder"),
    ],
)
def test_user_encoder_settings_that_conflict_name_the_key(overrides, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, overrides)


def test_a_dict_observation_is_split_into_its_parts_and_encoded_each():
    space = gymnasium.spaces.Dict({
        "camera": gymnasium.spaces.Box(0, 255, (2, 12, 12), np.uint8),
        "speed": gymnasium.spaces.Box(-1, 1, (3,), np.float64),
        "gear": gymnasium.spaces.Discrete(4),
        "grid": gymnasium.spaces.Box(-1, 1, (2, 2), np.float32),
    })
    spec = spec_of(space, "model.conv=[[4,3,2]]", "model.trunk=[8]")
    # Gymnasium flattens a Dict in its (sorted) key order: camera, gear (one-hot), grid, speed
    assert spec.encoder == "concat" and spec.obs_dtype == "float32" and spec.obs_shape == (288 + 4 + 4 + 3,)
    assert spec.obs_parts == (((2, 12, 12), "uint8", 1 / 255), ((4,), "float32", 1.0), ((2, 2), "float32", 1.0), ((3,), "float32", 1.0))
    assert spec.features() == 4 * 5 * 5 + 4 + 4 + 3
    model = build_torch(spec)
    assert sum(p.numel() for p in model.parameters()) == spec.num_params()
    sample = space.sample()
    flat = gymnasium.spaces.flatten(space, sample).astype(np.float32)[None]
    with torch.no_grad():
        features = model.encoder(torch.as_tensor(flat))
        camera = model.encoder.parts[0](torch.as_tensor(sample["camera"][None]))  # the image scaled as bytes
    assert features.shape == (1, spec.features())
    torch.testing.assert_close(features[:, : camera.shape[1]], camera)
    net = acting_network(spec, flat_weights(model))
    assert net(flat)[0].shape == (1, 3)


def test_a_tuple_of_bytes_is_stored_as_bytes():
    space = gymnasium.spaces.Tuple((gymnasium.spaces.Box(0, 255, (3, 8, 8), np.uint8), gymnasium.spaces.Box(0, 255, (5,), np.uint8)))
    spec = spec_of(space, "model.conv=[[4,3,1]]")
    assert spec.obs_dtype == "uint8" and spec.obs_shape == (197,) and spec.features() == 4 * 6 * 6 + 5
