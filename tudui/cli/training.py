"""``python -m tudui train``: the lessons' training, with the checks a tool owes its user: a writable
checkpoint path, continued or overwritten only on request, one lock per checkpoint, and a resume only
from the same settings and an optimizer state that is what this run builds.
"""
import contextlib
import gc
import os
import pathlib

import torch
from filelock import FileLock, Timeout

from .. import checkpoint, data, distributed, loops, resident
from ..checkpoint import CheckpointError
from ..model import Tudui
from . import checks
from .console import quiet, raise_if_interrupted

# Settings a resumed run must share with the run that wrote the checkpoint.
RESUMED_SETTINGS = ("lr", "batch_size", "data", "limit", "seed", "loader")


class UsageError(Exception):
    """Bad input from the user: reported in one line, exit code 2."""


def check_target(path) -> str:
    """The real file a checkpoint for ``path`` goes to (links resolved), or a CheckpointError saying why not."""
    if not path.strip() or path.endswith(("/", os.sep)):
        raise CheckpointError(f"checkpoint path {path!r} names no file; give a file name such as tudui.pth")
    size = len(os.fsencode(os.path.basename(path)))
    if size > 255:  # the most that common file systems allow: refused now, not at the first save
        raise CheckpointError(f"checkpoint file name is too long ({size} bytes, at most 255); choose a shorter one")
    try:
        real = os.path.realpath(path)
        folder = os.path.dirname(real)
        if any(os.path.exists(p) and not os.path.isfile(p) for p in (path, real)):  # /dev/stdout: a pipe
            kind = "a folder" if os.path.isdir(real) else "not a regular file"
            raise CheckpointError(f"checkpoint path {path!r} is {kind}; give a file name such as tudui.pth")
        if not os.path.isdir(folder):
            what = "is a file, not a folder" if os.path.exists(folder) else "does not exist; create it first"
            raise CheckpointError(f"folder {folder!r} for the checkpoint {what}")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise CheckpointError(f"cannot write to folder {folder!r}; choose a --checkpoint in a writable folder")
    except (ValueError, OSError) as exc:  # a NUL byte, an unreadable folder ...
        raise CheckpointError(f"checkpoint path {path[:80]!r} is not usable: {exc}") from None
    return real


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
        raise CheckpointError(f"another training is writing {path!r} (it holds {lock.lock_file!r}); "
                              "wait for it to finish, or choose another --checkpoint") from None
    except OSError as exc:
        raise CheckpointError(f"cannot create the lock file beside the checkpoint ({exc.strerror or exc}): "
                              f"{lock.lock_file[:100]!r}; choose another --checkpoint") from None
    try:
        for orphan in pathlib.Path(real).parent.glob(checkpoint.temp_prefix(real) + "*.tmp"):
            with contextlib.suppress(OSError):
                orphan.unlink()
        yield real
    finally:
        lock.release()  # the empty lock file stays: deleting it would let two trainings lock two files


def check_checkpoint_path(args):
    """Before any training: the checkpoint can be written, and is resumed or overwritten only on request."""
    check_target(args.checkpoint)
    exists = os.path.isfile(args.checkpoint)
    if args.resume and not exists:
        if os.path.lexists(args.checkpoint):  # a link loop, a pipe ...
            checks.regular_file(args.checkpoint, "checkpoint")
        raise UsageError(f"--resume: no checkpoint at {args.checkpoint!r}; train without --resume first")
    if exists and not args.resume and not args.force:
        raise UsageError(f"{args.checkpoint!r} already exists; continue it with --resume, "
                         "overwrite it with --force, or choose another --checkpoint")


def _check_resumable(path, optimizer):
    """The parts of our format a resume uses: a whole epoch, plain extras, a CPU generator state."""
    kind, ours = checks.read_checked(path)
    if kind != checkpoint.FORMAT:
        raise UsageError(f"--resume: {path!r} is a {kind}, with no optimizer state; train without --resume")
    epoch, rng = ours.get("epoch"), ours.get("rng")
    if type(epoch) is not int or not 0 <= epoch <= 10**6:
        raise CheckpointError(f"{path!r}: its epoch {str(epoch)[:20]!r} is not a whole number of epochs")
    if not isinstance(ours.get("extra"), dict):
        raise CheckpointError(f"{path!r}: its 'extra' entry is not a dict")
    checks.check_optimizer(ours.get("optimizer"), optimizer, path)
    try:
        if type(rng) is not torch.Tensor or rng.dtype != torch.uint8:
            raise TypeError
        torch.Generator().set_state(rng)  # a scratch generator: checks the state, changes nothing
    except (TypeError, RuntimeError):
        raise CheckpointError(f"{path!r}: its saved random state is not a CPU generator state") from None


def _resume(args, model, optimizer, dev, settings):
    """Load the checkpoint; refuse it if it was trained with other settings. Returns (its epoch, its settings)."""
    _check_resumable(args.checkpoint, optimizer)
    with quiet():
        info = checkpoint.load_checkpoint(args.checkpoint, model, optimizer, dev, restore_rng=True)
    recorded = info["extra"].get("args") if isinstance(info["extra"].get("args"), dict) else {}
    recorded = {**recorded, "lr": optimizer.param_groups[0]["lr"]}  # the lr the optimizer state really has
    changed = [f"--{k.replace('_', '-')} {_shown(recorded[k])} (not {settings[k]})" for k in RESUMED_SETTINGS
               if k in recorded and not (type(recorded[k]) is type(settings[k]) and recorded[k] == settings[k])]
    if changed:
        raise UsageError(f"--resume: {args.checkpoint!r} was trained with {', '.join(changed)}; resume with the "
                         "same settings, or start a new run with --force")
    return info["epoch"], recorded


def _shown(value) -> str:
    return str(value)[:40] if type(value) in checks.PLAIN else f"<a {type(value).__name__}>"


def workers_note(recorded, workers):
    """A line when DataLoader workers were on when the checkpoint was written and are off now, or the
    reverse: batches are the same, but the weights then differ slightly from an uninterrupted run."""
    before = recorded.get("workers")
    if type(before) is int and (before > 0) != (workers > 0):
        return (f"note: the checkpoint was trained with {before} DataLoader workers, this run uses {workers}: the "
                "batches are the same but the results will differ slightly from an uninterrupted run")


def _announce(ctx, args, train_set, start, note):
    procs = f", {ctx.world_size} processes ({ctx.backend})" if ctx.distributed else ""
    print(f"device: {ctx.device}{procs}; data: {data.describe_data(train_set)}; loader: {args.loader}")
    if note:
        print(note)
    if start:
        print(f"resuming after epoch {start} from {args.checkpoint}")
    if start >= args.epochs:
        print(f"already trained for {start} epochs; nothing to do (raise --epochs)")


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
    make = resident.resident_loaders if args.loader == "resident" else data.loaders
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

    loops.fit(model, train_loader, test_loader, torch.nn.CrossEntropyLoss(), optimizer, ctx.device,
              args.epochs, start_epoch=start, on_epoch_end=save,
              progress=ctx.is_main and not args.no_progress, log=lines.append)
    if ctx.is_main and start < args.epochs:
        print(f"saved {args.checkpoint}")


def train(args):
    check_checkpoint_path(args)
    ctx = distributed.setup(args.device)
    try:
        with exclusive(args.checkpoint) if ctx.is_main else contextlib.nullcontext():
            _run_training(args, ctx)
    finally:
        gc.collect()  # the DDP model (and the save closure holding it) must go before its process group
        distributed.teardown()
