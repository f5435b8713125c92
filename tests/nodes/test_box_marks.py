"""BoundingBoxRenderer's box marks (issue 34): circle markers, score bars and traces against supersampled
references; blur, pixelation and dimming against per-pixel references, on the torch path and numba's."""

import json

import numpy as np
import pytest
import torch

from rasterkit.nodes.boxes import BoundingBoxRenderer as Node
from rasterkit.utils.gpu_rendering import box_regions
from sdf_reference import H, W, assert_close, pixel_mean, samples


def alpha_of(boxes, **kw):
    kw = dict(labels="none") | kw
    return Node.run(torch.zeros(kw.pop("frames", 1), H, W, 3), boxes=json.dumps(boxes), **kw)[1].numpy()


def test_the_new_inputs_off_draw_exactly_as_before():
    boxes = '[{"x1": 8, "y1": 20, "x2": 40, "y2": 40, "label": "dog", "score": 0.5, "id": 3}]'
    images = torch.rand(3, 48, 64, 3)
    default = Node.run(images, boxes=boxes, labels="label+score")
    spelled = Node.run(
        images,
        boxes=boxes,
        labels="label+score",
        bar="none",
        bar_height=9.0,
        inside="none",
        inside_size=7,
        dim_outside=0.0,
        trace_frames=0,
    )
    assert all(torch.equal(a, b) for a, b in zip(default, spelled, strict=True))
    frame, bounds = torch.zeros(1, dtype=torch.int64), torch.tensor([[8.0, 20, 40, 40]])
    assert box_regions.edit_regions(images, frame, bounds, "blur", 1, 0.0) is images  # nothing to do: no copy


@pytest.mark.parametrize("box,stroke", [((12.3, 10.1, 32.2, 26.7), 2.0), ((15, 12, 27, 20), 3.5)])
def test_circle_marker_against_a_supersampled_ring_and_disc(box, stroke):
    """The circle through the box's corners about its centre: its outline stroke px wide, and its fill."""
    X, Y = samples()
    centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
    radius = np.hypot(box[2] - box[0], box[3] - box[1]) / 2
    distance = np.hypot(X - centre[0], Y - centre[1])
    boxes = [list(box)]
    assert_close(
        alpha_of(boxes, marker="circle", stroke_width=stroke, fill_opacity=0.0)[0],
        pixel_mean(np.abs(distance - radius) <= stroke / 2),
    )
    assert_close(
        alpha_of(boxes, marker="circle", stroke_width=0.0, fill_opacity=1.0)[0], pixel_mean(distance <= radius)
    )


def over(*layers):
    """Source-over of (opacity, coverage) layers, bottom first: the alpha they leave."""
    alpha = 0.0
    for opacity, coverage in layers:
        alpha = alpha + opacity * coverage * (1 - alpha)
    return alpha


def rect(X, Y, x1, y1, x2, y2):
    return pixel_mean((X >= x1) & (X <= x2) & (Y >= y1) & (Y <= y2))


@pytest.mark.parametrize("place", ["below", "above"])
def test_score_bars_against_supersampled_rectangles(place):
    """A background as wide as the box at a quarter of the opacity, the score's part of it at the opacity;
    a box without a score has no bar."""
    X, Y = samples()
    box, score, height, stroke, opacity = (6.3, 9.2, 38.6, 24.1), 0.37, 4.5, 2.0, 0.8
    top = box[3] + stroke / 2 if place == "below" else box[1] - stroke / 2 - height
    reference = over(
        (opacity * 0.25, rect(X, Y, box[0], top, box[2], top + height)),
        (opacity, rect(X, Y, box[0], top, box[0] + (box[2] - box[0]) * score, top + height)),
    )
    boxes = [{"x1": box[0], "y1": box[1], "x2": box[2], "y2": box[3], "score": score}]
    alpha = alpha_of(boxes, bar=place, bar_height=height, stroke_width=stroke, stroke_opacity=opacity)[0]
    marks = alpha_of(boxes, stroke_width=stroke, stroke_opacity=opacity)[0]
    assert_close(alpha, over((1.0, marks), (1.0, reference)))  # the bar over the box's marks
    boxes[0].pop("score")
    assert np.array_equal(alpha_of(boxes, bar=place, stroke_width=stroke, stroke_opacity=opacity)[0], marks)


def segment_distance(X, Y, a, b):
    """Distance to the segment a-b and where along it (0..1) the nearest point lies, unclipped."""
    d = np.subtract(b, a)
    along = ((X - a[0]) * d[0] + (Y - a[1]) * d[1]) / max(d @ d, 1e-12)
    t = np.clip(along, 0, 1)
    return np.hypot(X - a[0] - t * d[0], Y - a[1] - t * d[1]), along


