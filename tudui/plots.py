"""Pictures a learner would rather look at than read."""
import torch

from .data import CLASSES


def plot_history(*histories, title=None):
    """Loss and accuracy per epoch, one line per run (e.g. CPU vs GPU)."""
    import matplotlib.pyplot as plt  # here, not at import: torchrun workers need no plotting
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.5))
    for h in histories:
        name = f" ({h.label})" if h.label else ""
        ax_loss.plot(h.epochs, h.train_loss, "o-", label=f"train{name}")
        ax_loss.plot(h.epochs, h.test_loss, "s--", label=f"test{name}")
        ax_acc.plot(h.epochs, [100 * a for a in h.test_accuracy], "s--", label=f"test{name}")
    ax_loss.set(xlabel="epoch", ylabel="loss", title="Loss")
    ax_acc.set(xlabel="epoch", ylabel="accuracy (%)", title="Test accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        ax.xaxis.get_major_locator().set_params(integer=True)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    plt.show()


def plot_bars(values: dict, ylabel="seconds", title=None, fmt="{:.2f}"):
    """A labelled bar chart, e.g. {"CPU": 12.1, "GPU": 0.8}."""
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(1.6 * len(values) + 2, 3.2))
    bars = ax.bar(list(values), list(values.values()), color=plt.rcParams["axes.prop_cycle"].by_key()["color"])
    ax.bar_label(bars, labels=[fmt.format(v) for v in values.values()])
    ax.set(ylabel=ylabel, title=title or "")
    ax.margins(y=0.15)
    fig.tight_layout()
    plt.show()


def show_predictions(model, dataset, device="cpu", n=8, classes=CLASSES):
    """The first ``n`` images of ``dataset`` with predicted (and true) classes."""
    import matplotlib.pyplot as plt
    model.eval()
    images = torch.stack([dataset[i][0] for i in range(n)])
    with torch.no_grad():
        predicted = model(images.to(device)).argmax(1).cpu()  # back to the CPU to plot
    fig, axes = plt.subplots(1, n, figsize=(1.5 * n, 2))
    for ax, img, p, i in zip(axes, images, predicted, range(n)):
        truth = dataset[i][1]
        ax.imshow(img.permute(1, 2, 0).numpy())
        ax.set_title(f"{classes[p]}\n({classes[truth]})", fontsize=8, color="green" if p == truth else "red")
        ax.axis("off")
    fig.suptitle("predicted (true)", fontsize=9)
    fig.tight_layout()
    plt.show()
