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


def generate_tracks(num_frames=5, num_tracks=3, width=832, height=480, track_mask=None):
    """Core TRACKS as comfy_extras/nodes_wanmove.py's GenerateTracks builds them: a straight path from
    (0.1, 0.2) to (0.9, 0.6) of the frame, tracks spread across it, track_path float32 [frames,
    tracks, 2] in pixels and track_visibility bool [frames, tracks], or [frames, 1] from a track_mask."""
    t = torch.linspace(0, 1, num_frames)
    x, y = (0.1 + 0.8 * t) * width, (0.2 + 0.4 * t) * height
    spread = (torch.arange(num_tracks) - (num_tracks - 1) / 2) * 0.025 * (width + height) / 2
    path = torch.stack([x[:, None] - 0.447 * spread, y[:, None] + 0.894 * spread], -1).float()
    if track_mask is None:
        visibility = torch.ones((num_frames, num_tracks), dtype=torch.bool)
    else:
        visibility = (track_mask > 0).any(dim=(1, 2)).unsqueeze(-1)
    return {"track_path": path, "track_visibility": visibility}


def test_core_tracks_from_generate_tracks():
    tracks = generate_tracks()
    xy, visible = T.from_tracks_socket(tracks, 5)
    assert torch.equal(xy, tracks["track_path"]) and visible.all() and xy.dtype == torch.float32
    xy, visible = T.from_tracks_socket(tracks, 7)  # a short path holds its last frame, as the others
    assert torch.equal(xy[6], tracks["track_path"][4]) and xy.shape == (7, 3, 2)
    assert T.from_tracks_socket(tracks, None)[0].shape == (5, 3, 2)  # None: the tracks' own length


def test_core_tracks_visibility_from_a_track_mask_and_missing():
    mask = torch.zeros(5, 8, 8)
    mask[[0, 1, 3]] = 1.0  # frames 2 and 4 masked out: every track hidden there
    _, visible = T.from_tracks_socket(generate_tracks(track_mask=mask), 5)
    assert visible.tolist() == [[v] * 3 for v in (True, True, False, True, False)]
    tracks = generate_tracks()
    del tracks["track_visibility"]  # optional, as WanMoveTrackToVideo reads it
    assert T.from_tracks_socket(tracks, 5)[1].all()


def test_core_tracks_from_coords_and_concat():
    """WanMoveTracksFromCoords builds track_path from KJNodes-style JSON: [frames, tracks, 2]; WanMoveConcatTrack
    concatenates along the track dimension. Negative and non-finite points are hidden."""
    coords = [[{"x": 10, "y": 20}, {"x": 11, "y": 21}], [{"x": 30, "y": 40}, {"x": -100, "y": -100}]]
    path = torch.tensor([[[track[f]["x"], track[f]["y"]] for track in coords] for f in range(2)], dtype=torch.float32)
    one = {"track_path": path, "track_visibility": torch.ones(2, 2, dtype=torch.bool)}
    both = {
        "track_path": torch.cat([one["track_path"], path.flip(1)], dim=1),
        "track_visibility": torch.cat([one["track_visibility"], torch.ones(2, 2, dtype=torch.bool)], dim=-1),
    }
    xy, visible = T.from_tracks_socket(both, 2)
    assert xy.shape == (2, 4, 2) and visible.tolist() == [[True] * 4, [True, False, False, True]]
    both["track_path"][0, 0, 0] = float("nan")
    assert not T.from_tracks_socket(both, 2)[1][0, 0]


def test_ys_tracks_still_read_on_the_tracks_socket():
    frames = [np.array([[1.0, 2.0], [3.0, 4.0]], np.float32), np.argwhere(np.eye(3))[:, [1, 0]]]  # as ys' detectors
    xy, visible = T.from_tracks_socket(frames, 2)
    assert xy.shape == (2, 3, 2) and visible.tolist() == [[True, True, False], [True] * 3]


@pytest.mark.parametrize(
    "value,message",
    [
        ("nonsense", "ys_tracks: expected core ComfyUI TRACKS .* or ys-vision-tools' TRACKS"),
        ({"xy": torch.zeros(2, 1, 2)}, "ys_tracks: expected core ComfyUI TRACKS"),
        (42, "ys_tracks: expected core ComfyUI TRACKS"),
        ({"track_path": torch.zeros(3, 2)}, r"ys_tracks: core TRACKS' track_path should be \[T,N,2\] with T > 0"),
        ({"track_path": torch.zeros(0, 2, 2)}, "track_path should be"),
        ({"track_path": "abc"}, "ys_tracks: core TRACKS should hold tensors"),
        (
            {"track_path": torch.zeros(3, 2, 2), "track_visibility": torch.ones(3, 3)},
            r"track_visibility \(3, 3\) should be \[T,N\] or \[T,1\]",
        ),
    ],
)
def test_bad_tracks_socket_values_are_named(value, message):
    with pytest.raises(ValueError, match=message):
        T.from_tracks_socket(value, 2)


def test_core_tracks_on_the_rasterkit_socket_say_where_they_go():
    with pytest.raises(ValueError, match="tracks: got core ComfyUI TRACKS .*connect it to ys_tracks"):
        T.from_tracks(generate_tracks(), 2)


def test_to_core_tracks_holds_hidden_points_where_last_seen():
    xy = torch.tensor([[[-1.0, -1.0], [5, 5]], [[2, 3], [6, 6]], [[-1, -1], [-1, -1]], [[4, 5], [-1, -1]]])
    visible = (xy >= 0).all(-1)
    core = T.to_core_tracks(xy, visible)
    assert core["track_path"].dtype == torch.float32 and core["track_visibility"].dtype == torch.bool
    assert core["track_path"][:, 0].tolist() == [[2, 3], [2, 3], [2, 3], [4, 5]]  # first seen, then last seen
    assert core["track_path"][:, 1].tolist() == [[5, 5], [6, 6], [6, 6], [6, 6]]
    assert torch.equal(core["track_visibility"], visible)
    never = T.to_core_tracks(torch.full((2, 1, 2), -1.0), torch.zeros(2, 1, dtype=torch.bool))
    assert never["track_path"].shape == (2, 0, 2)
    back, seen = T.from_tracks_socket(core, 4)  # the round trip keeps every visible point
    assert torch.equal(seen, visible) and torch.equal(back[seen], xy[visible])
