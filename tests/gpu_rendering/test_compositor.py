"""The SDF renderer against brute-force supersampled references (16x16 samples per pixel)."""

import functools

import numpy as np
import pytest
import torch

from rasterkit.utils import gpu_rendering as R
from rasterkit.utils.gpu_rendering.compositor import bin_tiles
from sdf_reference import H, S, W, assert_close, ellipse_inside, pixel_mean, rounded_box_distance, samples, turned


def capsule(X, Y, a, b, half):
    d = np.subtract(b, a)
    t = np.clip(((X - a[0]) * d[0] + (Y - a[1]) * d[1]) / (d @ d), 0, 1)
    return np.hypot(X - a[0] - t * d[0], Y - a[1] - t * d[1]) <= half


def butt_segment(X, Y, a, b, half):
    d = np.subtract(b, a)
    length = np.hypot(*d)
    u = d / length
    along = (X - a[0]) * u[0] + (Y - a[1]) * u[1]
    across = np.abs((X - a[0]) * u[1] - (Y - a[1]) * u[0])
    return (along >= 0) & (along <= length) & (across <= half)


def alpha_of(prims):
    _, alpha, _ = R.draw(torch.zeros(1, H, W, 3), prims)
    return alpha[0].numpy()


@pytest.mark.parametrize(
    "a,b,width",
    [
        ((3.2, 30.7), (41.9, 5.1), 2.0),
        ((5, 5), (40, 5.5), 3.0),
        ((20.3, 2.2), (21.1, 34.8), 6.5),
        ((10, 10), (30, 28), 1.0),
    ],
)
@pytest.mark.parametrize("caps", ["round", "butt"])
def test_segment_coverage(a, b, width, caps):
    X, Y = samples()
    prims = R.segments(
        0,
        torch.tensor([a], dtype=torch.float32),
        torch.tensor([b], dtype=torch.float32),
        width,
        (1, 1, 1, 1),
        caps=caps,
    )
    shape = capsule if caps == "round" else butt_segment
    assert_close(alpha_of(prims), pixel_mean(shape(X, Y, a, b, width / 2)))


@pytest.mark.parametrize(
    "box,radius,stroke",
    [
        ((5.3, 6.7, 40.2, 30.1), 6.0, 3.0),
        ((2.5, 2.5, 20.5, 33.25), 0.0, 2.0),
        ((10, 8, 30, 20), 50.0, 1.5),
        ((-10, -5, 60, 50), 12.0, 4.0),
    ],
)
def test_rounded_box_fill_and_stroke(box, radius, stroke):
    X, Y = samples()
    r = min(radius, (box[2] - box[0]) / 2, (box[3] - box[1]) / 2)
    d = rounded_box_distance(X, Y, box, r)
    fill = R.rounded_boxes(0, torch.tensor([box]), 0.0, radius, (0, 0, 0, 0), (1, 1, 1, 1))
    assert_close(alpha_of(fill), pixel_mean(d <= 0))
    outline = R.rounded_boxes(0, torch.tensor([box]), stroke, radius, (1, 1, 1, 1), (0, 0, 0, 0))
    assert_close(alpha_of(outline), pixel_mean(np.abs(d) <= stroke / 2))


def test_corner_only_outline():
    X, Y = samples()
    box, length, stroke = (6.5, 5.5, 38.5, 31.5), 8.0, 2.0
    d = rounded_box_distance(X, Y, box, 0.0)
    cx, cy, hx, hy = 22.5, 18.5, 16.0, 13.0
    near_corner = (np.abs(X - cx) >= hx - length) & (np.abs(Y - cy) >= hy - length)
    prims = R.rounded_boxes(0, torch.tensor([box]), stroke, 0.0, (1, 1, 1, 1), (0, 0, 0, 0), corner_length=length)
    assert_close(alpha_of(prims), pixel_mean((np.abs(d) <= stroke / 2) & near_corner))


@pytest.mark.parametrize("degrees", [0, 30, 90, 137, -12.5])
@pytest.mark.parametrize(
    "box,radius,stroke",
    [
        ((8.3, 10.7, 36.2, 26.1), 5.0, 3.0),
        ((12.5, 6.5, 32.5, 30.25), 0.0, 2.0),
        ((14, 12, 30, 24), 50.0, 1.5),
        ((-10, 4, 55, 32), 9.0, 4.0),
    ],
)
def test_turned_rounded_box_fill_and_stroke(box, radius, stroke, degrees):
    """Boxes turned about their centres: the samples taken into the box's frame, against the box there."""
    centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
    X, Y = turned(*samples(), centre, degrees)
    r = min(radius, (box[2] - box[0]) / 2, (box[3] - box[1]) / 2)
    d = rounded_box_distance(X, Y, box, r)
    angle = np.radians(degrees)
    fill = R.rounded_boxes(0, torch.tensor([box]), 0.0, radius, (0, 0, 0, 0), (1, 1, 1, 1), angle=angle)
    assert_close(alpha_of(fill), pixel_mean(d <= 0))
    outline = R.rounded_boxes(0, torch.tensor([box]), stroke, radius, (1, 1, 1, 1), (0, 0, 0, 0), angle=angle)
    assert_close(alpha_of(outline), pixel_mean(np.abs(d) <= stroke / 2))


