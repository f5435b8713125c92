"""The Mask Renderer and utils/masks.py: fills exact, outlines against a 16x16-supersampled render of the
contour a brute-force numpy marching squares traces, halos, mask sources and bad input."""

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rasterkit.nodes.masks import MaskRenderer
from rasterkit.utils.gpu_rendering import masks as M
from rasterkit.utils.inputs import masks as I

H, W, S = 29, 37, 16  # not multiples of the tile size: partial tiles are exercised


def blobs(count=2, height=H, width=W, soft=False):
    yy, xx = torch.meshgrid(torch.arange(height) + 0.5, torch.arange(width) + 0.5, indexing="ij")
    out = [((xx - 12.3) ** 2 + (yy - 13.1) ** 2 < 8.2**2), ((xx - 27.5) ** 2 / 40 + (yy - 18.0) ** 2 / 70 < 1)]
    out = torch.stack(out[:count]).float()
    if soft:
        out = out * torch.linspace(0.2, 1.0, width)
    return out


def draw(masks, images=None, **kw):
    images = torch.zeros(1, H, W, 3) if images is None else images
    kw = {"outline_width": 0.0, "opacity": 1.0, "color": "#ffffff", **kw}
    return MaskRenderer.run(images, masks=masks, **kw)


def reference_pieces(mask, level):
    """Marching squares, one cell at a time, on the mask padded with zeros (pixel centres at +0.5)."""
    v = np.pad(mask, 1)
    pieces = []
    for y in range(v.shape[0] - 1):
        for x in range(v.shape[1] - 1):
            c = [v[y, x], v[y, x + 1], v[y + 1, x + 1], v[y + 1, x]]  # clockwise from top-left
            corners = [(x, y), (x + 1, y), (x + 1, y + 1), (x, y + 1)]
            points = []
            for i in range(4):  # the crossing on each edge, corner i to corner i+1
                a, b = c[i], c[(i + 1) % 4]
                if (a > level) != (b > level):
                    t = (level - a) / (b - a)
                    (x0, y0), (x1, y1) = corners[i], corners[(i + 1) % 4]
                    points.append((x0 + t * (x1 - x0) - 0.5, y0 + t * (y1 - y0) - 0.5))
            if len(points) == 2:
                pieces.append(points)
            elif len(points) == 4:  # a saddle: join the crossings around the corners the centre is apart from
                centre = sum(c) / 4 > level
                pairs = [(0, 1), (2, 3)] if (c[0] > level) == centre else [(3, 0), (1, 2)]
                pieces += [[points[i], points[j]] for i, j in pairs]
    return pieces


def supersampled_stroke(pieces, width):
    ys = (np.arange(H * S) + 0.5) / S
    xs = (np.arange(W * S) + 0.5) / S
    X, Y = np.meshgrid(xs, ys)
    near = np.zeros_like(X, dtype=bool)
    for a, b in pieces:
        d = np.subtract(b, a)
        t = np.clip(((X - a[0]) * d[0] + (Y - a[1]) * d[1]) / max(d @ d, 1e-12), 0, 1)
        near |= np.hypot(X - a[0] - t * d[0], Y - a[1] - t * d[1]) <= width / 2
    return near.reshape(H, S, W, S).mean(axis=(1, 3))


def test_fill_is_the_mask_exactly():
    masks = blobs(soft=True)
    _, alpha, layer = draw(masks, opacity=0.6)
    union = 1 - (1 - 0.6 * masks).prod(0)  # source-over of the two fills
    assert torch.allclose(alpha[0], union, atol=1e-6)
    assert torch.allclose(layer[0, ..., 3], union, atol=1e-6)


@pytest.mark.parametrize("layer_alpha", ["straight", "premultiplied"])
def test_fills_lie_beneath_outlines_and_labels(layer_alpha):
    """The fills (composited per tile apart from the draw) and the primitives drawn over them make the
    outputs a single draw of both would: alpha and layer of the outlines over the fills', the image that
    layer over the frames (their alpha channel too)."""
    masks = blobs(soft=True)
    images = torch.rand(1, H, W, 4)
    kw = {"color": "", "labels": "id", "label_size": 8, "layer_alpha": "premultiplied"}
    _, over, top = MaskRenderer.run(images, masks=masks, opacity=0.0, outline_width=2.0, **kw)
    _, under, bottom = MaskRenderer.run(images, masks=masks, opacity=0.6, outline_width=0.0, **{**kw, "labels": "none"})
    image, alpha, layer = MaskRenderer.run(
        images, masks=masks, opacity=0.6, outline_width=2.0, **{**kw, "layer_alpha": layer_alpha}
    )
    expected = top + bottom * (1 - over[..., None])
    assert float(over.max()) > 0.9 and float(under.max()) > 0.5
    assert torch.allclose(alpha, expected[..., 3], atol=1e-5) and torch.allclose(layer[..., 3], alpha)
    rgb = layer[..., :3] * alpha[..., None] if layer_alpha == "straight" else layer[..., :3]
    assert torch.allclose(rgb, expected[..., :3], atol=1e-5)
    assert torch.allclose(image, expected + images * (1 - alpha[..., None]), atol=1e-5)


