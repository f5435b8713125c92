"""RasterKit_BoundingBoxRenderer: rounded, anti-aliased boxes with labels on image batches."""

from __future__ import annotations

import torch

from ..utils import gpu_rendering as R
from ..utils.gpu_rendering.box_regions import INSIDE_EDITS, edit_regions
from ..utils.gpu_rendering.box_styles import BARS, MARKERS, box_markers, box_traces, score_bars
from ..utils.gpu_rendering.labels import ANCHORS, DEFAULT_FONT, PADDING, font_chain, font_names, label_primitives
from ..utils.inputs.boxes import (
    BBOX_FORMATS,
    COLOR_BY,
    LABEL_MODES,
    box_colors,
    box_label_texts,
    box_table,
    label_priority,
)
from ..utils.inputs.colors import PALETTES, parse_hex
from ._comfy import (
    LAYER_ALPHA_MODES,
    LAYER_ALPHA_TOOLTIP,
    LAYER_TOOLTIP,
    OVERLAY_OUTPUTS,
    OVERLAY_OUTPUTS_TOOLTIP,
    check_interrupt,
    draw_overlay,
    frame_preview,
    render_device,
)
from ._schema import Bool, Combo, Float, Int, Output, RasterKitNode, Socket, String
from ._validate import check_images


def _text_color(text_color: str):
    return parse_hex(text_color, "text_color") if text_color.strip() else None