@pytest.mark.parametrize("degrees", [0, 30, 137])
def test_turned_corner_only_outline(degrees):
    box, length, stroke = (8.5, 7.5, 36.5, 29.5), 7.0, 2.0
    cx, cy, hx, hy = 22.5, 18.5, 14.0, 11.0
    X, Y = turned(*samples(), (cx, cy), degrees)
    d = rounded_box_distance(X, Y, box, 0.0)
    near_corner = (np.abs(X - cx) >= hx - length) & (np.abs(Y - cy) >= hy - length)
    prims = R.rounded_boxes(
        0, torch.tensor([box]), stroke, 0.0, (1, 1, 1, 1), (0, 0, 0, 0), corner_length=length, angle=np.radians(degrees)
    )
    assert_close(alpha_of(prims), pixel_mean((np.abs(d) <= stroke / 2) & near_corner))


def test_boxes_at_angle_zero_are_drawn_as_before():
    """A zero angle, given as a tensor or a number, draws what no angle draws (the separable path)."""
    xyxy = torch.tensor([[5.3, 6.7, 40.2, 30.1], [2.5, 2.5, 20.5, 33.25]])
    plain = alpha_of(R.rounded_boxes(0, xyxy, 3.0, 6.0, (1, 1, 1, 1), (1, 1, 1, 0.3)))
    for angle in (0.0, torch.zeros(2)):
        assert np.array_equal(
            alpha_of(R.rounded_boxes(0, xyxy, 3.0, 6.0, (1, 1, 1, 1), (1, 1, 1, 0.3), angle=angle)), plain
        )


def check_ellipse(centre, radii, stroke, degrees, check=None):
    """Fill, outline, and both (a translucent fill under the outline), against the supersampled ellipse."""
    check = check or assert_close
    inside, distance = ellipse_inside(*samples(), centre, radii, degrees, stroke / 2 + 0.01)
    args = (0, torch.tensor([centre]), torch.tensor([radii]))
    fill = R.ellipses(*args, 0.0, (0, 0, 0, 0), angle=np.radians(degrees), fill_color=(1, 1, 1, 1))
    check(alpha_of(fill), pixel_mean(inside))
    outline = R.ellipses(*args, stroke, (1, 1, 1, 1), angle=np.radians(degrees))
    check(alpha_of(outline), pixel_mean(distance <= stroke / 2))
    both = R.ellipses(*args, stroke, (1, 1, 1, 1), angle=np.radians(degrees), fill_color=(1, 1, 1, 0.5))
    check(alpha_of(both), pixel_mean(np.maximum(0.5 * inside, distance <= stroke / 2)))


@pytest.mark.parametrize("degrees", [0, 30, 90, 137])
@pytest.mark.parametrize(
    "centre,radii,stroke",
    [((22.3, 18.6), (17.2, 9.4), 2.0), ((21.0, 17.5), (6.5, 15.25), 3.5), ((20.7, 19.1), (11.0, 10.6), 1.0)],
)
def test_turned_ellipse_fill_and_outline(centre, radii, stroke, degrees):
    check_ellipse(centre, radii, stroke, degrees)


@pytest.mark.parametrize("degrees", [30, 137])
@pytest.mark.parametrize(
    "centre,radii,stroke",
    [((24.0, 16.0), (19.5, 2.5), 1.5), ((21.0, 17.5), (4.5, 15.25), 3.5), ((22.0, 18.0), (3.0, 0.75), 1.0)],
)
def test_ellipses_with_sharper_ends_than_their_outline(centre, radii, stroke, degrees):
    """Where the curve turns tighter than half the stroke width (or than a pixel), both sides of the thin end
    reach into one pixel, which coverage from the distance at its centre does not see: those few pixels
    are held to 0.35, the mean to the rule."""

    def check(alpha, reference):
        error = np.abs(alpha - reference)
        assert error.mean() < 0.01 and error.max() < 0.35, (error.mean(), error.max())

    check_ellipse(centre, radii, stroke, degrees, check)


@pytest.mark.parametrize("width", [0.4, 0.75])
def test_strokes_thinner_than_a_pixel_are_one_pixel_wide_and_fainter(width):
    """Segments, box outlines and rings under 1 px are drawn 1 px wide at opacity `width` (the engine's
    documented rule for thin strokes), against 1-px references scaled by the width."""
    X, Y = samples()
    a, b = (4.3, 30.2), (40.6, 7.9)
    cases = [
        (R.segments(0, torch.tensor([a]), torch.tensor([b]), width, (1, 1, 1, 1)), capsule(X, Y, a, b, 0.5)),
        (
            R.segments(0, torch.tensor([a]), torch.tensor([b]), width, (1, 1, 1, 1), caps="butt"),
            butt_segment(X, Y, a, b, 0.5),
        ),
    ]
    box = (6.3, 5.8, 38.4, 30.1)
    cases.append(
        (
            R.rounded_boxes(0, torch.tensor([box]), width, 5.0, (1, 1, 1, 1), (0, 0, 0, 0)),
            np.abs(rounded_box_distance(X, Y, box, 5.0)) <= 0.5,
        )
    )
    cases.append(
        (
            R.discs(0, torch.tensor([[21.7, 18.2]]), 12.4, (1, 1, 1, 1), ring_width=width),
            np.abs(np.hypot(X - 21.7, Y - 18.2) - 12.4) <= 0.5,
        )
    )
    for prims, one_pixel_wide in cases:
        assert_close(alpha_of(prims), width * pixel_mean(one_pixel_wide))


