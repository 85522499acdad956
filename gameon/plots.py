"""The per-skill learning-curve plot: evaluated success of each skill per iteration.

One figure for the two places that draw it: a collect run's `curves.png` and the image the VLM
experimenter reads when it judges the curves. The PNG carries no timestamp or software tag, so one
machine renders the same curves to the same bytes (a replayed transcript matches its images).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence

MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
"""One hollow marker shape per skill, so skills whose curves coincide (all at 0 early in a run)
each still show where one line covers the others."""


def skill_curves_png(
    curves: Mapping[str, Sequence[float]],
    title: str | None = None,
    size: tuple[float, float] = (6.0, 4.0),
    dpi: int = 100,
) -> bytes:
    """The curves (skill -> success per iteration) as a PNG of `size` inches at `dpi`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    figure, axes = plt.subplots(figsize=size)
    for index, (skill, rates) in enumerate(curves.items()):
        marker = MARKERS[index % len(MARKERS)]
        axes.plot(
            range(len(rates)), list(rates), marker=marker, markerfacecolor="none", label=skill
        )
    if max((len(rates) for rates in curves.values()), default=0) == 1:
        axes.set_xticks([0])  # the locator would tick fractions of an iteration around it
    else:
        axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("iteration")
    axes.set_ylabel("evaluated success rate")
    axes.set_ylim(-0.05, 1.05)
    if title:
        axes.set_title(title)
    axes.legend(fontsize="small")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()
