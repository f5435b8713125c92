"""Link styles, point markers and trails against independent references: brute-force coverage with
16x16 samples per pixel (numpy), and the pattern, colour and fading rules of utils/link_styles.py."""

import json
import math

import numpy as np
import pytest
import torch

from rasterkit.nodes.links import LineLinkRenderer
from rasterkit.utils import gpu_rendering as R
from rasterkit.utils.gpu_rendering import link_styles as S

H, W, SS = 40, 64, 16


def samples():
    ys = (np.arange(H * SS) + 0.5) / SS
    xs = (np.arange(W * SS) + 0.5) / SS
    return np.meshgrid(xs, ys)


def pixel_mean(values):
    return values.reshape(H, SS, W, SS).mean(axis=(1, 3))


def along_across(X, Y, a, b):
    d = np.subtract(b, a, dtype=float)
    length = np.hypot(*d)
    u = d / length
    return (X - a[0]) * u[0] + (Y - a[1]) * u[1], np.abs((X - a[0]) * u[1] - (Y - a[1]) * u[0]), length


def capsule(X, Y, a, b, half):
    along, across, length = along_across(X, Y, a, b)
    beyond = np.maximum(np.maximum(-along, along - length), 0)
    return np.hypot(beyond, across) <= half


def draw(prims):
    _, alpha, layer = R.draw(torch.zeros(1, H, W, 3), prims)
    return alpha[0].numpy(), layer[0].numpy()


def assert_close(alpha, reference, mean=0.01, largest=0.1):
    error = np.abs(alpha - reference)
    assert error.mean() < mean and error.max() < largest, (error.mean(), error.max())


def straight(a, b):
    return torch.tensor([[a, b]], dtype=torch.float32), torch.tensor([2])


ONE = torch.zeros(1, dtype=torch.long)
A, B, WIDTH = (4.3, 31.2), (58.7, 9.6), 3.0


@pytest.mark.parametrize("phase", [0.0, 5.5, -3.0])
def test_dashes_against_a_reference(phase):
    """Dash j covers arc [phase mod period + (j - 1) period, + dash] (butt ends), clipped to the link."""
    points, lengths = straight(A, B)
    prims = S.styled_polylines(
        ONE, points, lengths, WIDTH, torch.tensor([[1.0, 1, 1, 1]]), None, "dashed", 7.0, 5.0, phase, 60.0
    )
    X, Y = samples()
    along, across, length = along_across(X, Y, A, B)
    on = np.mod(along - phase, 12.0) < 7.0
    reference = pixel_mean((across <= WIDTH / 2) & (along >= 0) & (along <= length) & on)
    assert_close(draw(prims)[0], reference)


def test_dashes_along_a_curve_against_a_reference():
    """Dashes follow a Bezier link: the reference takes each sample's nearest point on the true curve
    (densely sampled) and its arc length; butt ends are then square to the curve."""
    from scipy.spatial import cKDTree

    from rasterkit.utils.gpu_curves import bezier_polylines

    start, end = torch.tensor([[6.0, 30.0]]), torch.tensor([[58.0, 24.0]])
    points, lengths = bezier_polylines(start, end, 0.3)
    prims = S.styled_polylines(
        ONE, points, lengths, WIDTH, torch.tensor([[1.0, 1, 1, 1]]), None, "dashed", 6.0, 4.0, 2.0, 120.0
    )
    p0, p2 = start[0].numpy().astype(float), end[0].numpy().astype(float)
    control = (p0 + p2) / 2 + 0.3 * np.array([-(p2 - p0)[1], (p2 - p0)[0]])
    t = np.linspace(0, 1, 8001)[:, None]
    dense = (1 - t) ** 2 * p0 + 2 * (1 - t) * t * control + t**2 * p2
    arc = np.concatenate([[0], np.cumsum(np.hypot(*np.diff(dense, axis=0).T))])
    X, Y = samples()
    distance, nearest = cKDTree(dense).query(np.stack([X.ravel(), Y.ravel()], 1), distance_upper_bound=3.0)
    nearest = np.minimum(nearest, len(dense) - 1).reshape(X.shape)
    inner = (nearest > 0) & (nearest < len(dense) - 1)  # not beyond the curve's ends
    on = np.mod(arc[nearest] - 2.0, 10.0) < 6.0
    reference = pixel_mean((distance.reshape(X.shape) <= WIDTH / 2) & inner & on)
    assert_close(draw(prims)[0], reference)


def test_dots_against_a_reference():
    points, lengths = straight(A, B)
    prims = S.styled_polylines(
        ONE,
        points,
        lengths,
        WIDTH,
        torch.tensor([[1.0, 1, 1, 1]]),
        None,
        "dotted",
        gap_length=4.0,
        phase=2.0,
        max_length=60.0,
    )
    X, Y = samples()
    length = np.hypot(B[0] - A[0], B[1] - A[1])
    inside = np.zeros_like(X, dtype=bool)
    for s in np.arange(2.0, length, WIDTH + 4.0):  # a dot every width + gap px from the phase on
        c = np.add(A, s / length * np.subtract(B, A))
        inside |= np.hypot(X - c[0], Y - c[1]) <= WIDTH / 2
    assert_close(draw(prims)[0], pixel_mean(inside))


def test_wider_dots_of_a_glow_sit_on_the_line_dots():
    """A glow is the same dotted stroke drawn wider: its dots must keep the line's spacing."""
    points, lengths = straight(A, B)
    white = torch.tensor([[1.0, 1, 1, 1]])
    line = S.styled_polylines(ONE, points, lengths, WIDTH, white, None, "dotted", gap_length=4.0, max_length=60.0)
    glow = S.styled_polylines(
        ONE, points, lengths, 4 * WIDTH, white, None, "dotted", gap_length=4.0, max_length=60.0, pattern_width=WIDTH
    )
    shown = lambda prims: prims.params[prims.color[:, 3] > 0, :2]  # noqa: E731  the dots' centres
    assert torch.equal(shown(line), shown(glow))


