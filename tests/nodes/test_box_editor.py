"""Box Editor: each output format exactly, snapping, the frame, bad input naming its input, and round
trips into the Bounding Box and Line Link Renderers (each source draws the same image)."""

import json
import math

import pytest
import torch

from rasterkit.nodes.boxes import BoundingBoxRenderer
from rasterkit.nodes.editors import BoxEditor
from rasterkit.nodes.links import LineLinkRenderer

BOXES = (
    '[[10, 12, 40, 30], {"x": 50, "y": 5, "w": 20.5, "h": 30, "label": "dog"}, '
    '{"x1": 90, "y1": 40, "x2": 70, "y2": 20}]'
)
POINTS = '[{"x": 12, "y": 20}, [30.5, 44]]'
NEGATIVE = '[{"x": 100, "y": 60}]'


def edit(**inputs):
    outputs = BoxEditor.execute(**{"width": 128, "height": 96, **inputs})
    return dict(zip([o.name for o in BoxEditor.OUTPUTS], outputs, strict=True))


def test_each_output_format_exactly():
    out = edit(boxes=BOXES, points=POINTS, negative_points=NEGATIVE)
    detections = [
        {"x": 10, "y": 12, "width": 30, "height": 18, "label": None, "score": 1.0},
        {"x": 50, "y": 5, "width": 20.5, "height": 30, "label": "dog", "score": 1.0},
        {"x": 70, "y": 20, "width": 20, "height": 20, "label": None, "score": 1.0},
    ]
    assert out["bounding_box"] == [detections]  # no image: one image
    assert out["bbox"] == [[(10, 12, 30, 18), (50, 5, 20.5, 30), (70, 20, 20, 20)]]
    assert json.loads(out["boxes"]) == [
        {"x1": 10, "y1": 12, "x2": 40, "y2": 30},
        {"x1": 50, "y1": 5, "x2": 70.5, "y2": 35, "label": "dog"},
        {"x1": 70, "y1": 20, "x2": 90, "y2": 40},
    ]
    assert json.loads(out["positive_coords"]) == [{"x": 12, "y": 20}, {"x": 30.5, "y": 44}]
    assert json.loads(out["negative_coords"]) == [{"x": 100, "y": 60}]
    assert json.loads(out["tracks_json"]) == [[{"x": 12, "y": 20}], [{"x": 30.5, "y": 44}]]
    assert all(type(v) is int for box in out["bbox"][0][:1] for v in box)  # whole numbers as ints (slices)


def test_one_list_per_image_or_one_list_for_the_batch():
    image = torch.rand(3, 96, 128, 3)
    per_image = edit(boxes="[[1, 2, 3, 4]]", image=image)
    assert per_image["bounding_box"] == [[{"x": 1, "y": 2, "width": 2, "height": 2, "label": None, "score": 1.0}]] * 3
    assert per_image["bbox"] == [[(1, 2, 2, 2)]] * 3
    assert per_image["bounding_box"][0][0] is not per_image["bounding_box"][1][0]  # a consumer may change one
    one = edit(boxes="[[1, 2, 3, 4]]", image=image, frames="one list")
    assert one["bounding_box"] == [{"x": 1, "y": 2, "width": 2, "height": 2, "label": None, "score": 1.0}]
    assert one["bbox"] == [(1, 2, 2, 2)]
    assert one["boxes"] == per_image["boxes"]  # the JSON is one list for every frame either way


def test_the_image_sets_the_frame_and_scores_pass_through():
    image = torch.rand(1, 20, 30, 3)
    out = edit(boxes='[{"x1": -5, "y1": 2, "x2": 100, "y2": 50, "score": 0.25}]', image=image, width=999, height=999)
    assert out["bounding_box"] == [[{"x": 0, "y": 2, "width": 30, "height": 18, "label": None, "score": 0.25}]]
    assert json.loads(out["boxes"]) == [{"x1": 0, "y1": 2, "x2": 30, "y2": 20, "score": 0.25}]


def test_snap_moves_corners_and_points_to_the_grid_halves_up():
    out = edit(boxes="[[10, 13, 37, 47.9], [100, 80, 125, 90]]", points="[[8, 23.9], [120, 90]]", snap=16, width=120)
    # 10 -> 16 (halves up), 13 -> 16, 37 -> 32, 47.9 -> 48; 125 and 120 -> 128, kept in the frame: 120
    assert out["bbox"] == [[(16, 16, 16, 32), (96, 80, 24, 16)]]
    assert json.loads(out["positive_coords"]) == [{"x": 16, "y": 16}, {"x": 120, "y": 96}]
    assert edit(boxes="[[10, 13, 37, 47.9]]", snap=0)["bbox"] == [[(10, 13, 27, 34.9)]]


