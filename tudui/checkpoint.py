"""Checkpoints that move between devices safely.

We save state_dicts, never pickled models, and write atomically. We load with
``weights_only=True`` and ``map_location``, so a file saved on a GPU loads on a
CPU-only machine, and a file cannot run code when it is opened. The course's
whole-model files (``torch.save(tudui, ...)``) are read with an allow-list of
exactly the classes Tudui is built from.
"""
from __future__ import annotations

import os
import pickle
import re
import tempfile

import torch
from torch import nn

from .distributed import unwrap
from .model import Tudui

FORMAT = "tudui-checkpoint"
# What a pickled course model may contain, and nothing else.
COURSE_CLASSES = [nn.Sequential, nn.Conv2d, nn.MaxPool2d, nn.Flatten, nn.Linear]
COURSE_NAMES = ("__main__.Tudui", "model.Tudui")


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable, unsafe or does not fit the model."""


def save_checkpoint(path, model, optimizer=None, epoch=None, **extra):
    """Save model (and optimizer) state_dicts to ``path`` atomically.

    The file is written next to its destination and renamed into place, so an
    interruption leaves either the old file or the new one, never half of one.
    ``extra`` holds anything else worth keeping (e.g. history, arguments).
    """
    state = {
        "format": FORMAT,
        "model": unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "epoch": epoch,
        "rng": torch.get_rng_state(),
        "extra": extra,
    }
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".pth", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes owner-only files; give the usual permissions
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _refused_global(exc: Exception) -> str | None:
    m = re.search(r"GLOBAL ([\w.]+)", str(exc))
    return m.group(1) if m else None


def read_checkpoint(path, device="cpu"):
    """Load a file's contents onto ``device`` safely, whatever kind of Tudui file it is."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise CheckpointError(f"{path}: no such checkpoint file")
    allowed = list(COURSE_CLASSES) + [(Tudui, name) for name in COURSE_NAMES]
    while True:
        try:
            with torch.serialization.safe_globals(allowed):
                return torch.load(path, map_location=device, weights_only=True)
        except pickle.UnpicklingError as exc:
            name = _refused_global(exc)
            if name and name.endswith(".Tudui") and (Tudui, name) not in allowed:
                allowed.append((Tudui, name))  # the course's class, saved from another module
                continue
            if name is None:  # no forbidden class named: the pickle itself is damaged (or not a pickle)
                raise CheckpointError(f"{path}: not a readable PyTorch checkpoint (truncated or corrupt?)") from None
            raise CheckpointError(
                f"{path}: refused to unpickle {name}, which is not part of a Tudui model; "
                "only state_dict checkpoints and the course's whole-model files are loaded") from None
        except Exception as exc:  # RuntimeError, EOFError, BadZipFile, OSError, and KeyError etc. from a damaged pickle
            first = str(exc).splitlines()[0].split(". ")[0] if str(exc) else type(exc).__name__
            if "CUDA" in first or "device" in first:
                raise CheckpointError(f"{path}: cannot load onto {device}: {first}") from None
            raise CheckpointError(f"{path}: not a readable PyTorch checkpoint (truncated or corrupt?): "
                                  f"{first}") from None


def _state_dict_of(obj, path):
    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        return obj["model"], obj
    if isinstance(obj, nn.Module):
        return obj.state_dict(), {"format": "course whole-model file"}
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        return obj, {"format": "state_dict"}
    raise CheckpointError(f"{path}: holds a {type(obj).__name__}, not a Tudui checkpoint or state_dict")


def _check_fits(state_dict, model, path):
    expected = model.state_dict()
    missing = [k for k in expected if k not in state_dict]
    unexpected = [k for k in state_dict if k not in expected]
    if missing or unexpected:
        raise CheckpointError(f"{path}: parameters do not match the model "
                              f"(missing: {', '.join(missing) or 'none'}; unexpected: {', '.join(unexpected) or 'none'})")
    for k, v in expected.items():
        if state_dict[k].shape != v.shape:
            raise CheckpointError(f"{path}: parameter {k} has shape {tuple(state_dict[k].shape)} "
                                  f"in the file but {tuple(v.shape)} in the model")


def load_checkpoint(path, model, optimizer=None, device="cpu", restore_rng=False):
    """Load ``path`` into ``model`` on ``device`` (and ``optimizer``, if given).

    Works for our checkpoints, plain state_dicts and the course's whole-model
    files, whatever device they were saved on. The model is moved to
    ``device``; optimizer state follows the model's parameters there.
    ``restore_rng`` restores the CPU random state saved with the checkpoint,
    so a resumed run shuffles exactly as an uninterrupted one would.
    Returns a dict with ``epoch``, ``extra`` and ``format``.
    """
    obj = read_checkpoint(path, device)
    state_dict, meta = _state_dict_of(obj, path)
    target = unwrap(model)
    _check_fits(state_dict, target, path)
    target.load_state_dict(state_dict)
    target.to(device)
    if optimizer is not None:
        if not meta.get("optimizer"):
            raise CheckpointError(f"{path}: has no optimizer state to resume from")
        optimizer.load_state_dict(meta["optimizer"])  # casts state to each parameter's device
    if restore_rng and meta.get("rng") is not None:
        torch.set_rng_state(meta["rng"].cpu())
    return {"epoch": meta.get("epoch"), "extra": meta.get("extra") or {}, "format": meta["format"]}


def load_model(path, device="cpu") -> Tudui:
    """A fresh Tudui with the weights from ``path``, on ``device``, in eval mode."""
    model = Tudui()
    load_checkpoint(path, model, device=device)
    return model.eval()
