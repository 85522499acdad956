"""The per-skill learning-curve plot: evaluated success of each skill per iteration.

One figure for the two places that draw it: a collect run's `curves.png` and the image the VLM
experimenter reads when it judges the curves. The PNG carries no timestamp or software tag, so one
machine renders the same curves to the same bytes (a replayed transcript matches its images).
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence


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
    for skill, rates in curves.items():
        axes.plot(range(len(rates)), list(rates), marker="o", label=skill)
    axes.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.set_xlabel("iteration")
    axes.set_ylabel("evaluated success")
    axes.set_ylim(-0.05, 1.05)
    if title:
        axes.set_title(title)
    axes.legend(fontsize="small")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=dpi, metadata={"Software": None})
    plt.close(figure)
    return buffer.getvalue()
