"""``mlxe export``: a run's greedy policy as one ONNX or TorchScript file, to act where MLxE is not
installed (ONNX Runtime in a service, a C++ program, a browser), as Stable-Baselines3's export guide
and Sample Factory's ``export_onnx`` do.

The file computes what :meth:`TrainedPolicy.predict <mlxe.runtime.trained.TrainedPolicy.predict>`
gives with ``deterministic=True``, from observations as the run's environment gives them:

* the observation filter's normalization with the checkpoint's statistics, uint8 images scaled as
  the network's encoder scales them, and Box actions squashed into the action space's bounds;
* the greedy head of the algorithm (its policy's ``greedy_module``: the policy head's mode for
  actor-critics, the best legal Q for DQN and its relatives, the actor's tanh for DDPG, TD3 and SAC).

Inputs and outputs, each with a dynamic batch axis B: ``obs`` [B, *obs_shape]; ``action_mask`` [B, A]
bool for a policy trained with masks; ``state.<name>`` [B, core_size] for a recurrent core (zeros at
an episode's start) -> ``action`` and ``next_state.<name>``. A JSON file beside the model names them
with their shapes and dtypes, and the action space (kind, sizes, bounds).

An export is checked before it is kept: the file, loaded back (ONNX Runtime for ONNX), must give
``predict``'s actions on random observations (continuous values within ``atol``). It is written in a
temporary directory and moved into place only then, so a failed export leaves the run directory as
it was.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import torch
from torch import nn

from mlxe.config import ConfigError
from mlxe.models.actor_critic import NetSpec
from mlxe.runtime.trained import TrainedPolicy, load_policy

FORMATS = {"onnx": ".onnx", "torchscript": ".pt"}
OPSET = 18


class ExportError(RuntimeError):
    """An export that could not be written, or whose file does not act as ``predict`` does."""


class ExportedPolicy(nn.Module):
    """``forward(obs, [action_mask], *state) -> (action, *next_state)``: a trained policy's greedy
    actions from raw observations (the module doc), with a copy of its weights."""

    def __init__(self, trained: TrainedPolicy) -> None:
        super().__init__()
        spec = trained.spec
        greedy = getattr(trained.policy, "greedy_module", None)
        if greedy is None:
            raise ConfigError(f"algo.name: {trained.config.algo.name!r}'s policy has no greedy_module to export")
        self.greedy = greedy()
        self.masked = spec.action_mask
        self.state_names = list(spec.state_shapes()) if spec.recurrent else []
        rms = trained.filters.obs
        self.filter = rms is not None
        if self.filter:  # as RunningMeanStd.normalize computes it, in float32
            self.register_buffer("obs_mean", torch.as_tensor(rms.mean, dtype=torch.float32))
            self.register_buffer("obs_std", torch.as_tensor(np.sqrt(rms.var + 1e-8), dtype=torch.float32))
            self.clip = float(trained.filters.clip)
        bounds = trained.bounds
        self.bounded = bounds is not None
        if self.bounded:
            self.register_buffer("low", torch.as_tensor(bounds[0]))
            self.register_buffer("high", torch.as_tensor(bounds[1]))

    def forward(self, obs: torch.Tensor, *rest: torch.Tensor):
        mask = rest[0] if self.masked else None
        state = dict(zip(self.state_names, rest[int(self.masked):])) or None
        if self.filter:
            obs = ((obs - self.obs_mean) / self.obs_std).clamp(-self.clip, self.clip)
        action, state = self.greedy(obs, mask, state)
        if self.bounded:
            action = torch.minimum(torch.maximum(action, self.low), self.high)
        return (action, *(state[k] for k in self.state_names)) if self.state_names else action


def signature(spec: NetSpec) -> tuple[list[dict], list[dict]]:
    """The exported graph's (inputs, outputs): each {"name", "shape" (with "batch" first), "dtype"}."""
    inputs = [{"name": "obs", "shape": ["batch", *spec.obs_shape], "dtype": spec.obs_dtype}]
    if spec.action_mask:
        inputs.append({"name": "action_mask", "shape": ["batch", spec.n_actions], "dtype": "bool"})
    states = spec.state_shapes() if spec.recurrent else {}
    inputs += [{"name": f"state.{k}", "shape": ["batch", *shape], "dtype": "float32"} for k, shape in states.items()]
    if spec.continuous:
        action = {"shape": ["batch", spec.n_actions], "dtype": "float32"}
    elif spec.hybrid:
        action = {"shape": ["batch", len(spec.action_nvec) + spec.box_dims], "dtype": "float32"}
    elif spec.factorized:
        action = {"shape": ["batch", len(spec.action_nvec)], "dtype": "int64"}
    else:
        action = {"shape": ["batch"], "dtype": "int64"}
    outputs = [{"name": "action", **action}]
    outputs += [{"name": f"next_state.{k}", "shape": ["batch", *shape], "dtype": "float32"} for k, shape in states.items()]
    return inputs, outputs


