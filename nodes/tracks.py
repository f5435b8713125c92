"""RasterKit_TrackTrails: tracked points' paths over past and future frames (trajectories) drawn on
every frame of a batch at once."""

from __future__ import annotations

import numpy as np
import torch

from ..utils.core.device import check_memory
from ..utils.gpu_rendering.track_trails import HEADS, trail_layers
from ..utils.inputs import tracks as track_sources
from ..utils.inputs.colors import PALETTES, palette, parse_hex, stable_index
from ._comfy import (
    LAYER_ALPHA_MODES,
    LAYER_ALPHA_TOOLTIP,
    LAYER_TOOLTIP,
    OVERLAY_OUTPUTS,
    OVERLAY_OUTPUTS_TOOLTIP,
    draw_overlay_in_windows,
    frame_windows,
    render_device,
)
from ._schema import Combo, Float, Int, Output, RasterKitNode, Socket, String
from ._validate import DRAW_PRIMITIVE_BYTES, check_images

# Trail points of a window of frames whose layers are built and drawn together (~0.3 s of building on a
# 2-core CPU): a long video's trails are built window by window, their memory bounded and interrupts seen
# between windows
WINDOW_ITEMS = 1 << 18


def track_colours(count: int, color: str, palette_name: str) -> torch.Tensor:
    """float [count,3]: `color` for every track, else track n's palette slot (the same in every frame)."""
    if color.strip():
        return torch.tensor(parse_hex(color, "color")[:3]).expand(count, 3)
    colours = palette(palette_name)
    return torch.tensor([colours[stable_index(n, len(colours))][:3] for n in range(count)]).reshape(count, 3)


class TrackTrails(RasterKitNode):
    NODE_ID = "RasterKit_TrackTrails"
    DISPLAY_NAME = "Track Trails (RasterKit)"
    CATEGORY = "RasterKit/overlay"
    DESCRIPTION = (
        "Draws each tracked point's path over its past (and future) frames on every frame of a batch: "
        "anti-aliased trails fading with age, an arrow or a dot at the point, a colour per track. Tracks from "
        "core ComfyUI (GenerateTracks, WanMove Tracks From Coords), Point Tracker (RasterKit), ys-vision-tools "
        "or JSON; one image and tracks of T frames give T frames (as WanMove Visualize Tracks)."
    )
    INPUTS = [
        Socket("images", "IMAGE", tooltip="the frames to draw on; one image serves every frame of the tracks"),
        Int("trail_length", 24, 0, 10000, tooltip="frames of each point's past drawn behind it; 0: none"),
        Int("future_length", 0, 0, 10000, tooltip="frames of each point's future drawn ahead of it; 0: none"),
        Float("line_width", 3.0, 0.1, 64.0, 0.1, tooltip="width of the trails in pixels"),
        Float(
            "fade",
            1.0,
            0.0,
            1.0,
            tooltip="how much a trail fades with age: 1, to nothing at trail_length (future_length) frames; "
            "0, not at all",
        ),
        Float("opacity", 0.9, 0.0, 1.0, tooltip="opacity of the trails at the point, and of the heads"),
        Combo(
            "head",
            HEADS,
            tooltip="the mark at each point: an arrow along its motion (a dot where it does not move), a dot, or none",
        ),
        Float("head_size", 10.0, 0.0, 256.0, 0.5, tooltip="length of the arrow, diameter of the dot, in pixels"),
        String("color", "", tooltip="hex colour of every track (#RRGGBB); empty: the palette, a colour per track"),
        Combo("palette", tuple(PALETTES), tooltip="the tracks' colours when color is empty, by track number"),
        Combo("layer_alpha", LAYER_ALPHA_MODES, tooltip=LAYER_ALPHA_TOOLTIP),
        String(
            "tracks_json",
            "",
            multiline=True,
            tooltip="tracks as JSON when no tracks input is connected: a list of tracks, each a list of "
            "per-frame points ({x, y} or [x, y]; negative: hidden)",
        ),
        Combo("outputs", OVERLAY_OUTPUTS, tooltip=OVERLAY_OUTPUTS_TOOLTIP, optional=True),
        Socket(
            "tracks",
            "TRACKS",
            optional=True,
            tooltip="core ComfyUI's TRACKS (GenerateTracks, WanMove Tracks From Coords, Point Tracker's "
            "core_tracks) or ys-vision-tools' TRACKS, told apart by their contents",
        ),
        Socket(
            "rasterkit_tracks",
            "RASTERKIT_TRACKS",
            optional=True,
            tooltip="tracks from Point Tracker (RasterKit): every track, also those that start after frame 0",
        ),
    ]
    OUTPUTS = [
        Output("IMAGE", "image", "the frames with the trails drawn over them"),
        Output("MASK", "alpha", "the overlay's coverage of each pixel"),
        Output("IMAGE", "layer", LAYER_TOOLTIP),
    ]

    @classmethod
    def run(
        cls,
        images,
        trail_length=24,
        future_length=0,
        line_width=3.0,
        fade=1.0,
        opacity=0.9,
        head="arrow",
        head_size=10.0,
        color="",
        palette="default",
        layer_alpha="straight",
        tracks_json="",
        outputs=OVERLAY_OUTPUTS[0],
        tracks=None,
        rasterkit_tracks=None,
    ):
        check_images(images, "images")
        if head not in HEADS:
            raise ValueError(f"head: expected one of {', '.join(HEADS)}, got {head!r}")
        frames = images.shape[0] if images.shape[0] != 1 else None  # one image: every frame of the tracks
        xy, visible, _ = track_sources.track_points(
            frames, rasterkit_tracks, tracks, tracks_json, names=("rasterkit_tracks", "tracks")
        )
        images = images.expand(xy.shape[0], -1, -1, -1)
        device = render_device()
        rgb = track_colours(xy.shape[1], color, palette)
        batch, height, width, _ = images.shape
        job = f"tracks: {xy.shape[1]:,} tracks on {batch} frames of {height} x {width}"
        per_frame = xy.shape[1] * (trail_length + future_length + 1)  # trail points and heads
        check_memory(per_frame * DRAW_PRIMITIVE_BYTES, job, device)  # a window holds one frame at least
        xy = xy.to(device)
        style = (rgb, trail_length, future_length, line_width, opacity, fade, head, head_size)
        back, ahead = max(trail_length, 1), max(future_length, 1)  # what a window's trails and heads read

        def layers(begin, stop):
            """The trails of frames begin..stop, numbered from begin (no text: no atlas)."""
            if (begin, stop) == (0, batch):
                return trail_layers(xy, visible, *style), None
            since, until = max(0, begin - back), min(batch, stop + ahead)
            return trail_layers(xy[since:until], visible[since:until], *style).window(begin - since, stop - since), None

        windows = frame_windows(np.full(batch, per_frame), WINDOW_ITEMS)
        return draw_overlay_in_windows(images, windows, layers, device, layer_alpha, outputs, job)


NODES = [TrackTrails]
