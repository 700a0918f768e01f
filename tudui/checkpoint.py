"""Checkpoints that move between devices safely.

We save state_dicts, never pickled models, and write atomically. We load with
``weights_only=True`` and ``map_location``, so a file saved on a GPU loads on a
CPU-only machine, and a file cannot run code when it is opened. The course's
whole-model files (``torch.save(tudui, ...)``) are read with an allow-list of
exactly the classes Tudui is built from. Everything taken from a file is
checked before it is used; anything wrong raises :class:`CheckpointError`.
"""
from __future__ import annotations

import dataclasses
import glob
import math
import numbers
import os
import tempfile
from contextlib import contextmanager, suppress

import numpy as np
import torch
from torch import nn

from .device import pick_device
from .distributed import unwrap
from .model import Tudui

FORMAT = "tudui-checkpoint"
# What a pickled course model may contain, and nothing else.
COURSE_CLASSES = [nn.Sequential, nn.Conv2d, nn.MaxPool2d, nn.Flatten, nn.Linear]
COURSE_NAMES = {f"{c.__module__}.{c.__name__}" for c in COURSE_CLASSES}


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable, unsafe or does not fit the model."""


def _few(names, shown=3) -> str:
    """'a, b, c and 7 more': a bounded list for a one-line message."""
    names = list(names)
    rest = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(str(n)[:80] for n in names[:shown]) + rest


# --- where a checkpoint may be written -------------------------------------------------------------

def _temp_prefix(target: str) -> str:
    return f".tmp-{os.path.basename(target)[:100]}-"


def check_target(path) -> str:
    """The real file a checkpoint for ``path`` goes to (links resolved), or a CheckpointError saying why not.

    Refused: an empty name, a folder, a device or anything else that is not a regular file, a
    folder that does not exist or cannot be written, a name too long for the file system.
    """
    path = os.fspath(path)
    if not path.strip() or path.endswith(os.sep):
        raise CheckpointError(f"checkpoint path {path!r} names no file; give a file name such as tudui.pth")
    try:
        real = os.path.realpath(path)
        folder, name = os.path.split(real)
        if os.path.exists(real) and not os.path.isfile(real):
            kind = "a directory" if os.path.isdir(real) else "not a regular file"
            raise CheckpointError(f"checkpoint path {path!r} is {kind}; give a file name such as tudui.pth")
        if not os.path.isdir(folder):
            raise CheckpointError(f"folder {folder!r} for the checkpoint does not exist; create it first")
        if len(os.fsencode(name)) + len(_temp_prefix(name)) + 12 > os.pathconf(folder, "PC_NAME_MAX"):
            raise CheckpointError(f"checkpoint file name is too long ({len(name)} characters); choose a shorter one")
        if not os.access(folder, os.W_OK):
            raise CheckpointError(f"cannot write to folder {folder!r}; choose a --checkpoint in a writable folder")
    except (ValueError, OSError) as exc:  # a NUL byte, an unreadable folder ...
        raise CheckpointError(f"checkpoint path {path[:80]!r} is not usable: {exc}") from None
    return real


def _remove_orphans(real: str) -> None:
    """Delete temp files left by a save that was killed half-way (only ours: same folder, same name)."""
    folder, name = os.path.split(real)
    for orphan in glob.glob(os.path.join(glob.escape(folder), glob.escape(_temp_prefix(name)) + "*.pth")):
        if os.path.isfile(orphan) and not os.path.islink(orphan):
            os.unlink(orphan)


@contextmanager
def exclusive(path):
    """Hold ``<checkpoint>.lock`` while training writes ``path``: a second training on it is refused.

    A lock left by a killed process (its pid is gone) is taken over; on entry, temp files of
    killed saves are cleaned up.
    """
    real = check_target(path)
    lock = real + ".lock"
    for _ in range(2):
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            break
        except FileExistsError:
            if _lock_owner_alive(lock):
                raise CheckpointError(f"another training is writing {path!r} (lock file {lock!r}); wait for it, "
                                      "or delete the lock file if no training is running") from None
            os.unlink(lock)
    else:
        raise CheckpointError(f"could not take the lock file {lock!r}; delete it and try again")
    try:
        os.write(fd, str(os.getpid()).encode())
        os.close(fd)
        _remove_orphans(real)
        yield real
    finally:
        with suppress(FileNotFoundError):
            os.unlink(lock)


def _lock_owner_alive(lock: str) -> bool:
    try:
        with open(lock) as f:
            pid = int(f.read(20).strip() or 0)
        if pid <= 0:
            return False
        os.kill(pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return False
    except (ValueError, OSError):
        return True  # unreadable, or another user's process: assume it is running
    return True


# --- saving ------------------------------------------------------------------------------------------

def _plain(value, name):
    """``value`` as what the loader accepts: plain Python types and tensors (numpy scalars, dataclasses converted)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v, name) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain(v, f"{name}.{k}") for k, v in value.items()}
    raise CheckpointError(f"cannot save {name!r} of type {type(value).__name__}; "
                          "use numbers, strings, lists, dicts or tensors")


