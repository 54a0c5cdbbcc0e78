"""The figures' panel layout helper."""

import matplotlib.pyplot as plt

from weakspots.figures.style import panel_grid


def test_panel_grid_fills_rows_of_three_in_reading_order_and_hides_the_rest():
    fig, shown = panel_grid(5)
    grid = [(ax.get_subplotspec().rowspan.start, ax.get_subplotspec().colspan.start)
            for ax in fig.axes]  # fmt: skip
    assert fig.axes[0].get_subplotspec().get_geometry()[:2] == (2, 3)
    assert grid == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert shown == fig.axes[:5]
    assert [ax.get_visible() for ax in fig.axes] == [True] * 5 + [False]
    plt.close(fig)
    fig, shown = panel_grid(2)
    assert fig.axes[0].get_subplotspec().get_geometry()[:2] == (1, 2) and shown == fig.axes
    plt.close(fig)
