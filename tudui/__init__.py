"""Shared code for the lessons: train the course's Tudui network on CPU, GPU or anything else."""
from .checkpoint import CheckpointError, load_checkpoint, load_model, read_checkpoint, save_checkpoint
from .data import (CLASSES, DataError, SyntheticCIFAR10, cifar10, describe_data, is_synthetic,
                   loaders)
from .device import DeviceError, best_accelerator, describe_devices, pick_device, synchronize
from .settings import in_colab, quick_mode
from .loops import History, evaluate, fit, train_one_epoch
from .model import Tudui, count_parameters
from .plots import plot_bars, plot_history, show_predictions
from .resident import ResidentLoader, resident_loaders
from .timing import Stopwatch, Timing, measure, train_step_speed

__version__ = "0.1.0"