@pytest.mark.parametrize("width", [1.0, 2.0, 3.5])
@pytest.mark.parametrize("soft", [False, True])
def test_outline_against_supersampled_contour(width, soft):
    masks = blobs(1, soft=soft)
    _, alpha, _ = draw(masks, opacity=0.0, outline_width=width)
    reference = supersampled_stroke(reference_pieces(masks[0].numpy(), 0.5), width)
    error = np.abs(alpha[0].numpy() - reference)
    assert error.mean() < 0.01, error.mean()
    # the engine's distance coverage is within 0.1 of the box filter on one curve; the soft mask's level
    # line turns sharply and runs beside the disc's edge, and where two pieces each cover part of a pixel
    # a group's coverage is their maximum, not their union: up to 0.25 there
    assert error.max() < (0.25 if soft else 0.1), error.max()


def test_outline_pieces_match_the_reference():
    masks = blobs(2, soft=True)
    objects = I.from_masks(masks, 1)
    tiles = M._list_tiles(objects.masks, 0.5, True)
    _, a, b = M._contour_pieces(tiles, 0.5)

    def ordered(pieces):  # each piece's ends in order, then the pieces in order
        rows = np.array([sorted(map(tuple, piece)) for piece in pieces], dtype=np.float64).reshape(-1, 4)
        return rows[np.lexsort(np.round(rows, 3).T[::-1])]

    theirs = [piece for m in masks.numpy() for piece in reference_pieces(m, 0.5)]
    ours = ordered(np.stack([a.numpy(), b.numpy()], 1))
    assert ours.shape == (len(theirs), 4)
    assert np.allclose(ours, ordered(theirs), atol=1e-4)


def test_halo_is_outside_smooth_and_fades():
    masks = blobs(1, 64, 64)
    images = torch.zeros(1, 64, 64, 3)
    _, alpha, _ = MaskRenderer.run(
        images, masks=masks, opacity=0.0, outline_width=0.0, halo_width=12.0, halo_opacity=1.0
    )
    a = alpha[0]
    assert float(a[masks[0] > 0].max()) == 0  # nothing inside
    row = a[13, 21:40]  # outwards from the disc's right edge (x = 20.5)
    assert float(row[0]) > 0.5 and float(row[-1]) < 0.01
    assert bool((row[1:] <= row[:-1] + 1e-6).all())  # fades
    assert float((row[1:] - row[:-1]).abs().max()) < 0.25  # no hard steps


def test_colours_follow_the_object_across_frames():
    masks = blobs(2)
    track = torch.cat([masks, masks.flip(0)])  # 2 frames x 2 objects, frame after frame
    images = torch.zeros(2, H, W, 3)
    image, _, _ = MaskRenderer.run(images, masks=track, opacity=1.0, outline_width=0.0)
    # slot 0 of each frame (masks[0], then masks[1]) has the same colour wherever it is
    first, second = image[0][masks[0] > 0], image[1][masks[1] > 0]
    assert torch.allclose(first, first[0]) and torch.allclose(second, first[0])
    assert not torch.allclose(image[0][masks[1] > 0][0], first[0])


def test_sources():
    masks = blobs(2)
    one = I.from_masks(masks[:1], 3)
    assert one.source.tolist() == [0, 0, 0] and one.frame.tolist() == [0, 1, 2]
    per_frame = I.from_masks(torch.cat([masks, masks, masks]), 3)
    assert per_frame.frame.tolist() == [0, 0, 1, 1, 2, 2] and per_frame.slot.tolist() == [0, 1] * 3
    single = I.from_masks(masks, 1)
    assert single.frame.tolist() == [0, 0] and single.slot.tolist() == [0, 1]
    seg = SimpleNamespace(
        cropped_mask=np.ones((4, 5), np.float32),
        crop_region=(2, 3, 7, 7),
        bbox=(2, 3, 7, 7),
        label="cat",
        confidence=np.float32(0.9),
    )
    segs = I.from_segs(((H, W), [seg]), 2, H, W)
    assert segs.frame.tolist() == [0, 1] and segs.label == ["cat", "cat"]
    assert float(segs.masks[0, 3:7, 2:7].min()) == 1 and float(segs.masks.sum()) == 20


