"""Checkpoints: written atomically with a checksum, rotated, verified on load; the newest valid one found.

A checkpoint is one ``torch.save`` file of tensors and plain data, loaded with ``weights_only=True``
(nothing but tensors and containers is unpickled). Its ``checksum`` is the SHA-256 of its content
(every key, scalar and tensor byte, in order), computed before writing and checked after loading:
torch's zip archive does not verify its records on load, so without it a flipped bit in a tensor
would load as a silently different model. A truncated file, a flipped bit or an edit is a
:class:`CheckpointError` naming the file and what is wrong.

A run's ``checkpoints/`` folder (:class:`CheckpointDir`) holds ``last.pt`` (the newest), the
``run.keep_checkpoints`` - 1 before it as ``iter-NNNNNNNN.pt`` (named by iteration) and ``best.pt``.
A new ``last.pt`` is written to a temporary file first, so a crash at any moment leaves the
previous ones intact; ``--resume`` continues from the newest one that verifies
(:meth:`CheckpointDir.resume`), moving unreadable ones aside as ``*.corrupt`` and saying so.

A checkpoint names the run it belongs to (``run``: the algorithm and the weight count). Loading one
into a run (``--resume``, ``mlxe eval``) compares it with the run's config, so that a checkpoint of
another run is an error naming what differs rather than a traceback from deep inside the model.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

# the layout version written: 5 added ``run`` (the identity of the run that wrote it), 6 the
# Memorizer's state apart from the Learner's (``memorizer``)
FORMAT = 6
READABLE = (4, 5, 6)  # the versions loaded; a format 4 checkpoint is compared by its weight count only
_ROTATED = re.compile(r"iter-(\d+)\.pt")


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used: truncated, corrupted, or not an MLxE checkpoint."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path


def _to_torch(obj):
    """NumPy arrays -> tensors, recursively, so checkpoints load with ``weights_only=True``."""
    import torch

    if isinstance(obj, np.ndarray):  # torch wants memory it may write: copy read-only views (Ray's)
        return torch.from_numpy(np.ascontiguousarray(obj) if obj.flags.writeable else obj.copy())
    if isinstance(obj, np.generic):  # a NumPy scalar (e.g. the statistics of a scalar stream)
        return obj.item()
    if isinstance(obj, dict):
        return {k: _to_torch(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_torch(v) for v in obj)
    return obj


def content_digest(state: dict) -> str:
    """SHA-256 (hex) of ``state``'s content: keys, plain values and tensor bytes, in order."""
    import torch

    h = hashlib.sha256()

    def visit(obj) -> None:
        h.update(type(obj).__name__.encode())
        if isinstance(obj, torch.Tensor):
            t = obj.detach().cpu().reshape(-1)
            h.update(f"{t.dtype}{tuple(obj.shape)}".encode())
            if t.numel():
                if t.stride(0) != 1:  # a copy; also a one-element view of stride 0 (NumPy's)
                    t = t.clone(memory_format=torch.contiguous_format)
                h.update(t.view(torch.uint8).numpy().data)
        elif isinstance(obj, dict):
            for key, value in obj.items():
                h.update(repr(key).encode())
                visit(value)
        elif isinstance(obj, (list, tuple)):
            h.update(str(len(obj)).encode())
            for value in obj:
                visit(value)
        else:
            h.update(repr(obj).encode())

    visit(state)
    return h.hexdigest()


def save_checkpoint(path: Path, state: dict) -> None:
    """Write ``state`` (format and checksum added) atomically: a crash mid-write leaves ``path``
    as it was."""
    tmp = _write_temporary(path, state)
    os.replace(tmp, path)
    _sync_dir(path.parent)


def _write_temporary(path: Path, state: dict) -> Path:
    """``state`` written and flushed to disk as ``path``'s temporary sibling."""
    import torch

    state = _to_torch({"format": FORMAT, **state})
    state["checksum"] = content_digest(state)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())  # the rename must not expose a file still in the page cache only
    except (OSError, RuntimeError) as e:  # a full disk or a size limit (torch wraps the OSError)
        tmp.unlink(missing_ok=True)
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(path, f"cannot be written ({reason}); the checkpoints before it are intact") from None
    return tmp


