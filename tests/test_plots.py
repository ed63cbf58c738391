"""The shared figure helpers of lmstudy.plots."""

import matplotlib

matplotlib.use("agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from lmstudy.plots import log_axis_at, short_number, strip_points  # noqa: E402


def test_short_number_keeps_three_significant_digits():
    assert [short_number(v) for v in (950, 122_880, 1_966_080, 37_500_000_000)] == ["950", "123k", "1.97M", "37.5B"]


def test_a_trend_axis_is_labelled_at_its_levels_only():
    figure, axis = plt.subplots()
    axis.plot([122_880, 491_520, 1_966_080], [1, 2, 3])
    log_axis_at(axis, [491_520, 122_880, 1_966_080, 122_880], None)
    figure.canvas.draw()
    assert axis.get_xscale() == "log"
    assert list(axis.get_xticks()) == [122_880, 491_520, 1_966_080]
    assert [t.get_text() for t in axis.get_xticklabels()] == ["123k", "492k", "1.97M"]
    assert not [t for t in axis.xaxis.get_minorticklabels() if t.get_text()]  # no overlapping 2x10^5 labels
    log_axis_at(axis, [1, 10], ["one", "ten"])
    assert [t.get_text() for t in axis.get_xticklabels()] == ["one", "ten"]
    plt.close(figure)


def test_strip_points_jitter_the_same_way_every_time_and_leave_numpys_rng_alone():
    table = pd.DataFrame({"config": ["a", "a", "b", "b"], "ppl": [1.0, 2.0, 3.0, 4.0]})

    def offsets() -> list:
        figure, axis = plt.subplots()
        strip_points(data=table, x="config", y="ppl", ax=axis)
        points = [tuple(xy) for collection in axis.collections for xy in collection.get_offsets()]
        plt.close(figure)
        return points

    np.random.seed(5)
    first = offsets()
    after = np.random.random()
    np.random.seed(5)
    assert offsets() == first and np.random.random() == after  # the caller's stream is where it was
    assert len({x for x, _ in first}) == 4  # jittered: no two points on the same x