def action_space(spec: NetSpec) -> dict:
    """The actions the exported policy gives, as JSON: kind, sizes and Box bounds."""
    if spec.continuous:
        return {"kind": "box", "shape": [spec.n_actions], "low": list(spec.action_low), "high": list(spec.action_high)}
    if spec.hybrid:
        return {"kind": "hybrid", "nvec": list(spec.action_nvec), "box_dims": spec.box_dims,
                "low": list(spec.action_low), "high": list(spec.action_high)}
    if spec.factorized:
        return {"kind": "multi_discrete", "nvec": list(spec.action_nvec)}
    return {"kind": "discrete", "n": spec.n_actions}


def random_inputs(spec: NetSpec, rows: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Inputs of ``rows`` random observations (uint8: uniform; floats: standard normal), random masks
    with a legal action in every part, and random states (as :func:`signature` orders them)."""
    if np.dtype(spec.obs_dtype) == np.uint8:
        obs = rng.integers(0, 256, (rows, *spec.obs_shape), dtype=np.uint8)
    elif np.issubdtype(np.dtype(spec.obs_dtype), np.integer):
        obs = rng.integers(0, max(spec.obs_categories, 2), (rows, *spec.obs_shape)).astype(spec.obs_dtype)
    else:
        obs = rng.standard_normal((rows, *spec.obs_shape)).astype(spec.obs_dtype)
    inputs = [obs]
    if spec.action_mask:
        mask = rng.random((rows, spec.n_actions)) < 0.7
        first = np.cumsum([0, *(spec.action_nvec or (spec.n_actions,))])[:-1]
        mask[:, first] = True  # every part keeps a legal action
        inputs.append(mask)
    if spec.recurrent:
        inputs += [rng.standard_normal((rows, *shape)).astype(np.float32) for shape in spec.state_shapes().values()]
    return inputs


def export_policy(
    source: str | Path, fmt: str = "onnx", out: str | Path | None = None, last: bool = False, atol: float = 1e-5
) -> Path:
    """Write the greedy policy of ``source`` (a run directory or a checkpoint in one, as
    :func:`mlxe.load` reads it) to ``out`` (default: ``<run>/export/policy.onnx`` or ``policy.pt``)
    and ``out`` with the suffix ``.json``; returns ``out``. ConfigError for a bad format or source,
    ExportError where the graph cannot be written or does not act as ``predict``."""
    if fmt not in FORMATS:
        raise ConfigError(f"--format: {fmt!r} is not an export format; expected one of {', '.join(FORMATS)}")
    if fmt == "onnx":  # the exporter (onnx, onnxscript) and the parity check (onnxruntime), before anything is loaded
        try:
            import onnxruntime  # noqa: F401
            import onnxscript  # noqa: F401
        except ImportError as e:
            raise ConfigError(f"--format onnx needs the onnx extra: pip install 'mlxe[onnx]' ({e})") from None
    trained = load_policy(source, last)
    run_dir = trained.checkpoint.parent.parent
    out = Path(out) if out is not None else run_dir / "export" / f"policy{FORMATS[fmt]}"
    module = ExportedPolicy(trained).eval()
    inputs, outputs = signature(trained.spec)
    with tempfile.TemporaryDirectory(prefix="mlxe-export-") as tmp:
        path = Path(tmp) / out.name
        examples = random_inputs(trained.spec, 2, np.random.default_rng(0))
        write(module, fmt, path, examples, inputs, outputs)
        check_parity(trained, load_exported(path, fmt), inputs, atol)
        meta = path.with_suffix(".json")
        meta.write_text(json.dumps({
            "format": fmt, "file": out.name, "checkpoint": str(trained.checkpoint), "algo": trained.config.algo.name,
            "env": trained.config.env.id, "inputs": inputs, "outputs": outputs, "action_space": action_space(trained.spec),
        }, indent=2) + "\n")
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(path, out)
        shutil.move(meta, out.with_suffix(".json"))
    return out


def write(module: ExportedPolicy, fmt: str, path: Path, examples: list[np.ndarray], inputs: list[dict],
          outputs: list[dict]) -> None:
    """``module`` traced on ``examples`` and written to ``path`` as ``fmt``, the batch axis dynamic."""
    args = tuple(torch.from_numpy(x) for x in examples)
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # torch.export's notes on its own deprecations
            # torch.export's note on nn.LSTM's cached weight list, which it rebuilds while tracing
            warnings.filterwarnings("ignore", message="The tensor attributes .* were assigned during export")
            # TorchScript's deprecation, and its tracer's notes on nn.LSTM's input-size checks (the parity check
            # runs other batch sizes than the traced one)
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            if fmt == "torchscript":
                torch.jit.save(torch.jit.trace(module, args), str(path))
                return
            batch = torch.export.Dim("batch")
            rest = tuple({0: batch} for _ in args[1:])  # forward(obs, *rest): the inputs' structure is (obs, rest)
            logging.getLogger("torch.onnx").setLevel(logging.ERROR)  # not its notes on optional torchvision ops
            torch.onnx.export(
                module, args, str(path), dynamo=True, opset_version=OPSET, external_data=False,
                input_names=[x["name"] for x in inputs], output_names=[x["name"] for x in outputs],
                dynamic_shapes=({0: batch}, rest) if rest else ({0: batch},), verbose=False,
            )
    except Exception as e:  # the exporter's own errors name the operation it cannot express
        raise ExportError(f"{fmt} export failed: {summary(e)}") from e


def summary(error: Exception) -> str:
    """The line of torch.onnx's error report that names what failed (its "Exception summary"), else
    the error's first line."""
    lines = str(error).splitlines()
    named = [line for line in lines if line.startswith("<class ")]
    return named[0] if named else f"{type(error).__name__}: {lines[0] if lines else ''}"


def load_exported(path: Path, fmt: str):
    """A function of the exported file: a list of input arrays -> a list of output arrays."""
    if fmt == "torchscript":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            graph = torch.jit.load(str(path))

        def run(arrays):
            with torch.no_grad():
                out = graph(*(torch.from_numpy(x) for x in arrays))
            return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]

        return run
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [x.name for x in session.get_inputs()]
    return lambda arrays: session.run(None, dict(zip(names, arrays)))


