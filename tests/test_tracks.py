"""Track sources: every tracks_json format, TRACKS, and bad input."""
import json

import pytest
import torch

from rasterkit.utils import tracks as T


def test_kjnodes_dicts_and_lists_hold_the_last_point():
    xy, visible = T.from_json('[[{"x": 1, "y": 2}, {"x": 3, "y": 4}], [[5, 6]]]', 3)
    assert xy.shape == (3, 2, 2) and visible.all()
    assert xy[:, 0].tolist() == [[1, 2], [3, 4], [3, 4]] and xy[:, 1].tolist() == [[5, 6]] * 3


def test_single_quotes_cotracker_strings_and_static_points():
    xy, _ = T.from_json("[[{'x': 1, 'y': 2}]]", 2)
    assert xy[1, 0].tolist() == [1, 2]
    cotracker = json.dumps([json.dumps([{"x": 1, "y": 1}, {"x": 2, "y": 2}]), json.dumps([{"x": 9, "y": 9}])])
    xy, _ = T.from_json(cotracker, 2)
    assert xy[1].tolist() == [[2, 2], [9, 9]]
    xy, visible = T.from_json("[[10, 20], [30, 40], [50, 60]]", 4)  # a flat list of points: static
    assert xy.shape == (4, 3, 2) and xy[3, 2].tolist() == [50, 60]


def test_negative_points_are_invisible_and_long_tracks_are_cut():
    xy, visible = T.from_json('[[[1, 1], [-100, -100], [3, 3], [4, 4]]]', 3)
    assert visible[:, 0].tolist() == [True, False, True] and xy.shape[0] == 3


def test_tracks_type_and_round_trip():
    xy = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [float("nan"), 1.0]]])
    visible = torch.tensor([[True, True], [True, True]])
    fitted_xy, fitted_visible = T.from_tracks({"xy": xy, "visible": visible}, 3)
    assert fitted_visible.tolist() == [[True, True], [True, False], [True, False]]
    again, seen = T.from_json(T.to_json(fitted_xy, fitted_visible), 3)
    assert torch.equal(seen, fitted_visible) and torch.allclose(again[seen], fitted_xy[fitted_visible])


@pytest.mark.parametrize("text,message", [
    ("[[1, 2", "tracks_json: not valid JSON"),
    ('{"x": 1}', "tracks_json: expected a list"),
    ("[[]]", "track 0 should be a non-empty list"),
    ('[[{"x": 1}]]', r'track 0 point 0 should be \{"x": .., "y": ..\}'),
    ('[[[1, NaN]]]', "track 0 point 0 has a non-finite coordinate"),
    ('[[[1, 2]], [[Infinity, 2]]]', "track 1 point 0 has a non-finite coordinate"),
])
def test_bad_tracks_json(text, message):
    with pytest.raises(ValueError, match=message):
        T.from_json(text, 2)


def test_bad_tracks_type():
    with pytest.raises(ValueError, match="tracks: expected TRACKS"):
        T.from_tracks("nonsense", 2)
    with pytest.raises(ValueError, match=r"tracks: xy \(2, 3\)"):
        T.from_tracks({"xy": torch.zeros(2, 3), "visible": torch.zeros(2, 3)}, 2)


def test_empty_text_is_no_points():
    xy, visible = T.from_json("", 5)
    assert xy.shape == (5, 0, 2) and visible.shape == (5, 0)