@pytest.mark.parametrize("ring", [0.0, 2.5])
def test_disc_and_ring(ring):
    X, Y = samples()
    c, r = (21.3, 17.8), 11.2
    distance = np.hypot(X - c[0], Y - c[1]) - r
    inside = np.abs(distance) <= ring / 2 if ring else distance <= 0
    assert_close(alpha_of(R.discs(0, torch.tensor([c]), r, (1, 1, 1, 1), ring_width=ring)), pixel_mean(inside))


# -- tile culling: shapes whose edges pass at every sub-pixel phase of the tile grid ---------------------
N = 64  # frames of 8 x 8 tiles


@functools.cache
def fine_grid():
    centres = (np.arange(N * S, dtype=np.float32) + 0.5) / S
    return np.meshgrid(centres, centres)


def per_pixel(inside):
    return inside.reshape(N, S, N, S).mean(axis=(1, 3))


def diagonal_lines(frame, width, rising, phase):
    """Parallel 45-degree lines across a whole frame, their edges 3.37 px apart (no pixel sees two), so
    that the edges of successive lines fall at many phases of the tile grid (whose tile corners repeat
    every 8 / sqrt(2) = 5.66 px across the lines). Returns their primitives and the reference coverage."""
    X, Y = fine_grid()
    spacing = width + 3.37
    first = (-N if rising else 0) / np.sqrt(2) + phase - spacing  # lines a little past the frame on both sides
    centres = np.arange(first, (N if rising else 2 * N) / np.sqrt(2) + spacing, spacing)
    across = (X - Y if rising else X + Y) / np.sqrt(2) - first  # from the first line, across the lines
    distance = np.abs((across + spacing / 2) % spacing - spacing / 2)  # to the nearest line
    along = np.array([1.0, 1.0] if rising else [-1.0, 1.0])
    on_line = np.stack([centres * np.sqrt(2), np.zeros_like(centres)], 1)  # where each line meets y = 0
    a, b = on_line - 12 * along, on_line + (N + 12) * along  # ends outside the frame
    prims = R.segments(
        frame, torch.tensor(a, dtype=torch.float32), torch.tensor(b, dtype=torch.float32), width, (1, 1, 1, 1)
    )
    return prims, per_pixel(distance <= width / 2)


def in_cells(cell, shapes):
    """Samples inside any of `shapes`, each (column, row, test) a test of the sample coordinates X, Y of its
    cell of the frame: cells `cell` px wide, one shape each."""
    inside = np.zeros((N * S, N * S), dtype=bool)
    X, Y = fine_grid()
    for column, row, test in shapes:
        window = slice(row * cell * S, (row + 1) * cell * S), slice(column * cell * S, (column + 1) * cell * S)
        inside[window] = test(X[window], Y[window])
    return inside


