"""Checkpoints that move between devices safely (notebook 04): written atomically (an interruption leaves the old
file or the new one), loaded with ``weights_only=True`` and ``map_location`` (a GPU's file loads on a CPU, and no file
runs code). One boundary for every reader, the notebooks' and the tool's: the file screened first (tudui/screening:
torch's zip format, no more memory than a Tudui checkpoint needs, its pickle read, never run), the course's classes only."""
import copy
import dataclasses
import hashlib
import os
import tempfile

import numpy as np
import torch
from torch import nn

from .device import pick_device
from .distributed import unwrap
from .model import Tudui
from .screening import CheckpointError, check_archive, regular_file, tensor_oddity  # noqa: F401 (the tool's too)
from .text import checked, one_line, say

FORMAT = "tudui-checkpoint"
# What a pickled course model may contain, and nothing else.
COURSE_CLASSES = [nn.Sequential, nn.Conv2d, nn.MaxPool2d, nn.Flatten, nn.Linear]
COURSE_NAMES = {f"{c.__module__}.{c.__name__}" for c in COURSE_CLASSES}
WEIGHT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)  # load_state_dict casts them


def _plain(value, name):
    """``value`` as what the loader accepts: plain Python types and tensors (numpy scalars, dataclasses converted)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    value = value.item() if isinstance(value, np.generic) else value
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v, name) for v in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _plain(v, f"{name}.{k}") for k, v in value.items()}
    raise CheckpointError(say("checkpoint.cannot_save_type", name=name, kind=type(value).__name__))


def temp_prefix(path) -> str:
    """How the temp files of saves to ``path`` begin: the same short name whatever the file's name."""
    name = os.path.basename(os.path.realpath(path))
    return f".tudui-save-{hashlib.sha256(os.fsencode(name)).hexdigest()[:12]}-"


def save_checkpoint(path, model, optimizer=None, epoch=None, **extra):
    """Save model (and optimizer) state_dicts to ``path`` atomically (a link's target is replaced); returns ``path``.
    ``extra``: anything else worth keeping (history, arguments), as plain types."""
    epoch = _plain(epoch, "epoch")
    if epoch is not None and (isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0):
        raise CheckpointError(say("checkpoint.bad_epoch", epoch=epoch))
    state = {"format": FORMAT, "model": unwrap(model).state_dict(),
             "optimizer": optimizer.state_dict() if optimizer is not None else None,
             "epoch": epoch, "rng": torch.get_rng_state(), "extra": _plain(extra, "extra")}
    _write_atomically(state, os.fspath(path))
    return os.fspath(path)


def _write_atomically(state, path):
    """torch.save to a temp file beside the real target of ``path``, then renamed over that target."""
    real = os.path.realpath(path)
    if os.path.exists(real) and not os.path.isfile(real):  # a folder, /dev/null ...: never replaced
        raise CheckpointError(say("checkpoint.folder" if os.path.isdir(real) else "checkpoint.not_regular", path=path))
    try:
        os.makedirs(os.path.dirname(real), exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(real), suffix=".tmp", dir=os.path.dirname(real))
    except (OSError, ValueError) as exc:
        raise CheckpointError(say("checkpoint.cannot_write", path=path,
                                  reason=getattr(exc, "strerror", None) or exc)) from None
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())  # on disk before the rename, so a power cut cannot leave an empty file
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes owner-only files; give the usual permissions
        os.replace(tmp, real)
    except (OSError, RuntimeError) as exc:  # a full disk: torch.save raises RuntimeError ("unexpected pos")
        raise CheckpointError(say("checkpoint.write_failed", path=path,
                                  reason=getattr(exc, "strerror", None) or one_line(exc))) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_checkpoint(path, device="cpu"):
    """A file's contents on ``device``, after :func:`check_archive`. The classes it names are listed before anything
    is unpickled: only the layers of the course's Tudui and any ``<module>.Tudui`` (read as ours) pass."""
    path, device = os.fspath(checked((str, bytes, os.PathLike), path=path)), pick_device(device)
    check_archive(path)
    try:
        names = set(torch.serialization.get_unsafe_globals_in_checkpoint(path))
    except Exception as exc:  # not a zip archive as torch.save writes, truncated, unreadable ...
        raise CheckpointError(say("checkpoint.unreadable", path=path, reason=one_line(exc, 80))) from None
    tudui_names = {n for n in names if n.endswith(".Tudui")}
    foreign = sorted(names - tudui_names - COURSE_NAMES)
    if foreign:
        more = say("checkpoint.and_more", count=len(foreign) - 3) if len(foreign) > 3 else ""
        raise CheckpointError(say("checkpoint.foreign_class", path=path,
                                  names=", ".join(n[:80] for n in foreign[:3]) + more))
    try:
        with torch.serialization.safe_globals(COURSE_CLASSES + [(Tudui, name) for name in tudui_names]):
            return torch.load(path, map_location=device, weights_only=True)
    except Exception as exc:
        raise CheckpointError(say("checkpoint.cannot_load", path=path, device=device, reason=one_line(exc))) from None