@pytest.mark.parametrize("opacity", [1.0, 0.6])
def test_gradient_covers_the_link_once_with_its_colours_at_the_ends(opacity):
    """The colour steps overlap at their seams just enough to keep the link's opacity (butt ends)."""
    points, lengths = straight(A, B)
    start, end = torch.tensor([[1.0, 0, 0, opacity]]), torch.tensor([[0.0, 0, 1, opacity]])
    alpha, layer = draw(S.styled_polylines(ONE, points, lengths, WIDTH, start, end))
    X, Y = samples()
    along, across, length = along_across(X, Y, A, B)
    # the seams between colour steps: within about 0.1 of the opacity (test_seam_overlap_is_the_least_worst_error)
    assert_close(
        alpha, opacity * pixel_mean((across <= WIDTH / 2) & (along >= 0) & (along <= length)), largest=0.15 * opacity
    )
    rgb = layer[..., :3] / np.maximum(layer[..., 3:], 1e-6)
    first, last = np.add(A, 1.0 / length * np.subtract(B, A)), np.add(B, -1.0 / length * np.subtract(B, A))
    assert np.allclose(rgb[int(first[1]), int(first[0])], [1, 0, 0], atol=0.02)
    assert np.allclose(rgb[int(last[1]), int(last[0])], [0, 0, 1], atol=0.02)
    middle = rgb[int((A[1] + B[1]) / 2), int((A[0] + B[0]) / 2)]
    assert 0.3 < middle[0] < 0.7 and 0.3 < middle[2] < 0.7


def test_gradient_steps_bounded_on_the_host_draw_the_same():
    """max_steps (a caller's bound on its strokes' arc lengths, in steps) builds fewer pieces, the same
    pixels: a bent polyline and a short one, fading."""
    points = torch.tensor(
        [[[4.0, 30.0], [20.0, 12.0], [33.0, 25.0], [40.0, 6.0]], [[8.0, 8.0], [14.0, 10.0], [0, 0], [0, 0]]]
    )
    lengths = torch.tensor([4, 2])
    frame = torch.tensor([0, 0])
    start, end = torch.tensor([[1.0, 0, 0, 0.9], [0, 1, 0, 1]]), torch.tensor([[0.0, 0, 1, 0.2], [0, 0, 1, 0]])
    arc = float(S.arc_lengths(points, lengths).max())  # the longest stroke
    full = S.styled_polylines(frame, points, lengths, 3.0, start, end)
    fewer = S.styled_polylines(frame, points, lengths, 3.0, start, end, max_steps=math.ceil(arc / S.GRADIENT_STEP))
    assert len(fewer.frame) < len(full.frame) and arc < S.GRADIENT_STEP * S.GRADIENT_STEPS
    for a, b in zip(draw(full), draw(fewer), strict=True):
        assert np.array_equal(a, b)


def test_seam_overlap_is_the_least_worst_error():
    """The overlap of two anti-aliased butt ends against a 1-D model of a seam: each end's coverage
    ramps over one pixel; the union of the two, source-over, against the stroke's opacity, for every
    coverage across the stroke; no other overlap does better in the worst case."""
    x, sides = np.linspace(-1.5, 1.5, 601), np.linspace(0.02, 1.0, 50)[:, None]

    def worst(a, d):
        first, second = np.clip(0.5 - x + d / 2, 0, 1) * sides * a, np.clip(0.5 + x + d / 2, 0, 1) * sides * a
        return np.abs(first + second - first * second - sides * a).max()

    for a in (0.3, 0.6, 0.8, 1.0):
        chosen = worst(a, float(S.seam_overlap(torch.tensor(a))))
        assert chosen <= 0.1 * a + 1e-3 and chosen <= min(worst(a, d) for d in np.linspace(0, 1, 101)) + 0.01 * a + 1e-3


MARKER = (30.4, 19.7)


@pytest.mark.parametrize("style", S.POINT_STYLES)
def test_markers_against_a_reference(style):
    radius, stroke = 9.0, 2.0
    prims = S.markers(ONE, torch.tensor([MARKER]), radius, (1.0, 1.0, 1.0, 1.0), style, stroke)
    X, Y = samples()
    dx, dy = X - MARKER[0], Y - MARKER[1]
    if style == "dot":
        inside = np.hypot(dx, dy) <= radius
    elif style == "ring":
        inside = np.abs(np.hypot(dx, dy) - radius) <= stroke / 2
    elif style == "square":  # the outline of the square of half side radius
        box = np.maximum(np.abs(dx), np.abs(dy)) - radius
        outside = np.hypot(np.maximum(np.abs(dx) - radius, 0), np.maximum(np.abs(dy) - radius, 0))
        inside = np.where(box > 0, outside, -box) <= stroke / 2
    elif style == "cross":
        inside = capsule(dx, dy, (-radius, 0), (radius, 0), stroke / 2) | capsule(
            dx, dy, (0, -radius), (0, radius), stroke / 2
        )
    else:  # diamond: corners radius from the centre on the axes, round joins
        corners = [(radius, 0), (0, radius), (-radius, 0), (0, -radius)]
        inside = np.zeros_like(X, dtype=bool)
        for k in range(4):
            inside |= capsule(dx, dy, corners[k], corners[(k + 1) % 4], stroke / 2)
    # a marker's strokes are one shape whose coverage is the largest of theirs: where two strokes meet at
    # an angle, a pixel that each covers in part is under-counted (the engine's rule for joins)
    assert_close(draw(prims)[0], pixel_mean(inside), largest=0.25 if style in ("cross", "diamond") else 0.1)


def test_bad_marker_style_is_named():
    with pytest.raises(ValueError, match="point_style: expected one of dot, ring"):
        S.markers(ONE, torch.tensor([MARKER]), 3.0, (1, 1, 1, 1), "star")


