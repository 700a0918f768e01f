"""The lessons' code, collected: train the course's Tudui network on the CPU, a GPU or anything else.
Each name below is written out in a lesson first. Modules load on first use: ``import tudui`` is quick and loads nothing
of the tool (``tudui.cli``, which only ``python -m tudui`` imports)."""
from importlib import import_module

__version__ = "0.1.0"

_NAMES = {
    "cli.pretend_gpu": "pretend_gpu",  # the tool's: loaded only when called
    "cli.rehearse": "rehearse",
    "checkpoint": "CheckpointError load_checkpoint load_model read_checkpoint save_checkpoint",
    "data": "CLASSES DataError ResidentLoader cifar10 describe_data host is_synthetic loaders quick_mode "
            "resident_loaders",
    "device": "DeviceError best_accelerator describe_devices pick_device synchronize",
    "distributed": "LaunchError",
    "exercise": "exercises",  # the lessons' checked exercises: loaded only when called
    "loops": "History evaluate fit train_one_epoch",
    "model": "Tudui count_parameters",
    "plots": "plot_bars plot_history show_predictions",
    "recorded": "show_recorded",
    "synthetic": "SyntheticCIFAR10",
    "text": "language say set_language",
    "timing": "Stopwatch interleaved measure speed_ratio",
}
_HOME = {name: module for module, names in _NAMES.items() for name in names.split()}
__all__ = sorted(_HOME)


def __getattr__(name):
    """``tudui.fit`` and friends, and the modules themselves (``tudui.data``), imported when first used."""
    if name in _NAMES:
        return import_module(f".{name}", __name__)
    if name not in _HOME:
        raise AttributeError(f"module 'tudui' has no attribute {name!r}")
    value = getattr(import_module(f".{_HOME[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__) | set(_NAMES))
