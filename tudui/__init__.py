"""Shared code for the lessons: train the course's Tudui network on CPU, GPU or anything else."""
import sys

try:
    from .checkpoint import CheckpointError, load_checkpoint, load_model, read_checkpoint, save_checkpoint
    from .data import CLASSES, DataError, SyntheticCIFAR10, cifar10, describe_data, is_synthetic, loaders
    from .device import DeviceError, best_accelerator, describe_devices, pick_device, synchronize
    from .distributed import LaunchError
    from .loops import History, evaluate, fit, train_one_epoch
    from .model import Tudui, count_parameters
    from .plots import plot_bars, plot_history, show_predictions
    from .recorded import show_recorded
    from .resident import ResidentLoader, resident_loaders
    from .settings import host, quick_mode
    from .timing import Stopwatch, measure
except KeyboardInterrupt:  # Ctrl-C while torch loads: `python -m tudui` promises one line
    if sys.argv[:1] != ["-m"]:  # imported by a program or a notebook: its own Ctrl-C
        raise
    print("tudui: interrupted", file=sys.stderr)
    raise SystemExit(130)

__version__ = "0.1.0"
