"""RasterKit_BoundingBoxRenderer: rounded, anti-aliased boxes with labels on image batches."""
from __future__ import annotations

import torch

from ..utils.inputs import boxes as box_sources
from ..utils import gpu_rendering as R
from ..utils.inputs.colors import PALETTES, palette, palette_from_hex, parse_hex, stable_index
from ..utils.core.device import check_memory
from ..utils.gpu_rendering.labels import ANCHORS, DEFAULT_FONT, PADDING, font_chain, font_names, label_primitives
from ._comfy import (
    LAYER_ALPHA_MODES,
    LAYER_ALPHA_TOOLTIP,
    LAYER_TOOLTIP,
    OVERLAY_OUTPUTS,
    OVERLAY_OUTPUTS_TOOLTIP,
    Progress,
    frame_preview,
    overlay_outputs,
    render_device,
)
from ._schema import Bool, Combo, Float, Int, Output, RasterKitNode, Socket, String
from ._validate import check_images, check_mask, draw_memory

LABEL_MODES = ("none", "label", "label+score", "id", "label+id", "all")
COLOR_BY = ("label", "id", "index")
MARKERS = ("box", "ellipse", "dot", "halo")


def _box_table(images, boxes, bbox, segs, mask, bounding_box):
    """The boxes of the one connected socket, else of the `boxes` text (a connected socket wins over the
    text, so that its default never blocks a connection)."""
    batch = images.shape[0]
    sockets = {"bbox": bbox, "segs": segs, "mask": mask, "bounding_box": bounding_box}
    given = [name for name, value in sockets.items() if value is not None]
    if len(given) > 1:
        raise ValueError(f"{given[0]}: connect one box source, got {', '.join(given)}")
    if bbox is not None:
        return box_sources.from_lists(bbox, batch, "bbox")
    if segs is not None:
        return box_sources.from_segs(segs, batch)
    if mask is not None:
        check_mask(mask, images)
        return box_sources.from_mask(mask, batch)
    if bounding_box is not None:
        return box_sources.from_bounding_box(bounding_box, batch)
    return box_sources.from_json(boxes, batch)


def _label_text(table, index: int, mode: str) -> str:
    label, track, score = table.label[index], table.id[index], table.score[index]
    parts = []
    if mode in ("label", "label+score", "label+id", "all") and label is not None:
        parts.append(str(label))
    if mode in ("id", "label+id", "all") and track is not None:
        parts.append(f"#{track}")
    if mode in ("label+score", "all") and score is not None:
        parts.append(f"{score:.2f}")
    return " ".join(parts)


def _box_colors(table, color: str, palette_name: str, palette_colors: str, color_by: str) -> torch.Tensor:
    """float [N,3]: a box's own colour, else the fixed colour, else the palette slot of its key (in the
    palette of hex colours when there is one, else in the named palette)."""
    fixed = parse_hex(color, "color")[:3] if color.strip() else None
    colours = palette_from_hex(palette_colors) if palette_colors.strip() else palette(palette_name)
    # a box's index within its frame, so that "index" (and boxes without a label or id) keep their colour
    # from frame to frame; the table lists frames in order
    first = torch.searchsorted(table.frame, table.frame, right=False)
    in_frame = (torch.arange(len(table)) - first).tolist()
    rows = []
    for i in range(len(table)):
        if table.color[i] is not None:
            rows.append(parse_hex(table.color[i], f"boxes: box {i} color")[:3])
        elif fixed is not None:
            rows.append(fixed)
        else:
            key = {"label": table.label[i], "id": table.id[i], "index": in_frame[i]}[color_by]
            rows.append(colours[stable_index(in_frame[i] if key is None else key, len(colours))][:3])
    return torch.tensor(rows, dtype=torch.float32).reshape(-1, 3)


