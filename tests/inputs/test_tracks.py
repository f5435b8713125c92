"""Track sources: every tracks_json format, RASTERKIT_TRACKS, ys-vision-tools' TRACKS, and bad input."""

import json

import numpy as np
import pytest
import torch

from rasterkit.utils.inputs import tracks as T


def test_kjnodes_dicts_and_lists_hold_the_last_point():
    xy, visible = T.from_json('[[{"x": 1, "y": 2}, {"x": 3, "y": 4}], [[5, 6]]]', 3)
    assert xy.shape == (3, 2, 2) and visible.all()
    assert xy[:, 0].tolist() == [[1, 2], [3, 4], [3, 4]] and xy[:, 1].tolist() == [[5, 6]] * 3


def test_single_quotes_and_cotracker_strings():
    xy, _ = T.from_json("[[{'x': 1, 'y': 2}]]", 2)
    assert xy[1, 0].tolist() == [1, 2]
    cotracker = json.dumps([json.dumps([{"x": 1, "y": 1}, {"x": 2, "y": 2}]), json.dumps([{"x": 9, "y": 9}])])
    xy, _ = T.from_json(cotracker, 2)
    assert xy[1].tolist() == [[2, 2], [9, 9]]


def test_a_flat_list_is_one_point_moving_over_frames():
    # KJNodes' coordinates (Spline Editor, Points Editor): one {x, y} per frame, written with str() quotes
    xy, visible = T.from_json("[{'x': 10, 'y': 20}, {'x': 30, 'y': 40}, {'x': 50, 'y': 60}]", 4)
    assert xy.shape == (4, 1, 2) and visible.all()
    assert xy[:, 0].tolist() == [[10, 20], [30, 40], [50, 60], [50, 60]]  # the last point holds
    xy, visible = T.from_json("[[10, 20], [-100, -100], [50, 60]]", 3)
    assert xy.shape == (3, 1, 2) and visible[:, 0].tolist() == [True, False, True]
    for single in ("[[10, 20]]", '[{"x": 10, "y": 20}]', "[[[10, 20]]]"):  # one point, one track, all frames
        xy, visible = T.from_json(single, 2)
        assert xy.tolist() == [[[10, 20]], [[10, 20]]] and visible.all()
    xy, _ = T.from_json("[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]", 2)  # several flat lists: several tracks
    assert xy.tolist() == [[[1, 2], [5, 6]], [[3, 4], [7, 8]]]


def test_negative_points_are_invisible_and_long_tracks_are_cut():
    xy, visible = T.from_json("[[[1, 1], [-100, -100], [3, 3], [4, 4]]]", 3)
    assert visible[:, 0].tolist() == [True, False, True] and xy.shape[0] == 3


def test_tracks_type_and_round_trip():
    xy = torch.tensor([[[1.0, 2.0], [3.0, 4.0]], [[5.0, 6.0], [float("nan"), 1.0]]])
    visible = torch.tensor([[True, True], [True, True]])
    fitted_xy, fitted_visible = T.from_tracks({"xy": xy, "visible": visible}, 3)
    assert fitted_visible.tolist() == [[True, True], [True, False], [True, False]]
    again, seen = T.from_json(T.to_json(fitted_xy, fitted_visible), 3)
    assert torch.equal(seen, fitted_visible) and torch.allclose(again[seen], fitted_xy[fitted_visible])


@pytest.mark.parametrize(
    "text,message",
    [
        ("[[1, 2", "tracks_json: not valid JSON"),
        ('{"x": 1}', "tracks_json: expected a list"),
        ("[[]]", "track 0 should be a non-empty list"),
        ('[[{"x": 1}]]', r'track 0 point 0 should be \{"x": .., "y": ..\}'),
        ("[[[1, NaN]]]", "track 0 point 0 has a non-finite coordinate"),
        ("[[[1, 2]], [[Infinity, 2]]]", "track 1 point 0 has a non-finite coordinate"),
    ],
)
def test_bad_tracks_json(text, message):
    with pytest.raises(ValueError, match=message):
        T.from_json(text, 2)


def test_bad_tracks_type():
    with pytest.raises(ValueError, match="tracks: expected RASTERKIT_TRACKS"):
        T.from_tracks("nonsense", 2)
    with pytest.raises(ValueError, match=r"tracks: xy \(2, 3\)"):
        T.from_tracks({"xy": torch.zeros(2, 3), "visible": torch.zeros(2, 3)}, 2)
    for ys in (np.zeros((4, 2)), [np.zeros((4, 2))]):  # ys-vision-tools' TRACKS on the wrong input: no IndexError
        with pytest.raises(ValueError, match="tracks: got .*ys-vision-tools' TRACKS .*connect it to ys_tracks"):
            T.from_tracks(ys, 2)


def test_ys_tracks_one_frame_is_held_on_every_frame():
    points = np.array([[10, 20], [30, 40]])  # ys-vision-tools' tracker on a single image: an int64 [N,2]
    xy, visible = T.from_ys_tracks(points, 3)
    assert xy.dtype == torch.float32 and xy.tolist() == [[[10, 20], [30, 40]]] * 3 and visible.all()
    xy, visible = T.from_ys_tracks(points, 1)
    assert xy.shape == (1, 2, 2) and visible.all()


