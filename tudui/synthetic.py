"""A synthetic stand-in for CIFAR-10: the lessons and tests run anywhere, offline, in seconds."""
import numpy as np
from torchvision.datasets import CIFAR10, VisionDataset

from .text import say

CLASSES = say("data.classes", "en").split(",")  # airplane, automobile, ... truck; in Chinese: say("data.classes", "zh")


class SyntheticCIFAR10(CIFAR10):
    """A deterministic, learnable stand-in with CIFAR10's interface. Each class has a smooth colour pattern; an
    image is its class pattern, shifted, dimmed and noised. ``.data`` is uint8 NHWC, ``.targets`` a list; items
    are CIFAR10's own ``__getitem__`` (through PIL and the transform), only its files are not read."""

    is_synthetic = True
    classes = CLASSES

    def __init__(self, train=True, transform=None, target_transform=None, size=None, seed=0):
        VisionDataset.__init__(self, root="synthetic", transform=transform, target_transform=target_transform)
        self.train = train
        full = 50_000 if train else 10_000  # CIFAR-10's sizes: never more
        n = full if size is None else min(size, full)
        self.data, self.targets = _synthetic_images(n, seed, split=0 if train else 1)

    def extra_repr(self):
        return f"Split: {'Train' if self.train else 'Test'} ({say('data.synthetic')})"


def _class_patterns(seed: int) -> np.ndarray:
    """Ten 36x36 RGB patterns of 9x9-pixel blocks, each colour channel on or off. The on/off codes are rows of
    a Hadamard matrix (columns shuffled by the seed), so any two classes differ in half of their 48 blocks."""
    rng = np.random.default_rng([seed, 10])
    hadamard = np.array([[1]])
    while len(hadamard) < 64:
        hadamard = np.block([[hadamard, hadamard], [hadamard, -hadamard]])
    codes = hadamard[1:11][:, rng.permutation(64)[:48]] > 0
    blocks = codes.reshape(10, 4, 4, 3).astype(np.float32)
    return blocks.repeat(9, axis=1).repeat(9, axis=2)


def _synthetic_images(n: int, seed: int, split: int, chunk: int = 1000):
    """n images, built in fixed chunks so that a smaller n is a prefix of a larger."""
    patterns = _class_patterns(seed)
    images, labels = [], []
    for c in range(0, n, chunk):
        rng = np.random.default_rng([seed, split, c // chunk])
        y = rng.integers(0, 10, chunk)
        dx, dy = rng.integers(0, 2, chunk), rng.integers(0, 2, chunk)
        crops = np.stack([patterns[k, a:a + 32, b:b + 32] for k, a, b in zip(y, dy, dx)])
        gain = rng.uniform(0.8, 1.0, (chunk, 1, 1, 1)).astype(np.float32)
        noise = rng.normal(0, 0.1, crops.shape).astype(np.float32)
        images.append(np.clip((crops * gain + noise) * 255, 0, 255).round().astype(np.uint8))
        labels.append(y)
    return np.concatenate(images)[:n], np.concatenate(labels)[:n].tolist()
