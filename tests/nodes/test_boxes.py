"""BoundingBoxRenderer: every box source, styles, labels and bad input."""

import types

import numpy as np
import pytest
import torch

from rasterkit.nodes.boxes import BoundingBoxRenderer as Node
from rasterkit.utils.inputs import boxes as B

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
    table = B.from_json(
        '[{"x": 4, "y": 5, "w": 10, "h": 20, "label": "dog", "id": 7, "score": 0.5, "color": "#00FF00"}]', 1
    )
    assert table.xyxy.tolist() == [[4, 5, 14, 25]] and table.label == ["dog"] and table.id == [7]
    _, _, layer = render(
        boxes='[{"x1": 4, "y1": 4, "x2": 30, "y2": 30, "color": "#00FF00"}]', fill_opacity=0.0, corner_radius=0.0
    )
    assert layer[0, 4, 15, :3].tolist() == pytest.approx([0, 1, 0], abs=1e-5)


def test_layer_is_straight_alpha_by_default_premultiplied_on_request():
    """Save Image writes the layer's channels as they are: a 25% orange fill must be stored as
    (255, 128, 0, 64), straight alpha, not (64, 32, 0, 64)."""
    boxes = '[{"x1": 4, "y1": 4, "x2": 40, "y2": 40, "color": "#FF8000"}]'
    straight = render(boxes=boxes, fill_opacity=0.25, stroke_width=0.0, corner_radius=0.0)[2]
    saved = (straight[0, 20, 20] * 255).round().tolist()
    assert saved == [255, 128, 0, 64]
    assert straight[0, 44, 60].tolist() == [0, 0, 0, 0]  # outside: transparent black
    premultiplied = render(
        boxes=boxes, fill_opacity=0.25, stroke_width=0.0, corner_radius=0.0, layer_alpha="premultiplied"
    )[2]
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
    from_bbox = render(boxes="", bbox=[(8, 8, 40, 30)], bbox_format="xyxy")[1]
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
    _, alpha, _ = Node.run(
        IMAGES,
        boxes='[{"x1": 50, "y1": 0, "x2": 63, "y2": 20, "label": "a long label"}]',
        labels="label",
        fill_opacity=0.0,
        stroke_width=0.0,
        label_size=10,
    )
    columns = alpha[0].sum(0).nonzero()
    rows = alpha[0].sum(1).nonzero()
    assert columns.min() < 50  # shifted left to fit
    assert rows.min() >= 0 and alpha[0, 0].sum() > 0  # no room above: inside the box top


def test_palette_by_label_is_stable_across_frames():
    cat = '{"x1": %d, "y1": 4, "x2": %d, "y2": 20, "label": "cat"}'
    per_frame = f"[[{cat % (4, 20)}], [{cat % (30, 50)}]]"
    _, _, layer = render(boxes=per_frame, fill_opacity=1.0, corner_radius=0)
    assert layer[0, 10, 10].tolist() == layer[1, 10, 40].tolist()
    _, _, layer = render(boxes="[[4, 4, 20, 20], [30, 4, 50, 20]]", fill_opacity=1.0, corner_radius=0, color_by="index")
    assert layer[0, 10, 10].tolist() != layer[0, 10, 40].tolist()


def test_rgba_images_keep_alpha_and_inputs_are_untouched():
    images = torch.rand(1, 32, 32, 4)
    before = images.clone()
    image, _, _ = Node.run(images, boxes="[[4, 4, 20, 20]]", labels="none")
    assert image.shape == (1, 32, 32, 4) and torch.equal(images, before)


@pytest.mark.parametrize(
    "boxes,message",
    [
        ("[[1, 2, 3", "boxes: not valid JSON"),
        ('{"x1": 1}', "boxes: expected a list"),
        ("[[1, 2, 3]]", "boxes: a box is"),
        ('[["a", 2, 3, 4]]', "boxes: a box is"),
        ("[[NaN, 2, 3, 4]]", "box 0 (frame 0) has a non-finite coordinate"),
        ("[[1, 2, 3, 4], [Infinity, 2, 3, 4]]", "box 1 (frame 0) has a non-finite"),
        ('[{"x1": 1, "y1": 2}]', "needs numeric x1,y1,x2,y2"),
        ('[{"x1": 1, "y1": 2, "x2": 3, "y2": 4, "id": "seven"}]', "non-integer id"),
        ("[[[1, 2, 3, 4]], [], []]", "3 per-frame box lists for a batch of 2 frames"),
    ],
)
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
        render(boxes="", bbox=[[(1, 2, 3, 4)], [], []], bbox_format="xyxy")