def trail_reference(path, opacity, half):
    """Alpha of a trail through `path` (newest first, butt ends), fading in colour steps of
    max(4, length / 32) px from opacity at the newest point to 0 at the oldest: by the nearest point of
    the path to each sample, its arc length along the path."""
    X, Y = samples()
    path = np.asarray(path, float)
    best, arc_at = np.full(X.shape, np.inf), np.zeros(X.shape)
    start = 0.0
    for k, (a, b) in enumerate(zip(path[:-1], path[1:], strict=False)):
        along, across, length = along_across(X, Y, a, b)
        t = np.clip(along, 0, length)
        distance = np.hypot(along - t, across)
        if k == 0:  # butt end at the newest point, at the oldest below
            distance = np.where(along < 0, np.inf, distance)
        if k == len(path) - 2:
            distance = np.where(along > length, np.inf, distance)
        closer = distance < best
        best, arc_at = np.where(closer, distance, best), np.where(closer, start + t, arc_at)
        start += length
    step = max(4.0, start / 32)
    steps = np.ceil(start / step - 1e-4)
    fade = 1 - np.minimum(np.floor(arc_at / step), steps - 1) / max(steps - 1, 1)
    return pixel_mean(np.where(best <= half, opacity * fade, 0.0))


def test_trails_against_a_reference():
    """A point moving right, then down: its trail at the last frame bends through its past positions."""
    positions = torch.tensor([[6.0, 8.0], [22.0, 8.0], [38.0, 8.0], [48.0, 8.0], [48.0, 18.0], [48.0, 34.0]])
    xy, visible = positions[:, None], torch.ones(6, 1, dtype=torch.bool)
    frame, points, lengths = S.trail_paths(xy, visible, 4)
    assert lengths.tolist() == [1, 2, 3, 4, 5, 5] and frame.tolist() == [0, 1, 2, 3, 4, 5]
    opacity, width = 0.9, 3.0
    head = torch.tensor([[1.0, 1.0, 1.0, opacity]]).expand(6, 4)
    prims = S.styled_polylines(frame, points, lengths, width, head, head * torch.tensor([1, 1, 1, 0.0]))
    _, alpha, _ = R.draw(torch.zeros(6, H, W, 3), prims)
    newest_first = positions[1:].flip(0).tolist()
    assert_close(alpha[5].numpy(), trail_reference(newest_first, opacity, width / 2))
    assert alpha[0].sum() == 0  # one position: no trail yet


def test_trails_stop_where_the_point_was_hidden():
    xy = torch.arange(5.0)[:, None, None].expand(5, 1, 2) * 10
    visible = torch.tensor([[True], [True], [False], [True], [True]])
    lengths = S.trail_paths(xy, visible, 3)[2]
    assert lengths.tolist() == [1, 2, 0, 1, 2]
    assert S.trail_paths(xy, visible, 100)[1].shape == (5, 5, 2)  # no longer than the batch


def test_catmull_rom_passes_through_the_points():
    points = torch.tensor(
        [[[0.0, 0.0], [10.0, 0.0], [10.0, 10.0], [0.0, 0.0]], [[5.0, 5.0], [9.0, 1.0], [0.0, 0.0], [0.0, 0.0]]]
    )
    smooth, lengths = S.catmull_rom(points, torch.tensor([4, 2]), 4)
    assert lengths.tolist() == [13, 5]
    assert torch.allclose(smooth[0, ::4], points[0]) and torch.allclose(smooth[1, [0, 4]], points[1, :2])
    assert torch.allclose(smooth[1, 2], torch.tensor([7.0, 3.0]))  # a straight span stays straight


def test_width_by_length():
    length = torch.tensor([0.0, 50.0, 100.0, 200.0])
    assert S.width_by_length(length, 100.0, 2.0, "shorter_thicker").tolist() == [3.0, 2.0, 1.0, 1.0]
    assert S.width_by_length(length, 100.0, 2.0, "longer_thicker").tolist() == [1.0, 2.0, 3.0, 3.0]
    assert S.width_by_length(length, 100.0, 2.0, "none").tolist() == [2.0] * 4


# -- the node ----------------------------------------------------------------------------------------

IMAGES = torch.zeros(3, 40, 64, 3)
PAIR = "[[[6, 20]], [[58, 20]]]"


def render(**kw):
    kw.setdefault("point_radius", 0.0)
    kw.setdefault("opacity", 1.0)
    return LineLinkRenderer.run(IMAGES, tracks_json=PAIR, k=1, **kw)


def test_marching_ants_move_by_dash_speed_per_frame():
    alpha = render(line_style="dashed", dash_length=6.0, gap_length=4.0, dash_phase=1.0, dash_speed=3.0, width=2.0)[1][
        :, 20
    ]
    # arc s = x - 6 along the link: dashes where (s - phase) mod 10 < 6, phase = 1 + 3 t
    for t in range(3):
        s = np.arange(64) + 0.5 - 6
        on = np.mod(s - 1 - 3 * t, 10) < 6
        inside = (s > 0.5) & (s < 51.5)
        middle = np.abs(np.mod(s - 1 - 3 * t, 10) - 3) <= 2.5  # pixel centres a half pixel or more into a dash
        gap_middle = np.abs(np.mod(s - 1 - 3 * t, 10) - 8) <= 1.5
        assert (alpha[t].numpy()[inside & on & middle] > 0.99).all(), t
        assert (alpha[t].numpy()[inside & ~on & gap_middle] == 0).all(), t
    assert torch.equal(alpha[1, 16:44], alpha[0, 13:41])  # frame 1 is frame 0 moved 3 px along


def test_node_gradient_ends_and_glow():
    _, alpha, layer, _ = render(color="#FF0000", end_color="#0000FF", width=3.0)
    assert torch.allclose(layer[0, 20, 7, :3], torch.tensor([1.0, 0, 0]), atol=0.02)
    assert torch.allclose(layer[0, 20, 56, :3], torch.tensor([0.0, 0, 1]), atol=0.02)
    plain = render(width=3.0)[1]
    glowing = render(width=3.0, glow=0.3, glow_scale=4.0)[1]
    assert torch.equal(glowing[:, 20, 8:56], plain[:, 20, 8:56])  # opaque links hide their glow
    assert plain[0, 24, 30] == 0 and abs(float(glowing[0, 24, 30]) - 0.3) < 1e-5  # 4 px off: inside the 12 px glow


