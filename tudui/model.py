"""The course's CIFAR-10 network, layer for layer."""
from torch import nn


class Tudui(nn.Module):
    """The Tudui network from the xiaotudui PyTorch course (145,578 parameters). The layers sit in ``self.model``
    as in the course, so its checkpoints' keys (``model.0.weight`` ...) and shapes match. No ReLU, as in the
    course: max-pooling is the only non-linearity, which is why accuracy on real CIFAR-10 tops out near 65 %."""

    def __init__(self):
        super().__init__()
        self.model = nn.Sequential(
            nn.Conv2d(3, 32, 5, 1, 2),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 5, 1, 2),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 5, 1, 2),
            nn.MaxPool2d(2),
            nn.Flatten(),
            nn.Linear(64 * 4 * 4, 64),
            nn.Linear(64, 10),
        )

    def forward(self, x):
        return self.model(x)


def count_parameters(model: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
