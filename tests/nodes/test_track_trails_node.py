"""TrackTrails: core TRACKS in, every frame drawn, and bad input (NaN, empty, mismatched batches)."""

import math

import numpy as np
import pytest
import torch

from rasterkit.nodes.tracks import TrackTrails


def generate_tracks(frames=6, count=2):
    """Core TRACKS as GenerateTracks (comfy_extras/nodes_wanmove.py) makes them: track_path float32
    [frames, count, 2] in pixels, track_visibility bool [frames, count]."""
    t = torch.linspace(0, 1, frames)[:, None]
    path = torch.stack([8 + 40 * t + 0 * torch.arange(count), 10 + 12 * torch.arange(count) + 10 * t], -1)
    return {"track_path": path.float(), "track_visibility": torch.ones(frames, count, dtype=torch.bool)}


def test_one_image_and_core_tracks_give_every_frame():
    image = torch.full((1, 40, 64, 3), 0.2)
    out, alpha, layer = TrackTrails.run(image, tracks=generate_tracks(), trail_length=3, head="dot")
    assert out.shape == (6, 40, 64, 3) and alpha.shape == (6, 40, 64) and layer.shape == (6, 40, 64, 4)
    assert alpha[0, 10, 8] > 0.5 and alpha[5, 20, 48] > 0.5  # the heads move along the paths
    assert alpha[5, 10, 8] == 0 and torch.equal(out[:, 39, 0], image[0, 39, 0].expand(6, 3))
    assert not torch.equal(layer[0, ..., :3], layer[0, ..., :3].flip(0))  # tracks differ in colour


def test_sources_agree():
    core = generate_tracks()
    xy = core["track_path"]
    images = torch.zeros(6, 40, 64, 3)
    from_core = TrackTrails.run(images, tracks=core)[1]
    from_rasterkit = TrackTrails.run(images, rasterkit_tracks={"xy": xy, "visible": core["track_visibility"]})[1]
    text = str([[[round(v, 4) for v in p] for p in track] for track in xy.transpose(0, 1).tolist()])
    from_json = TrackTrails.run(images, tracks_json=text)[1]
    assert torch.equal(from_core, from_rasterkit) and (from_core - from_json).abs().max() < 0.01


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_coordinates_are_hidden(bad):
    core = generate_tracks()
    core["track_path"][2, 0] = bad
    _, alpha, _ = TrackTrails.run(torch.zeros(6, 40, 64, 3), tracks=core, trail_length=5)
    assert torch.isfinite(alpha).all() and alpha[2, 10:14, 20:26].amax() == 0  # no head, no trail there
    assert alpha[1].amax() > 0.5


def test_empty_tracks_pass_the_images_through():
    images = torch.rand(3, 16, 16, 3)
    empty = {"track_path": torch.zeros(3, 0, 2), "track_visibility": torch.zeros(3, 0, dtype=torch.bool)}
    for kw in ({}, {"tracks": empty}, {"tracks": [np.empty((0, 2))]}, {"tracks_json": "[]"}):
        out, alpha, _ = TrackTrails.run(images, **kw)
        assert torch.equal(out, images) and alpha.sum() == 0


def test_mismatched_batches_hold_or_cut_the_tracks():
    core = generate_tracks(frames=4)
    _, alpha, _ = TrackTrails.run(torch.zeros(6, 40, 64, 3), tracks=core, head="dot", trail_length=0)
    assert alpha.shape[0] == 6 and torch.equal(alpha[5], alpha[3])  # short tracks hold their last frame
    _, alpha, _ = TrackTrails.run(torch.zeros(2, 40, 64, 3), tracks=core, head="dot", trail_length=0)
    assert alpha.shape[0] == 2  # long ones are cut to the batch


@pytest.mark.parametrize(
    "kw,message",
    [
        ({"tracks": "junk"}, "^tracks: expected core ComfyUI TRACKS"),
        ({"tracks": {"track_path": torch.zeros(2, 3)}}, r"^tracks: core TRACKS' track_path should be \[T,N,2\]"),
        ({"tracks": generate_tracks(), "rasterkit_tracks": {"xy": torch.zeros(1, 1, 2)}}, "^rasterkit_tracks: connect"),
        ({"rasterkit_tracks": generate_tracks()}, "^rasterkit_tracks: got core ComfyUI TRACKS"),
        ({"tracks_json": "[[1, 2"}, "^tracks_json: "),
        ({"head": "star"}, "^head: expected one of arrow, dot, none"),
        ({"color": "#zz"}, "^color: "),
        ({"palette": "nope"}, "^palette: "),
    ],
)
def test_bad_input_names_the_input(kw, message):
    with pytest.raises(ValueError, match=message):
        TrackTrails.run(torch.zeros(2, 16, 16, 3), **kw)


@pytest.mark.parametrize(
    "style",
    [
        dict(trail_length=4, future_length=0, head="arrow", fade=1.0),
        dict(trail_length=2, future_length=3, head="dot", fade=0.5),
        dict(trail_length=0, future_length=2, head="arrow", fade=0.0),
    ],
)
def test_windows_of_frames_draw_as_one(style, monkeypatch):
    """A long video's trails are built and drawn in windows of frames (issue 29: memory of one window,
    interrupts between windows): the same image, alpha and layer, bit for bit, as one window, the trails
    and arrow heads reading the frames before and after a window."""
    from rasterkit.nodes import tracks as node

    generator = torch.Generator().manual_seed(2)
    xy = torch.rand(1, 6, 2, generator=generator) * 40 + 10 + torch.randn(12, 6, 2, generator=generator).cumsum(0)
    visible = torch.rand(12, 6, generator=generator) > 0.1
    images = torch.rand(12, 64, 64, 3, generator=generator)
    options = dict(rasterkit_tracks={"xy": xy, "visible": visible}, tracks_json="", line_width=2.0, **style)
    whole = TrackTrails.run(images, **options)
    monkeypatch.setattr(node, "WINDOW_ITEMS", 6 * (1 + style["trail_length"] + style["future_length"]) * 3)
    calls = []
    layers = node.trail_layers
    monkeypatch.setattr(node, "trail_layers", lambda *a, **k: calls.append(len(a[0])) or layers(*a, **k))
    windowed = TrackTrails.run(images, **options)
    assert len(calls) == 4 and max(calls) < 12
    assert all(torch.equal(a, b) for a, b in zip(whole, windowed, strict=True))


def test_trails_past_memory_are_refused_before_they_are_built(monkeypatch):
    from rasterkit.utils.core import device as device_module

    monkeypatch.setattr(device_module, "free_memory_bytes", lambda _device: 1 << 30)
    tracks = {"xy": torch.rand(2, 20000, 2) * 60, "visible": torch.ones(2, 20000, dtype=torch.bool)}
    with pytest.raises(ValueError, match=r"^tracks: 20,000 tracks on 2 frames of 64 x 64 needs ~"):
        TrackTrails.run(torch.zeros(2, 64, 64, 3), rasterkit_tracks=tracks, trail_length=500, future_length=500)