def test_ys_tracks_per_frame_arrays_by_row():
    frames = [
        np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]], np.float32),
        np.empty((0, 2)),
        np.array([[7, 8]]),
        np.array([]),
    ]  # N changes; empty frames come as (0, 2) or (0,)
    xy, visible = T.from_ys_tracks(frames, 6)
    assert xy.shape == (6, 3, 2)
    assert visible.tolist() == [[True] * 3, [False] * 3, [True, False, False]] + [[False] * 3] * 3
    assert xy[0].tolist() == [[1, 2], [3, 4], [5, 6]] and xy[2, 0].tolist() == [7, 8]
    xy, visible = T.from_ys_tracks(frames[:1] + frames[2:3], 3)  # a short list holds its last frame
    assert visible.tolist() == [[True] * 3, [True, False, False], [True, False, False]]
    xy, visible = T.from_ys_tracks(frames, 1)  # a long one is cut
    assert xy.shape == (1, 3, 2)
    xy, visible = T.from_ys_tracks([], 2)
    assert xy.shape == (2, 0, 2) and visible.shape == (2, 0)


def test_ys_tracks_hide_non_finite_and_negative_points():
    xy, visible = T.from_ys_tracks([np.array([[np.nan, 1], [2, np.inf], [-1, 5], [6, 7]])], 1)
    assert visible.tolist() == [[False, False, False, True]] and torch.isfinite(xy).all()


@pytest.mark.parametrize(
    "value,message",
    [
        (
            np.zeros((3, 3)),
            r"ys_tracks: expected an array \[N,2\] of x, y or a list of them, one per frame, got shape \(3, 3\)",
        ),
        ("nonsense", "ys_tracks: expected an array"),
        ([np.zeros((2, 2)), np.zeros(2)], r"ys_tracks: frame 1 should be an array \[N,2\] of x, y, got shape \(2,\)"),
        ([[[1, 2], [3]]], "ys_tracks: frame 0 should be an array"),
    ],
)
def test_bad_ys_tracks(value, message):
    with pytest.raises(ValueError, match=message):
        T.from_ys_tracks(value, 2)


def test_empty_text_is_no_points():
    xy, visible = T.from_json("", 5)
    assert xy.shape == (5, 0, 2) and visible.shape == (5, 0)


def test_point_labels_name_their_track_from_their_frame_on():
    """A "label" on a {x, y} point names its track from that frame on, and before it when it is the
    track's first; a short track holds its last label; tracks without one have none (-1); null is none."""
    text = json.dumps(
        [
            [
                {"x": 1, "y": 1},
                {"x": 2, "y": 2, "label": "walker"},
                {"x": 3, "y": 3},
                {"x": 4, "y": 4, "label": "runner"},
                {"x": 5, "y": 5},
            ],
            [[5, 6]],
            [{"x": 7, "y": 8, "label": "Привет"}],
            [{"x": 7, "y": 8, "label": None}, {"x": -100, "y": -100, "label": ""}],
        ]
    )
    xy, visible, labels = T.labelled_json(text, 6)
    assert labels.names == sorted(["walker", "runner", "Привет", ""])
    named = [[labels.names[i] if i >= 0 else None for i in row] for row in labels.index.T.tolist()]
    assert named == [["walker", "walker", "walker", "runner", "runner", "runner"], [None] * 6, ["Привет"] * 6, [""] * 6]
    assert torch.equal(xy, T.from_json(text, 6)[0]) and visible[1:, 3].tolist() == [False] * 5
    cut = T.labelled_json(text, 3)[2]
    assert [cut.names[i] for i in cut.index[:, 0].tolist()] == ["walker"] * 3
    early = T.labelled_json('[[{"x": 1, "y": 1}, {"x": 2, "y": 2}, {"x": 3, "y": 3, "label": "late"}]]', 2)[2]
    assert early.names == ["late"] and early.index.tolist() == [[-1], [-1]]  # its label lies past the batch


def test_tracks_without_labels_and_empty_text():
    for text in ("", "[]", "[[1, 2], [3, 4]]", "[[[1, 2]], [[3, 4]]]"):
        xy, _, labels = T.labelled_json(text, 3)
        assert labels.names == [] and labels.index.shape == (3, xy.shape[1]) and (labels.index == -1).all()


@pytest.mark.parametrize(
    "text,message",
    [
        ('[[{"x": 1, "y": 2, "label": 5}]]', "tracks_json: track 0 point 0 label should be a string, got 5"),
        (
            '[[[1, 2]], [{"x": 1, "y": 2}, {"x": 1, "y": 2, "label": ["a"]}]]',
            r"tracks_json: track 1 point 1 label should be a string, got \['a'\]",
        ),
    ],
)
def test_labels_that_are_not_strings_are_named(text, message):
    with pytest.raises(ValueError, match=message):
        T.labelled_json(text, 2)


def test_rasterkit_tracks_labels():
    tracks = {"xy": torch.ones(2, 3, 2), "visible": torch.ones(2, 3, dtype=torch.bool), "labels": ["a", None, "b"]}
    xy, visible, labels = T.labelled_tracks(tracks, 4)
    assert xy.shape == (4, 3, 2) and labels.names == ["a", "b"] and labels.index.tolist() == [[0, -1, 1]] * 4
    assert (T.labelled_tracks({"xy": tracks["xy"], "visible": tracks["visible"]}, 2)[2].index == -1).all()
    for bad, message in (
        (["a"], "tracks: labels should be a list of 3 strings"),
        ("abc", "tracks: labels should be"),
        (["a", 2, "b"], "tracks: label 1 should be a string, got 2"),
    ):
        with pytest.raises(ValueError, match=message):
            T.labelled_tracks({**tracks, "labels": bad}, 2)