def _sync_dir(path: Path) -> None:
    """Make the folder's renames durable (where the platform can open a folder)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def load_checkpoint(path: str | Path, expect: dict | None = None) -> dict:
    """The verified content of checkpoint file ``path``, or of a run directory's ``last.pt``.

    ``expect``: the identity of the run it is loaded into (:func:`run_identity`), compared with the
    checkpoint's. Raises FileNotFoundError when there is no such file and :class:`CheckpointError`
    when it is truncated, corrupted, edited, not an MLxE checkpoint of a readable format, or (with
    ``expect``) another run's.
    """
    import torch

    path = Path(path)
    if path.is_dir() and path.suffix != ".pt":  # a run directory (a last.pt that is a folder is an error)
        path = path / "checkpoints" / "last.pt"
    if path.is_dir():
        raise CheckpointError(path, "is a directory, not a checkpoint file")
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - torch raises RuntimeError, EOFError, UnpicklingError, ...
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CheckpointError(path, f"cannot be read, the file is truncated or corrupted ({reason})") from None
    readable = f"this MLxE reads formats {', '.join(map(str, READABLE))}"
    if not isinstance(state, dict) or "format" not in state:
        raise CheckpointError(path, f"not an MLxE checkpoint (no format version; {readable})")
    version = state["format"]
    if type(version) is not int:  # not a bool, nor a tensor (whose != has no single truth value)
        raise CheckpointError(path, f"not an MLxE checkpoint (its format is a {type(version).__name__}, not a version number)")
    if version not in READABLE:
        raise CheckpointError(path, f"checkpoint format {version}; {readable}")
    checksum = state.pop("checksum", None)
    if checksum != content_digest(state):
        raise CheckpointError(path, "checksum mismatch: the file was corrupted or modified after it was written")
    _check_layout(path, state)
    if expect is not None:
        check_identity(path, state, expect)
    return state


def _check_layout(path: Path, state: dict) -> None:
    """What every reader of a checkpoint relies on is there (a checksum proves integrity, not that
    the writer was MLxE)."""
    import torch

    problems = [f"no {key!r}" for key in ("trainer", "weights") if key not in state]
    if not problems:
        if not isinstance(state["trainer"], dict) or not isinstance(state["trainer"].get("iteration"), int):
            problems.append("'trainer' without an iteration")
        weights = state["weights"]
        if not (isinstance(weights, torch.Tensor) and weights.dim() == 1 and weights.is_floating_point()):
            problems.append("'weights' is not a vector of numbers")
        if state["format"] >= 5:
            run = state.get("run")
            if not (isinstance(run, dict) and isinstance(run.get("algorithm"), str) and isinstance(run.get("weights"), int)):
                problems.append("'run' does not name an algorithm and a weight count")
            elif not problems and run["weights"] != weights.numel():
                problems.append(f"'run' says {run['weights']:,} weights, 'weights' holds {weights.numel():,}")
    if problems:
        raise CheckpointError(path, f"not a complete MLxE checkpoint: {'; '.join(problems)}")


def checkpoint_identity(algorithm: str, weights) -> dict:
    """The ``run`` entry of a checkpoint: ``algorithm`` (``algo.name``) and the length of ``weights``."""
    return {"algorithm": algorithm, "weights": int(len(weights))}


def run_identity(cfg, spec=None) -> dict:
    """What a checkpoint loaded into a run of ``cfg`` must hold: its algorithm and weight count
    (``spec``: the run's network spec, if already built; else one environment is built to read it)."""
    from mlxe.policies.manager import algorithm_class
    from mlxe.runtime.setup import problem_spec

    spec = problem_spec(cfg) if spec is None else spec
    return {"algorithm": cfg.algo.name, "weights": int(algorithm_class(cfg).weights_size(cfg, spec))}


def check_identity(path: Path, state: dict, expect: dict) -> None:
    """A :class:`CheckpointError` naming what differs if verified checkpoint ``state`` (of ``path``)
    is not of the run ``expect`` (:func:`run_identity`) describes."""
    found = state.get("run") or {"weights": state["weights"].numel()}  # format 4: no algorithm to compare
    differences = []
    if "algorithm" in found and found["algorithm"] != expect["algorithm"]:
        differences.append(f"algorithm {found['algorithm']} vs {expect['algorithm']}")
    if found["weights"] != expect["weights"]:
        differences.append(f"{found['weights']:,} weights vs {expect['weights']:,}")
    if differences:
        raise CheckpointError(
            path, f"a checkpoint of another run: {', '.join(differences)} (the checkpoint's vs this run's config)"
        )


def check_finite_weights(path: Path, state: dict) -> None:
    """A :class:`CheckpointError` if the policy weights of ``state`` (of ``path``) hold NaN or inf."""
    import torch

    bad = int((~torch.isfinite(state["weights"])).sum())
    if bad:
        raise CheckpointError(
            path, f"{bad:,} of its {state['weights'].numel():,} weights are NaN or infinite: the model is unusable"
        )


def checkpoint_file(source: str | Path, last: bool = False) -> Path:
    """The checkpoint of ``source``: the file itself, or a run directory's ``best.pt`` (``last``, or
    when the run has none: ``last.pt``)."""
    from mlxe.config import ConfigError

    source = Path(source)
    if not source.is_dir():
        if last:
            raise ConfigError(f"--last chooses a run directory's last.pt; {source} is a checkpoint file")
        return source
    best = source / "checkpoints" / "best.pt"
    return best if best.is_file() and not last else source / "checkpoints" / "last.pt"


class CheckpointDir:
    """A run's ``checkpoints/`` folder: ``last.pt``, up to ``keep`` - 1 older ``iter-*.pt``, ``best.pt``."""

    def __init__(self, path: Path, keep: int) -> None:
        self.path = Path(path)
        self.keep = keep
        self.last = self.path / "last.pt"
        self.best = self.path / "best.pt"
        self._last_iteration: int | None = None  # the iteration ``last.pt`` holds, once known

    def save_last(self, state: dict, iteration: int) -> None:
        """Write ``state`` (of ``iteration``) as ``last.pt``; the one it replaces becomes
        ``iter-NNNNNNNN.pt``, and the oldest rotated ones beyond ``keep`` go."""
        tmp = _write_temporary(self.last, state)
        previous = self._last_iteration
        if self.keep > 1 and previous is not None and previous != iteration and self.last.is_file():
            # a second name for it, so that last.pt exists at every instant (a kill between two renames
            # would leave none)
            rotated = self._rotated(previous)
            rotated.unlink(missing_ok=True)  # one left by an earlier run of the same iterations
            os.link(self.last, rotated)
        os.replace(tmp, self.last)
        _sync_dir(self.path)
        self._last_iteration = iteration
        for old in self.history()[self.keep:]:
            old.unlink()

    def save_best(self, state: dict) -> None:
        save_checkpoint(self.best, state)

    def history(self) -> list[Path]:
        """``last.pt`` (if present), then the rotated checkpoints, newest first."""
        rotated = sorted(
            (p for p in self.path.glob("iter-*.pt") if _ROTATED.fullmatch(p.name)),
            key=lambda p: int(_ROTATED.fullmatch(p.name).group(1)),
            reverse=True,
        )
        # exists(), not is_file(): a last.pt that is not a file is reported and set aside by resume
        return ([self.last] if self.last.exists() else []) + rotated

    def resume(self, report: Callable[[str], None] = print, expect: dict | None = None) -> dict:
        """The newest checkpoint that verifies. Unreadable ones newer than it are renamed
        ``*.corrupt`` (kept for inspection, out of the rotation), each with a line to ``report``.
        ``expect``: the run's identity (:func:`run_identity`); a checkpoint of another run is an
        error, and stays where it is (the run's own config may be what changed)."""
        problems = []
        for path in self.history():
            try:
                state = load_checkpoint(path)
            except CheckpointError as e:
                problems.append(str(e))
                aside = path.with_name(path.name + ".corrupt")
                os.replace(path, aside)
                report(f"{e}\n  moved aside to {aside.name}")
                continue
            if expect is not None:
                check_identity(path, state, expect)
            if problems:
                report(f"resuming from {path} (iteration {state['trainer']['iteration']}), the newest valid checkpoint")
            if path == self.last:
                self._last_iteration = int(state["trainer"]["iteration"])
            return state
        if problems:
            raise CheckpointError(self.path, "no valid checkpoint to resume from:\n  " + "\n  ".join(problems))
        raise FileNotFoundError(f"no checkpoint to resume from in {self.path}")

    def _rotated(self, iteration: int) -> Path:
        return self.path / f"iter-{iteration:08d}.pt"