def test_segs_labels_drawn():
    seg = SimpleNamespace(
        cropped_mask=np.ones((10, 12), np.float32),
        crop_region=(10, 12, 22, 22),
        bbox=(10, 12, 22, 22),
        label="cat",
        confidence=0.9,
    )
    image, alpha, _ = MaskRenderer.run(
        torch.zeros(1, H, W, 3), segs=((H, W), [seg]), labels="label+score", label_size=8
    )
    assert float(alpha[0, :12].max()) > 0.5  # the label above the object


@pytest.mark.parametrize(
    "masks,message",
    [
        (torch.zeros(3, H, W), "3 masks for 2 images"),
        (torch.zeros(2, H + 1, W), "resize"),
        ("not a mask", "expected a MASK"),
        (torch.zeros(2, 0, W), "expected a MASK"),
    ],
)
def test_bad_masks_name_the_input(masks, message):
    with pytest.raises(ValueError, match=f"masks: .*{message}"):
        MaskRenderer.run(torch.zeros(2, H, W, 3), masks=masks)


def test_one_source_at_most():
    with pytest.raises(ValueError, match="masks: connect one"):
        MaskRenderer.run(torch.zeros(1, H, W, 3), masks=blobs(1), segs=((H, W), []))
    images = torch.rand(1, H, W, 3)
    assert torch.equal(MaskRenderer.run(images)[0], images)  # nothing connected: the frames pass through


def test_empty_zero_and_nan_masks():
    images = torch.rand(2, H, W, 3)
    for masks in (torch.zeros(0, H, W), torch.zeros(2, H, W)):
        image, alpha, _ = MaskRenderer.run(images, masks=masks, labels="id", halo_width=5.0)
        assert torch.equal(image, images) and float(alpha.abs().max()) == 0
    masks = blobs(1)
    holed = masks.clone()
    holed[0, 10:14, 10:14] = float("nan")
    holed[0, 0, 0] = float("inf")
    image, alpha, _ = MaskRenderer.run(images[:1], masks=holed, outline_width=0.0, opacity=1.0)
    expected = torch.nan_to_num(holed[0], nan=0.0).clamp(0, 1)
    assert torch.isfinite(image).all() and torch.allclose(alpha[0], expected)
    assert torch.isnan(holed).any()  # the input is left as it was


def test_node_batched_once_per_call():
    """The pixel work is batched: the ops a draw issues do not grow with the frames or objects."""
    from opcount import OpCount

    def ops(frames, objects):
        masks = blobs(2).repeat(frames * objects // 2 or 1, 1, 1)[: frames * objects]
        with OpCount() as count:
            MaskRenderer.run(torch.zeros(frames, H, W, 3), masks=masks, halo_width=6.0, outputs="image only")
        return sum(count.ops.values())

    assert ops(4, 6) == ops(1, 2)


@pytest.mark.parametrize("per_frame, shared", [(3, False), (1, True)])
def test_windows_of_frames_draw_as_one(per_frame, shared, monkeypatch):
    """A long video's overlay is built and drawn in windows of frames (issue 29: interrupts between
    windows, memory of one window's overlay): the same image, alpha and layer, bit for bit, as one
    window, with labels, halos and outlines; several objects a frame, or one mask on every frame."""
    from rasterkit.nodes import masks as node

    frames = 8
    generator = torch.Generator().manual_seed(5)
    masks = (torch.rand(1 if shared else frames * per_frame, H, W, generator=generator) > 0.6).float()
    masks = torch.nn.functional.max_pool2d(masks[:, None], 5, 1, 2)[:, 0]
    images = torch.rand(frames, H, W, 3, generator=generator)
    options = dict(masks=masks, labels="id", halo_width=6.0, outline_width=1.5, color_by="index")
    whole = MaskRenderer.run(images, **options)
    monkeypatch.setattr(node, "WINDOW_PIXELS", 2 * H * W * per_frame)  # two frames a window
    windowed = MaskRenderer.run(images, **options)
    assert len(node.frame_windows(np.full(frames, H * W * per_frame), node.WINDOW_PIXELS)) == frames // 2
    assert all(torch.equal(a, b) for a, b in zip(whole, windowed, strict=True))


def test_one_mask_is_drawn_on_every_frame():
    """A MASK [1,H,W] on a batch of frames (its objects share one source's tiles): fill, halo and outline
    on every frame alike. The sprites of the objects after the first pointed past the atlas, so that only
    the first frame had its fill and halo."""
    mask = blobs(1)
    images = torch.rand(1, H, W, 3).expand(5, H, W, 3).contiguous()
    image, alpha, _ = MaskRenderer.run(images, masks=mask, halo_width=6.0, outline_width=1.5)
    single, single_alpha, _ = MaskRenderer.run(images[:1], masks=mask, halo_width=6.0, outline_width=1.5)
    assert all(torch.equal(frame, single[0]) for frame in image) and all(torch.equal(a, single_alpha[0]) for a in alpha)