def read_weights(path, model=None):
    """(state_dict, format name, the rest of our format) of ``path`` on the CPU, each weight a plain finite tensor:
    an integer entry of ``model`` (default: a Tudui) of its dtype, the rest floating point (float8 is not cast)."""
    weights, kind, ours = parts(read_checkpoint(path), path)
    expected = unwrap(model if model is not None else Tudui()).state_dict()
    for key, value in weights.items():
        want = expected.get(key)
        dtypes = (want.dtype,) if want is not None and not want.is_floating_point() else WEIGHT_DTYPES
        oddity = tensor_oddity(value, dtypes) if type(key) is str else "?"
        if oddity:
            raise CheckpointError(say("checks.not_plain", path=path, oddity=oddity,
                                      entry=str(key)[:40] if type(key) is str else "?"))
        if not bool(torch.isfinite(value).all()):
            raise CheckpointError(say("checks.not_finite", path=path, entry=key[:60]))
    return weights, kind, ours


def parts(obj, path):
    """(model state_dict, format name, the rest of our format) from what a file holds; a course model's weights are
    read from its attributes, none of its methods called."""
    def children(obj, kind):
        if type(obj) is not kind or not isinstance(vars(obj).get("_modules"), dict):
            raise CheckpointError(say("checkpoint.not_course_model", path=path))
        return vars(obj)["_modules"]

    if isinstance(obj, dict) and obj.get("format") == FORMAT:
        if not isinstance(obj.get("model"), dict):
            raise CheckpointError(say("checkpoint.no_model", path=path))
        return obj["model"], FORMAT, obj
    if isinstance(obj, dict) and obj and all(type(v) in (torch.Tensor, nn.Parameter) for v in obj.values()):
        return obj, "state_dict", {}
    if not isinstance(obj, nn.Module):
        raise CheckpointError(say("checkpoint.foreign_object", path=path, kind=type(obj).__name__))
    state = {}
    for i, layer in children(children(obj, Tudui).get("model"), nn.Sequential).items():
        if type(layer) not in COURSE_CLASSES or not isinstance(vars(layer).get("_parameters"), dict):
            raise CheckpointError(say("checkpoint.not_course_layer", path=path, layer=str(i)[:20]))
        state.update({f"model.{i}.{k}": v for k, v in vars(layer)["_parameters"].items()})
    return state, "course whole-model file", {}


def load_checkpoint(path, model, optimizer=None, device="cpu", restore_rng=False):
    """Load our checkpoint, a state_dict or a course whole-model file into ``model`` (and ``optimizer``), moved to
    ``device``; returns ``epoch``, ``extra``, ``format``. ``restore_rng``: the saved CPU random state (a resumed run
    shuffles as an uninterrupted one). Tried on copies first: a file that does not fit changes nothing."""
    device = pick_device(device)
    checked(nn.Module, model=model)
    checked(torch.optim.Optimizer, optimizer=optimizer) if optimizer is not None else None
    weights, kind, ours = read_weights(path, model)
    target = unwrap(model)
    if optimizer is not None and not ours.get("optimizer"):
        raise CheckpointError(say("checkpoint.no_optimizer", path=os.fspath(path)))
    try:
        copy.deepcopy(target).load_state_dict(weights)  # strict: missing, unexpected, mis-shaped entries
        if optimizer is not None:
            copy.deepcopy(optimizer).load_state_dict(ours["optimizer"])
        target.load_state_dict(weights)
        target.to(device)
        if optimizer is not None:
            optimizer.load_state_dict(ours["optimizer"])  # casts state to each parameter's device
        if restore_rng and ours.get("rng") is not None:
            torch.set_rng_state(ours["rng"].cpu())
    except (RuntimeError, ValueError, KeyError, TypeError, AttributeError) as exc:
        reason = " ".join(str(exc).split()).replace(f"Error(s) in loading state_dict for {type(target).__name__}: ", "")
        wrapped = [p for p in ("module.", "_orig_mod.") if all(str(k).startswith(p) for k in weights)]
        hint = say("checkpoint.wrapped_hint", prefix=wrapped[0]) if wrapped else ""
        raise CheckpointError(say("checkpoint.misfit", path=os.fspath(path), model=type(target).__name__, hint=hint,
                                  reason=one_line(reason, 200))) from None
    return {"epoch": ours.get("epoch"), "extra": ours.get("extra", {}), "format": kind}


def load_model(path, device="cpu") -> Tudui:
    """A fresh Tudui with the weights from ``path``, on ``device``, in eval mode."""
    model = Tudui()
    load_checkpoint(path, model, device=device)
    return model.eval()