class BoundingBoxRenderer(RasterKitNode):
    NODE_ID = "RasterKit_BoundingBoxRenderer"
    DISPLAY_NAME = "Bounding Box Renderer (RasterKit)"
    CATEGORY = "RasterKit/overlay"
    DESCRIPTION = (
        "Draws anti-aliased rounded boxes (or ellipses, dots, halos, circles, triangles) with labels on every "
        "frame of an image batch. Boxes come from JSON, a BBOX, SEGS or a MASK (one box per connected component); "
        "JSON boxes may be oriented (turned about their centres)."
    )
    INPUTS = [
        Socket("images", "IMAGE", tooltip="the frames to draw on (a video is one batch)"),
        String(
            "boxes",
            "[[64, 48, 256, 200]]",
            multiline=True,
            tooltip="JSON: a list of boxes for every frame, or one list per frame. A box is [x1,y1,x2,y2] or "
            "{x1,y1,x2,y2 | x,y,w,h, angle, label, id, score, color}, angle in degrees clockwise about "
            "its centre; oriented boxes also as {xywhr: [cx,cy,w,h,radians]} or {points: 4 corners}.",
        ),
        Float("stroke_width", 3.0, 0.0, 64.0, 0.5, tooltip="outline width in pixels; 0: no outline"),
        Float("corner_radius", 8.0, 0.0, 256.0, 0.5, tooltip="radius of the rounded corners in pixels; 0: square"),
        Float("stroke_opacity", 1.0, 0.0, 1.0, tooltip="opacity of the outline"),
        Float("fill_opacity", 0.15, 0.0, 1.0, tooltip="opacity of the fill inside each box; 0: outline only"),
        String("color", "", tooltip="Hex colour for every box (#RRGGBB or #RRGGBBAA); empty: use the palette"),
        Combo("palette", tuple(PALETTES), tooltip="colours of the boxes without one of their own, when color is empty"),
        Combo("color_by", COLOR_BY, tooltip="Palette slot by class label, track id, or box index"),
        Combo(
            "labels",
            LABEL_MODES,
            "label",
            tooltip="text drawn above each box: its class label, score and/or track id; none: no labels",
        ),
        Int("label_size", 16, 6, 128, tooltip="label text size in pixels"),
        Float("corner_length", 0.0, 0.0, 1024.0, 1.0, tooltip="> 0: draw only the corners, arms this long"),
        Combo("layer_alpha", LAYER_ALPHA_MODES, tooltip=LAYER_ALPHA_TOOLTIP),
        Combo(
            "font",
            font_names,
            default=DEFAULT_FONT,
            tooltip="label font: a font file found on this machine, or default (Pillow's font for ASCII); "
            "characters a font lacks come from other fonts found (Cyrillic, CJK, emoji, ...)",
        ),
        # new widgets go last: saved workflows list widget values in order
        String(
            "palette_colors",
            "",
            tooltip="hex colours separated by commas (#ff0000, #00ff00): the palette, in place of the named "
            "one; empty: the named palette",
        ),
        Combo(
            "label_anchor",
            ANCHORS,
            tooltip="where a label sits on its box: top_* above it (inside its top when there is no room), "
            "bottom_* below it (inside its bottom when there is no room), center_* centred on it "
            "vertically; *_left, *_center, *_right along it (an oriented box: its upright bounds)",
        ),
        String(
            "text_color",
            "",
            tooltip="hex colour of the label text; empty: black or white, whichever "
            "contrasts more with the label's background",
        ),
        Int("label_padding", PADDING, 0, 64, tooltip="pixels between a label's text and the edge of its background"),
        Int(
            "label_max_width",
            0,
            0,
            4096,
            tooltip="> 0: label text wraps at spaces onto lines no wider than this many pixels; 0: one line",
        ),
        Bool(
            "label_avoid_overlap",
            False,
            tooltip="labels of a frame that overlap move apart (below the label they overlap), the higher "
            "scores keeping their place",
        ),
        Combo(
            "marker",
            MARKERS,
            tooltip="the mark of each detection: box (outline and fill), ellipse (outline and fill of the ellipse "
            "inscribed in the box), dot (a disc at its centre), halo (its fill and a soft ring around it), "
            "circle (outline and fill of the circle through its corners, about its centre); turned with "
            "oriented boxes; triangle (a filled triangle pointing down at the top centre of the box, "
            "2 x marker_size wide and as high, at stroke_opacity)",
        ),
        Float(
            "marker_size",
            8.0,
            0.0,
            256.0,
            0.5,
            tooltip="radius of a dot, width of a halo, half the width and height of a triangle, in pixels",
        ),
        Combo("outputs", OVERLAY_OUTPUTS, tooltip=OVERLAY_OUTPUTS_TOOLTIP, optional=True),  # old API prompts lack it
        Combo(
            "bbox_format",
            BBOX_FORMATS,
            tooltip="how the bbox input's boxes are written: xywh, (x, y, width, height) as KJNodes' Batch Crop "
            "From Mask sends them; xyxy, (x1, y1, x2, y2) as Florence2 To Coordinates, KJNodes' Image Crop By "
            "Mask And Resize and Points Editor (its default) send them",
            optional=True,
        ),
        Socket(
            "bbox",
            "BBOX",
            optional=True,
            tooltip="boxes from KJNodes, SAM2 or Florence2 (see bbox_format): a list of boxes for every frame, one "
            "list per frame, or one box per frame (a list as long as the batch)",
        ),
        Socket("segs", "SEGS", optional=True, tooltip="Impact Pack SEGS: a box per segment, with label and confidence"),
        Socket("mask", "MASK", optional=True, tooltip="one box per connected component of each frame's mask"),
        Socket(
            "bounding_box",
            "BOUNDING_BOX",
            optional=True,
            tooltip="core ComfyUI's detections (e.g. RT-DETR Detect): per image, {x, y, width, height, label, score}",
        ),
        Combo(
            "bar",
            BARS,
            tooltip="a bar below or above each box with a score, as wide as the box, filled from the left to "
            "the score (0..1) in the box's colour over a faint background of it; none: no bars",
            optional=True,
        ),
        Float("bar_height", 6.0, 0.5, 256.0, 0.5, tooltip="height of the score bars in pixels", optional=True),
        Combo(
            "inside",
            INSIDE_EDITS,
            tooltip="the image inside every box (its upright bounds) before the boxes are drawn: blurred (a box "
            "blur inside_size px across), pixelated (blocks of inside_size px), or none: as it is",
            optional=True,
        ),
        Int("inside_size", 15, 1, 512, tooltip="blur width or pixel block size of `inside`, in pixels", optional=True),
        Float(
            "dim_outside",
            0.0,
            0.0,
            1.0,
            tooltip="darkens the image outside every box of its frame by this much before the boxes are drawn "
            "(0: not at all, 1: black)",
            optional=True,
        ),
        Int(
            "trace_frames",
            0,
            0,
            4096,
            tooltip="> 0: each track id's path through its boxes' centres over this many earlier frames, "
            "fading with age, stroke_width wide (boxes matched across frames by their id; boxes without "
            "an id have none); 0: no traces",
            optional=True,
        ),
    ]
    OUTPUTS = [
        Output("IMAGE", "image", "the frames with the boxes and labels drawn over them"),
        Output("MASK", "alpha", "the overlay's coverage, 0..1 per pixel"),
        Output("IMAGE", "layer", LAYER_TOOLTIP),
    ]

    @classmethod
    def run(
        cls,
        images,
        boxes="",
        stroke_width=3.0,
        corner_radius=8.0,
        stroke_opacity=1.0,
        fill_opacity=0.15,
        color="",
        palette="default",
        color_by="label",
        labels="label",
        label_size=16,
        corner_length=0.0,
        layer_alpha="straight",
        font=DEFAULT_FONT,
        palette_colors="",
        label_anchor="top_left",
        text_color="",
        label_padding=PADDING,
        label_max_width=0,
        label_avoid_overlap=False,
        marker="box",
        marker_size=8.0,
        outputs=OVERLAY_OUTPUTS[0],
        bbox_format=BBOX_FORMATS[0],
        bbox=None,
        segs=None,
        mask=None,
        bounding_box=None,
        bar="none",
        bar_height=6.0,
        inside="none",
        inside_size=15,
        dim_outside=0.0,
        trace_frames=0,
    ):
        check_images(images, "images")
        font_chain(font)  # a font name that is not in the list is an error even without labels
        ink = _text_color(text_color)
        batch, height, width, _ = images.shape
        table = box_table(images, boxes, bbox, segs, mask, bounding_box, bbox_format)
        check_interrupt()  # between the batched set-up steps: each takes seconds for 100k boxes
        rgb = box_colors(table, color, palette, palette_colors, color_by)
        prims = R.concat(
            box_traces(table, batch, trace_frames, stroke_width, stroke_opacity, rgb),
            box_markers(
                table,
                marker,
                stroke_width,
                corner_radius,
                stroke_opacity,
                fill_opacity,
                corner_length,
                marker_size,
                rgb,
            ),
            score_bars(table, bar, bar_height, stroke_width / 2, stroke_opacity, rgb),
        )
        images = edit_regions(images, table.frame, table.bounds(), inside, inside_size, dim_outside)
        check_interrupt()
        atlas = None
        if labels != "none" and len(table):
            texts = box_label_texts(table, labels)
            priority = label_priority(table) if label_avoid_overlap else None
            tags, atlas = label_primitives(
                table.frame,
                table.bounds(),
                texts,
                torch.cat([rgb, torch.ones(len(table), 1)], 1),
                height,
                width,
                label_size,
                font,
                label_anchor,
                label_padding,
                ink,
                label_max_width,
                priority,
            )
            prims = R.concat(prims, tags)
            check_interrupt()
        job = f"boxes: {len(table):,} boxes on {batch} frames of {height} x {width}"
        return draw_overlay(images, prims, atlas, render_device(), layer_alpha, outputs, job)

    @classmethod
    def preview(cls, inputs, outputs):
        return frame_preview(inputs["images"])  # the box editor draws over the first input frame


NODES = [BoundingBoxRenderer]