def disc_grid(frame, per_row, ring, shift):
    """per_row x per_row discs (or rings) of different radii, each in its cell of the frame, centred at
    sub-pixel offsets from the tile grid."""
    cell = N // per_row
    g = np.random.default_rng(per_row * 100 + int(ring * 10) + int(shift * 100))
    centres = np.array([(cell * (i + 0.5), cell * (j + 0.5)) for j in range(per_row) for i in range(per_row)])
    centres += g.random(centres.shape) + shift
    radii = cell / 2 - 3 - ring / 2 - g.random(len(centres)) * cell / 6

    def test(cx, cy, r):
        def inside(X, Y):
            distance = np.hypot(X - cx, Y - cy) - r
            return np.abs(distance) <= ring / 2 if ring else distance <= 0

        return inside

    inside = in_cells(
        cell,
        [
            (k % per_row, k // per_row, test(*centre, r))
            for k, (centre, r) in enumerate(zip(centres, radii, strict=False))
        ],
    )
    prims = R.discs(
        frame,
        torch.tensor(centres, dtype=torch.float32),
        torch.tensor(radii, dtype=torch.float32),
        (1, 1, 1, 1),
        ring_width=ring,
    )
    return prims, per_pixel(inside)


BOX_EDGE_PHASES = np.random.default_rng(0).permutation(np.arange(32) * 0.25 + 0.1).reshape(2, 4, 4)


def box_grid(frame, part, radius, stroke):
    """2 x 2 boxes (fills, or outlines `stroke` wide), each in its 32 px cell, their edges at 16 of 32
    phases 0.25 px apart across a tile (part 0 or 1 of them)."""
    phases = BOX_EDGE_PHASES[part]
    base = np.array([(32.0 * i, 32.0 * j) for j in range(2) for i in range(2)])
    boxes = np.concatenate([base + 3 + phases[:, :2], base + 20 + phases[:, 2:]], 1)  # 3 px inside their cells

    def test(box):
        def inside(X, Y):
            d = rounded_box_distance(X, Y, box, min(radius, (box[2] - box[0]) / 2, (box[3] - box[1]) / 2))
            return np.abs(d) <= stroke / 2 if stroke else d <= 0

        return inside

    inside = in_cells(32, [(k % 2, k // 2, test(box)) for k, box in enumerate(boxes)])
    xyxy = torch.tensor(boxes, dtype=torch.float32)
    if stroke:
        prims = R.rounded_boxes(frame, xyxy, stroke, radius, (1, 1, 1, 1), (0, 0, 0, 0))
    else:
        prims = R.rounded_boxes(frame, xyxy, 0.0, radius, (0, 0, 0, 0), (1, 1, 1, 1))
    return prims, per_pixel(inside)


def test_tile_culling_keeps_every_pixel_a_shape_reaches():
    """Binning drops the tiles a shape cannot reach and marks those it covers fully, from conservative
    distances (half the tile diagonal, the anti-aliasing margin). Against supersampled references, edges
    at many phases of the tile grid: a tile wrongly dropped or wrongly solid is off by up to half a
    pixel's coverage or more, while the distance-field coverage itself is within 0.085 on these shapes.
    (The mean error is higher than in the tests above: the frames are dense with edges.)"""
    makers = [
        lambda f, w=width, r=rising, p=phase: diagonal_lines(f, w, r, p)
        for width in (1.0, 2.0, 3.5, 6.0)
        for rising in (True, False)
        for phase in (0.0, 0.19, 0.41)
    ]
    makers += [
        lambda f, n=per_row, r=ring, s=shift: disc_grid(f, n, r, s)
        for per_row in (2, 3)
        for ring in (0.0, 2.5)
        for shift in (0.0, 0.37)
    ]
    makers += [
        lambda f, p=part, r=radius, w=stroke: box_grid(f, p, r, w)
        for part in (0, 1)
        for radius, stroke in ((0.0, 0.0), (6.0, 0.0), (0.0, 2.0), (3.0, 5.0), (9.0, 1.0))
    ]
    cases = [make(torch.tensor(frame)) for frame, make in enumerate(makers)]
    _, alpha, _ = R.draw(torch.zeros(len(cases), N, N, 3), R.concat(*(prims for prims, _ in cases)))
    for frame, (_, reference) in enumerate(cases):
        error = np.abs(alpha[frame].numpy() - reference)
        assert error.mean() < 0.02 and error.max() < 0.1, (frame, error.mean(), error.max())


def turned_grid(frame, per_row, shape, stroke, seed):
    """per_row x per_row turned boxes (radius 4) or ellipses, fills or outlines `stroke` wide, each in its
    cell of the frame, at random angles and sub-pixel offsets from the tile grid."""
    cell = N // per_row
    g = np.random.default_rng(seed)
    centres = np.array([(cell * (i + 0.5), cell * (j + 0.5)) for j in range(per_row) for i in range(per_row)])
    centres += g.random(centres.shape) - 0.5
    # inside the cell; ellipses no sharper at their ends than their outlines are wide (see below)
    halves = (cell / 2 - 2 - stroke / 2) / np.sqrt(2) * (0.75 + 0.25 * g.random(centres.shape))
    degrees = g.random(len(centres)) * 360

    def test(centre, half, angle):
        def inside(X, Y):
            U, V = turned(X, Y, centre, angle)
            if shape == "box":
                d = rounded_box_distance(U, V, (*(centre - half), *(centre + half)), 4.0)
                return np.abs(d) <= stroke / 2 if stroke else d <= 0
            inside_ellipse, distance = ellipse_inside(X, Y, centre, half, angle, stroke / 2 + 0.01)
            return distance <= stroke / 2 if stroke else inside_ellipse

        return inside

    inside = in_cells(
        cell,
        [
            (k % per_row, k // per_row, test(*args))
            for k, args in enumerate(zip(centres, halves, degrees, strict=False))
        ],
    )
    c, h, a = (torch.tensor(v, dtype=torch.float32) for v in (centres, halves, np.radians(degrees)))
    if shape == "box":
        xyxy = torch.cat([c - h, c + h], 1)
        prims = (
            R.rounded_boxes(frame, xyxy, stroke, 4.0, (1, 1, 1, 1), (0, 0, 0, 0), angle=a)
            if stroke
            else R.rounded_boxes(frame, xyxy, 0.0, 4.0, (0, 0, 0, 0), (1, 1, 1, 1), angle=a)
        )
    else:
        prims = (
            R.ellipses(frame, c, h, stroke, (1, 1, 1, 1), angle=a)
            if stroke
            else R.ellipses(frame, c, h, 0.0, (0, 0, 0, 0), angle=a, fill_color=(1, 1, 1, 1))
        )
    return prims, per_pixel(inside)


def test_tile_culling_of_turned_boxes_and_ellipses():
    """As above, for turned shapes: tiles outside them or inside their outlines are dropped, tiles inside
    their fills are solid, measured in their own frames."""
    cases = [
        turned_grid(torch.tensor(frame), per_row, shape, stroke, seed=frame)
        for frame, (per_row, shape, stroke) in enumerate(
            (n, shape, stroke) for n in (1, 2) for shape in ("box", "ellipse") for stroke in (0.0, 2.0, 5.0)
        )
    ]
    _, alpha, _ = R.draw(torch.zeros(len(cases), N, N, 3), R.concat(*(prims for prims, _ in cases)))
    for frame, (_, reference) in enumerate(cases):
        error = np.abs(alpha[frame].numpy() - reference)
        assert error.mean() < 0.02 and error.max() < 0.1, (frame, error.mean(), error.max())


def test_polyline_draws_each_joint_once():
    """A translucent polyline must equal the union of its capsules: joints are not darker."""
    X, Y = samples()
    points = [(4.0, 30.0), (14.5, 8.2), (24.0, 26.0), (33.7, 6.0), (41.0, 20.0)]
    union = np.zeros_like(X, dtype=bool)
    for a, b in zip(points[:-1], points[1:], strict=False):
        union |= capsule(X, Y, a, b, 2.0)
    prims = R.polylines(0, torch.tensor([points]), torch.tensor([5]), 4.0, (1, 1, 1, 0.5))
    alpha = alpha_of(prims)
    assert alpha.max() <= 0.5 + 1e-6  # a pixel drawn twice would reach 0.75
    error = np.abs(alpha - 0.5 * pixel_mean(union))
    # merged by nearest distance, the pixel inside a sharp turn's concave corner is a little light
    assert error.mean() < 0.005 and error.max() < 0.16


def test_polyline_nan_point_makes_a_gap():
    points = torch.tensor([[[2.0, 5.0], [20.0, 5.0], [float("nan"), 0.0], [25.0, 30.0], [40.0, 30.0]]])
    prims = R.polylines(0, points, torch.tensor([5]), 2.0, (1, 1, 1, 1))
    assert len(prims) == 4 and prims.color[:, 3].tolist() == [1, 0, 0, 1]  # the segments at the NaN: opacity 0
    alpha = alpha_of(prims)
    assert alpha[5, 10] > 0.9 and alpha[30, 30] > 0.9 and alpha[17, 22] == 0


def test_translucent_layers_build_up_source_over():
    fills = R.concat(
        R.rounded_boxes(0, torch.tensor([[0.0, 0.0, 30.0, 30.0]]), 0, 0, (0, 0, 0, 0), (1, 0, 0, 0.5)),
        R.rounded_boxes(0, torch.tensor([[10.0, 10.0, 40.0, 36.0]]), 0, 0, (0, 0, 0, 0), (0, 0, 1, 0.5)),
    )
    background = torch.full((1, H, W, 3), 0.2)
    image, alpha, layer = R.draw(background, fills)
    assert alpha[0, 20, 20].item() == pytest.approx(0.75, abs=1e-5)
    assert layer[0, 20, 20].tolist() == pytest.approx([0.25, 0.0, 0.5, 0.75], abs=1e-5)
    assert image[0, 20, 20].tolist() == pytest.approx([0.25 + 0.05, 0.05, 0.5 + 0.05], abs=1e-5)
    assert torch.allclose(image, R.composite(background, layer), atol=1e-6)


def test_inputs_are_not_modified_and_alpha_channel_is_composited():
    images = torch.rand(2, H, W, 4)
    before = images.clone()
    prims = R.discs(torch.tensor([1]), torch.tensor([[20.0, 20.0]]), 8.0, (1, 1, 1, 0.5))
    image, alpha, layer = R.draw(images, prims)
    assert torch.equal(images, before)
    assert torch.equal(image[0], images[0]) and alpha[0].sum() == 0  # frame 0 has no primitive
    expected = images[1, 20, 20, 3] * 0.5 + 0.5
    assert image[1, 20, 20, 3].item() == pytest.approx(expected.item(), abs=1e-5)


def test_opaque_primitives_cover_fully():
    prims = R.concat(
        *(
            R.rounded_boxes(0, torch.tensor([[4.0, 4.0, 30.0, 30.0]]), 0, 0, (0, 0, 0, 0), (1, 1, 1, 1))
            for _ in range(5)
        )
    )
    _, alpha, _ = R.draw(torch.zeros(1, H, W, 3), prims)
    assert alpha[0, 10, 10].item() == pytest.approx(1.0, abs=1e-6)


def test_sprites_copy_the_atlas():
    atlas = torch.zeros(8, 8)
    atlas[2:5, 1:7] = 1.0
    prims = R.sprites(0, torch.tensor([[10.0, 12.0]]), torch.tensor([[0, 0, 8, 8]]), (1, 1, 1, 1))
    _, alpha, _ = R.draw(torch.zeros(1, H, W, 3), prims, atlas=atlas)
    assert torch.equal(alpha[0, 12:20, 10:18], atlas)
    assert alpha.sum() == atlas.sum()


def test_binning_follows_covered_area():
    big = R.rounded_boxes(0, torch.tensor([[0.5, 0.5, 1000.0, 1000.0]]), 2.0, 0.0, (1, 1, 1, 1), (0, 0, 0, 0))
    tile_id, _, _ = bin_tiles(big, 1, 1024, 1024)
    assert tile_id.numel() <= 8 * 1000 / R.TILE + 16  # one or two tile rows along each side, none inside
    outside = R.discs(0, torch.tensor([[-50.0, -50.0], [2000.0, 10.0]]), 5.0, (1, 1, 1, 1))
    assert bin_tiles(outside, 1, 64, 64)[0].numel() == 0
    wrong_frame = R.discs(torch.tensor([3]), torch.tensor([[10.0, 10.0]]), 5.0, (1, 1, 1, 1))
    assert bin_tiles(wrong_frame, 2, 64, 64)[0].numel() == 0


def test_batch_primitives_stay_on_their_frame():
    frames = torch.tensor([0, 2, 2])
    prims = R.discs(frames, torch.tensor([[10.0, 10.0], [20.0, 20.0], [30.0, 10.0]]), 4.0, (1, 1, 1, 1))
    _, alpha, _ = R.draw(torch.zeros(3, H, W, 3), prims)
    assert alpha[1].sum() == 0
    assert alpha[0, 10, 10] > 0.99 and alpha[2, 20, 20] > 0.99 and alpha[2, 10, 30] > 0.99


@pytest.mark.parametrize("image_only", [False, True])
def test_draw_writes_into_the_outputs_it_is_given(image_only):
    """out=: views of a longer batch's outputs (the windows of a video) get what draw would make."""
    frames = torch.tensor([0, 1])
    prims = R.discs(frames, torch.tensor([[10.0, 10.0], [20.0, 15.0]]), 6.0, (1, 0.5, 0, 0.7))
    images = torch.rand(2, H, W, 3)
    expected = R.draw(images, prims, image_only=image_only, layer_alpha="straight")
    outputs = [torch.full((4, H, W, 3), 7.0), torch.full((4, H, W), 7.0), torch.full((4, H, W, 4), 7.0)]
    views = tuple(None if image_only and i else o[1:3] for i, o in enumerate(outputs))
    got = R.draw(images, prims, image_only=image_only, layer_alpha="straight", out=views)
    assert all(g is v for g, v in zip(got, views, strict=True))
    for e, g, whole in zip(expected, got, outputs, strict=True):
        if e is not None:
            assert torch.equal(e, g) and bool((whole[0] == 7).all() and (whole[3] == 7).all())


def test_empty_primitives_return_a_copy():
    images = torch.rand(1, H, W, 3)
    image, alpha, layer = R.draw(images, R.empty())
    assert torch.equal(image, images) and image.data_ptr() != images.data_ptr()
    assert alpha.sum() == 0 and layer.shape == (1, H, W, 4)


def test_deep_overlap_in_one_tile_matches_sequential_compositing():
    torch.manual_seed(0)
    n = 37  # a depth that needs padding in its group
    centers = torch.rand(n, 2) * 10 + 4
    colours = torch.rand(n, 4) * torch.tensor([1, 1, 1, 0.6])
    prims = R.discs(0, centers, torch.rand(n) * 6 + 1, colours)
    _, _, layer = R.draw(torch.zeros(1, 16, 16, 3), prims)
    expected = torch.zeros(16, 16, 4)
    for i in range(n):  # the reference composites one primitive at a time
        _, a, _ = R.draw(torch.zeros(1, 16, 16, 3), prims.select(torch.tensor([i])))
        a = a[0, ..., None]
        expected = expected * (1 - a) + torch.cat([colours[i, :3] * a, a], -1)
    assert torch.allclose(layer[0], expected, atol=1e-5)


def test_a_span_past_the_frame_leaves_the_depth_bound_alone(monkeypatch):
    """The torch path sizes its compositing passes by a bound on each tile's depth (2D differences of the
    primitives' tile spans): a primitive whose span is empty (an infinite bound) must not lower it."""
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    torch.manual_seed(0)
    n = 37  # deeper than 32: the sixth pass
    prims = R.discs(0, torch.rand(n, 2) * 6 + 1, torch.rand(n) * 3 + 1, torch.rand(n, 4) * torch.tensor([1, 1, 1, 0.6]))
    odd = R.discs(0, torch.full((5, 2), 3.0), 2.0, (1, 0, 0, 1))  # 5: the bound would fall below 33
    odd = R.Primitives(*odd.fields()[:4], torch.tensor([[100.0, 0.0, float("inf"), 50.0]]).expand(5, 4), odd.group)
    expected = R.draw(torch.zeros(1, 16, 16, 3), prims)[2]
    assert torch.equal(R.draw(torch.zeros(1, 16, 16, 3), R.concat(odd, prims))[2], expected)


@pytest.mark.gpu
def test_cuda_path_equals_cpu_path():
    torch.manual_seed(1)
    images = torch.rand(3, 72, 96, 3)
    prims = R.concat(
        R.rounded_boxes(
            torch.tensor([0, 1, 2]), torch.tensor([[5.0, 6.0, 60.0, 50.0]] * 3), 3.0, 8.0, (1, 0, 0, 1), (0, 1, 0, 0.3)
        ),
        R.polylines(1, torch.rand(2, 9, 2) * 90, torch.tensor([9, 6]), 2.5, (0, 0, 1, 0.7)),
        R.discs(2, torch.tensor([[40.0, 30.0]]), 9.0, (1, 1, 0, 0.5), ring_width=2.0),
    )
    on_cpu = R.draw(images, prims)
    on_gpu = R.draw(images, prims, device="cuda")
    for a, b in zip(on_cpu, on_gpu, strict=False):
        assert b.device == images.device
        assert torch.allclose(a, b, atol=1e-5)
    resident = R.draw(images.cuda(), prims.to("cuda"))
    assert all(torch.allclose(a, b.cpu(), atol=1e-5) for a, b in zip(on_cpu, resident, strict=False))


def counted(monkeypatch, fn):
    """OpCount of fn() (tests/opcount.py: what a GPU would launch, measured on the CPU, with the engine's
    .tolist() reads of device values counted as the host syncs they are) and its host syncs."""
    from opcount import OpCount

    with OpCount() as count:
        fn()
    return count, count.syncs


def test_draw_of_100_boxes_on_a_4k_frame_keeps_its_gpu_budget(monkeypatch):
    """The call that ../shared/tools/budget.py measures: <= 200 device ops, <= 2 host syncs (1 reached: the
    number of pairs, with the bounds that size the rest), no float64,
    on the torch path a GPU takes (on the CPU numba's loop draws instead: tests/test_rendering_cpu.py)."""
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    torch.manual_seed(0)
    height, width, n = 2160, 3840, 100
    images = torch.rand(1, height, width, 3)
    xy = torch.rand(n, 2) * torch.tensor([width - 300.0, height - 300.0])
    xyxy = torch.cat([xy, xy + 50 + torch.rand(n, 2) * 250], 1)
    colour = torch.tensor([[1, 0, 0, 1.0]]).expand(n, 4)
    count, syncs = counted(
        monkeypatch,
        lambda: R.draw(
            images, R.rounded_boxes(torch.zeros(n, dtype=torch.long), xyxy, 3.0, 12.0, colour, colour * 0.25, 0.0)
        ),
    )
    assert count.launches <= 200 and syncs <= 1 and count.float64 == 0, (count.summary(), syncs)


def test_boxes_from_host_values_keep_the_draw_budget(monkeypatch):
    """budget.py's "boxes" case: boxes as a node has them after parsing (a list made into one tensor: the one
    upload), colours and sizes as Python numbers (filled in on the device, never uploaded), then draw:
    <= 200 device ops, <= 2 host syncs, <= 1 upload (was 12: rounded_boxes made 9 tensors from host values,
    draw 2)."""
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    torch.manual_seed(0)
    height, width = 2160, 3840
    images = torch.rand(1, height, width, 3)
    xy = (torch.rand(100, 2) * torch.tensor([width - 300.0, height - 300.0])).tolist()
    count, syncs = counted(
        monkeypatch,
        lambda: R.draw(
            images,
            R.rounded_boxes(
                0, torch.tensor([[x, y, x + 120, y + 80] for x, y in xy]), 3.0, 12.0, (1, 0, 0, 1), (1, 0, 0, 0.25)
            ),
        ),
    )
    assert count.launches <= 200 and syncs <= 2 and count.uploads <= 1 and count.float64 == 0, count.summary()


def triangle_inside(X, Y, corners):
    """Samples inside the triangle of `corners` (3 x,y pairs, either turn)."""
    sides = [
        (q[0] - p[0]) * (Y - p[1]) - (q[1] - p[1]) * (X - p[0])
        for p, q in zip(corners, np.roll(corners, -1, 0), strict=True)
    ]
    return np.logical_and.reduce([d >= 0 for d in sides]) | np.logical_and.reduce([d <= 0 for d in sides])


def near_corners(corners, size, reach=1.5):
    """Pixels [size] whose centre lies within `reach` px of a corner."""
    ys, xs = np.mgrid[: size[0], : size[1]] + 0.5
    return np.logical_or.reduce([np.hypot(xs - x, ys - y) <= reach for x, y in corners])


TRIANGLES = [
    ((10.3, 5.2), (30.6, 5.2), (20.45, 18.0)),  # supervision's mark: pointing down, 20 px wide, 12.8 high
    ((40.0, 30.0), (5.0, 34.5), (25.0, 8.0)),  # turning the other way
    ((44.0, 2.0), (41.0, 35.0), (30.0, 20.0)),  # a 25-degree corner at the top
    ((3.0, 3.0), (3.0, 30.0), (30.0, 3.0)),  # a right angle along the axes: exact
]


@pytest.mark.parametrize("corners", TRIANGLES)
def test_triangle_fill(corners):
    """The product of the three edges' half-plane coverages: within 0.1 of a supersampled triangle away
    from its corners, and at a corner within 0.2 (the product counts a pixel past both edges twice over)."""
    X, Y = samples()
    a, b, c = (torch.tensor([corner], dtype=torch.float32) for corner in corners)
    alpha = alpha_of(R.triangles(0, a, b, c, (1, 1, 1, 1)))
    reference = pixel_mean(triangle_inside(X, Y, np.array(corners)))
    error = np.abs(alpha - reference)
    corner = near_corners(corners, (H, W))
    assert error.mean() < 0.01 and error[~corner].max() < 0.1 and error.max() < 0.2, (error.mean(), error.max())


def test_tile_culling_of_triangles():
    """Triangles over many tiles at random turns and sub-pixel offsets: tiles beyond an edge dropped, tiles
    inside solid, against a supersampled reference (a wrongly dropped or solid tile is off by half a pixel's
    coverage or more); and a triangle of no area draws nothing."""
    g = np.random.default_rng(5)
    frames, references, shapes = [], [], []
    X, Y = fine_grid()
    for frame in range(6):
        centre = N / 2 + g.random(2) - 0.5
        angle = g.random() * 2 * np.pi + np.array([0, 2.1, 4.0]) + g.random(3) * 0.4
        corners = centre + (22 + 8 * g.random(3))[:, None] * np.stack([np.cos(angle), np.sin(angle)], 1)
        shapes.append(corners)
        references.append(per_pixel(triangle_inside(X, Y, corners)))
        frames.append(frame)
    corners = torch.tensor(np.array(shapes), dtype=torch.float32)
    prims = R.triangles(torch.tensor(frames), corners[:, 0], corners[:, 1], corners[:, 2], (1, 1, 1, 1))
    flat = R.triangles(0, corners[:1, 0], corners[:1, 0] + 5, corners[:1, 0] + 10, (1, 1, 1, 1))
    _, alpha, _ = R.draw(torch.zeros(len(frames), N, N, 3), R.concat(prims, flat))
    for frame, reference in enumerate(references):
        error = np.abs(alpha[frame].numpy() - reference)
        corner = near_corners(shapes[frame], (N, N))
        assert error.mean() < 0.01 and error[~corner].max() < 0.1, (frame, error.mean(), error[~corner].max())
    assert not R.tile_spans(flat.bounds, N, N, 8)[1].prod(1).any()  # no area: no tile listed


def test_no_float64_for_any_kind(monkeypatch):
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")  # the torch path, which MPS and GPUs run
    g = torch.Generator().manual_seed(4)
    frames = torch.tensor([0, 1, 1])
    xy = torch.rand(3, 2, generator=g) * 30
    prims = R.concat(
        R.rounded_boxes(frames, torch.cat([xy, xy + 12], 1), 2.0, 4.0, (1, 0, 0, 1), (0, 1, 0, 0.5), corner_length=3.0),
        R.segments(frames, xy, xy.flip(1), 2.0, (1, 1, 1, 0.7), caps="butt"),
        R.polylines(1, torch.rand(2, 6, 2, generator=g) * 40, torch.tensor([6, 4]), 3.0, (0, 0, 1, 0.6)),
        R.discs(frames, xy, 5.0, (1, 1, 0, 0.5), ring_width=1.5),
        R.sprites(frames[:1], xy[:1], torch.tensor([[0, 0, 4, 4]]), (1, 1, 1, 1)),
        R.rounded_boxes(frames, torch.cat([xy, xy + 12], 1), 2.0, 4.0, (1, 0, 0, 1), (0, 1, 0, 0.5), angle=0.6),
        R.ellipses(
            frames,
            xy,
            xy.flip(1) / 3 + 2,
            1.5,
            (1, 1, 1, 1),
            angle=torch.rand(3, generator=g),
            fill_color=(0, 0, 1, 0.5),
        ),
        R.triangles(frames, xy, xy + torch.tensor([9.0, 1.0]), xy + torch.tensor([3.0, 8.0]), (0, 1, 1, 0.8)),
    )
    count, _ = counted(monkeypatch, lambda: R.draw(torch.rand(2, H, W, 4), prims, atlas=torch.rand(4, 4)))
    assert count.float64 == 0, count.f64_ops


def test_straight_alpha_new_and_in_place():
    """Premultiplied RGBA to straight: RGB / alpha clamped to 0..1, RGB 0 where alpha is 0, alpha kept."""
    layer = torch.tensor(
        [
            [0.2, 0.1, 0.0, 0.4],
            [0.0, 0.0, 0.0, 0.0],
            [1e-9, 0.0, 0.0, 0.0],
            [0.5, 0.3, 0.6, 0.5],
            [3e-39, 0.0, 1e-39, 6e-39],
        ]
    )
    expected = torch.tensor(
        [
            [0.5, 0.25, 0.0, 0.4],
            [0.0, 0.0, 0.0, 0.0],
            [0.0, 0.0, 0.0, 0.0],
            [1.0, 0.6, 1.0, 0.5],
            [0.5, 0.0, 1e-39 / 6e-39, 6e-39],
        ]
    )
    new = R.straight_alpha(layer)
    torch.testing.assert_close(new, expected, rtol=1e-6, atol=0)
    converted = layer.clone()
    assert R.straight_alpha(converted, in_place=True) is converted and torch.equal(converted, new)


@pytest.mark.parametrize("path", ["numba", "torch"])
def test_draw_refuses_images_it_cannot_composite(monkeypatch, path):
    """1 or 2 channels, integers, or not [B,H,W,C]: a ValueError that names images (numba's loop wrote past
    a 1-channel image's rows; the torch path resized its output)."""
    if path == "torch":
        monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    prims = R.rounded_boxes(0, torch.tensor([[2.0, 2, 20, 12]]), 2.0, 3.0, (1, 0, 0, 1), (0, 1, 0, 0.5))
    for images in (
        torch.rand(1, 16, 24, 1),
        torch.rand(1, 16, 24, 2),
        torch.zeros(1, 16, 24, 3, dtype=torch.uint8),
        torch.rand(16, 24, 3),
    ):
        with pytest.raises(ValueError, match="images"):
            R.draw(images, prims)


@pytest.mark.parametrize("path", ["numba", "torch"])
def test_draw_takes_any_float_dtype_and_grad(monkeypatch, path):
    """Rendered in float32, returned in the images' dtype; inputs that require grad are read detached."""
    if path == "torch":
        monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    torch.manual_seed(0)
    images = torch.rand(2, 17, 26, 4)
    prims = R.concat(
        R.rounded_boxes(
            torch.tensor([0, 1]),
            torch.tensor([[2.0, 2, 20, 12], [5, 1, 25, 16]]),
            2.0,
            3.0,
            (1, 0, 0, 1),
            (0, 1, 0, 0.5),
        ),
        R.discs(1, torch.tensor([[9.0, 8]]), 6.0, (0, 0, 1, 0.7)),
    )
    expected = R.draw(images, prims)
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        got = R.draw(images.to(dtype), prims)
        assert got[0].dtype == dtype and got[1].dtype == torch.float32
        assert torch.equal(got[0], R.draw(images.to(dtype).float(), prims)[0].to(dtype))
    prims.params.requires_grad_()
    got = R.draw(images.clone().requires_grad_(), prims)
    assert all(torch.equal(e, g) and not g.requires_grad for e, g in zip(expected, got, strict=False))