def test_empty_inputs_give_empty_outputs():
    out = edit(boxes="", points=" ", negative_points="[]")
    assert out["bounding_box"] == [[]] and out["bbox"] == [[]]
    assert [out[name] for name in ("boxes", "positive_coords", "negative_coords", "tracks_json")] == ["[]"] * 4
    assert edit(frames="one list")["bounding_box"] == []


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"boxes": "[[1, 2, 3"}, "^boxes: not valid JSON"),
        ({"boxes": "[[NaN, 0, 5, 5]]"}, "^boxes: box 0 has a non-finite coordinate"),
        ({"boxes": "[[0, 0, Infinity, 5]]"}, "^boxes: box 0 has a non-finite coordinate"),
        ({"boxes": '{"x1": 0}'}, "^boxes: expected one list of boxes"),
        ({"boxes": "[[[0, 0, 5, 5]], [[1, 1, 4, 4]]]"}, "^boxes: expected one list of boxes"),
        ({"boxes": "[[200, 10, 300, 20]]"}, r"^boxes: box 0 .* no area inside the 128 x 96 frame$"),
        ({"boxes": "[[5, 5, 5, 9]]"}, "^boxes: box 0 .* no area"),
        ({"boxes": "[[3, 3, 6, 6]]", "snap": 16}, r"^boxes: box 0 .* no area .*\(corners snapped to 16 px\)"),
        ({"boxes": '[{"x1": 0, "y1": 0, "x2": 9, "y2": 9, "angle": 30}]'}, "^boxes: box 0 is turned"),
        ({"points": "[[NaN, 3]]"}, "^points: point 0 has a non-finite coordinate"),
        ({"points": '[{"x": 1}]'}, "^points: point 0 should be"),
        ({"points": '{"x": 1, "y": 2}'}, "^points: expected a list of points"),
        ({"negative_points": "[[1, 2], [129, 3]]"}, r"^negative_points: point 1 \(129, 3\) is outside the 128 x 96"),
        ({"negative_points": "[[-1, 2]]"}, "^negative_points: point 0 .* is outside"),
        ({"image": torch.rand(2, 8, 8)}, "^image: expected an IMAGE"),
        ({"frames": "every"}, "^frames: 'every' is not one of"),
        ({"snap": math.nan}, "^snap: "),
    ],
)
def test_bad_input_names_the_input(inputs, message):
    with pytest.raises(ValueError, match=message):
        edit(**inputs)


# Round trips: the editor's three box outputs into the renderer's three inputs draw the same image.
IMAGES = torch.rand(2, 96, 128, 3, generator=torch.Generator().manual_seed(0))
ROUND_TRIP_BOXES = '[[10, 12, 40, 30], {"x": 50, "y": 5, "w": 20.5, "h": 30, "label": "dog"}, [-20, 60, 30, 200]]'


@pytest.mark.parametrize("frames", ["per image", "one list"])
def test_box_outputs_draw_the_same_image_through_each_renderer_input(frames):
    out = edit(boxes=ROUND_TRIP_BOXES, image=IMAGES, frames=frames, snap=0)
    style = {"labels": "label", "fill_opacity": 0.3}
    from_json = BoundingBoxRenderer.execute(images=IMAGES, boxes=out["boxes"], **style)
    from_core = BoundingBoxRenderer.execute(images=IMAGES, bounding_box=out["bounding_box"], **style)
    expected = BoundingBoxRenderer.execute(
        images=IMAGES,
        boxes='[[10, 12, 40, 30], {"x1": 50, "y1": 5, "x2": 70.5, "y2": 35, "label": "dog"}, [0, 60, 30, 96]]',
        **style,
    )
    for drawn, reference in zip(from_json, expected, strict=True):
        assert torch.equal(drawn, reference)
    for drawn, reference in zip(from_core, expected, strict=True):
        assert torch.equal(drawn, reference)
    if frames == "per image":  # one list of 3 boxes on a batch of 2 reads as a list for every frame; see README
        from_bbox = BoundingBoxRenderer.execute(images=IMAGES, bbox=out["bbox"], bbox_format="xywh", **style)
        unlabelled = BoundingBoxRenderer.execute(
            images=IMAGES, boxes=out["boxes"].replace(', "label": "dog"', ""), **style
        )
        for drawn, reference in zip(from_bbox, unlabelled, strict=True):
            assert torch.equal(drawn, reference)  # BBOX carries no labels


def test_points_as_tracks_json_place_the_link_renderers_points_where_given():
    out = edit(points="[[20, 30], [100, 70.5]]", image=IMAGES)
    tracks = json.loads(out["tracks_json"])
    assert tracks == [[{"x": 20, "y": 30}], [{"x": 100, "y": 70.5}]]
    _image, alpha, _layer, _edges = LineLinkRenderer.execute(
        images=IMAGES, tracks_json=out["tracks_json"], point_radius=4.0, opacity=1.0, width=0.1
    )
    for frame in range(2):  # one point per track, held on every frame
        for x, y in ((20, 30), (100, 70.5)):
            assert alpha[frame, int(y), int(x)] > 0.99
        assert alpha[frame, 5, 5] == 0 and alpha[frame, 90, 10] == 0