def check_parity(trained: TrainedPolicy, run, inputs: list[dict], atol: float, rows: int = 64, steps: int = 3) -> None:
    """``run`` (:func:`load_exported`) gives ``predict``'s greedy actions and next states on ``rows``
    random observations, ``steps`` steps on (a recurrent state carried); an ExportError otherwise."""
    rng = np.random.default_rng(1)
    spec = trained.spec
    names = [x["name"] for x in inputs]
    state = None
    for _ in range(steps):
        arrays = random_inputs(spec, rows, rng)
        if spec.recurrent:
            if state is None:
                state = {k: arrays[names.index(f"state.{k}")] for k in spec.state_shapes()}
            arrays = arrays[: len(arrays) - len(state)] + [state[k] for k in spec.state_shapes()]
        mask = arrays[1] if spec.action_mask else None
        expected, state = trained.predict(arrays[0], state, deterministic=True, action_mask=mask)
        got = run(arrays)
        compare("action", got[0], expected, atol)
        for k, value in zip(spec.state_shapes() if spec.recurrent else (), got[1:]):
            compare(f"next_state.{k}", value, state[k], atol)


def compare(name: str, got: np.ndarray, expected: np.ndarray, atol: float) -> None:
    expected = np.asarray(expected)
    if got.shape != expected.shape:
        raise ExportError(f"parity check: the exported {name} has shape {got.shape}, predict gives {expected.shape}")
    if np.issubdtype(expected.dtype, np.integer):
        wrong = int((got != expected).sum())
        if wrong:
            raise ExportError(f"parity check: the exported {name} differs from predict's in {wrong} of {got.size} entries")
        return
    err = float(np.abs(got - expected).max(initial=0.0))
    if not err <= atol:
        raise ExportError(f"parity check: the exported {name} differs from predict's by up to {err:.3g} (atol {atol})")
