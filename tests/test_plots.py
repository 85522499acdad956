"""The per-skill learning-curve plot (`gameon.plots`): curves.png and the VLM's analysis image."""

from __future__ import annotations

import pytest

from gameon.plots import skill_curves_png

SKILLS = ("reach", "lift", "push", "place", "stack", "unstack", "tower")


@pytest.fixture
def drawn(monkeypatch: pytest.MonkeyPatch) -> list:
    """The figures skill_curves_png closes, kept to look at what it drew."""
    plt = pytest.importorskip("matplotlib.pyplot")
    figures: list = []
    close = plt.close

    def keep(figure: object = None) -> None:
        figures.append(figure)
        close(figure)

    monkeypatch.setattr(plt, "close", keep)
    return figures


def test_one_iteration_is_ticked_as_iteration_0_only(drawn: list) -> None:
    """After the first iteration (the VLM's first analysis, a run of --iterations 0) the axis
    was ticked -0.045, -0.030, ... 0.045: fractions of an iteration."""
    png = skill_curves_png({skill: [0.0] for skill in SKILLS})
    assert png.startswith(b"\x89PNG")
    axes = drawn[0].axes[0]
    low, high = axes.get_xlim()
    assert [tick for tick in axes.get_xticks() if low <= tick <= high] == [0]


def test_every_skill_has_its_own_marker_so_coinciding_curves_stay_visible(drawn: list) -> None:
    """Every curve at 0 (early in every run) drew one line, the last skill's, over six others
    with the same round marker: the legend named seven skills and the plot showed one."""
    skill_curves_png({skill: [0.0, 0.0, 0.1] for skill in SKILLS}, title="collect: lp + bc")
    axes = drawn[0].axes[0]
    markers = [line.get_marker() for line in axes.lines]
    assert len(set(markers)) == len(SKILLS)
    assert all(line.get_markerfacecolor() == "none" for line in axes.lines)
    assert [text.get_text() for text in axes.get_legend().get_texts()] == list(SKILLS)
    assert axes.get_xlabel() == "iteration" and axes.get_ylabel() == "evaluated success rate"