def save_checkpoint(path, model, optimizer=None, epoch=None, **extra):
    """Save model (and optimizer) state_dicts to ``path`` atomically.

    The file is written next to its destination and renamed into place, so an
    interruption leaves either the old file or the new one, never half of one.
    A link is followed: its target is replaced. ``extra`` holds anything else
    worth keeping (e.g. history, arguments), as plain types.
    """
    state = {"format": FORMAT, "model": unwrap(model).state_dict(),
             "optimizer": optimizer.state_dict() if optimizer is not None else None,
             "epoch": _plain(epoch, "epoch"), "rng": torch.get_rng_state(), "extra": _plain(extra, "extra")}
    if state["epoch"] is not None and not _is_epoch(state["epoch"]):
        raise CheckpointError(f"epoch must be a whole number >= 0, not {epoch!r}")
    path = os.fspath(path)
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    except (OSError, ValueError):
        pass  # check_target says what is wrong with the path
    real = check_target(path)
    try:
        _write_atomically(state, real)
    except OSError as exc:
        raise CheckpointError(f"cannot write {path!r}: {exc.strerror or exc}; the previous file is unchanged") from None
    return path


def _write_atomically(state, real):
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(real), suffix=".pth", dir=os.path.dirname(real))
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes owner-only files; give the usual permissions
        os.replace(tmp, real)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


# --- reading -----------------------------------------------------------------------------------------