def test_traces_against_a_supersampled_fading_polyline():
    """Frame 3 of a track id over 4 frames (3 frames back): the polyline through the centres of its boxes,
    stroke_width wide with butt ends (a fading stroke's colour steps), its opacity falling along the arc
    from stroke_opacity at this frame's box to (1 - 3 / 4) of it at the oldest (3 of 4 frames old); a box
    without an id has no trace, a box of another id in frame 3 only none yet."""
    X, Y = samples()
    centres = [(6.3, 30.2), (14.1, 22.7), (25.4, 20.3), (36.0, 12.8)]
    frames = [
        [{"x": cx - 1, "y": cy - 1, "w": 2, "h": 2, "id": 5}, {"x": 30, "y": 30, "w": 2, "h": 2}] for cx, cy in centres
    ]
    frames[3].append({"x": 3, "y": 3, "w": 2, "h": 2, "id": 9})
    width, opacity, length = 3.0, 0.9, 4
    alpha = alpha_of(frames, frames=4, trace_frames=length, stroke_width=width, stroke_opacity=opacity, fill_opacity=0)
    marks = alpha_of(frames, frames=4, stroke_width=width, stroke_opacity=opacity, fill_opacity=0)
    path = centres[::-1]  # from this frame's box back
    arcs = np.concatenate([[0], np.cumsum(np.hypot(*np.diff(path, axis=0).T))])
    nearest, at = np.full(X.shape, np.inf), np.zeros(X.shape)
    for i in range(3):
        d, along = segment_distance(X, Y, path[i], path[i + 1])
        closer = (d < nearest) & ~((i == 0) & (along < 0)) & ~((i == 2) & (along > 1))  # butt ends
        nearest[closer] = d[closer]
        at[closer] = (arcs[i] + np.clip(along, 0, 1) * (arcs[i + 1] - arcs[i]))[closer]
    fade = opacity * (1 - (at / arcs[-1]) * 3 / length)
    trace = pixel_mean(np.where(nearest <= width / 2, fade, 0.0))
    assert_close(alpha[3] - marks[3] * (1 - trace), trace)  # the box marks lie over the trace
    assert np.array_equal(alpha[0], marks[0])  # the first frame: no path yet


IMAGE = torch.rand(2, 21, 27, 4)
FRAME = torch.tensor([0, 0, 1])
BOUNDS = torch.tensor([[2.2, 3.6, 13.5, 11.4], [9.0, 7.0, 30.0, 15.0], [-4.0, 12.0, 6.4, 40.0]])


def inside_mask():
    """bool [B,H,W]: the pixels whose centres lie in a box of their frame."""
    ys, xs = np.mgrid[:21, :27] + 0.5
    mask = np.zeros((2, 21, 27), bool)
    for f, (x1, y1, x2, y2) in zip(FRAME.tolist(), BOUNDS.tolist(), strict=True):
        mask[f] |= (xs >= x1) & (xs < x2) & (ys >= y1) & (ys < y2)
    return mask


def blurred(image, size):
    out = np.empty_like(image)
    before, after = size // 2, size - 1 - size // 2
    for y in range(image.shape[1]):
        for x in range(image.shape[2]):
            window = image[:, max(y - before, 0) : y + after + 1, max(x - before, 0) : x + after + 1]
            out[:, y, x] = window.mean((1, 2))
    return out


def pixelated(image, size):
    out = np.empty_like(image)
    for y in range(image.shape[1]):
        for x in range(image.shape[2]):
            top, left = y // size * size, x // size * size
            out[:, y, x] = image[:, top : top + size, left : left + size].mean((1, 2))
    return out


@pytest.mark.parametrize("numba", [True, False])
@pytest.mark.parametrize(
    "inside,size,dim", [("blur", 5, 0.0), ("blur", 4, 0.4), ("pixelate", 4, 0.0), ("none", 3, 0.7)]
)
def test_blur_pixelate_and_dim_against_per_pixel_references(numba, inside, size, dim, monkeypatch):
    """Inside the boxes the colour blurred (the mean of the size x size window, cut to the frame) or
    pixelated (blocks from the top left corner); outside every box of a frame times 1 - dim; alpha kept."""
    if not numba:
        monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    image = IMAGE.numpy()
    mask = inside_mask()[..., None]
    colour = image[..., :3]
    edited = {"blur": blurred, "pixelate": pixelated, "none": lambda c, _: c}[inside](colour, size)
    expected = np.where(mask, edited, colour * (1 - np.float32(dim)))
    out = box_regions.edit_regions(IMAGE, FRAME, BOUNDS, inside, size, dim)
    assert np.abs(out[..., :3].numpy() - expected).max() < 1e-5
    assert torch.equal(out[..., 3], IMAGE[..., 3])
    boxes = [[b for f, b in zip(FRAME.tolist(), BOUNDS.tolist(), strict=True) if f == frame] for frame in (0, 1)]
    image_out = Node.run(
        IMAGE,
        boxes=json.dumps(boxes),
        labels="none",
        stroke_width=0,
        fill_opacity=0,
        inside=inside,
        inside_size=size,
        dim_outside=dim,
    )[0]
    assert torch.equal(image_out, out)  # the node draws its boxes over the edited frames