def _markers(table, marker: str, stroke_width, corner_radius, stroke_opacity, fill_opacity, corner_length,
             marker_size, rgb: torch.Tensor) -> R.Primitives:
    """The mark of each box, turned with it: its outline and fill (box), the inscribed ellipse's outline and
    fill (ellipse), a disc of radius marker_size at its centre (dot), or its fill and a halo marker_size
    wide around it (halo)."""
    ones = torch.ones(len(table), 1)
    stroke, fill = torch.cat([rgb, ones * stroke_opacity], 1), torch.cat([rgb, ones * fill_opacity], 1)
    if marker == "box":
        return R.rounded_boxes(table.frame, table.xyxy, stroke_width, corner_radius, stroke, fill, corner_length,
                               table.angle)
    low, high = torch.minimum(table.xyxy[:, :2], table.xyxy[:, 2:]), torch.maximum(table.xyxy[:, :2], table.xyxy[:, 2:])
    centre = (low + high) / 2
    drawn = torch.isfinite(centre).all(1) & torch.isfinite(high - low).all(1)  # host data: no device sync
    if marker == "ellipse":
        return R.ellipses(table.frame[drawn], centre[drawn], (high - low)[drawn] / 2, stroke_width, stroke[drawn],
                          table.angle[drawn], fill[drawn])
    if marker == "dot":
        return R.discs(table.frame[drawn], centre[drawn], marker_size, stroke[drawn])
    boxes = R.rounded_boxes(table.frame, table.xyxy, 0.0, corner_radius, stroke, fill, angle=table.angle)
    return R.concat(boxes, R.halos(table.frame[drawn], table.xyxy[drawn], marker_size, corner_radius, stroke[drawn],
                                   table.angle[drawn]))


def _text_color(text_color: str):
    return parse_hex(text_color, "text_color") if text_color.strip() else None


