"""RasterKit_BoxEditor: boxes and points drawn on a reference image (its in-node editor, web/js) as the
sources that detectors (SAM3 Detect, SAM2, Florence2 pipelines) and the pack's renderers read."""

from __future__ import annotations

from ..utils.inputs import drawn
from ._comfy import frame_preview
from ._schema import Combo, Int, Output, RasterKitNode, Socket, String
from ._validate import check_images

# how BOUNDING_BOX and BBOX hold the boxes of an image batch
FRAMES = ("per image", "one list")
MAX_SIZE = 16384  # px: the frame without an image
MAX_SNAP = 1024

POINTS_TOOLTIP = (
    'JSON: a list of points {"x": .., "y": ..} or [x, y] in image pixels (as KJNodes\' Points Editor writes '
    "them); the editor writes it (shift-click adds a point, shift+alt-click a negative one)"
)


class BoxEditor(RasterKitNode):
    NODE_ID = "RasterKit_BoxEditor"
    DISPLAY_NAME = "Box Editor (RasterKit)"
    CATEGORY = "RasterKit/editors"
    DESCRIPTION = (
        "Boxes and points drawn by hand on a reference image (or a blank frame of width x height), for the "
        "detectors and renderers that take them: core ComfyUI's BOUNDING_BOX (SAM3 Detect, Draw BBoxes), "
        "KJNodes' BBOX, the Bounding Box Renderer's boxes JSON, positive and negative point prompts (SAM3 "
        "Detect, SAM2) and tracks_json (Line Link Renderer, Track Trails). Run it once with an image to see "
        "the image in the editor."
    )
    INPUTS = [
        String(
            "boxes",
            "[]",
            multiline=True,
            tooltip="JSON: one list of boxes for every frame, each [x1,y1,x2,y2] or {x1,y1,x2,y2 | x,y,w,h, label, "
            "score} in image pixels; the editor writes it (drag to draw a box). Cut to the frame.",
        ),
        String("points", "[]", multiline=True, tooltip=POINTS_TOOLTIP + "; the positive points"),
        String("negative_points", "[]", multiline=True, tooltip=POINTS_TOOLTIP + "; the negative points"),
        Int("width", 512, 1, MAX_SIZE, tooltip="width of the frame in pixels when no image is connected"),
        Int("height", 512, 1, MAX_SIZE, tooltip="height of the frame in pixels when no image is connected"),
        Int(
            "snap",
            0,
            0,
            MAX_SNAP,
            tooltip="grid in pixels that box corners and points snap to, in the editor and when the node runs; 0: off",
        ),
        Combo(
            "frames",
            FRAMES,
            tooltip="per image: bounding_box and bbox hold one list per image of the batch, the same boxes in each "
            "(as detectors give them; Draw BBoxes, the Bounding Box Renderer); one list: a single list for the "
            "whole batch (SAM3 Detect joins every image's list into its prompts, so a batch would repeat each box)",
        ),
        Socket(
            "image",
            "IMAGE",
            optional=True,
            tooltip="the reference: its size is the frame's, its batch the number of lists; the editor shows its "
            "first frame after a run",
        ),
    ]
    OUTPUTS = [
        Output("BOUNDING_BOX", "bounding_box", "core ComfyUI's boxes: {x, y, width, height, label, score} dicts"),
        Output("BBOX", "bbox", "KJNodes' boxes: (x, y, width, height) tuples (bbox_format xywh)"),
        Output("STRING", "boxes", "JSON boxes {x1, y1, x2, y2, label, ...}: the Bounding Box Renderer's boxes input"),
        Output("STRING", "positive_coords", 'the points as JSON [{"x": .., "y": ..}]: SAM3 Detect\'s positive_coords'),
        Output("STRING", "negative_coords", "the negative points, in the same form: SAM3 Detect's negative_coords"),
        Output("STRING", "tracks_json", "the points as tracks of one point each: the Line Link Renderer's tracks_json"),
    ]

    @classmethod
    def run(cls, boxes="", points="", negative_points="", width=512, height=512, snap=0, frames=FRAMES[0], image=None):
        images = 1
        if image is not None:
            check_images(image, "image")
            images, height, width = image.shape[:3]
        drawn_boxes = drawn.drawn_boxes(boxes, width, height, snap, "boxes")
        positive = drawn.drawn_points(points, width, height, snap, "points")
        negative = drawn.drawn_points(negative_points, width, height, snap, "negative_points")
        lists = images if frames == FRAMES[0] else None
        return (
            drawn.to_bounding_box(drawn_boxes, lists),
            drawn.to_bbox(drawn_boxes, lists),
            drawn.to_boxes_json(drawn_boxes),
            drawn.to_points_json(positive),
            drawn.to_points_json(negative),
            drawn.to_tracks_json(positive),
        )

    @classmethod
    def preview(cls, inputs, outputs):
        image = inputs.get("image")
        return frame_preview(image) if image is not None else None  # the editor draws over the first frame


NODES = [BoxEditor]
