"""Vectors as recall keeps them: unit length, stored as float32, the nearest scenes, and
reciprocal rank fusion."""

from __future__ import annotations

import numpy as np

from proxy.core.vectors import from_blob, fuse, stacked, to_blob, unit


def test_unit_vectors_round_trip_as_float32() -> None:
    vector = unit([3.0, 4.0])
    assert np.allclose(vector, [0.6, 0.8]) and vector.dtype == np.float32
    assert np.array_equal(from_blob(to_blob(vector)), vector)
    assert not unit([0.0, 0.0]).any()  # a zero vector stays zero: near nothing


def test_the_nearest_scenes_best_first_above_the_floor() -> None:
    scenes = stacked([10, 20, 30], [unit([1, 0, 0]), unit([1, 1, 0]), unit([0, 0, 1])])
    question = unit([1, 0.1, 0])
    assert scenes.nearest(question, 3, floor=0.3) == [10, 20]  # 30 is orthogonal
    assert scenes.nearest(question, 1, floor=-1) == [10]
    assert scenes.nearest(unit([1, 0]), 3, floor=-1) == []  # another model's size


def test_vectors_of_another_size_are_left_out() -> None:
    """A model change leaves old vectors until the scenes are embedded again."""
    scenes = stacked([1, 2], [unit([1, 0]), unit([1, 0, 0])])
    assert scenes.uids == (1,)
    assert stacked([], []).nearest(unit([1.0]), 3, 0.0) == []


def test_fusion_puts_what_both_rankings_find_first() -> None:
    assert fuse([[1, 2, 3], [3, 4]]) == [3, 1, 2, 4]
    assert fuse([[1, 2], []]) == [1, 2]
    assert fuse([[], [7]]) == [7]
