"""The commutation heatmap as a reader sees it: what differs, a legend, and a clear empty case."""

from __future__ import annotations

import warnings

import pandas as pd

from composer_lab.explore import plot_commutation
from composer_lab.explore.commutation import COLUMNS


def _table(rows):
    return pd.DataFrame(rows, columns=COLUMNS)


def test_a_cell_names_the_first_field_that_differs_not_a_size_and_a_legend_says_what_colours_mean():
    table = _table([("after_dataloader", "CutMix", "MixUp", "inputs", 0.0, 2, True),
                    ("after_dataloader", "CutMix", "MixUp", "targets", 9.0, 2, False),  # class indices
                    ("after_dataloader", "CutMix", "MixUp", "loss", 0.3, 2, False),
                    ("before_loss", "LabelSmoothing", "MixUp", "targets", 0.0, 2, True)])
    ax = plot_commutation(table).axes[0]
    texts = [t.get_text() for t in ax.texts]
    assert sorted(texts) == ["commutes", "≠ targets +1"]
    assert not any("9" in t or "Δ" in t for t in texts), "no size for a difference of class indices"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "the two orders leave the same state", "≠ the first field that differs, +N more",
        "the pair never met at that event"]


def test_no_pair_to_compare_says_the_algorithms_never_meet():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (before: an empty box and matplotlib's 'singular xlim' warnings)
        fig = plot_commutation(_table([]))
        png = fig._repr_png_()
    assert fig.axes == [] and png.startswith(b"\x89PNG")
    assert "never ran at the same event" in fig.texts[0].get_text()
