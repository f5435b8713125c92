"""RasterKit_MaskRenderer: per-object masks of every frame as fills, anti-aliased outlines, halos and labels.

A node of its own rather than mask modes of the Bounding Box Renderer: a mask's drawing (the mask itself as
the fill, its contour as the outline, a halo grown from it) shares none of the box renderer's widgets
(corner radius, corner length, box markers, box sources), and a renderer taking both boxes and masks
would have to say which of them wins.
"""
from __future__ import annotations

import torch

from ..utils import gpu_rendering as R
from ..utils.gpu_rendering import masks as mask_sources
from ..utils.inputs.colors import PALETTES, palette, palette_from_hex, parse_hex, stable_index
from ..utils.gpu_rendering.labels import DEFAULT_FONT, PADDING, font_chain, font_names, label_primitives
from ._comfy import (
    LAYER_ALPHA_MODES,
    LAYER_ALPHA_TOOLTIP,
    LAYER_TOOLTIP,
    OVERLAY_OUTPUTS,
    OVERLAY_OUTPUTS_TOOLTIP,
    Progress,
    overlay_outputs,
    render_device,
)
from ._schema import Combo, Float, Int, Output, RasterKitNode, Socket, String
from ._validate import check_images

LABEL_MODES = ("none", "id", "label", "label+score", "label+id")
COLOR_BY = ("index", "label")
LABEL_PLACES = ("top", "center")


def _objects(images, masks, segs):
    batch, height, width, _ = images.shape
    if masks is not None and segs is not None:
        raise ValueError("masks: connect one of masks (MASK) or segs (SEGS), not both")
    if masks is None and segs is None:  # nothing connected: the frames pass through
        masks = torch.zeros(0, height, width)
    if segs is not None:
        return mask_sources.from_segs(segs, batch, height, width)
    objects = mask_sources.from_masks(masks, batch)
    if tuple(objects.masks.shape[1:]) != (height, width):
        raise ValueError(f"masks: masks of {objects.masks.shape[2]}x{objects.masks.shape[1]} for images of "
                         f"{width}x{height}; resize the masks to the images (they are not resized here)")
    return objects


def _colors(objects, color: str, palette_name: str, palette_colors: str, color_by: str) -> torch.Tensor:
    """float [K,3]: the fixed colour, else the palette slot of each object's index in its frame (or its
    label, where it has one and color_by is label): the same object has the same colour in every frame."""
    if color.strip():
        return torch.tensor(parse_hex(color, "color")[:3]).expand(len(objects), 3)
    colours = palette_from_hex(palette_colors) if palette_colors.strip() else palette(palette_name)
    slots = objects.slot.tolist()
    keys = [label if color_by == "label" and label is not None else slot for slot, label in zip(slots, objects.label)]
    return torch.tensor([colours[stable_index(key, len(colours))][:3] for key in keys], dtype=torch.float32).reshape(-1, 3)


def _label_text(objects, index: int, mode: str) -> str:
    label, score, slot = objects.label[index], objects.score[index], int(objects.slot[index])
    if mode == "id":
        return f"#{slot}"
    name = str(label) if label is not None else f"#{slot}"
    if mode == "label+id" and label is not None:
        return f"{name} #{slot}"
    if mode == "label+score" and score is not None:
        return f"{name} {score:.2f}"
    return name