@pytest.mark.parametrize("numba", [True, False])
def test_blur_of_overlapping_boxes_and_a_frame_without_any(numba, monkeypatch):
    """numba's loop blurs each frame once over the bounds of its boxes' union: boxes that overlap or cross
    the frame's edges, disjoint boxes far apart and a frame without boxes (left as it is) all match the
    per-pixel reference."""
    if not numba:
        monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    image = torch.rand(3, 23, 31, 3)
    frame = torch.tensor([0, 0, 0, 2, 2])
    bounds = torch.tensor(
        [
            [-3.0, -2.0, 9.0, 8.0],
            [4.0, 5.0, 14.0, 19.0],
            [25.0, 17.0, 40.0, 30.0],
            [1.0, 1.0, 6.0, 4.0],
            [20, 15, 29, 22],
        ]
    )
    ys, xs = np.mgrid[:23, :31] + 0.5
    mask = np.zeros((3, 23, 31, 1), bool)
    for f, (x1, y1, x2, y2) in zip(frame.tolist(), bounds.tolist(), strict=True):
        mask[f, ..., 0] |= (xs >= x1) & (xs < x2) & (ys >= y1) & (ys < y2)
    expected = np.where(mask, blurred(image.numpy(), 6), image.numpy())
    out = box_regions.edit_regions(image, frame, bounds, "blur", 6, 0.0)
    assert np.abs(out.numpy() - expected).max() < 1e-5


def test_bad_region_inputs_are_named():
    with pytest.raises(ValueError, match="inside"):
        box_regions.edit_regions(IMAGE, FRAME, BOUNDS, "smudge", 3, 0.0)
    with pytest.raises(ValueError, match="dim_outside"):
        box_regions.edit_regions(IMAGE, FRAME, BOUNDS, "none", 3, 1.5)


@pytest.mark.parametrize("box,size", [((12.3, 20.1, 32.2, 30.7), 8.0), ((5, 14, 41, 33), 5.5), ((20, 30, 28, 36), 3.0)])
def test_triangle_marker_against_a_supersampled_triangle(box, size):
    """supervision's TriangleAnnotator: a filled triangle pointing down with its tip at the box's top centre,
    2 x marker_size wide and as high, at stroke_opacity; within 0.1 of a 16x16-sample reference away from
    its corners, 0.2 at them (the triangle kind's product of edge coverages)."""
    X, Y = samples()
    tip = np.array([(box[0] + box[2]) / 2, box[1]])
    corners = [tip, tip + (size, -2 * size), tip + (-size, -2 * size)]
    # below the base, above the tip, and inside both slanted sides
    inside = (Y >= tip[1] - 2 * size) & (Y <= tip[1]) & (np.abs(X - tip[0]) <= (tip[1] - Y) / 2)
    alpha = alpha_of([list(box)], marker="triangle", marker_size=size, stroke_opacity=0.8)[0]
    error = np.abs(alpha - 0.8 * pixel_mean(inside))
    ys, xs = np.mgrid[:H, :W] + 0.5
    near = np.logical_or.reduce([np.hypot(xs - x, ys - y) <= 1.5 for x, y in corners])
    assert error.mean() < 0.01 and error[~near].max() < 0.1 and error.max() < 0.2, (error.mean(), error.max())


def test_triangle_marker_of_a_turned_box_sits_on_its_upright_bounds():
    boxes = [{"x": 14, "y": 20, "w": 20, "h": 10, "angle": 30}]
    alpha = alpha_of(boxes, marker="triangle", marker_size=4.0)[0]
    from rasterkit.utils.inputs.boxes import box_table

    x1, y1, x2, _ = box_table(torch.zeros(1, H, W, 3), json.dumps(boxes)).bounds()[0].tolist()
    rows, columns = np.nonzero(alpha > 0.5)
    assert abs(columns.mean() + 0.5 - (x1 + x2) / 2) < 0.5 and rows.max() + 0.5 <= y1 + 0.5 and rows.min() >= y1 - 9
