"""What the tool checks before the lessons' loader reads a file (a regular file in torch's zip format, asking
no more memory than a Tudui checkpoint needs; its pickle read, never run) and in what the loader returns (plain
finite tensors; optimizer groups exactly as this run builds them). Nothing from the file is called or compared
before its type is checked."""
import math
import os
import pickletools
import stat
import zipfile

import torch

from .. import checkpoint
from ..checkpoint import CheckpointError
from ..model import Tudui
from .console import quiet

MAX_PICKLE_BYTES = 1 << 20   # our pickles are a few KB; the course's whole-model files too
MAX_CALL_INT = 1 << 20       # no size in a Tudui file's calls is larger (its largest tensor has 65,536 values)
LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"  # how torch.save's pre-1.6 format begins
PLAIN = (bool, int, float, str, type(None))
_MARK = object()


def regular_file(path, what, error=CheckpointError):
    """``path`` names a regular file (a pipe, a device or a link loop would block or mislead the reader)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError) as exc:
        raise error(f"{path!r}: cannot open the {what}: {getattr(exc, 'strerror', None) or exc}") from None
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "not a regular file (a pipe or a device?)"
        raise error(f"{path!r} is {kind}, not {'an' if what[0] in 'aeiou' else 'a'} {what} file")


def _budget():
    """Bytes one storage, and all of them, may declare: the model's tensors at 8 bytes a value, twice over
    (weights and optimizer state), and the random state."""
    sizes = [t.numel() * 8 for t in Tudui().state_dict().values()]
    return max(sizes), 2 * sum(sizes) + (64 << 10)


def check_archive(path):
    """Refuse a file that is not torch's zip format (saying what it is) or that declares too much data."""
    regular_file(path, "checkpoint")
    one, total = _budget()
    try:
        with open(path, "rb") as f:
            head = f.read(len(LEGACY_MAGIC))
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            pickles = [m for m in members if m.filename.endswith("/data.pkl")]
            if any(m.filename.endswith("/constants.pkl") for m in members):
                raise CheckpointError(f"{path!r} is a TorchScript file (torch.jit.save); save "
                                      "model.state_dict() with torch.save instead")
            storages = [m.file_size for m in members if "/data/" in m.filename]
            if len(pickles) != 1 or pickles[0].file_size > MAX_PICKLE_BYTES or max(storages, default=0) > one \
                    or sum(storages) > total:
                raise CheckpointError(f"{path!r}: refused: it declares {sum(m.file_size for m in members):,} bytes "
                                      f"of data, more than a Tudui checkpoint holds ({total:,} at most)")
            pickled = archive.read(pickles[0])
        if pickled[:1] == b"\x80" and pickled[1:2] > b"\x03":  # torch's safe loader reads protocols 2 and 3
            raise CheckpointError(f"{path!r} was saved with pickle_protocol={pickled[1]}, which torch's safe loader "
                                  "cannot read; save it again with torch.save's default protocol")
        _check_calls(path, pickled)
    except zipfile.BadZipFile:
        if head == LEGACY_MAGIC:
            raise CheckpointError(f"{path!r} is in torch's old (before 1.6) format; load it with the torch that "
                                  "saved it and save it again with torch.save") from None
        raise CheckpointError(f"{path!r}: not a readable PyTorch checkpoint (not a zip archive as torch.save "
                              "writes: truncated, or another kind of file?)") from None
    except OSError as exc:
        raise CheckpointError(f"{path!r}: cannot read the checkpoint: {exc.strerror or exc}") from None


def _check_calls(path, data):
    """Read the pickle's opcodes (nothing runs): classes are built without arguments, and no call asks for
    a size beyond MAX_CALL_INT (``bytearray(2**31)``, ``nn.Linear(20000, 20000)`` are refused)."""
    stack, memo = [], {}
    try:
        for op, arg, _ in pickletools.genops(data):
            if op.name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
                memo[len(memo) if arg is None else arg] = stack[-1] if stack else None
                continue
            popped = _pop(stack, op.stack_before)
            if op.name in ("REDUCE", "NEWOBJ") and _too_big(*popped):
                raise CheckpointError(f"{path!r}: refused: it asks to build {str(popped[0])[:60]} with "
                                      f"arguments {str(popped[1])[:60]}, which no Tudui checkpoint does")
            stack.extend(_pushed(op, arg, popped, memo))
    except (ValueError, IndexError):  # not a valid pickle: the loader says so
        return