class MaskRenderer(RasterKitNode):
    NODE_ID = "RasterKit_MaskRenderer"
    DISPLAY_NAME = "Mask Renderer (RasterKit)"
    CATEGORY = "RasterKit/overlay"
    DESCRIPTION = ("Draws per-object masks on every frame of an image batch: the mask as a translucent fill "
                   "(soft masks stay soft), an anti-aliased outline traced on the mask at sub-pixel precision, "
                   "a soft halo outside it, and a label at each object; each object keeps its colour from frame "
                   "to frame. Masks come from a MASK batch (SAM3 Detect's or SAM3 Video Track's per-object masks) "
                   "or Impact Pack SEGS.")
    INPUTS = [
        Socket("images", "IMAGE", tooltip="the frames to draw on (a video is one batch)"),
        Float("opacity", 0.45, 0.0, 1.0, tooltip="opacity of the fill: the mask's value times this"),
        Float("outline_width", 2.0, 0.0, 64.0, 0.5, tooltip="width of the outline in pixels; 0: no outline"),
        Float("outline_opacity", 1.0, 0.0, 1.0, tooltip="opacity of the outline"),
        Float("halo_width", 0.0, 0.0, 256.0, 0.5,
              tooltip="width in pixels of a soft glow fading outwards from each mask; 0: no halo"),
        Float("halo_opacity", 0.6, 0.0, 1.0, tooltip="opacity of the halo at the mask's edge"),
        Float("mask_threshold", 0.5, 0.0, 0.999, tooltip="the mask level the outline traces, and above which a "
                                                           "pixel counts as the object (its label's place)"),
        String("color", "", tooltip="hex colour for every object (#RRGGBB); empty: use the palette"),
        Combo("palette", tuple(PALETTES), tooltip="colours of the objects when color is empty"),
        Combo("color_by", COLOR_BY, tooltip="palette slot by the object's index in its frame (stable over a "
                                            "SAM3 track), or by its label (SEGS)"),
        Combo("labels", LABEL_MODES, tooltip="text at each object: its index (#n), its label, label and score, "
                                             "label and index; none: no labels"),
        Combo("label_position", LABEL_PLACES,
              tooltip="top: above the object's bounds (inside the frame); center: on its centroid"),
        Int("label_size", 16, 6, 128, tooltip="label text size in pixels"),
        Combo("font", font_names, default=DEFAULT_FONT, tooltip="label font"),
        String("palette_colors", "", tooltip="hex colours separated by commas: the palette, in place of the named one"),
        Combo("layer_alpha", LAYER_ALPHA_MODES, tooltip=LAYER_ALPHA_TOOLTIP),
        Combo("outputs", OVERLAY_OUTPUTS, tooltip=OVERLAY_OUTPUTS_TOOLTIP, optional=True),
        Socket("masks", "MASK", optional=True,
               tooltip="MASK [N,H,W] of the images' size: N = frames (one object each), 1 (on every frame), "
                       "frames x k (k objects per frame, frame after frame: SAM3 Video Track), or any N on a "
                       "single image (SAM3 Detect's individual masks)"),
        Socket("segs", "SEGS", optional=True, tooltip="Impact Pack SEGS: each SEG's cropped mask with its label, "
                                                      "on every frame"),
    ]
    OUTPUTS = [Output("IMAGE", "image", "the frames with the masks drawn over them"),
               Output("MASK", "alpha", "the overlay's coverage, 0..1 per pixel"),
               Output("IMAGE", "layer", LAYER_TOOLTIP)]

    @classmethod
    def run(cls, images, opacity=0.45, outline_width=2.0, outline_opacity=1.0, halo_width=0.0, halo_opacity=0.6,
            mask_threshold=0.5, color="", palette="default", color_by="index", labels="none", label_position="top",
            label_size=16, font=DEFAULT_FONT, palette_colors="", layer_alpha="straight", outputs=OVERLAY_OUTPUTS[0],
            masks=None, segs=None):
        check_images(images, "images")
        font_chain(font)
        batch, height, width, _ = images.shape
        objects = _objects(images, masks, segs)
        rgb = _colors(objects, color, palette, palette_colors, color_by)
        device = render_device()
        objects.masks = objects.masks.to(device)  # one transfer; the overlay is built where it is drawn
        drawn = mask_sources.overlay(objects, height, width, rgb, opacity, outline_width, outline_opacity,
                                     halo_width, halo_opacity, mask_threshold)
        prims, atlas = drawn.prims, drawn.atlas
        if labels != "none" and len(objects):
            present = drawn.present.cpu()
            texts = [_label_text(objects, i, labels) if present[i] else "" for i in range(len(objects))]
            if label_position == "center":
                spot = drawn.centroid.cpu()
                where, anchor = torch.cat([spot, spot], 1), "center"
            else:
                where, anchor = drawn.bounds.cpu(), "top_center"
            tags, label_atlas = label_primitives(objects.frame, where, texts, torch.cat([rgb, torch.ones(len(objects), 1)], 1),
                                                 height, width, label_size, font, anchor, PADDING)
            prims, atlas = mask_sources.with_labels(drawn, tags, label_atlas)
        return overlay_outputs(*R.draw(images, prims, atlas, device=device, on_progress=Progress(batch),
                                       layer_alpha=layer_alpha, image_only=outputs == "image only"))


NODES = [MaskRenderer]
