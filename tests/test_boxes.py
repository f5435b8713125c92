"""BoundingBoxRenderer: every box source, styles, labels and bad input."""
import types

import pytest
import torch

from rasterkit.nodes.boxes import BoundingBoxRenderer as Node
from rasterkit.utils import boxes as B

IMAGES = torch.full((2, 48, 64, 3), 0.25)


def render(**kw):
    kw.setdefault("labels", "none")
    return Node.run(IMAGES, **kw)


def test_json_boxes_for_every_frame_and_per_frame():
    image, alpha, layer = render(boxes="[[8, 8, 40, 30]]")
    assert alpha[0, 8, 20] > 0.9 and alpha[1, 8, 20] > 0.9  # stroke on the top edge, both frames
    image, alpha, layer = render(boxes="[[[8, 8, 40, 30]], []]")
    assert alpha[0, 8, 20] > 0.9 and alpha[1].sum() == 0
    assert torch.equal(image[1], IMAGES[1])


def test_dict_boxes_xywh_and_own_colour():
    table = B.from_json('[{"x": 4, "y": 5, "w": 10, "h": 20, "label": "dog", "id": 7, "score": 0.5, '
                        '"color": "#00FF00"}]', 1)
    assert table.xyxy.tolist() == [[4, 5, 14, 25]] and table.label == ["dog"] and table.id == [7]
    _, _, layer = render(boxes='[{"x1": 4, "y1": 4, "x2": 30, "y2": 30, "color": "#00FF00"}]', fill_opacity=0.0,
                         corner_radius=0.0)
    assert layer[0, 4, 15, :3].tolist() == pytest.approx([0, 1, 0], abs=1e-5)


def test_layer_is_straight_alpha_by_default_premultiplied_on_request():
    """Save Image writes the layer's channels as they are: a 25% orange fill must be stored as
    (255, 128, 0, 64), straight alpha, not (64, 32, 0, 64)."""
    boxes = '[{"x1": 4, "y1": 4, "x2": 40, "y2": 40, "color": "#FF8000"}]'
    straight = render(boxes=boxes, fill_opacity=0.25, stroke_width=0.0, corner_radius=0.0)[2]
    saved = (straight[0, 20, 20] * 255).round().tolist()
    assert saved == [255, 128, 0, 64]
    assert straight[0, 44, 60].tolist() == [0, 0, 0, 0]  # outside: transparent black
    premultiplied = render(boxes=boxes, fill_opacity=0.25, stroke_width=0.0, corner_radius=0.0,
                           layer_alpha="premultiplied")[2]
    assert (premultiplied[0, 20, 20] * 255).round().tolist() == [64, 32, 0, 64]


def test_inverted_boxes_are_normalised():
    a = render(boxes="[[40, 30, 8, 8]]")[1]
    b = render(boxes="[[8, 8, 40, 30]]")[1]
    assert torch.equal(a, b)


def test_boxes_outside_the_frame_are_skipped():
    image, alpha, _ = render(boxes="[[-100, -100, -20, -20], [500, 500, 600, 700]]")
    assert alpha.sum() == 0 and torch.equal(image, IMAGES)


def test_partly_outside_boxes_are_clipped():
    _, alpha, _ = render(boxes="[[-20, -20, 30, 30]]", fill_opacity=1.0)
    assert alpha[0, 0, 0] > 0.99 and alpha[0, 40, 40] == 0


def test_bbox_segs_and_mask_sources():
    from_bbox = render(boxes="", bbox=[(8, 8, 40, 30)])[1]
    assert torch.equal(from_bbox, render(boxes="[[8, 8, 40, 30]]")[1])
    seg = types.SimpleNamespace(bbox=(8, 8, 40, 30), label="person", confidence=torch.tensor([0.8]))
    table = B.from_segs(((48, 64), [seg]), 2)
    assert table.label == ["person", "person"] and table.score[0] == pytest.approx(0.8)
    mask = torch.zeros(2, 48, 64)
    mask[0, 10:20, 5:15] = 1
    mask[0, 30:40, 40:60] = 1
    table = B.from_mask(mask, 2)
    assert table.frame.tolist() == [0, 0] and table.xyxy.tolist() == [[5, 10, 15, 20], [40, 30, 60, 40]]
    _, alpha, _ = render(boxes="", mask=mask[:1])  # one mask frame serves every frame
    assert alpha[1].sum() > 0


def test_labels_stay_inside_the_frame():
    _, alpha, _ = Node.run(IMAGES, boxes='[{"x1": 50, "y1": 0, "x2": 63, "y2": 20, "label": "a long label"}]',
                           labels="label", fill_opacity=0.0, stroke_width=0.0, label_size=10)
    columns = alpha[0].sum(0).nonzero()
    rows = alpha[0].sum(1).nonzero()
    assert columns.min() < 50  # shifted left to fit
    assert rows.min() >= 0 and alpha[0, 0].sum() > 0  # no room above: inside the box top


def test_palette_by_label_is_stable_across_frames():
    cat = '{"x1": %d, "y1": 4, "x2": %d, "y2": 20, "label": "cat"}'
    per_frame = "[[%s], [%s]]" % (cat % (4, 20), cat % (30, 50))
    _, _, layer = render(boxes=per_frame, fill_opacity=1.0, corner_radius=0)
    assert layer[0, 10, 10].tolist() == layer[1, 10, 40].tolist()
    _, _, layer = render(boxes="[[4, 4, 20, 20], [30, 4, 50, 20]]", fill_opacity=1.0, corner_radius=0,
                         color_by="index")
    assert layer[0, 10, 10].tolist() != layer[0, 10, 40].tolist()