def test_node_markers_trails_and_width_by_length():
    tracks = {
        "xy": torch.tensor([[[10.0, 10.0], [50.0, 30.0]], [[14.0, 10.0], [50.0, 30.0]], [[18.0, 10.0], [50.0, 30.0]]]),
        "visible": torch.ones(3, 2, dtype=torch.bool),
    }

    def run(**kw):
        return LineLinkRenderer.run(IMAGES, tracks_json="", tracks=tracks, k=1, opacity=1.0, **kw)[1]

    ring = run(point_radius=5.5, point_style="ring", width=1.0)
    assert ring[0, 10, 15] > 0.9 and ring[0, 7, 10] == 0  # hollow (the link leaves the centre down and right)
    trail = run(point_radius=0.0, trail_frames=2, width=2.0) - run(point_radius=0.0, width=2.0)
    assert trail[0].abs().sum() == 0 and trail[2, 10, 15] > 0.9  # at frame 2, the path from x 18 back to 10
    thick = run(point_radius=0.0, width=2.0, width_by_length="shorter_thicker", max_distance=200.0)
    thin = run(point_radius=0.0, width=2.0, width_by_length="longer_thicker", max_distance=200.0)
    assert thick.sum() > thin.sum()
    one_frame = LineLinkRenderer.run(IMAGES[:1], tracks_json="", tracks=tracks, trail_frames=5)[1]
    assert torch.equal(one_frame, LineLinkRenderer.run(IMAGES[:1], tracks_json="", tracks=tracks)[1])


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(line_style="wavy"), "line_style: expected one of solid, dashed, dotted, pulsing, electric, got 'wavy'"),
        (dict(curve="wavy"), "curve: expected one of straight, bezier, cubic, spiral, elastic, fourier, got 'wavy'"),
        (dict(point_style="star"), "point_style: expected one of dot, ring"),
        (dict(width_by_length="random"), "width_by_length: expected one of none"),
        (dict(end_color="teal"), "end_color: expected a hex colour"),
        (dict(line_style="dotted", gap_length=0.0), "gap_length: expected more than 0 for dotted lines"),
        (dict(line_style="dashed", dash_length=-1.0), "dash_length: expected more than 0 for dashed lines"),
    ],
)
def test_bad_style_input_is_named(kw, message):
    with pytest.raises(ValueError, match=message):
        render(**kw)


def test_every_style_at_once_on_curves():
    _, alpha, _, edges = render(
        curve="bezier",
        line_style="dashed",
        end_color="#00FF00",
        glow=0.5,
        marker_glow=True,
        point_radius=3.0,
        point_style="diamond",
        trail_frames=2,
        trail_smooth=True,
        width_by_length="longer_thicker",
    )
    assert json.loads(edges) == [[[0, 1]]] * 3 and alpha.amax() > 0.9


# -- text at points and Voronoi walls -------------------------------------------------------------


def text_reference(text, size, left, bottom, height=H, width=W):
    """Coverage float [height,width] of `text` drawn by Pillow in its bundled font (the default font's
    first choice for ASCII) with its ink's lower left corner at pixel (left, bottom), on a frame large
    enough for any offset, then cut to the frame."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=size)
    ink_left, _, _, ink_bottom = font.getbbox(text, anchor="ls")
    margin = 200
    canvas = Image.new("L", (width + 2 * margin, height + 2 * margin), 0)
    ImageDraw.Draw(canvas).text(
        (margin + left - ink_left, margin + bottom - ink_bottom), text, fill=255, font=font, anchor="ls"
    )
    return np.asarray(canvas, np.float32)[margin : margin + height, margin : margin + width] / 255


def test_point_text_is_the_fonts_coverage_up_and_right_of_the_point():
    """Text with its ink's lower left corner at (x + r + 2, y - r - 2) in whole pixels (r: the marker's
    radius), at the opacity; the labelled track shows its label, the others their ids. Text with no room
    on the right goes to the left of its point, with none above below it: no text is cut. Away from the
    markers, the coverage is the font's."""
    from PIL import ImageFont

    font = ImageFont.load_default(size=12)
    tracks = '[[{"x": 20.6, "y": 30.2, "label": "Vega"}], [[8.3, 6.0]], [[58.0, 38.0]]]'
    texts = (("Vega", 20.6, 30.2), ("1", 8.3, 6.0), ("2", 58.0, 38.0))
    X, Y = np.meshgrid(np.arange(W) + 0.5, np.arange(H) + 0.5)
    for radius, opacity in ((0.0, 1.0), (3.0, 0.7)):
        _, alpha, _, _ = LineLinkRenderer.run(
            IMAGES[:1],
            tracks_json=tracks,
            k=1,
            max_distance=1.0,
            point_radius=radius,
            opacity=opacity,
            point_labels="label",
            text_size=12,
        )
        offset, reference, sides = radius + 2, 0, set()
        for text, x, y in texts:
            ink_left, ink_top, ink_right, ink_bottom = font.getbbox(text, anchor="ls")
            w, h = ink_right - ink_left, ink_bottom - ink_top
            left = x + offset if x + offset + w <= W else x - offset - w
            top = y - offset - h if y - offset - h >= 0 else y + offset
            sides.add((left < x, top > y))
            reference = reference + text_reference(text, 12, math.floor(left), math.floor(top) + h)
        away = np.all([np.hypot(X - x, Y - y) > radius + 1 for _, x, y in texts], 0)
        assert np.abs(alpha[0].numpy() - opacity * reference)[away].max() < 1e-6
        assert {(True, False), (False, True)} < sides  # the "2" has no room on the right, the "1" none above


