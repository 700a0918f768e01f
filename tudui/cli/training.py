"""``python -m tudui train``: the lessons' training, with the checks a tool owes its user: a writable checkpoint path,
continued or overwritten only on request, one lock per checkpoint, and a resume only from the same settings and an
optimizer state that is what this run builds."""
import contextlib
import errno
import gc
import math
import os
import pathlib
import stat

import torch
from filelock import FileLock, Timeout

from .. import checkpoint, data, distributed, loops
from ..checkpoint import CheckpointError, tensor_oddity
from ..model import Tudui
from ..text import say
from .console import UsageError, quiet, raise_if_interrupted

RESUMED_SETTINGS = ("lr", "batch_size", "data", "limit", "seed", "loader")  # as the run that wrote the checkpoint
PLAIN = (bool, int, float, str, type(None))


def check_target(path) -> str:
    """The real file a checkpoint for ``path`` goes to (links resolved), or a CheckpointError saying why not.
    The path is taken as the system resolves it: ``ck.pth/.``, ``nosuch/../ck.pth`` and ``x.png/../ck.pth`` name
    no file on Linux and macOS (on Windows the second is ck.pth, and then it is ck.pth, --force and all)."""
    if not path.strip() or path.endswith(("/", os.sep)):
        raise CheckpointError(say("train.no_file_name", path=path))
    size = len(os.fsencode(os.path.basename(path)))
    if size > 255:  # the most that common file systems allow: refused now, not at the first save
        raise CheckpointError(say("train.name_too_long", size=size))
    try:
        real, folder = os.path.realpath(path), os.path.dirname(path) or "."
        if any(os.path.exists(p) and not os.path.isfile(p) for p in (path, real)):  # /dev/stdout: a pipe
            raise CheckpointError(say("checkpoint.folder" if os.path.isdir(real) else "checkpoint.not_regular",
                                      path=path))
        if os.path.basename(path) in (".", ".."):
            raise CheckpointError(say("train.no_file_name", path=path))
        _check_folder(folder)
        if not os.access(os.path.dirname(real), os.W_OK | os.X_OK):
            raise CheckpointError(say("train.folder_read_only", folder=os.path.dirname(real)))
    except (ValueError, OSError) as exc:  # a NUL byte, an unreadable folder ...
        raise CheckpointError(say("train.path_unusable", path=path[:80], reason=exc)) from None
    return real


def _check_folder(folder):
    """``folder`` is a folder as the system resolves it (``nosuch/..`` and ``x.png/..`` are not)."""
    try:
        if stat.S_ISDIR(os.stat(folder).st_mode):
            return
        key = "train.folder_is_file"
    except OSError as exc:
        key = "train.folder_through_file" if exc.errno == errno.ENOTDIR else "train.folder_missing"
    raise CheckpointError(say(key, folder=folder))


@contextlib.contextmanager
def exclusive(path):
    """Hold ``<checkpoint>.lock`` while training writes ``path``; clean up temp files of killed saves.
    The lock is the system's (``filelock``): it ends with the process that holds it, however it ends."""
    real = check_target(path)
    name = os.path.basename(real) + ".lock"
    if len(os.fsencode(name)) > 255:  # the longest file name most file systems allow, in bytes
        name = checkpoint.temp_prefix(real) + "lock"
    # a soft lock would outlive a killed run
    lock = FileLock(os.path.join(os.path.dirname(real), name), timeout=0, fallback_to_soft=False)
    try:
        lock.acquire()
    except Timeout:
        raise CheckpointError(say("train.locked", path=path, lock=lock.lock_file)) from None
    except OSError as exc:
        raise CheckpointError(say("train.lock_failed", reason=exc.strerror or exc, lock=lock.lock_file[:100])) from None
    try:
        for orphan in pathlib.Path(real).parent.glob(checkpoint.temp_prefix(real) + "*.tmp"):
            with contextlib.suppress(OSError):
                orphan.unlink()
        yield real
    finally:
        lock.release()  # the empty lock file stays: deleting it would let two trainings lock two files


def check_checkpoint_path(args):
    """Before any training: the checkpoint can be written, and is resumed or overwritten only on request."""
    exists = os.path.isfile(check_target(args.checkpoint))  # the file the save would replace
    if args.resume and not exists:
        if os.path.lexists(args.checkpoint):  # a link loop, a pipe ...
            checkpoint.regular_file(args.checkpoint, "checkpoint")
        raise UsageError(say("train.nothing_to_resume", path=args.checkpoint))
    if exists and not args.resume and not args.force:
        raise UsageError(say("train.exists", path=args.checkpoint))


def _check_resumable(path, optimizer):
    """The parts of our format a resume uses: a whole epoch, plain extras, a CPU generator state."""
    with quiet():
        _, kind, ours = checkpoint.read_weights(path)
    if kind != checkpoint.FORMAT:
        raise UsageError(say("train.no_optimizer_state", path=path,
                             kind=say("train.kind.course" if kind.startswith("course") else "train.kind.state_dict")))
    epoch, rng = ours.get("epoch"), ours.get("rng")
    if type(epoch) is not int or not 0 <= epoch <= 10**6:
        raise CheckpointError(say("train.bad_epoch", path=path, epoch=str(epoch)[:20]))
    if not isinstance(ours.get("extra"), dict):
        raise CheckpointError(say("train.bad_extra", path=path))
    check_optimizer(ours.get("optimizer"), optimizer, path)
    try:
        if type(rng) is not torch.Tensor or rng.dtype != torch.uint8:
            raise TypeError
        torch.Generator().set_state(rng)  # a scratch generator: checks the state, changes nothing
    except (TypeError, RuntimeError):
        raise CheckpointError(say("train.bad_rng", path=path)) from None


