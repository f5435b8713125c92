"""RasterKit_MaskRenderer: per-object masks of every frame as fills, anti-aliased outlines, halos and labels.

A node of its own rather than mask modes of the Bounding Box Renderer: a mask's drawing (the mask itself as
the fill, its contour as the outline, a halo grown from it) shares none of the box renderer's widgets
(corner radius, corner length, box markers, box sources), and a renderer taking both boxes and masks
would have to say which of them wins.
"""

from __future__ import annotations

import torch

from ..utils.core.device import check_memory, memory_budget
from ..utils.gpu_rendering.labels import DEFAULT_FONT, font_chain, font_names
from ..utils.gpu_rendering.masks import LABEL_PLACES, labelled, overlay, overlay_memory, tile_peaks
from ..utils.inputs.colors import PALETTES
from ..utils.inputs.masks import (
    COLOR_BY,
    LABEL_MODES,
    mask_objects,
    object_colors,
    object_label_texts,
    objects_in_frames,
)
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
from ._validate import check_images

# Mask pixels of a window of frames whose overlay is built and drawn together: a long video's overlay is
# built window by window, interrupts seen between windows. On the 2-core test machine, ~7 ms of building
# for SAM-like masks (1080p, 20 objects: each window's own calls cost ~1.7 ms a frame at 1 << 24 against
# 1 << 28), ~6 s for masks of noise (every cell crosses the level; their pieces' memory is checked)
WINDOW_PIXELS = 1 << 26


class MaskRenderer(RasterKitNode):
    NODE_ID = "RasterKit_MaskRenderer"
    DISPLAY_NAME = "Mask Renderer (RasterKit)"
    CATEGORY = "RasterKit/overlay"
    DESCRIPTION = (
        "Draws per-object masks on every frame of an image batch: the mask as a translucent fill "
        "(soft masks stay soft), an anti-aliased outline traced on the mask at sub-pixel precision, "
        "a soft halo outside it, and a label at each object; each object keeps its colour from frame "
        "to frame. Masks come from a MASK batch (SAM3 Detect's or SAM3 Video Track's per-object masks) "
        "or Impact Pack SEGS."
    )
    INPUTS = [
        Socket("images", "IMAGE", tooltip="the frames to draw on (a video is one batch)"),
        Float("opacity", 0.45, 0.0, 1.0, tooltip="opacity of the fill: the mask's value times this"),
        Float("outline_width", 2.0, 0.0, 64.0, 0.5, tooltip="width of the outline in pixels; 0: no outline"),
        Float("outline_opacity", 1.0, 0.0, 1.0, tooltip="opacity of the outline"),
        Float(
            "halo_width",
            0.0,
            0.0,
            256.0,
            0.5,
            tooltip="width in pixels of a soft glow fading outwards from each mask; 0: no halo",
        ),
        Float("halo_opacity", 0.6, 0.0, 1.0, tooltip="opacity of the halo at the mask's edge"),
        Float(
            "mask_threshold",
            0.5,
            0.0,
            0.999,
            tooltip="the mask level the outline traces, and above which a "
            "pixel counts as the object (its label's place)",
        ),
        String("color", "", tooltip="hex colour for every object (#RRGGBB); empty: use the palette"),
        Combo("palette", tuple(PALETTES), tooltip="colours of the objects when color is empty"),
        Combo(
            "color_by",
            COLOR_BY,
            tooltip="palette slot by the object's index in its frame (stable over a "
            "SAM3 track), or by its label (SEGS)",
        ),
        Combo(
            "labels",
            LABEL_MODES,
            tooltip="text at each object: its index (#n), its label, label and score, label and index; none: no labels",
        ),
        Combo(
            "label_position",
            LABEL_PLACES,
            tooltip="top: above the object's bounds (inside the frame); center: on its centroid",
        ),
        Int("label_size", 16, 6, 128, tooltip="label text size in pixels"),
        Combo("font", font_names, default=DEFAULT_FONT, tooltip="label font"),
        String("palette_colors", "", tooltip="hex colours separated by commas: the palette, in place of the named one"),
        Combo("layer_alpha", LAYER_ALPHA_MODES, tooltip=LAYER_ALPHA_TOOLTIP),
        Combo("outputs", OVERLAY_OUTPUTS, tooltip=OVERLAY_OUTPUTS_TOOLTIP, optional=True),
        Socket(
            "masks",
            "MASK",
            optional=True,
            tooltip="MASK [N,H,W] of the images' size: N = frames (one object each), 1 (on every frame), "
            "frames x k (k objects per frame, frame after frame: SAM3 Video Track), or any N on a "
            "single image (SAM3 Detect's individual masks)",
        ),
        Socket(
            "segs",
            "SEGS",
            optional=True,
            tooltip="Impact Pack SEGS: each SEG's cropped mask with its label, on every frame",
        ),
    ]
    OUTPUTS = [
        Output("IMAGE", "image", "the frames with the masks drawn over them"),
        Output("MASK", "alpha", "the overlay's coverage, 0..1 per pixel"),
        Output("IMAGE", "layer", LAYER_TOOLTIP),
    ]

    @classmethod
    def run(
        cls,
        images,
        opacity=0.45,
        outline_width=2.0,
        outline_opacity=1.0,
        halo_width=0.0,
        halo_opacity=0.6,
        mask_threshold=0.5,
        color="",
        palette="default",
        color_by="index",
        labels="none",
        label_position="top",
        label_size=16,
        font=DEFAULT_FONT,
        palette_colors="",
        layer_alpha="straight",
        outputs=OVERLAY_OUTPUTS[0],
        masks=None,
        segs=None,
    ):
        check_images(images, "images")
        font_chain(font)
        batch, height, width, _ = images.shape
        objects = mask_objects(masks, segs, batch, height, width)
        rgb = object_colors(objects, color, palette, palette_colors, color_by)
        device = render_device()
        outlines = outline_width > 0 and outline_opacity > 0
        job = f"masks: {len(objects):,} objects on {batch} frames of {height} x {width}"
        halo = halo_width if halo_opacity > 0 else 0.0
        per_frame = torch.bincount(objects.frame, minlength=batch)[:batch] * (height * width)

        def layers(start, stop):
            """The overlay of frames start..stop (numbered from start) and its atlas."""
            part, index = (objects, None) if (start, stop) == (0, batch) else objects_in_frames(objects, start, stop)
            colours = rgb if index is None else rgb[index]
            peak = tile_peaks(part.masks)  # read once: for the estimate and for the overlay
            estimate = overlay_memory(part, height, width, mask_threshold, outlines, halo, peak, memory_budget(device))
            check_memory(estimate, job, device)
            part.masks = part.masks.to(device)  # one transfer; the overlay is built where it is drawn
            drawn = overlay(
                part,
                height,
                width,
                colours,
                opacity,
                outline_width,
                outline_opacity,
                halo_width,
                halo_opacity,
                mask_threshold,
                peak,
                lambda needed: check_memory(needed, job, device),  # the outlines' pieces, once counted
            )
            if labels == "none" or not len(part):
                return drawn.prims, drawn.atlas
            texts = object_label_texts(part, labels, drawn.present.cpu())
            return labelled(drawn, part.frame, texts, colours, height, width, label_size, font, label_position)

        windows = frame_windows(per_frame.numpy(), WINDOW_PIXELS)
        return draw_overlay_in_windows(images, windows, layers, device, layer_alpha, outputs, job)


NODES = [MaskRenderer]
