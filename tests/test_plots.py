"""The plot helpers label in the language in force: Chinese in a CJK font where this machine has one, English where
it has none; never a missing glyph (matplotlib's "Glyph ... missing from font" warning fails these tests)."""
import logging
import warnings
from types import SimpleNamespace

import matplotlib
import matplotlib.pyplot as plt
import pytest
from matplotlib.text import Text

import tudui
from tudui import History, Tudui, cifar10, plots

MISSING_GLYPH = r"Glyph .* missing from font"


@pytest.fixture
def drawn(caplog):
    """``drawn(helper, *args, **kwargs)``: call a plot helper and draw its figure, a missing glyph being an
    error and a font that is not found (matplotlib logs "findfont: ...") a failure; returns the texts it shows."""
    plt.switch_backend("Agg")

    def draw(helper, *args, **kwargs):
        plt.close("all")
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="matplotlib"), warnings.catch_warnings():
            warnings.filterwarnings("error", message=MISSING_GLYPH)
            warnings.filterwarnings("ignore", message=".*non-interactive.*cannot be shown")  # plt.show() on Agg
            helper(*args, **kwargs)
            figure = plt.gcf()
            figure.canvas.draw()
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
        return {text.get_text() for text in figure.findobj(Text) if text.get_text()}

    yield draw
    plt.close("all")


def history(label="cpu"):
    return History(label=label, epochs=[1, 2], train_loss=[2.2, 2.0], train_accuracy=[0.2, 0.3],
                   test_loss=[2.1, 1.9], test_accuracy=[0.25, 0.35], seconds=[1.0, 1.0], images_per_s=[90, 95])


def predictions():
    return Tudui(), cifar10(False, source="synthetic", limit=4)


PLOTS = {  # helper, its arguments, what it says in English, what it says in Chinese
    "history": (tudui.plot_history, lambda: ((history(),), {"title": {"en": "CPU run", "zh": "CPU 上的训练"}}),
                {"Loss", "Test accuracy", "epoch", "loss", "accuracy (%)", "train (cpu)", "test (cpu)", "CPU run"},
                {"损失", "测试正确率", "轮", "正确率（%）", "训练（cpu）", "测试（cpu）", "CPU 上的训练"}),
    "bars": (tudui.plot_bars, lambda: (({"CPU": 12.1, "GPU": 0.8},), {"title": {"en": "One epoch", "zh": "一轮"}}),
             {"seconds", "One epoch", "CPU", "GPU", "12.10", "0.80"}, {"秒", "一轮", "CPU", "GPU", "12.10", "0.80"}),
    "predictions": (tudui.show_predictions, lambda: (predictions(), {"n": 4}), {"predicted (true)"}, {"预测（真实）"}),
}


@pytest.mark.parametrize("name", PLOTS)
def test_english_plots_say_what_they_said(drawn, name, monkeypatch):
    monkeypatch.setenv("TUDUI_LANG", "en")
    helper, arguments, english, _ = PLOTS[name]
    args, kwargs = arguments()
    assert english <= drawn(helper, *args, **kwargs)


@pytest.mark.parametrize("name", PLOTS)
def test_chinese_plots_draw_every_glyph_in_chinese_where_a_cjk_font_is_found(drawn, name, monkeypatch):
    """Chinese with a CJK font here; without one, the same plot in English. Either way no glyph is missing."""
    monkeypatch.setenv("TUDUI_LANG", "zh")
    helper, arguments, english, chinese = PLOTS[name]
    args, kwargs = arguments()
    shown = drawn(helper, *args, **kwargs)
    assert (chinese if plots.cjk_font() else english) <= shown, f"font {plots.cjk_font()}: {shown}"


@pytest.mark.parametrize("name", PLOTS)
def test_without_a_cjk_font_chinese_plots_are_english(drawn, name, monkeypatch):
    monkeypatch.setenv("TUDUI_LANG", "zh")
    monkeypatch.setattr(plots, "cjk_font", lambda: None)
    helper, arguments, english, _ = PLOTS[name]
    args, kwargs = arguments()
    assert plots.plot_language() == "en"
    assert english <= drawn(helper, *args, **kwargs)


def test_the_check_catches_chinese_drawn_in_a_font_without_it(drawn, monkeypatch):
    """What these tests guard against: a font that has no Chinese shows empty boxes, and matplotlib warns."""
    monkeypatch.setenv("TUDUI_LANG", "zh")
    monkeypatch.setattr(plots, "cjk_font", lambda: "DejaVu Sans")
    with pytest.raises(UserWarning, match=MISSING_GLYPH):
        drawn(tudui.plot_bars, {"CPU": 1.0})


def test_the_predictions_name_the_classes_in_chinese(drawn, monkeypatch):
    monkeypatch.setenv("TUDUI_LANG", "zh")
    shown = drawn(tudui.show_predictions, *predictions(), n=4)
    names = "飞机 汽车 鸟 猫 鹿 狗 青蛙 马 船 卡车".split() if plots.cjk_font() else tudui.CLASSES
    assert any(line in names for text in shown for line in text.split("\n") if line[:1] != "(")


@pytest.mark.parametrize("fonts, chosen", [
    (["DejaVu Sans", "WenQuanYi Zen Hei", "Microsoft YaHei"], "Microsoft YaHei"),  # the list's order decides
    (["Noto Sans CJK JP", "DejaVu Sans"], "Noto Sans CJK JP"),
    (["DejaVu Sans", "STIXGeneral"], None),
])
def test_the_cjk_font_is_the_first_of_the_list_that_matplotlib_finds(monkeypatch, fonts, chosen):
    monkeypatch.setattr(matplotlib.font_manager.fontManager, "ttflist", [SimpleNamespace(name=f) for f in fonts])
    assert plots.cjk_font() == chosen


@pytest.mark.parametrize("n, error, says", [(0, ValueError, "n=0 is out of range: it must be from 1 to 5"),
                                            (6, ValueError, "n=6 is out of range: it must be from 1 to 5"),
                                            (2.0, TypeError, "n must be a whole number (int), not float")])
def test_show_predictions_names_a_wrong_n(n, error, says):
    with pytest.raises(error) as err:
        tudui.show_predictions(tudui.Tudui(), tudui.cifar10(False, source="synthetic", limit=5), n=n)
    assert str(err.value) == says