def read_checkpoint(path, device="cpu"):
    """Load a file's contents onto ``device`` safely, whatever kind of Tudui file it is.

    The classes the file names are listed before anything is unpickled: the layers
    of the course's Tudui and any ``<module>.Tudui`` (read as ours) pass; any other
    class is refused by name.
    """
    path, device = os.fspath(path), pick_device(device)
    if os.path.isdir(path):
        raise CheckpointError(f"{path!r} is a directory, not a checkpoint file")
    if not os.path.isfile(path):
        raise CheckpointError(f"{path!r}: no such checkpoint file")
    try:
        names = set(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception:  # not a zip archive as torch.save writes, truncated, damaged ...
        raise CheckpointError(f"{path!r}: not a readable PyTorch checkpoint (truncated or corrupt?)") from None
    tudui_names = {n for n in names if n.endswith(".Tudui")}
    foreign = sorted(names - tudui_names - COURSE_NAMES)
    if foreign:
        raise CheckpointError(f"{path!r}: refused to unpickle {_few(foreign)}, which is not part of a Tudui model; "
                              "only state_dict checkpoints and the course's whole-model files are loaded")
    allowed = COURSE_CLASSES + [(Tudui, name) for name in tudui_names]
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:
        first = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        raise CheckpointError(f"{path!r}: cannot load onto {device}: {first}" if "CUDA" in first or "device" in first
                              else f"{path!r}: not a readable PyTorch checkpoint (truncated or corrupt?)") from None


# --- checking what a file holds ---------------------------------------------------------------------

def _is_epoch(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 10**6


def _is_weight(value) -> bool:
    return (type(value) in (torch.Tensor, nn.Parameter) and value.layout == torch.strided
            and value.is_floating_point())


def _course_state_dict(module, path):
    """The state_dict of an unpickled course model, read from its attributes without calling any of its methods."""
    def children(obj, kind):
        if type(obj) is not kind or not isinstance(vars(obj).get("_modules"), dict):
            raise CheckpointError(f"{path!r}: the pickled model is not built like the course's Tudui")
        return vars(obj)["_modules"]

    state = {}
    for i, layer in children(children(module, Tudui).get("model"), nn.Sequential).items():
        if type(layer) not in COURSE_CLASSES or not isinstance(vars(layer).get("_parameters"), dict):
            raise CheckpointError(f"{path!r}: layer {str(i)[:20]} of the pickled model is not a course layer")
        state.update({f"model.{i}.{k}": v for k, v in vars(layer)["_parameters"].items()})
    return state


def _parts(obj, path):
    """(model state_dict, format name, the rest of our format) from what a file holds."""
    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        if not isinstance(obj.get("model"), dict):
            raise CheckpointError(f"{path!r}: a Tudui checkpoint without model weights (no 'model' entry)")
        return obj["model"], FORMAT, obj
    if isinstance(obj, nn.Module):
        return _course_state_dict(obj, path), "course whole-model file", {}
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return obj, "state_dict", {}
    raise CheckpointError(f"{path!r}: holds a {type(obj).__name__}, not a Tudui checkpoint or state_dict")


def _checked_weights(state_dict, model, path) -> dict:
    expected = model.state_dict()
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    if missing or unexpected:
        raise CheckpointError(f"{path!r}: parameters do not match the model (missing {len(missing)}: "
                              f"{_few(missing) or 'none'}; unexpected {len(unexpected)}: {_few(unexpected) or 'none'})")
    for k, v in expected.items():
        if not _is_weight(state_dict[k]):
            raise CheckpointError(f"{path!r}: parameter {k} is not a dense floating-point tensor")
        if state_dict[k].shape != v.shape:
            raise CheckpointError(f"{path!r}: parameter {k} has shape {tuple(state_dict[k].shape)} "
                                  f"in the file but {tuple(v.shape)} in the model")
    return {k: state_dict[k] for k in expected}


def _check_optimizer(saved, optimizer, path):
    """The saved optimizer state must be this optimizer's kind, with the same groups and per-parameter shapes."""
    bad = CheckpointError(f"{path!r}: its optimizer state does not fit {type(optimizer).__name__} over this model")
    if not isinstance(saved, dict) or not isinstance(saved.get("param_groups"), list) \
            or not isinstance(saved.get("state"), dict):
        raise bad
    ours = optimizer.state_dict()["param_groups"]
    groups = saved["param_groups"]
    if len(groups) != len(ours) or any(not isinstance(g, dict) or g.keys() != o.keys() or g["params"] != o["params"]
                                       for g, o in zip(groups, ours)):
        raise bad
    if any(not isinstance(g["lr"], float) or not math.isfinite(g["lr"]) or g["lr"] <= 0 for g in groups):
        raise bad
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for i, entry in saved["state"].items():
        if not (isinstance(i, int) and 0 <= i < len(params) and isinstance(entry, dict)):
            raise bad
        for value in entry.values():
            if not (value is None or isinstance(value, numbers.Number) or _is_weight(value)
                    and value.shape in (params[i].shape, torch.Size([]))):
                raise bad


def _check_rng(rng, path):
    try:
        if type(rng) is not torch.Tensor or rng.dtype != torch.uint8:
            raise TypeError
        torch.Generator().set_state(rng.cpu())  # a scratch generator: checks the state, changes nothing
    except (TypeError, RuntimeError):
        raise CheckpointError(f"{path!r}: its saved random state is not a CPU generator state") from None


def load_checkpoint(path, model, optimizer=None, device="cpu", restore_rng=False):
    """Load ``path`` into ``model`` on ``device`` (and ``optimizer``, if given).

    Works for our checkpoints, plain state_dicts and the course's whole-model
    files, whatever device they were saved on. The model is moved to
    ``device``; optimizer state follows the model's parameters there.
    ``restore_rng`` restores the CPU random state saved with the checkpoint,
    so a resumed run shuffles exactly as an uninterrupted one would.
    Returns a dict with ``epoch``, ``extra`` and ``format``.
    Everything is checked before anything is applied.
    """
    device = pick_device(device)
    weights, kind, ours = _parts(read_checkpoint(path, device), path)
    target = unwrap(model)
    weights = _checked_weights(weights, target, path)
    epoch, extra, rng = ours.get("epoch"), ours.get("extra", {}), ours.get("rng")
    if epoch is not None and not _is_epoch(epoch):
        raise CheckpointError(f"{path!r}: its epoch {str(epoch)[:20]!r} is not a whole number of epochs")
    if not isinstance(extra, dict):
        raise CheckpointError(f"{path!r}: its 'extra' entry is a {type(extra).__name__}, not a dict")
    if optimizer is not None:
        if not ours.get("optimizer"):
            raise CheckpointError(f"{path!r}: has no optimizer state to resume from")
        _check_optimizer(ours["optimizer"], optimizer, path)
    if restore_rng and rng is not None:
        _check_rng(rng, path)
    _apply(target, weights, optimizer, ours.get("optimizer"), rng if restore_rng else None, device, path)
    return {"epoch": epoch, "extra": extra, "format": kind}


def _apply(target, weights, optimizer, optimizer_state, rng, device, path):
    try:
        target.load_state_dict(weights)
        target.to(device)
        if optimizer is not None:
            optimizer.load_state_dict(optimizer_state)  # casts state to each parameter's device
        if rng is not None:
            torch.set_rng_state(rng.cpu())
    except (RuntimeError, ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path!r}: cannot apply it: {(str(exc).splitlines() or [''])[0][:160]}") from None


def load_model(path, device="cpu") -> Tudui:
    """A fresh Tudui with the weights from ``path``, on ``device``, in eval mode."""
    model = Tudui()
    load_checkpoint(path, model, device=device)
    return model.eval()