def test_point_text_colour_hidden_points_and_ids():
    tracks = {
        "xy": torch.tensor([[[10.0, 30.0], [40.0, 30.0]]]).expand(3, 2, 2).clone(),
        "visible": torch.tensor([[True, True], [True, False], [False, False]]),
        "labels": ["", None],
    }

    def run(**kw):
        return LineLinkRenderer.run(
            IMAGES,
            tracks_json="",
            tracks=tracks,
            k=1,
            max_distance=1.0,
            point_radius=0.0,
            opacity=1.0,
            **kw,
        )

    _, alpha, layer, _ = run(point_labels="label", color="#FF0000")
    assert alpha[:, :, :30].sum() == 0  # an empty label: no text
    assert alpha[0, :, 40:].sum() > 5 and alpha[1:].sum() == 0  # the id "1", while its point shows
    ink = layer[0][alpha[0] > 0.5]
    assert torch.allclose(ink[:, :3], torch.tensor([1.0, 0.0, 0.0]))  # the points' colour
    _, alpha, layer, _ = run(point_labels="id", text_color="#00FF00", color="#FF0000")
    assert alpha[0, :, :30].sum() > 5 and torch.allclose(layer[0][alpha[0] > 0.5][:, :3], torch.tensor([0.0, 1, 0]))
    assert run(point_labels="none")[1].sum() == 0


def test_point_text_is_one_sprite_per_visible_point_and_one_atlas(monkeypatch):
    """Drawn in one batch: one atlas of the distinct strings, one sprite per visible point and frame."""

    drawn = {}
    real_draw = R.draw

    def record(images, prims, atlas=None, **kw):
        drawn.update(prims=prims, atlas=atlas)
        return real_draw(images, prims, atlas, **kw)

    monkeypatch.setattr(R, "draw", record)
    visible = torch.rand(3, 40, generator=torch.Generator().manual_seed(0)) > 0.3
    tracks = {"xy": torch.rand(3, 40, 2) * torch.tensor([64.0, 40.0]), "visible": visible, "labels": ["a", "b"] * 20}
    LineLinkRenderer.run(IMAGES, tracks_json="", tracks=tracks, point_radius=0.0, point_labels="label")
    sprites = drawn["prims"].kind == R.SPRITE
    assert int(sprites.sum()) == int(visible.sum())
    assert drawn["prims"].frame[sprites].tolist() == visible.nonzero()[:, 0].tolist()
    assert drawn["atlas"].ndim == 2 and drawn["atlas"].shape[0] < 2 * 14  # two strings


def test_voronoi_walls_against_a_reference():
    """Three points: three walls from their circumcentre to the frame's edges, each a line of the width
    with a round end at the centre, cut by the frame (16x16 samples per pixel). A sample is on the wall
    between i and j within half the width of their bisector at a foot no nearer to the third point than
    to them (or of the centre); the walls are separate shapes, composited one over another."""
    points = np.array([[14.0, 12.0], [50.0, 16.0], [30.0, 34.0]])
    tracks = json.dumps([[p.tolist()] for p in points])
    _, alpha, _, edges = LineLinkRenderer.run(
        IMAGES[:1], tracks_json=tracks, graph="voronoi", width=2.0, opacity=1.0, point_radius=0.0
    )
    assert json.loads(edges) == [[[0, 1], [0, 2], [1, 2]]]
    X, Y = samples()
    samples_xy = np.stack([X, Y], -1)
    centre = np.linalg.solve(2 * (points[1:] - points[0]), (points[1:] ** 2).sum(1) - (points[0] ** 2).sum())
    uncovered = np.ones((H, W))
    for i, j in ((0, 1), (0, 2), (1, 2)):
        middle, unit = (points[i] + points[j]) / 2, (points[j] - points[i]) / np.linalg.norm(points[j] - points[i])
        along_link = (samples_xy - middle) @ unit
        foot = samples_xy - along_link[..., None] * unit
        on_wall = np.linalg.norm(foot - points[3 - i - j], axis=-1) >= np.linalg.norm(foot - points[i], axis=-1)
        wall = ((np.abs(along_link) <= 1.0) & on_wall) | (np.hypot(X - centre[0], Y - centre[1]) <= 1.0)
        uncovered *= 1 - pixel_mean(wall)
    assert_close(alpha[0].numpy(), 1 - uncovered)


def test_link_layers_on_plain_tensors_are_what_the_node_draws(monkeypatch):
    """The engine's link layers, called without the node on the points, links and a LinkStyle, give the
    primitives and atlas the node draws (glow, links, marker glow, markers, text)."""
    from rasterkit.utils.gpu_rendering.link_layers import LinkStyle, link_layers
    from rasterkit.utils.inputs.tracks import track_points

    drawn = {}
    real_draw = R.draw
    monkeypatch.setattr(
        R,
        "draw",
        lambda images, prims, atlas=None, **kw: (
            drawn.update(prims=prims, atlas=atlas) or real_draw(images, prims, atlas, **kw)
        ),
    )
    options = dict(
        line_style="dashed",
        end_color="#FF0000",
        glow=0.5,
        marker_glow=True,
        point_labels="id",
        point_style="ring",
        curve="bezier",
        curvature=0.3,
    )
    LineLinkRenderer.run(IMAGES, tracks_json=PAIR, k=1, **options)
    xy, visible, labels = track_points(3, tracks_json=PAIR)
    frame, pairs = torch.arange(3), torch.tensor([[0, 1]] * 3)
    style = LinkStyle(end_rgb=(1.0, 0.0, 0.0), **{k: v for k, v in options.items() if k != "end_color"})
    longest = math.ceil((xy[:, 1] - xy[:, 0]).norm(dim=-1).amax())  # the node's bound on the curves' lengths
    prims, atlas = link_layers(xy, visible, labels, frame, pairs, xy[:, 0], xy[:, 1], style, IMAGES.shape[1:3], longest)
    for name in ("frame", "kind", "params", "color", "bounds", "group"):
        assert torch.equal(getattr(prims, name), getattr(drawn["prims"], name)), name
    assert torch.equal(atlas, drawn["atlas"])


