"""Pictures labelled in the language in force (English where no font here has Chinese: never empty boxes); a title
or y label may be given per language: ``{"en": ..., "zh": ...}``."""
import torch

from .text import checked, language, say

CJK_FONTS = ("Noto Sans CJK SC", "Source Han Sans SC", "Microsoft YaHei", "SimHei", "PingFang SC", "Noto Sans SC",
             "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Noto Sans CJK JP", "Source Han Sans", "Heiti SC")


def cjk_font() -> str | None:
    """The first of CJK_FONTS that matplotlib's font manager knows (it caches what it found), or None."""
    from matplotlib.font_manager import fontManager
    known = {font.name for font in fontManager.ttflist}
    return next((name for name in CJK_FONTS if name in known), None)


def plot_language() -> str:
    """The plots' language: the one in force, but English where no font here can draw Chinese."""
    return "en" if language() == "zh" and cjk_font() is None else language()


def _pick(text, lang):
    """``text``, or its ``lang`` entry when it is given per language."""
    return text.get(lang, text.get("en")) if isinstance(text, dict) else text


def _show(fig, lang):
    """Lay out and show ``fig``; Chinese text gets the CJK font (then the default ones, for the rest)."""
    import matplotlib.pyplot as plt
    for text in fig.findobj(plt.Text) if lang == "zh" else []:
        text.set_fontfamily([cjk_font(), "sans-serif"])
    fig.tight_layout()
    plt.show()


def plot_history(*histories, title=None):
    """Loss and accuracy per epoch, one line per run (e.g. CPU vs GPU)."""
    import matplotlib.pyplot as plt  # here, not at import: torchrun workers need no plotting
    lang = plot_language()
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.5))
    for h in histories:
        name = say("plots.run", lang, label=h.label) if h.label else ""
        ax_loss.plot(h.epochs, h.train_loss, "o-", label=say("split.train", lang) + name)
        ax_loss.plot(h.epochs, h.test_loss, "s--", label=say("split.test", lang) + name)
        ax_acc.plot(h.epochs, [100 * a for a in h.test_accuracy], "s--", label=say("split.test", lang) + name)
    epoch = say("plots.epoch", lang)
    ax_loss.set(xlabel=epoch, ylabel=say("plots.loss", lang), title=say("plots.loss_title", lang))
    ax_acc.set(xlabel=epoch, ylabel=say("plots.accuracy", lang), title=say("plots.accuracy_title", lang))
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
        ax.xaxis.get_major_locator().set_params(integer=True)
    if title:
        fig.suptitle(_pick(title, lang))
    _show(fig, lang)


def plot_bars(values: dict, ylabel=None, title=None, fmt="{:.2f}"):
    """A labelled bar chart, e.g. {"CPU": 12.1, "GPU": 0.8}; ylabel: seconds unless given."""
    import matplotlib.pyplot as plt
    lang = plot_language()
    fig, ax = plt.subplots(figsize=(1.6 * len(values) + 2, 3.2))
    bars = ax.bar(list(values), list(values.values()), color=plt.rcParams["axes.prop_cycle"].by_key()["color"])
    ax.bar_label(bars, labels=[fmt.format(v) for v in values.values()])
    ax.set(ylabel=say("plots.seconds", lang) if ylabel is None else _pick(ylabel, lang), title=_pick(title, lang) or "")
    ax.margins(y=0.15)
    _show(fig, lang)


def show_predictions(model, dataset, device="cpu", n=8, classes=None):
    """The first ``n`` images of ``dataset`` with predicted (and true) classes (default: CIFAR-10's names)."""
    import matplotlib.pyplot as plt
    lang = plot_language()
    classes = classes or say("data.classes", lang).split(",")
    checked(torch.nn.Module, model=model)
    checked(int, 1, len(dataset), n=n)
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
    fig.suptitle(say("plots.predicted", lang), fontsize=9)
    _show(fig, lang)