def test_rgba_images_keep_alpha_and_inputs_are_untouched():
    images = torch.rand(1, 32, 32, 4)
    before = images.clone()
    image, _, _ = Node.run(images, boxes="[[4, 4, 20, 20]]", labels="none")
    assert image.shape == (1, 32, 32, 4) and torch.equal(images, before)


@pytest.mark.parametrize("boxes,message", [
    ("[[1, 2, 3", "boxes: not valid JSON"),
    ('{"x1": 1}', "boxes: expected a list"),
    ("[[1, 2, 3]]", "boxes: a box is"),
    ('[["a", 2, 3, 4]]', "boxes: a box is"),
    ("[[NaN, 2, 3, 4]]", "box 0 (frame 0) has a non-finite coordinate"),
    ("[[1, 2, 3, 4], [Infinity, 2, 3, 4]]", "box 1 (frame 0) has a non-finite"),
    ('[{"x1": 1, "y1": 2}]', "needs numeric x1,y1,x2,y2"),
    ('[{"x1": 1, "y1": 2, "x2": 3, "y2": 4, "id": "seven"}]', "non-integer id"),
    ("[[[1, 2, 3, 4]], [], []]", "3 per-frame box lists for a batch of 2 frames"),
])
def test_bad_boxes_name_the_input(boxes, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        render(boxes=boxes)


def test_other_bad_inputs():
    with pytest.raises(ValueError, match="color: expected a hex colour"):
        render(boxes="[[1, 2, 3, 4]]", color="red")
    with pytest.raises(ValueError, match="box 0 color"):
        render(boxes='[{"x1": 1, "y1": 2, "x2": 3, "y2": 4, "color": "#12"}]')
    with pytest.raises(ValueError, match="connect one box source"):  # the boxes text does not count (DESIGN.md)
        render(boxes="[[1, 2, 3, 4]]", bbox=[(1, 2, 3, 4)], segs=((48, 64), []))
    with pytest.raises(ValueError, match="mask: 3 mask frames for a batch of 2"):
        render(boxes="", mask=torch.zeros(3, 48, 64))
    with pytest.raises(ValueError, match="segs: expected SEGS"):
        render(boxes="", segs="nonsense")
    with pytest.raises(ValueError, match="images: expected an IMAGE"):
        Node.run(torch.zeros(48, 64, 3), boxes="[]")
    with pytest.raises(ValueError, match="bbox: 3 per-frame box lists"):
        render(boxes="", bbox=[[(1, 2, 3, 4)], [], []])


def test_empty_inputs_give_the_frames_back():
    for empty in ("", "[]", "[[], []]"):
        image, alpha, layer = render(boxes=empty)
        assert torch.equal(image, IMAGES) and alpha.sum() == 0
    image, alpha, _ = render(boxes="", mask=torch.zeros(2, 48, 64))
    assert alpha.sum() == 0


def test_core_bounding_box_detections():
    from rasterkit.utils.boxes import from_bounding_box

    detection = {"x": 10, "y": 20, "width": 30, "height": 40, "label": "cat", "score": 0.9}
    for value in ([detection], [[detection]]):  # one image's list serves every frame
        table = from_bounding_box(value, 2)
        assert table.frame.tolist() == [0, 1] and table.xyxy[0].tolist() == [10, 20, 40, 60]
        assert table.label == ["cat", "cat"] and table.score == [0.9, 0.9]
    table = from_bounding_box([[detection], []], 2)
    assert table.frame.tolist() == [0]
    for bad in ("text", [{"x": 1}], [[detection], "x"], [[detection], [], []]):
        with pytest.raises(ValueError, match="^bounding_box: "):
            from_bounding_box(bad, 2)


def test_a_connected_socket_wins_over_the_default_boxes_text():
    from rasterkit.nodes.boxes import BoundingBoxRenderer

    images = torch.zeros(1, 32, 32, 3)
    spec = next(s for s in BoundingBoxRenderer.INPUTS if s.name == "boxes")
    _, alpha, _ = BoundingBoxRenderer.execute(images=images, boxes=spec.default, bbox=[(2, 2, 12, 12)], labels="none")
    assert alpha[0, 20, 20] == 0 and alpha[0, 7, 7] > 0
    with pytest.raises(ValueError, match="^bbox: connect one box source, got bbox, mask"):
        BoundingBoxRenderer.execute(images=images, bbox=[(2, 2, 12, 12)], mask=torch.zeros(1, 32, 32))


def test_index_colours_stay_with_the_box_from_frame_to_frame():
    from rasterkit.nodes.boxes import BoundingBoxRenderer

    boxes = "[[[2, 2, 10, 10], [20, 20, 28, 28]], [[2, 2, 10, 10], [20, 20, 28, 28]]]"
    for color_by in ("index", "label"):  # label-less boxes fall back on their index too
        image, _, _ = BoundingBoxRenderer.execute(images=torch.zeros(2, 32, 32, 3), boxes=boxes, color_by=color_by,
                                                  labels="none", fill_opacity=1.0)
        assert torch.equal(image[0], image[1])
        assert not torch.equal(image[0, 6, 6], image[0, 24, 24])


def test_every_input_has_a_tooltip():
    assert [spec.name for spec in Node.INPUTS if not spec.tooltip] == []