# -- plexus controls: length falloff and colours from the points -----------------------------------

# three links of lengths 20, 36 and 52 px on rows apart; max_distance 60
FALLOFF_LINKS = (((6.3, 7.4), (26.3, 7.4)), ((6.3, 19.6), (42.3, 19.6)), ((5.8, 31.3), (56.8, 33.8)))


def link_strokes(style, links=FALLOFF_LINKS):
    from rasterkit.utils.gpu_rendering.link_layers import link_strokes

    ends = torch.tensor(links, dtype=torch.float32)
    pairs = torch.arange(2 * len(links)).view(-1, 2)
    return link_strokes(torch.zeros(len(links), dtype=torch.long), pairs, ends[:, 0], ends[:, 1], style)[1]


def falloff(length, max_distance, amount):
    return np.clip((max_distance - length) / (amount * max_distance), 0, 1)


@pytest.mark.parametrize("amount", [1.0, 0.6])
def test_length_falloff_fades_opacity_against_a_reference(amount):
    """Each link at its opacity times the falloff of its length: full to (1 - amount) x max_distance, 0 at it."""
    from rasterkit.utils.gpu_rendering.link_layers import LinkStyle

    style = LinkStyle(opacity=0.9, width=3.0, max_distance=60.0, length_falloff=amount)
    X, Y = samples()
    reference = np.zeros((H, W))
    for a, b in FALLOFF_LINKS:
        length = math.dist(a, b)
        reference += 0.9 * falloff(length, 60.0, amount) * pixel_mean(capsule(X, Y, a, b, 1.5))
    assert_close(draw(link_strokes(style))[0], reference)


def test_length_falloff_thins_width_against_a_reference():
    """falloff_on width: each link falloff(length) x width wide (here 3.3 down to 1.2 px), at full opacity."""
    from rasterkit.utils.gpu_rendering.link_layers import LinkStyle

    style = LinkStyle(opacity=1.0, width=4.0, max_distance=70.0, length_falloff=0.8, falloff_on="width")
    X, Y = samples()
    reference = np.zeros((H, W))
    for a, b in FALLOFF_LINKS:
        half = 2.0 * falloff(math.dist(a, b), 70.0, 0.8)
        assert half >= 0.6  # the engine draws strokes under 1 px as 1 px at lower opacity: not this test's
        reference += pixel_mean(capsule(X, Y, a, b, half))
    assert_close(draw(link_strokes(style))[0], reference)
    both = LinkStyle(opacity=1.0, width=4.0, max_distance=70.0, length_falloff=0.8, falloff_on="opacity and width")
    assert draw(link_strokes(both))[0].sum() < draw(link_strokes(style))[0].sum()


def test_length_falloff_is_off_at_0_and_ends_at_the_longest_link_without_max_distance():
    from rasterkit.utils.gpu_rendering.link_layers import LinkStyle

    plain = link_strokes(LinkStyle())
    off = link_strokes(LinkStyle(length_falloff=0.0, falloff_on="width"))
    assert all(torch.equal(x, y) for x, y in zip(plain.fields(), off.fields(), strict=True))
    longest = draw(link_strokes(LinkStyle(opacity=1.0, length_falloff=1.0)))[0]
    assert longest[32, 30] == 0 and longest[7, 8] > 0.5  # the longest link fades to nothing, the shortest shows
    with pytest.raises(ValueError, match="falloff_on: expected one of opacity, width, opacity and width"):
        link_strokes(LinkStyle(length_falloff=0.5, falloff_on="colour"))


def test_colours_from_the_points_blend_along_the_link_against_a_reference():
    """color "points": a link from its first point's colour to its second's, in steps of max(8, length / 32)
    px (butt ends), each step the blend at its place; the premultiplied colour of every pixel against the
    16x16-sample reference, channel by channel."""
    from rasterkit.utils.gpu_rendering.link_layers import LinkStyle

    palette = ((1.0, 0.2, 0.0), (0.0, 0.4, 1.0), (0.1, 1.0, 0.3))
    links = (((4.3, 31.2), (58.7, 9.6)), ((8.0, 6.0), (30.0, 8.0)))  # points 0 -> 1 and 2 -> 3 (2 -> 0 mod 3)
    style = LinkStyle(opacity=1.0, width=3.0, point_palette=palette)
    alpha, layer = draw(link_strokes(style, links))
    X, Y = samples()
    reference = np.zeros((H, W, 3))
    for (a, b), (first, second) in zip(links, ((0, 1), (2, 0)), strict=True):
        along, across, length = along_across(X, Y, a, b)
        step = max(8.0, length / 32)
        steps = math.ceil(length / step - 1e-4)
        t = np.minimum(np.floor(np.clip(along, 0, length) / step), steps - 1) / max(steps - 1, 1)
        inside = (across <= 1.5) & (along >= 0) & (along <= length)
        colour = (1 - t)[..., None] * np.array(palette[first]) + t[..., None] * np.array(palette[second])
        for channel in range(3):
            reference[..., channel] += pixel_mean(inside * colour[..., channel])
    premultiplied = layer[..., :3]  # draw() gives the layer premultiplied
    for channel in range(3):  # the seams between steps: within 0.15, as test_gradient_covers_the_link_once...
        assert_close(premultiplied[..., channel], reference[..., channel], largest=0.15)