def test_empty_inputs_give_the_frames_back():
    for empty in ("", "[]", "[[], []]"):
        image, alpha, layer = render(boxes=empty)
        assert torch.equal(image, IMAGES) and alpha.sum() == 0
    image, alpha, _ = render(boxes="", mask=torch.zeros(2, 48, 64))
    assert alpha.sum() == 0


def test_core_bounding_box_detections():
    from rasterkit.utils.inputs.boxes import from_bounding_box

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
        image, _, _ = BoundingBoxRenderer.execute(
            images=torch.zeros(2, 32, 32, 3), boxes=boxes, color_by=color_by, labels="none", fill_opacity=1.0
        )
        assert torch.equal(image[0], image[1])
        assert not torch.equal(image[0, 6, 6], image[0, 24, 24])


def test_every_input_has_a_tooltip():
    assert [spec.name for spec in Node.INPUTS if not spec.tooltip] == []


def test_palette_from_hex_colours_takes_the_place_of_the_named_one():
    boxes = "[[2, 2, 10, 10], [14, 2, 22, 10], [26, 2, 34, 10]]"
    _, _, layer = render(
        boxes=boxes, fill_opacity=1.0, color_by="index", palette="tab10", palette_colors="#ff0000, #00FF00"
    )
    assert [layer[0, 6, x, :3].tolist() for x in (6, 18, 30)] == [[1, 0, 0], [0, 1, 0], [1, 0, 0]]
    _, _, named = render(boxes=boxes, fill_opacity=1.0, color_by="index", palette="tab10", palette_colors=" ")
    assert named[0, 6, 6, :3].tolist() == pytest.approx([0x1F / 255, 0x77 / 255, 0xB4 / 255])  # tab10's first
    with pytest.raises(ValueError, match="^palette_colors: colour 2: expected a hex colour"):
        render(boxes=boxes, palette_colors="#ff0000;red")
    with pytest.raises(ValueError, match="^palette_colors: expected hex colours"):
        render(boxes=boxes, palette_colors=" , ;")


LABEL_BOX = (40.0, 30.0, 100.0, 70.0)  # x1, y1, x2, y2 in a 160 x 120 frame: room on every side


def label_extent(alpha):
    """(left, top, right, bottom) of the pixels a label's background covers fully, in frame 0."""
    rows, columns = (alpha[0] > 0.99).nonzero(as_tuple=True)
    return columns.min().item(), rows.min().item(), columns.max().item() + 1, rows.max().item() + 1


def label_alpha(box=LABEL_BOX, size=(120, 160), **kw):
    boxes = '[{{"x1": {:g}, "y1": {:g}, "x2": {:g}, "y2": {:g}, "label": "cat"}}]'.format(*box)
    return Node.run(
        torch.zeros(1, *size, 3), boxes=boxes, labels="label", stroke_width=0.0, fill_opacity=0.0, label_size=12, **kw
    )[1]


