"""torchvision's datasets in a rehearsal: one on disk is read as it is, never downloaded; one that is not is replaced
by a small synthetic one of its shape, in its form (PIL images through the script's transform), with a note."""
import inspect

import numpy as np
from PIL import Image
from torch.utils.data import Dataset

from ..synthetic import SyntheticCIFAR10  # before the stand-ins replace torchvision's CIFAR10, its base

# the datasets course and example scripts load: (channels, side, classes)
SHAPES = {"CIFAR10": (3, 32, 10), "CIFAR100": (3, 32, 100), "MNIST": (1, 28, 10), "FashionMNIST": (1, 28, 10),
          "KMNIST": (1, 28, 10), "QMNIST": (1, 28, 10), "EMNIST": (1, 28, 47), "SVHN": (3, 32, 10),
          "STL10": (3, 96, 10)}


class StandIn(Dataset):
    """``n`` random images of the shape of dataset ``name``, with its number of classes."""

    def __init__(self, name, n, transform=None, target_transform=None):
        channels, side, classes = SHAPES[name]
        rng = np.random.default_rng(0)
        self.data = rng.integers(0, 256, (n, side, side, channels), dtype=np.uint8).squeeze(-1 if channels == 1 else ())
        self.targets, self.classes = rng.integers(0, classes, n).tolist(), [str(c) for c in range(classes)]
        self.transform, self.target_transform = transform, target_transform

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, i):
        image, target = Image.fromarray(self.data[i]), self.targets[i]
        return (self.transform(image) if self.transform else image,
                self.target_transform(target) if self.target_transform else target)


def stand_in(name, real, batches, note):
    """What the script gets for torchvision.datasets.``name``: the dataset from disk, else a stand-in (CIFAR-10:
    the course's own, which a model can learn)."""
    signature = inspect.signature(real)

    def dataset(*args, **kwargs):
        given = signature.bind(*args, **kwargs).arguments
        given.update({"download": False} if "download" in signature.parameters else {})
        try:
            return real(**given)
        except (RuntimeError, OSError):  # torchvision's "Dataset not found", or a missing file
            where, transforms = str(given.get("root", "")), (given.get("transform"), given.get("target_transform"))
            if name == "CIFAR10":
                note("rehearse.note.synthetic", where=where)
                return SyntheticCIFAR10(given.get("train", True), *transforms, size=64 * (batches + 1))
            note("rehearse.note.stand_in", dataset=name, where=where)
            return StandIn(name, 256 * (batches + 1), *transforms)
    return dataset


def replace_datasets(batches, note):
    """Put a stand-in in place of each dataset of SHAPES this torchvision has; a root is seen from the working
    folder, the scratch copy of the script's."""
    import torchvision.datasets as module
    for name in SHAPES:
        if hasattr(module, name):
            setattr(module, name, stand_in(name, getattr(module, name), batches, note))