def test_colours_from_the_points_colour_markers_text_and_trails_by_track():
    tracks = {
        "xy": torch.tensor([[[10.0, 10.0], [50.0, 30.0], [10.0, 30.0]]]).expand(3, 3, 2).clone(),
        "visible": torch.ones(3, 3, dtype=torch.bool),
    }
    tracks["xy"][:, 2, 0] += torch.arange(3.0) * 4  # point 2 moves: a trail

    def run(**kw):
        return LineLinkRenderer.run(
            IMAGES, tracks_json="", tracks=tracks, k=1, max_distance=1.0, opacity=1.0, color="points", **kw
        )

    _, alpha, layer, _ = run(point_radius=4.0, palette="tab10")
    tab10 = [(0x1F / 255, 0x77 / 255, 0xB4 / 255), (1.0, 0x7F / 255, 0x0E / 255), (0x2C / 255, 0xA0 / 255, 0x2C / 255)]
    for (x, y), rgb in zip(((10, 10), (50, 30), (10, 30)), tab10, strict=True):
        assert torch.allclose(layer[0, y, x, :3], torch.tensor(rgb), atol=1e-5)
    _, alpha, layer, _ = run(point_radius=0.0, point_labels="id", palette="tab10")
    ink = layer[0, 10:30, 52:64][alpha[0, 10:30, 52:64] > 0.5]  # the "1" up and right of point 1
    assert len(ink) and torch.allclose(ink[:, :3], torch.tensor(tab10[1]), atol=1e-5)
    _, alpha, layer, _ = run(point_radius=0.0, trail_frames=2, width=2.0, palette="tab10")
    assert alpha[2, 30, 15] > 0.5 and torch.allclose(layer[2, 30, 15, :3], torch.tensor(tab10[2]), atol=1e-5)


# -- pulsing and electric links (ys-vision-tools' line styles) -------------------------------------


def pulse_reference(a, b, width, opacity, wave, phase):
    """Alpha of a pulsing straight stroke a -> b, written out anew: the fewest equal butt-ended steps of at
    most clamp(wave / 6, 1, 4) px, each as wide and as opaque as the wave
    c = 0.5 + 0.5 cos(2 pi (s - phase) / wave) at its middle s: width (0.5 + 0.5 c), opacity (0.25 + 0.75 c)."""
    X, Y = samples()
    along, across, length = along_across(X, Y, a, b)
    step = length / np.ceil(length / min(max(wave / 6, 1.0), 4.0))
    middle = (np.floor(along / step) + 0.5) * step
    crest = 0.5 + 0.5 * np.cos(2 * np.pi * (middle - phase) / wave)
    inside = (along >= 0) & (along <= length) & (across <= width * (0.5 + 0.5 * crest) / 2)
    return pixel_mean(np.where(inside, opacity * (0.25 + 0.75 * crest), 0.0))


@pytest.mark.parametrize("phase,wave", [(0.0, 14.0), (5.5, 30.0), (-3.0, 9.0)])
def test_pulsing_against_a_reference(phase, wave):
    """Straight strokes and the same stroke as a polyline of three points draw the wave's steps; their
    seams within about 0.1 of the opacity, as a gradient's (test_seam_overlap_is_the_least_worst_error)."""
    width, opacity = 5.0, 0.9
    colour = torch.tensor([[1.0, 1, 1, opacity]])
    reference = pulse_reference(A, B, width, opacity, wave, phase)
    middle = np.add(A, 0.45 * np.subtract(B, A)).tolist()
    for points, lengths in (straight(A, B), (torch.tensor([[A, middle, B]], dtype=torch.float32), torch.tensor([3]))):
        gap = wave - 4.0  # dash_length + gap_length is the wave
        prims = S.styled_polylines(ONE, points, lengths, width, colour, None, "pulsing", 4.0, gap, phase, 60.0)
        assert_close(draw(prims)[0], reference, largest=0.15 * opacity)


def test_pulsing_along_a_curve_against_a_reference():
    """Pulsing steps follow a Bezier link by their chords: the reference takes each sample's nearest point
    on the true curve (densely sampled), its arc length, and the step and wave there."""
    from scipy.spatial import cKDTree

    from rasterkit.utils.gpu_curves import bezier_polylines

    start, end = torch.tensor([[6.0, 30.0]]), torch.tensor([[58.0, 24.0]])
    points, lengths = bezier_polylines(start, end, 0.3)
    width, opacity, wave, phase = 4.0, 1.0, 16.0, 3.0
    colour = torch.tensor([[1.0, 1, 1, opacity]])
    prims = S.styled_polylines(ONE, points, lengths, width, colour, None, "pulsing", 8.0, 8.0, phase, 120.0)
    p0, p2 = start[0].numpy().astype(float), end[0].numpy().astype(float)
    control = (p0 + p2) / 2 + 0.3 * np.array([-(p2 - p0)[1], (p2 - p0)[0]])
    t = np.linspace(0, 1, 8001)[:, None]
    dense = (1 - t) ** 2 * p0 + 2 * (1 - t) * t * control + t**2 * p2
    arc = np.concatenate([[0], np.cumsum(np.hypot(*np.diff(dense, axis=0).T))])
    step = arc[-1] / np.ceil(arc[-1] / min(max(wave / 6, 1.0), 4.0))
    X, Y = samples()
    distance, nearest = cKDTree(dense).query(np.stack([X.ravel(), Y.ravel()], 1), distance_upper_bound=3.0)
    nearest = np.minimum(nearest, len(dense) - 1).reshape(X.shape)
    inner = (nearest > 0) & (nearest < len(dense) - 1)  # not beyond the curve's ends
    crest = 0.5 + 0.5 * np.cos(2 * np.pi * ((np.floor(arc[nearest] / step) + 0.5) * step - phase) / wave)
    inside = (distance.reshape(X.shape) <= width * (0.5 + 0.5 * crest) / 2) & inner
    assert_close(draw(prims)[0], pixel_mean(np.where(inside, opacity * (0.25 + 0.75 * crest), 0.0)), largest=0.15)


