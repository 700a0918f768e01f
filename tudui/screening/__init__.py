"""Files from elsewhere, screened before torch or PIL reads them: a regular file (not a pipe, a device or a link
loop); a checkpoint in torch's zip format, asking no more memory than a Tudui checkpoint needs, its pickle read
(never run) first; tensors that are plain values in memory."""
import os
import pickletools
import stat
import zipfile
import zlib

import torch

from ..model import Tudui
from ..text import one_line, say

MAX_PICKLE_BYTES = 1 << 20   # our pickles are a few KB; the course's whole-model files too
MAX_CALL_INT = 1 << 20       # no size in a Tudui file's calls is larger (its largest tensor has 65,536 values)
LEGACY_MAGIC = b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19"  # how torch.save's pre-1.6 format begins
_MARK = object()


class CheckpointError(RuntimeError):
    """A checkpoint is missing, unreadable, unsafe or does not fit the model."""


def regular_file(path, what, error=CheckpointError):
    """``path`` (a "checkpoint" or an "image": ``what``) is a regular file, not a pipe, a device or a link loop."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError) as exc:
        raise error(say(f"checks.{what}.cannot_open", path=path,
                        reason=getattr(exc, "strerror", None) or exc)) from None
    if not stat.S_ISREG(mode):
        raise error(say(f"checks.{what}.{'folder' if stat.S_ISDIR(mode) else 'special'}", path=path))


def _budget():
    """Bytes one storage, and all of them, may declare: Tudui's tensors at 8 bytes a value, weights and optimizer."""
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
                raise CheckpointError(say("checks.torchscript", path=path))
            if len(pickles) != 1:  # an empty zip archive, or another program's
                raise CheckpointError(say("checks.no_pickle", path=path, count=len(pickles)))
            storages = [m.file_size for m in members if "/data/" in m.filename]
            if pickles[0].file_size > MAX_PICKLE_BYTES or max(storages, default=0) > one or sum(storages) > total:
                raise CheckpointError(say("checks.too_big", path=path, total=total,
                                          size=sum(m.file_size for m in members)))
            pickled = archive.read(pickles[0])
        if pickled[:1] == b"\x80" and pickled[1:2] > b"\x03":  # torch's safe loader reads protocols 2 and 3
            raise CheckpointError(say("checks.protocol", path=path, protocol=pickled[1]))
        _check_calls(path, pickled)
    except CheckpointError:
        raise
    except zipfile.BadZipFile:
        raise CheckpointError(say("checks.legacy" if head == LEGACY_MAGIC else "checks.not_zip", path=path)) from None
    except OSError as exc:
        raise CheckpointError(say("checks.cannot_read", path=path, reason=exc.strerror or exc)) from None
    except (RuntimeError, NotImplementedError, ValueError, EOFError, zlib.error) as exc:  # encrypted, damaged ...
        raise CheckpointError(say("checks.damaged", path=path, kind=type(exc).__name__, reason=one_line(exc))) from None


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
                raise CheckpointError(say("checks.call", path=path, callee=str(popped[0])[:60],
                                          args=str(popped[1])[:60]))
            stack.extend(_pushed(op, arg, popped, memo))
    except (ValueError, IndexError):  # not a valid pickle: the loader says so
        return


def _pop(stack, before):
    items = []
    for kind in reversed(before):
        if kind is pickletools.stackslice:  # back to the last mark, in one slice: a million items stay quick
            at = len(stack)
            while at and stack[at - 1] is not _MARK:
                at -= 1
            items.insert(0, tuple(stack[at:]))
            del stack[at:]
        elif stack:
            items.insert(0, stack.pop())
    return items


def _pushed(op, arg, popped, memo):
    if op.name in ("GLOBAL", "INST", "STACK_GLOBAL"):  # the callee's dotted name
        return [arg.replace(" ", ".") if arg else ".".join(map(str, popped))]
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


def tensor_oddity(value, dtypes=None):
    """What keeps ``value`` from being a plain tensor of values in memory (a meta tensor, a view of 2**40
    values, a float8 weight), or None. Checked before anything reads the values."""
    if type(value) not in (torch.Tensor, torch.nn.Parameter) or vars(value):
        return type(value).__name__
    for name, fine in (("layout", lambda: value.layout == torch.strided), ("device", lambda: value.is_cpu),
                       ("shape", lambda: value.numel() <= MAX_CALL_INT),
                       ("dtype", lambda: dtypes is None or value.dtype in dtypes)):
        if not fine():
            return f"{name} {str(getattr(value, name))[:60]}"