def _resume(args, model, optimizer, dev, settings):
    """Load the checkpoint; refuse it if it was trained with other settings. Returns (its epoch, its settings)."""
    _check_resumable(args.checkpoint, optimizer)
    with quiet():
        info = checkpoint.load_checkpoint(args.checkpoint, model, optimizer, dev, restore_rng=True)
    recorded = info["extra"].get("args") if isinstance(info["extra"].get("args"), dict) else {}
    recorded = {**recorded, "lr": optimizer.param_groups[0]["lr"]}  # the lr the optimizer state really has
    changed = [say("train.setting", option="--" + k.replace("_", "-"), saved=_shown(recorded[k]), now=settings[k])
               for k in RESUMED_SETTINGS
               if k in recorded and not (type(recorded[k]) is type(settings[k]) and recorded[k] == settings[k])]
    if changed:
        raise UsageError(say("train.other_settings", path=args.checkpoint,
                             changed=say("train.list_join").join(changed)))
    return info["epoch"], recorded


def _shown(value) -> str:
    return str(value)[:40] if type(value) in PLAIN else say("train.shown_object", kind=type(value).__name__)


def workers_note(recorded, workers):
    """A line when DataLoader workers were on when the checkpoint was written and are off now, or the
    reverse: batches are the same, but the weights then differ slightly from an uninterrupted run."""
    before = recorded.get("workers")
    if type(before) is int and (before > 0) != (workers > 0):
        return say("train.workers_note", before=before, workers=workers)


def _announce(ctx, args, train_set, start, note):
    procs = say("train.processes", count=ctx.world_size, backend=ctx.backend) if ctx.distributed else ""
    print(say("train.announce", device=ctx.device, procs=procs, data=data.describe_data(train_set), loader=args.loader))
    if note:
        print(note)
    if start:
        print(say("train.resuming", epoch=start, path=args.checkpoint))
    if start >= args.epochs:
        print(say("train.nothing_to_do", epoch=start))


def _run_training(args, ctx):
    torch.manual_seed(args.seed)
    with distributed.main_first(ctx):  # under torchrun, only rank 0 downloads CIFAR-10
        train_set = data.cifar10(True, args.root, args.data, args.limit, seed=args.seed)
        test_set = data.cifar10(False, args.root, args.data, args.limit and max(args.limit // 5, 1), seed=args.seed)
    model = Tudui().to(ctx.device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    settings = {**vars(args), "data": "synthetic" if data.is_synthetic(train_set) else "cifar10"}
    start, recorded = _resume(args, model, optimizer, ctx.device, settings) if args.resume else (0, {})
    if ctx.distributed:
        model = torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None)
    make = data.resident_loaders if args.loader == "resident" else data.loaders
    train_loader, test_loader = make(train_set, test_set, args.batch_size, ctx.device,
                                     distributed=ctx.distributed, seed=args.seed)
    settings["workers"] = getattr(train_loader, "num_workers", 0)  # resident loaders have none
    if ctx.is_main:
        _announce(ctx, args, train_set, start, workers_note(recorded, settings["workers"]))
    lines = []  # the epoch's line is printed once the epoch is saved

    def save(epoch, history):
        if ctx.is_main:  # one writer
            checkpoint.save_checkpoint(args.checkpoint, model, optimizer, epoch, args=settings)
            for line in lines:
                print(line)
        lines.clear()
        raise_if_interrupted()  # a Ctrl-C that something swallowed during the epoch stops the run here

    loops.fit(model, train_loader, test_loader, torch.nn.CrossEntropyLoss(), optimizer, ctx.device, args.epochs,
              start_epoch=start, on_epoch_end=save, progress=ctx.is_main and not args.no_progress, log=lines.append)
    if ctx.is_main and start < args.epochs:
        print(say("train.saved", path=args.checkpoint))


def train(args):
    check_checkpoint_path(args)
    with quiet():  # c10d's retries print pages of C++ stack traces; our line says what it waits for
        ctx = distributed.setup(args.device)
    try:
        with exclusive(args.checkpoint) if ctx.is_main else contextlib.nullcontext():
            _run_training(args, ctx)
    finally:
        gc.collect()  # the DDP model (and the save closure holding it) must go before its process group
        distributed.teardown()


def check_optimizer(saved, optimizer, path):
    """Before a resume, what torch's Optimizer.load_state_dict does not check: the groups are exactly those this run builds
    (the learning rate aside: it is compared with the run's settings), state tensors fit their parameters."""
    bad = CheckpointError(say("checks.optimizer", path=path, optimizer=type(optimizer).__name__))
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
            if type(name) is not str or not (value is None or not tensor_oddity(value, (params[i].dtype,))
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