def _pop(stack, before):
    items = []
    for kind in reversed(before):
        if kind is pickletools.stackslice:
            sliced = []
            while stack and stack[-1] is not _MARK:
                sliced.insert(0, stack.pop())
            items.insert(0, tuple(sliced))
        elif stack:
            items.insert(0, stack.pop())
    return items


def _pushed(op, arg, popped, memo):
    if op.name in ("GLOBAL", "INST"):
        return [arg.replace(" ", ".")]
    if op.name == "STACK_GLOBAL":
        return [".".join(map(str, popped))]
    if op.name in ("GET", "BINGET", "LONG_BINGET"):
        return [memo.get(arg)]
    if op.name == "MARK":
        return [_MARK]
    if op.name in ("TUPLE", "EMPTY_TUPLE", "TUPLE1", "TUPLE2", "TUPLE3"):
        return [popped[-1] if op.name == "TUPLE" else tuple(popped)]
    if arg is not None and isinstance(arg, (int, str)) and op.stack_after:
        return [arg]
    return [None] * len(op.stack_after)


def _too_big(callee, args):
    ints = [a for a in args if type(a) is int] if type(args) is tuple else []
    is_class = isinstance(callee, str) and callee.rsplit(".", 1)[-1][:1].isupper()
    return any(abs(a) > MAX_CALL_INT for a in ints) or (is_class and args != ())


def _plain_tensor(value):
    return type(value) in (torch.Tensor, torch.nn.Parameter) and not vars(value) and value.layout == torch.strided


def read_checked(path):
    """(format, our entries) of the checkpoint at ``path`` after every check above; weights plain and finite."""
    check_archive(path)
    with quiet():
        weights, kind, ours = checkpoint.parts(checkpoint.read_checkpoint(path), path)
    for key, value in weights.items():
        if type(key) is not str or not _plain_tensor(value):
            raise CheckpointError(f"{path!r}: entry {str(key)[:40] if type(key) is str else '?'!r} is not a "
                                  "plain tensor of weights")
        if torch.is_floating_point(value) and not bool(torch.isfinite(value).all()):
            raise CheckpointError(f"{path!r}: {key[:60]} holds NaN or infinite values (did the training diverge?); "
                                  "use an earlier checkpoint")
    return kind, ours


def check_optimizer(saved, optimizer, path):
    """What torch's Optimizer.load_state_dict does not check: the groups are exactly those this run builds
    (the learning rate aside: it is compared with the run's settings), state tensors fit their parameters."""
    bad = CheckpointError(f"{path!r}: its optimizer state does not fit {type(optimizer).__name__} over this model")
    if type(saved) is not dict or type(saved.get("param_groups")) is not list or type(saved.get("state")) is not dict:
        raise bad
    ours = optimizer.state_dict()["param_groups"]
    if len(saved["param_groups"]) != len(ours) or not all(map(_same_group, saved["param_groups"], ours)):
        raise bad
    params = [p for group in optimizer.param_groups for p in group["params"]]
    for i, entry in saved["state"].items():
        if not (type(i) is int and 0 <= i < len(params) and type(entry) is dict):
            raise bad
        for name, value in entry.items():
            if type(name) is not str or not (value is None or _plain_tensor(value) and value.dtype == params[i].dtype
                                             and value.shape == params[i].shape and bool(torch.isfinite(value).all())):
                raise bad


def _same_group(saved, ours):
    if type(saved) is not dict or not all(type(k) is str for k in saved) or saved.keys() != ours.keys():
        return False
    lr = saved["lr"]
    return type(lr) is float and math.isfinite(lr) and lr > 0 and all(
        _same_value(saved[k], ours[k]) for k in ours if k != "lr")


def _same_value(value, ours):
    if type(value) is list and type(ours) is list:  # the parameters' indices
        return len(value) == len(ours) and all(type(v) is int and v == o for v, o in zip(value, ours))
    return type(value) is type(ours) and type(value) in PLAIN and value == ours