@pytest.mark.parametrize(
    "anchor",
    [
        "top_left",
        "top_center",
        "top_right",
        "center_left",
        "center",
        "center_right",
        "bottom_left",
        "bottom_center",
        "bottom_right",
    ],
)
def test_label_anchors_place_the_label_from_the_box(anchor):
    from rasterkit.utils.gpu_rendering.labels import text_atlas

    padding = 4
    _, rect = text_atlas(["cat"], 12)
    w, h = rect[0, 2].item() + 2 * padding, rect[0, 3].item() + 2 * padding
    x1, y1, x2, y2 = LABEL_BOX
    vertical, horizontal = ("center", "center") if anchor == "center" else anchor.split("_")
    left = {"left": x1, "center": (x1 + x2 - w) // 2, "right": x2 - w}[horizontal]
    top = {"top": y1 - h, "center": (y1 + y2 - h) // 2, "bottom": y2}[vertical]
    assert label_extent(label_alpha(label_anchor=anchor, label_padding=padding)) == (left, top, left + w, top + h)


def test_labels_go_inside_the_box_without_room_outside():
    from rasterkit.utils.gpu_rendering.labels import PADDING, text_atlas

    _, rect = text_atlas(["cat"], 12)
    h = rect[0, 3].item() + 2 * PADDING
    assert label_extent(label_alpha(box=(40, 2, 100, 70), label_anchor="top_right"))[1] == 2
    assert label_extent(label_alpha(box=(40, 30, 100, 118), label_anchor="bottom_left"))[3] == 118
    assert label_extent(label_alpha(box=(40, 30, 100, 118), label_anchor="bottom_left"))[1] == 118 - h


def test_label_padding_and_text_colour():
    narrow = label_extent(label_alpha(label_padding=0))
    wide = label_extent(label_alpha(label_padding=10))
    assert (wide[2] - wide[0]) - (narrow[2] - narrow[0]) == 20 and (wide[3] - wide[1]) - (narrow[3] - narrow[1]) == 20
    boxes = '[{"x1": 40, "y1": 30, "x2": 100, "y2": 70, "label": "cat", "color": "#0000FF"}]'
    for text_color, ink, blend in (
        ("#FF0000", (1, 0, 0), lambda r, g, b: g == 0),  # red over blue: no green
        ("", (1, 1, 1), lambda r, g, b: r == g),
    ):  # auto: white on a dark blue
        image = Node.run(
            torch.zeros(1, 120, 160, 3),
            boxes=boxes,
            labels="label",
            stroke_width=0.0,
            fill_opacity=0.0,
            label_size=12,
            text_color=text_color,
        )[0][0, 10:30, 40:100]
        colours = {tuple(c) for c in image.reshape(-1, 3).tolist()}
        assert ink in colours and (0, 0, 1) in colours  # solid ink on the solid background
        assert all(blend(*c) for c in colours)
    with pytest.raises(ValueError, match="^text_color: expected a hex colour"):
        label_alpha(text_color="white")


def test_long_labels_wrap_at_spaces_below_the_maximum_width():
    boxes = '[{"x1": 10, "y1": 90, "x2": 150, "y2": 115, "label": "a cat on a very long mat"}]'

    def run(**kw):
        return Node.run(
            torch.zeros(1, 120, 160, 3),
            boxes=boxes,
            labels="label",
            stroke_width=0.0,
            fill_opacity=0.0,
            label_size=12,
            **kw,
        )[1]

    one_line, wrapped = label_extent(run()), label_extent(run(label_max_width=40))
    assert wrapped[2] - wrapped[0] <= 40 + 2 * 3 < one_line[2] - one_line[0]
    assert wrapped[3] - wrapped[1] > 2 * (one_line[3] - one_line[1])
    assert wrapped[3] == 90  # still above its box


def test_overlapping_labels_move_apart_highest_score_first():
    boxes = (
        '[{"x1": 20, "y1": 40, "x2": 100, "y2": 90, "label": "cat", "score": 0.2}, '
        '{"x1": 22, "y1": 42, "x2": 100, "y2": 90, "label": "cat", "score": 0.9}]'
    )

    def run(**kw):
        return Node.run(
            torch.zeros(1, 120, 160, 3),
            boxes=boxes,
            labels="label",
            stroke_width=0.0,
            fill_opacity=0.0,
            label_size=12,
            **kw,
        )[1]

    alone = label_extent(label_alpha(box=(22, 42, 100, 90)))
    height = alone[3] - alone[1]
    spread = label_extent(run(label_avoid_overlap=True))
    assert spread[1] == alone[1] and spread[3] == alone[3] + height  # the 0.9 label stays, the 0.2 goes below it
    assert spread[0] == 20 and spread[2] == alone[2]  # each keeps its column
    assert label_extent(run())[3] == alone[3]  # without avoidance they overlap


def test_avoid_overlaps_is_per_frame_and_bounded():
    from rasterkit.utils.gpu_rendering.labels import AVOID_MAX_LABELS, AVOID_STEPS, _avoid_overlaps

    rects = torch.tensor([[0.0, 10, 20, 10], [5, 12, 20, 10], [0, 10, 20, 10]])  # left, top, width, height
    tops = _avoid_overlaps(torch.tensor([0, 0, 1]), rects, torch.tensor([1.0, 0.5, 0.0]), 100)
    assert tops.tolist() == [10, 20, 10]  # the third is alone in its frame
    stack = torch.tensor([[0.0, 0, 20, 10]] * (AVOID_STEPS + 3))
    tops = _avoid_overlaps(torch.zeros(len(stack), dtype=torch.int64), stack, torch.zeros(len(stack)), 1000)
    assert tops[: AVOID_STEPS + 1].tolist() == [10.0 * i for i in range(AVOID_STEPS + 1)]
    assert len(set(tops.tolist())) < len(stack)  # no more than AVOID_STEPS moves each: the last ones give up
    crowd = torch.tensor([[0.0, 0, 20, 10]] * (AVOID_MAX_LABELS + 2))
    priority = torch.arange(len(crowd), dtype=torch.float32)  # the last two have the highest priorities
    tops = _avoid_overlaps(torch.zeros(len(crowd), dtype=torch.int64), crowd, priority, 1000)
    assert tops[-1] == 0 and tops[-2] == 10 and tops[:2].tolist() == [0, 0]  # beyond the cap: left in place


def test_new_widgets_keep_todays_drawing_by_default():
    boxes = '[{"x1": 8, "y1": 20, "x2": 40, "y2": 40, "label": "dog", "score": 0.5}]'
    images = torch.rand(1, 48, 64, 3)
    default = Node.run(images, boxes=boxes, labels="label+score")
    spelled = Node.run(
        images,
        boxes=boxes,
        labels="label+score",
        palette_colors="",
        label_anchor="top_left",
        text_color="",
        label_padding=3,
        label_max_width=0,
        label_avoid_overlap=False,
        marker="box",
    )
    assert all(torch.equal(a, b) for a, b in zip(default, spelled, strict=False))


def marker_alpha(box, **kw):
    from sdf_reference import H, W

    boxes = "[[{:g}, {:g}, {:g}, {:g}]]".format(*box)
    return Node.run(torch.zeros(1, H, W, 3), boxes=boxes, labels="none", **kw)[1][0].numpy()


@pytest.mark.parametrize("box,stroke", [((4.3, 5.1, 40.2, 30.7), 2.0), ((10, 3, 30, 34), 3.5), ((20, 10, 24, 14), 1.0)])
def test_ellipse_marker_against_a_supersampled_ellipse(box, stroke):
    """The outline of the ellipse inscribed in the box: samples within stroke/2 of the curve (distance to a
    dense set of its points)."""
    from scipy.spatial import cKDTree

    from sdf_reference import assert_close, pixel_mean, samples

    X, Y = samples()
    x1, y1, x2, y2 = box
    angle = np.linspace(0, 2 * np.pi, 4000, endpoint=False)
    curve = np.stack([(x1 + x2) / 2 + (x2 - x1) / 2 * np.cos(angle), (y1 + y2) / 2 + (y2 - y1) / 2 * np.sin(angle)], 1)
    distance, _ = cKDTree(curve).query(np.stack([X.ravel(), Y.ravel()], 1), distance_upper_bound=stroke)
    reference = pixel_mean((distance <= stroke / 2).reshape(X.shape))
    assert_close(marker_alpha(box, marker="ellipse", stroke_width=stroke, fill_opacity=0.0), reference)


@pytest.mark.parametrize("box,radius", [((4.3, 5.1, 40.2, 30.7), 6.0), ((10, 3, 30, 34), 2.5)])
def test_dot_marker_against_a_supersampled_disc(box, radius):
    from sdf_reference import assert_close, pixel_mean, samples

    X, Y = samples()
    cx, cy = (box[0] + box[2]) / 2, (box[1] + box[3]) / 2
    reference = pixel_mean(np.hypot(X - cx, Y - cy) <= radius)
    assert_close(marker_alpha(box, marker="dot", marker_size=radius, stroke_opacity=1.0), reference)


@pytest.mark.parametrize(
    "box,radius,width,opacity", [((12.3, 10.1, 32.2, 26.7), 4.0, 8.0, 1.0), ((10, 9, 34, 28), 0.0, 5.5, 0.6)]
)
def test_halo_marker_against_a_supersampled_fading_ring(box, radius, width, opacity):
    """Around the box, out to `width`: opacity * (1 - smoothstep(d / width)) at a distance d from it; the fill
    inside. On the pixels across the box's edge, where the halo's inner edge and the fill's edge coincide,
    their partial coverages compose source-over rather than add: those are held to the mean only."""
    from sdf_reference import H, S, W, pixel_mean, rounded_box_distance, samples

    X, Y = samples()
    distance = rounded_box_distance(X, Y, box, radius)
    t = np.clip(distance / width, 0, 1)
    halo = np.where(distance > 0, opacity * (1 - t) ** 2 * (1 + 2 * t), 0.0)
    fill = 0.25 * (distance <= 0)
    reference = pixel_mean(fill + halo)
    alpha = marker_alpha(
        box, marker="halo", marker_size=width, corner_radius=radius, stroke_opacity=opacity, fill_opacity=0.25
    )
    error = np.abs(alpha - reference)
    across_edge = np.abs(distance[S // 2 :: S, S // 2 :: S].reshape(H, W)) < 1
    assert error.mean() < 0.01 and error[~across_edge].max() < 0.1, (error.mean(), error[~across_edge].max())


def halo_levels(width, opacity):
    """8-bit alpha of a white halo marker along a row leaving a box's right edge (from its first pixel
    wholly outside the box out past the halo), and the box's right edge."""
    _, alpha, _ = Node.run(
        torch.zeros(1, 40, 40 + int(width) + 8, 3),
        boxes="[[4, 4, 36, 36]]",
        labels="none",
        marker="halo",
        marker_size=width,
        stroke_opacity=opacity,
        fill_opacity=0.0,
        color="#FFFFFF",
    )
    return np.round(alpha[0, 20, 36:].numpy().astype(np.float64) * 255)


def test_a_wide_halo_fades_without_bands_at_8_bit():
    """The halo is a smooth function of the distance from the box: along a row out of the box its 8-bit
    values fall monotonically, a level or two a pixel, with no plateau followed by a jump (nested rings of
    stepped opacity gave bands: flat runs and then steps of opacity / rings)."""
    levels = halo_levels(64.0, 0.3)
    steps = np.diff(levels)
    assert levels[0] >= 0.3 * 255 - 2 and levels[-1] == 0
    assert (steps <= 0).all() and steps.min() >= -2, steps


def test_a_narrow_halo_falls_smoothly():
    """The template's halo (14 px, opacity 1): monotone, and each step within a few levels of the step
    before it (rings gave flat runs, then drops of 255 / rings)."""
    steps = np.diff(halo_levels(14.0, 1.0))
    assert (steps <= 0).all() and np.abs(np.diff(steps)).max() <= 10, steps


def test_later_halos_never_cover_a_label():
    """Labels of a frame are drawn over every box's marks: a later box's halo that reaches an earlier box's
    label leaves the label's pixels as they are without that box."""
    first = '{"x1": 10, "y1": 30, "x2": 60, "y2": 90, "label": "first"}'
    second = '{"x1": 70, "y1": 24, "x2": 150, "y2": 90, "label": "second"}'

    def run(boxes, **kw):
        kw = dict(labels="label", marker="halo", marker_size=80.0, label_size=12, label_padding=3) | kw
        return Node.run(torch.zeros(1, 100, 160, 3), boxes=f"[{boxes}]", **kw)

    left, top, right, bottom = label_extent(run(first, marker_size=0.0, fill_opacity=0.0)[1])
    inside = (slice(top + 3, bottom - 3), slice(left + 3, right - 3))  # the tab's opaque middle
    halo = run(second, labels="none")[1][0]
    assert halo[inside].min() > 0.05  # the second box's halo reaches the first label
    alone, both = run(first)[0][0], run(f"{first}, {second}")[0][0]
    assert (both[inside] - alone[inside]).abs().max() < 1e-6


def test_a_later_label_is_drawn_whole_over_an_earlier_one():
    """Each label is its tab then its text: a label over another hides the text under it (every tab, then
    every text, drew the earlier text over the later tab)."""
    earlier = '{"x1": 20, "y1": 40, "x2": 100, "y2": 90, "label": "WWWW"}'
    later = '{"x1": 22, "y1": 42, "x2": 100, "y2": 90, "label": "ii"}'

    def run(boxes):
        kw = dict(labels="label", stroke_width=0.0, fill_opacity=0.0, label_size=12, label_padding=3)
        return Node.run(torch.zeros(1, 120, 160, 3), boxes=f"[{boxes}]", color="#FF0000", **kw)

    left, top, right, bottom = label_extent(run(later)[1])
    inside = (slice(top, bottom), slice(left + 3, right - 3))
    assert run(earlier)[1][0][inside].sum() > 0  # the earlier label lies under the later one
    assert (run(f"{earlier}, {later}")[0][0][inside] - run(later)[0][0][inside]).abs().max() < 1e-6


def test_oriented_boxes_in_every_form_give_the_same_table():
    """An angle in degrees (clockwise on screen) beside x1,y1,x2,y2 or x,y,w,h; ultralytics' xywhr (radians)
    and its 4 corners (xyxyxyxy: the first side sets width and angle, so the same rectangle may come back
    with width and height swapped and the angle a quarter turn on)."""
    import math

    cx, cy, w, h, r = 40.0, 30.0, 24.0, 10.0, math.radians(30)
    u, v = np.array([math.cos(r), math.sin(r)]) * w / 2, np.array([-math.sin(r), math.cos(r)]) * h / 2
    corners = [list(map(float, np.array([cx, cy]) + a * u + b * v)) for a, b in ((-1, -1), (1, -1), (1, 1), (-1, 1))]
    forms = [
        {"x1": 28, "y1": 25, "x2": 52, "y2": 35, "angle": 30},
        {"x": 28, "y": 25, "w": 24, "h": 10, "angle": 390},
        {"xywhr": [cx, cy, w, h, r]},
        {"points": corners},
        {"points": [c for p in corners for c in p]},
    ]
    for form in forms:
        table = B.from_json(str([form]).replace("'", '"'), 1)
        assert table.xyxy[0].tolist() == pytest.approx([28, 25, 52, 35], abs=1e-4), form
        assert table.angle.item() == pytest.approx(r, abs=1e-6), form
    ultralytics_order = [corners[i] for i in (2, 3, 0, 1)]  # pt1 = centre + w/2 + h/2 along the axes, ...
    table = B.from_json(f'[{{"points": {ultralytics_order}}}]', 1)
    assert math.remainder(table.angle.item() - r, math.pi) == pytest.approx(0, abs=1e-6)
    assert sorted((table.xyxy[0, 2:] - table.xyxy[0, :2]).tolist()) == pytest.approx([h, w], abs=1e-4)
    assert B.from_json('[{"x1": 0, "y1": 0, "x2": 4, "y2": 2, "angle": -90}]', 1).bounds()[0].tolist() == pytest.approx(
        [1, -1, 3, 3], abs=1e-5
    )
    huge = B.from_json(
        '[{"x1": 0, "y1": 0, "x2": 4, "y2": 2, "angle": %d}, '  # noqa: UP031
        '{"x1": 0, "y1": 0, "x2": 4, "y2": 2, "angle": 1e300}]' % (360 * 10**400 + 45),
        1,
    )
    assert huge.angle.tolist() == pytest.approx(
        [math.radians(45), math.remainder(math.radians(math.fmod(1e300, 360)), 2 * math.pi)], abs=1e-6
    )


def turned_box_reference(box, degrees, radius, stroke):
    """Per-pixel coverage of a box turned about its centre (fill, outline) from 16x16 samples."""
    from sdf_reference import pixel_mean, rounded_box_distance, samples, turned

    X, Y = turned(*samples(), ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2), degrees)
    d = rounded_box_distance(X, Y, box, min(radius, (box[2] - box[0]) / 2, (box[3] - box[1]) / 2))
    return pixel_mean(d <= 0), pixel_mean(np.abs(d) <= stroke / 2)


@pytest.mark.parametrize("degrees", [0, 30, 90, 137])
def test_oriented_box_marker_against_a_supersampled_box(degrees):
    from sdf_reference import assert_close

    box, radius, stroke = (9.3, 12.1, 35.2, 26.7), 4.0, 2.5
    fill, outline = turned_box_reference(box, degrees, radius, stroke)
    boxes = '[{{"x1": {:g}, "y1": {:g}, "x2": {:g}, "y2": {:g}, "angle": {:g}}}]'.format(*box, degrees)

    def alpha(**kw):
        return Node.run(
            torch.zeros(1, 37, 45, 3),
            boxes=boxes,
            labels="none",
            corner_radius=radius,
            **kw,
        )[1][0].numpy()

    assert_close(alpha(stroke_width=stroke, fill_opacity=0.0), outline)
    assert_close(alpha(stroke_width=0.0, fill_opacity=1.0), fill)
    brackets = alpha(stroke_width=stroke, fill_opacity=0.0, corner_length=5.0)
    assert 0 < brackets.sum() < alpha(stroke_width=stroke, fill_opacity=0.0).sum() - 10


@pytest.mark.parametrize("degrees", [0, 30, 90, 137])
def test_oriented_ellipse_marker_is_filled_and_turned(degrees):
    """The inscribed ellipse, turned with its box: the fill in the box's fill colour under the outline."""
    from sdf_reference import assert_close, ellipse_inside, pixel_mean, samples

    box, stroke, fill_opacity = (9.3, 10.1, 37.2, 26.7), 2.0, 0.4
    centre, radii = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2), ((box[2] - box[0]) / 2, (box[3] - box[1]) / 2)
    inside, distance = ellipse_inside(*samples(), centre, radii, degrees, stroke / 2 + 0.01)
    boxes = '[{{"x1": {:g}, "y1": {:g}, "x2": {:g}, "y2": {:g}, "angle": {:g}}}]'.format(*box, degrees)
    alpha = Node.run(
        torch.zeros(1, 37, 45, 3),
        boxes=boxes,
        labels="none",
        marker="ellipse",
        stroke_width=stroke,
        fill_opacity=fill_opacity,
    )[1][0].numpy()
    assert_close(alpha, pixel_mean(np.maximum(fill_opacity * inside, distance <= stroke / 2)))


def test_oriented_boxes_keep_their_marks_and_labels_upright():
    """Labels sit at their anchor on the turned box's upright bounds; dots stay at the centre; halos turn."""
    turned = '[{"x1": 50, "y1": 40, "x2": 110, "y2": 80, "angle": 90, "label": "cat"}]'
    upright = '[{"x1": 60, "y1": 30, "x2": 100, "y2": 90, "label": "cat"}]'  # the same bounds
    run = lambda boxes, **kw: Node.run(torch.zeros(1, 120, 160, 3), boxes=boxes, label_size=12, **kw)[1]  # noqa: E731
    labelled = [
        label_extent(run(boxes, labels="label", stroke_width=0.0, fill_opacity=0.0)) for boxes in (turned, upright)
    ]
    assert labelled[0] == labelled[1]
    for marker in ("box", "dot", "halo", "ellipse"):
        a, b = (
            run(boxes, labels="none", marker=marker, stroke_width=2.0, fill_opacity=0.3) for boxes in (turned, upright)
        )
        assert (a - b).abs().max() < 1e-4, marker  # a quarter turn of a 60 x 40 box is the 40 x 60 one


@pytest.mark.parametrize(
    "box,message",
    [
        ('{"x1": 1, "y1": 2, "x2": 3, "y2": 4, "angle": NaN}', "box 0 (frame 0) has a non-finite angle"),
        ('{"x1": 1, "y1": 2, "x2": 3, "y2": 4, "angle": -Infinity}', "has a non-finite angle"),
        ('{"x1": 1, "y1": 2, "x2": 3, "y2": 4, "angle": "30"}', "has a non-numeric angle"),
        ('{"x1": 1, "y1": 2, "x2": 3, "y2": 4, "angle": true}', "has a non-numeric angle"),
        ('{"xywhr": [1, 2, 3, 4]}', "has xywhr [1, 2, 3, 4]; expected [cx, cy, w, h, r]"),
        ('{"xywhr": [1, 2, 3, 4, NaN]}', "has a non-finite xywhr angle"),
        ('{"xywhr": [1, 2, 3, 4, %d]}' % 10**400, "has an xywhr angle out of range"),  # noqa: UP031
        ('{"xywhr": [1, 2, 3, 4, 0.5], "angle": 10}', "gives its angle twice"),
        ('{"points": [[0, 0], [4, 0], [4, 2]]}', "expected 4 corners"),
        ('{"points": [[0, 0], [4, 0], [4, 2], [0, NaN]]}', "has a non-finite coordinate"),
        ('{"points": [[0, 0], [40, 0], [30, 20], [0, 20]]}', "not the corners of a rectangle"),
        ('{"points": [[0, 0], [4, 2], [4, 0], [0, 2]]}', "not the corners of a rectangle"),
        ('{"points": "0 0 4 0 4 2 0 2"}', "expected 4 corners"),
    ],
)
def test_bad_oriented_boxes_name_the_input(box, message):
    import re

    with pytest.raises(ValueError, match="^boxes: .*" + re.escape(message)):
        render(boxes=f"[{box}]")


def test_image_only_outputs_the_same_image_and_blanks():
    images = torch.rand(2, 40, 60, 3)
    boxes = "[[5, 5, 30, 25]]"
    image, alpha, layer = Node.run(images, boxes=boxes, labels="none")
    only = Node.run(images, boxes=boxes, labels="none", outputs="image only")
    assert torch.equal(only[0], image) and alpha.any()
    assert only[1].shape == (2, 1, 1) and only[2].shape == (2, 1, 1, 4) and not only[1].any() and not only[2].any()


def batch_crop_from_mask_bboxes(masks, crop_size_mult=1.0):
    """KJNodes' Batch Crop From Mask's `bboxes` output (nodes/batchcrop_nodes.py, bbox_smooth_alpha 1):
    per frame, a box of the largest mask's size around the mask's mean pixel, clipped to the frame,
    as the tuple (min_x, min_y, width, height) of Python ints."""
    sizes = []
    for mask in masks:
        ys, xs = np.nonzero(mask.numpy())
        sizes.append((xs.max() - xs.min(), ys.max() - ys.min()))
    half_w = round(round(max(w for w, _ in sizes) * crop_size_mult) / 2)
    half_h = round(round(max(h for _, h in sizes) * crop_size_mult) / 2)
    boxes = []
    for mask in masks:
        ys, xs = np.nonzero(mask.numpy())
        cx, cy = round(np.mean(xs)), round(np.mean(ys))
        min_x, max_x = max(0, cx - half_w), min(mask.shape[1], cx + half_w)
        min_y, max_y = max(0, cy - half_h), min(mask.shape[0], cy + half_h)
        boxes.append((min_x, min_y, max_x - min_x, max_y - min_y))
    return boxes


def points_editor_bboxes(drawn, bbox_format="xyxy"):
    """KJNodes' Points Editor's `bbox` output (nodes/curve_nodes.py): the boxes drawn on its one canvas
    (startX, startY, endX, endY in any order) as (x_min, y_min, x_max, y_max) tuples, or with its
    bbox_format xywh (x_min, y_min, width, height)."""
    boxes = []
    for box in drawn:
        x_min, x_max = sorted((int(box["startX"]), int(box["endX"])))
        y_min, y_max = sorted((int(box["startY"]), int(box["endY"])))
        boxes.append(
            (x_min, y_min, x_max, y_max) if bbox_format == "xyxy" else (x_min, y_min, x_max - x_min, y_max - y_min)
        )
    return boxes


def test_kjnodes_batch_crop_from_mask_is_xywh_one_box_per_frame():
    masks = torch.zeros(2, 48, 64)
    masks[0, 10:20, 8:22] = 1
    masks[1, 20:34, 30:44] = 1
    bboxes = batch_crop_from_mask_bboxes(masks)
    table = B.box_table(IMAGES, "", bbox=bboxes)  # bbox_format's default: xywh
    assert table.frame.tolist() == [0, 1]  # box i on frame i, as KJNodes' BboxVisualize draws them
    expected = [[x, y, x + w, y + h] for x, y, w, h in bboxes]
    assert table.xyxy.tolist() == expected
    _, alpha, _ = render(boxes="", bbox=bboxes, fill_opacity=1.0, corner_radius=0.0, stroke_width=0.0)
    assert alpha[0, 15, 15] == 1 and alpha[0, 27, 37] == 0 and alpha[1, 27, 37] == 1 and alpha[1, 15, 15] == 0
    combined = [(8, 10, 36, 24)]  # its combined_bounding_box: one box, every frame
    assert B.box_table(IMAGES, "", bbox=combined).xyxy.tolist() == [[8, 10, 44, 34]] * 2
    drawn_as_corners = B.box_table(IMAGES, "", bbox=bboxes, bbox_format="xyxy").xyxy
    assert drawn_as_corners.tolist() != expected  # the silent wrong box the switch avoids


def test_kjnodes_points_editor_boxes_in_either_format():
    drawn = [{"startX": 40.6, "startY": 30, "endX": 8, "endY": 6.2}, {"startX": 2, "startY": 3, "endX": 12, "endY": 9}]
    xyxy = B.box_table(IMAGES[:1], "", bbox=points_editor_bboxes(drawn), bbox_format="xyxy")
    assert xyxy.xyxy.tolist() == [[8, 6, 40, 30], [2, 3, 12, 9]]  # its one canvas's boxes
    xywh = B.box_table(IMAGES[:1], "", bbox=points_editor_bboxes(drawn, "xywh"), bbox_format="xywh")
    assert xywh.xyxy.tolist() == xyxy.xyxy.tolist()
    three = points_editor_bboxes([*drawn, {"startX": 0, "startY": 0, "endX": 5, "endY": 5}])
    table = B.box_table(IMAGES, "", bbox=three, bbox_format="xyxy")  # not one per frame: every frame
    assert table.frame.tolist() == [0, 0, 0, 1, 1, 1]
    assert len(B.box_table(IMAGES, "", bbox=points_editor_bboxes([]))) == 0  # nothing drawn


def test_bbox_of_numpy_and_tensor_values():
    table = B.box_table(IMAGES, "", bbox=[np.array([4, 5, 10, 20], np.int64)])
    assert table.xyxy.tolist() == [[4, 5, 14, 25]] * 2
    table = B.box_table(IMAGES[:1], "", bbox=torch.tensor([[4.0, 5.0, 10.0, 20.0], [1, 1, 2, 2]]), bbox_format="xyxy")
    assert table.xyxy.tolist() == [[4, 5, 10, 20], [1, 1, 2, 2]]
    assert B.box_table(IMAGES, "", bbox=(np.int64(1), 2, 3, 4)).xyxy.tolist() == [[1, 2, 4, 6]] * 2  # one box


def test_bad_bbox_format_and_boxes_are_named():
    with pytest.raises(ValueError, match="bbox_format: expected one of xywh, xyxy, got 'cxcywh'"):
        render(boxes="", bbox=[(1, 2, 3, 4)], bbox_format="cxcywh")
    with pytest.raises(ValueError, match="^bbox: "):
        render(boxes="", bbox=[(1, 2, 3)])
    with pytest.raises(ValueError, match="^bbox: "):
        render(boxes="", bbox="abc")