def test_pulsing_gradient_colours_its_steps_along_the_link():
    points, lengths = straight(A, B)
    start, end = torch.tensor([[1.0, 0, 0, 1]]), torch.tensor([[0.0, 0, 1, 1]])
    _, layer = draw(S.styled_polylines(ONE, points, lengths, 4.0, start, end, "pulsing", 6.0, 6.0, 0.0, 60.0))
    rgb = layer[..., :3] / np.maximum(layer[..., 3:], 1e-6)
    first, last = np.add(A, 1.0 / 58 * np.subtract(B, A)), np.add(B, -1.0 / 58 * np.subtract(B, A))
    assert np.allclose(rgb[int(first[1]), int(first[0])], [1, 0, 0], atol=0.05)
    assert np.allclose(rgb[int(last[1]), int(last[0])], [0, 0, 1], atol=0.05)


def test_pulses_march_by_dash_speed_per_frame():
    """A 12 px wave in 2 px steps, moving 4 px (two steps) a frame: each frame is the one before moved
    4 px along the link, away from its ends."""
    alpha = render(line_style="pulsing", dash_length=6.0, gap_length=6.0, dash_speed=4.0, width=3.0)[1]
    assert alpha[0, 20, 8:56].std() > 0.1  # crests and troughs
    for t in (1, 2):
        assert torch.allclose(alpha[t, 15:26, 16:50], alpha[t - 1, 15:26, 12:46], atol=1e-5), t


def hash32(h):
    """link_styles' hash of uint64 values, written out anew in numpy."""
    for _ in range(2):
        h = ((h ^ (h >> np.uint64(16))) * np.uint64(0x45D9F3B)) & np.uint64(0xFFFFFFFF)
    return h ^ (h >> np.uint64(16))


def electric_reference(a, b, spacing, amplitude, seed, frame, pair):
    """The zigzag of a straight link a -> b, written out anew: the fewest equal pieces of at most
    `spacing` px, each inner corner moved along the left normal by the hash of (seed, frame, its points,
    its number) mapped to -amplitude .. amplitude."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    length = np.hypot(*(b - a))
    pieces = int(np.ceil(length / spacing))
    k = np.arange(pieces + 1, dtype=np.uint64)
    h = hash32(np.uint64(frame) ^ np.uint64(seed))
    h = hash32(hash32(h ^ np.uint64(pair[0])) ^ np.uint64(pair[1]))
    h = hash32(h ^ k)
    swing = (h & np.uint64(0xFFFFFF)).astype(float) * (2 * amplitude / 2**24) - amplitude
    swing[[0, -1]] = 0
    normal = np.array([-(b - a)[1], (b - a)[0]]) / length
    return a + (k / pieces)[:, None] * (b - a) + swing[:, None] * normal


def test_electric_zigzag_against_a_reference():
    """The zigzag's corners match a reference written out anew, and the drawn zigzag (solid, round joins)
    a supersampled union of capsules along them."""
    width, spacing, amplitude, seed = 2.0, 7.0, 3.5, 12345
    frame, pair = torch.tensor([2]), torch.tensor([[4, 9]])
    points, lengths = straight(A, B)
    zigzag, count = S.electric_polylines(points, lengths, frame, pair, spacing, amplitude, seed, 60.0)
    corners = electric_reference(A, B, spacing, amplitude, seed, 2, (4, 9))
    assert count.tolist() == [len(corners)] and zigzag.shape[1] >= len(corners)
    assert np.allclose(zigzag[0, : len(corners)].numpy(), corners, atol=1e-4)
    assert (zigzag[0, len(corners) :] == zigzag[0, len(corners) - 1]).all()  # padding: the end repeated
    alpha = draw(R.polylines(frame * 0, zigzag, count, width, (1.0, 1, 1, 1)))[0]
    X, Y = samples()
    inside = np.zeros_like(X, dtype=bool)
    for p, q in zip(corners[:-1], corners[1:], strict=True):
        inside |= capsule(X, Y, p, q, width / 2)
    assert_close(alpha, pixel_mean(inside))


def test_electric_links_change_every_frame_and_repeat_for_a_seed():
    def run(**kw):
        return render(**{"line_style": "electric", "width": 2.0, "jitter": 4.0, **kw})[1]

    first = run(seed=7)
    assert torch.equal(first, run(seed=7)) and not torch.equal(first, run(seed=8))
    assert not torch.equal(first[0], first[1]) and not torch.equal(first[1], first[2])  # the points hold still
    assert not torch.equal(first[0], render(width=2.0)[1][0])
    assert torch.equal(run(seed=7, jitter=0.0), render(width=2.0)[1])  # no swing: the straight link
    # a window of the batch's frames draws them as the whole batch does
    from rasterkit.utils.gpu_rendering.link_layers import LinkStyle, link_strokes

    ends = torch.tensor([[[6.0, 20.0], [58.0, 20.0]]] * 3)
    style = LinkStyle(line_style="electric", jitter=4.0, seed=7)
    frames, pairs = torch.arange(3), torch.tensor([[0, 1]] * 3)
    whole = link_strokes(frames, pairs, ends[:, 0], ends[:, 1], style)[1]
    window = link_strokes(frames[:1], pairs[:1], ends[2:, 0], ends[2:, 1], style, first_frame=2)[1]
    assert torch.equal(whole.params[whole.frame == 2], window.params)


@pytest.mark.parametrize("curve", ["straight", "bezier", "spiral", "fourier"])
@pytest.mark.parametrize("style", ["pulsing", "electric"])
def test_pulsing_and_electric_links_of_no_length(curve, style):
    """Two points on one spot (a link of length 0) beside a real link: no NaN, the real link drawn."""
    tracks = {
        "xy": torch.tensor([[[10.0, 10.0], [10.0, 10.0], [50.0, 30.0]]]).expand(3, -1, -1),
        "visible": torch.ones(3, 3, dtype=torch.bool),
    }
    _, alpha, _, edges = LineLinkRenderer.run(
        IMAGES, tracks_json="", tracks=tracks, k=2, curve=curve, line_style=style, end_color="#FF0000"
    )
    assert [0, 1] in json.loads(edges)[0] and torch.isfinite(alpha).all() and alpha.amax() > 0.5
