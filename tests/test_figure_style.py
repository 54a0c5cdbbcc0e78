"""The figures' panel layout helper."""

import matplotlib.pyplot as plt

from weakspots.figures.style import panel_grid


def test_panel_grid_fills_rows_of_three_in_reading_order_and_hides_the_rest():
    fig, axes, shown = panel_grid(5)
    assert axes.shape == (2, 3)
    assert shown == [axes[0, 0], axes[0, 1], axes[0, 2], axes[1, 0], axes[1, 1]]
    assert [ax.get_visible() for ax in axes.flat] == [True] * 5 + [False]
    plt.close(fig)
    fig, axes, shown = panel_grid(2)
    assert axes.shape == (1, 2) and len(shown) == 2
    plt.close(fig)