class BoundingBoxRenderer(RasterKitNode):
    NODE_ID = "RasterKit_BoundingBoxRenderer"
    DISPLAY_NAME = "Bounding Box Renderer (RasterKit)"
    CATEGORY = "RasterKit/overlay"
    DESCRIPTION = ("Draws anti-aliased rounded boxes (or ellipses, dots, halos) with labels on every frame of an "
                   "image batch. Boxes come from JSON, a BBOX, SEGS or a MASK (one box per connected component); "
                   "JSON boxes may be oriented (turned about their centres).")
    INPUTS = [
        Socket("images", "IMAGE", tooltip="the frames to draw on (a video is one batch)"),
        String("boxes", "[[64, 48, 256, 200]]", multiline=True,
               tooltip="JSON: a list of boxes for every frame, or one list per frame. A box is [x1,y1,x2,y2] or "
                       "{x1,y1,x2,y2 | x,y,w,h, angle, label, id, score, color}, angle in degrees clockwise about "
                       "its centre; oriented boxes also as {xywhr: [cx,cy,w,h,radians]} or {points: 4 corners}."),
        Float("stroke_width", 3.0, 0.0, 64.0, 0.5, tooltip="outline width in pixels; 0: no outline"),
        Float("corner_radius", 8.0, 0.0, 256.0, 0.5, tooltip="radius of the rounded corners in pixels; 0: square"),
        Float("stroke_opacity", 1.0, 0.0, 1.0, tooltip="opacity of the outline"),
        Float("fill_opacity", 0.15, 0.0, 1.0, tooltip="opacity of the fill inside each box; 0: outline only"),
        String("color", "", tooltip="Hex colour for every box (#RRGGBB or #RRGGBBAA); empty: use the palette"),
        Combo("palette", tuple(PALETTES), tooltip="colours of the boxes without one of their own, when color is empty"),
        Combo("color_by", COLOR_BY, tooltip="Palette slot by class label, track id, or box index"),
        Combo("labels", LABEL_MODES, "label",
              tooltip="text drawn above each box: its class label, score and/or track id; none: no labels"),
        Int("label_size", 16, 6, 128, tooltip="label text size in pixels"),
        Float("corner_length", 0.0, 0.0, 1024.0, 1.0, tooltip="> 0: draw only the corners, arms this long"),
        Combo("layer_alpha", LAYER_ALPHA_MODES, tooltip=LAYER_ALPHA_TOOLTIP),
        Combo("font", font_names, default=DEFAULT_FONT,
              tooltip="label font: a font file found on this machine, or default (Pillow's font for ASCII); "
                      "characters a font lacks come from other fonts found (Cyrillic, CJK, emoji, ...)"),
        # new widgets go last: saved workflows list widget values in order
        String("palette_colors", "",
               tooltip="hex colours separated by commas (#ff0000, #00ff00): the palette, in place of the named "
                       "one; empty: the named palette"),
        Combo("label_anchor", ANCHORS,
              tooltip="where a label sits on its box: top_* above it (inside its top when there is no room), "
                      "bottom_* below it (inside its bottom when there is no room), center_* centred on it "
                      "vertically; *_left, *_center, *_right along it (an oriented box: its upright bounds)"),
        String("text_color", "", tooltip="hex colour of the label text; empty: black or white, whichever "
                                         "contrasts more with the label's background"),
        Int("label_padding", PADDING, 0, 64, tooltip="pixels between a label's text and the edge of its background"),
        Int("label_max_width", 0, 0, 4096,
            tooltip="> 0: label text wraps at spaces onto lines no wider than this many pixels; 0: one line"),
        Bool("label_avoid_overlap", False,
             tooltip="labels of a frame that overlap move apart (below the label they overlap), the higher "
                     "scores keeping their place"),
        Combo("marker", MARKERS,
              tooltip="the mark of each detection: box (outline and fill), ellipse (outline and fill of the ellipse "
                      "inscribed in the box), dot (a disc at its centre), halo (its fill and a soft ring around it); "
                      "turned with oriented boxes"),
        Float("marker_size", 8.0, 0.0, 256.0, 0.5, tooltip="radius of a dot, width of a halo, in pixels"),
        Combo("outputs", OVERLAY_OUTPUTS, tooltip=OVERLAY_OUTPUTS_TOOLTIP, optional=True),  # old API prompts lack it
        Socket("bbox", "BBOX", optional=True,
               tooltip="boxes from KJNodes, SAM2 or Florence2: (x1, y1, x2, y2) per image, or a list per frame"),
        Socket("segs", "SEGS", optional=True, tooltip="Impact Pack SEGS: a box per segment, with label and confidence"),
        Socket("mask", "MASK", optional=True, tooltip="one box per connected component of each frame's mask"),
        Socket("bounding_box", "BOUNDING_BOX", optional=True,
               tooltip="core ComfyUI's detections (e.g. RT-DETR Detect): per image, "
                       "{x, y, width, height, label, score}"),
    ]
    OUTPUTS = [Output("IMAGE", "image", "the frames with the boxes and labels drawn over them"),
               Output("MASK", "alpha", "the overlay's coverage, 0..1 per pixel"),
               Output("IMAGE", "layer", LAYER_TOOLTIP)]

    @classmethod
    def run(cls, images, boxes="", stroke_width=3.0, corner_radius=8.0, stroke_opacity=1.0, fill_opacity=0.15,
            color="", palette="default", color_by="label", labels="label", label_size=16, corner_length=0.0,
            layer_alpha="straight", font=DEFAULT_FONT, palette_colors="", label_anchor="top_left", text_color="",
            label_padding=PADDING, label_max_width=0, label_avoid_overlap=False, marker="box", marker_size=8.0,
            outputs=OVERLAY_OUTPUTS[0], bbox=None, segs=None, mask=None, bounding_box=None):
        check_images(images, "images")
        font_chain(font)  # a font name that is not in the list is an error even without labels
        ink = _text_color(text_color)
        batch, height, width, _ = images.shape
        table = _box_table(images, boxes, bbox, segs, mask, bounding_box)
        rgb = _box_colors(table, color, palette, palette_colors, color_by)
        prims = _markers(table, marker, stroke_width, corner_radius, stroke_opacity, fill_opacity, corner_length,
                         marker_size, rgb)
        atlas = None
        if labels != "none" and len(table):
            texts = [_label_text(table, i, labels) for i in range(len(table))]
            priority = None
            if label_avoid_overlap:
                priority = torch.tensor([float("-inf") if s is None else float(s) for s in table.score])
            tags, atlas = label_primitives(table.frame, table.bounds(), texts, torch.cat([rgb, torch.ones(len(table), 1)], 1),
                                           height, width, label_size, font, label_anchor, label_padding, ink,
                                           label_max_width, priority)
            prims = R.concat(prims, tags)
        device, image_only = render_device(), outputs == "image only"
        check_memory(draw_memory(images, prims, atlas, image_only, device),
                     f"boxes: {len(table):,} boxes on {batch} frames of {height} x {width}", device)
        return overlay_outputs(*R.draw(images, prims, atlas, device=device, on_progress=Progress(batch),
                                       layer_alpha=layer_alpha, image_only=image_only))

    @classmethod
    def preview(cls, inputs, outputs):
        return frame_preview(inputs["images"])  # the box editor draws over the first input frame


NODES = [BoundingBoxRenderer]
