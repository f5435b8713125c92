"""RasterKit_PointTracker and RasterKit_LineLinkRenderer: tracked points linked into graphs (stable
kNN, radius, Delaunay, minimum spanning tree) drawn as anti-aliased lines or curves."""
from __future__ import annotations

import json
import math

import numpy as np
import torch

from ..utils import gpu_rendering as R
from ..utils.gpu_rendering import link_styles as styles
from ..utils.inputs import tracks as track_sources
from ..utils.inputs.colors import parse_hex
from ..utils.core.device import check_memory
from ..utils.gpu_curves import alternating_sign, bezier_polylines, control_polygon_length
from ..utils.gpu_graph.graph import GRAPHS, GraphOptions, voronoi_graph
from ..utils.gpu_rendering.labels import DEFAULT_FONT, text_atlas
from ._comfy import (
    LAYER_ALPHA_MODES,
    LAYER_ALPHA_TOOLTIP,
    LAYER_TOOLTIP,
    OVERLAY_OUTPUTS,
    OVERLAY_OUTPUTS_TOOLTIP,
    Progress,
    check_interrupt,
    frame_preview,
    overlay_outputs,
    render_device,
)
from ._schema import Bool, Combo, Float, Int, Output, RasterKitNode, Socket, String
from ._validate import check_images, draw_memory

POINT_LABELS = ("none", "id", "label")
GRAPH_CHOICES = (*GRAPHS, "voronoi")
# "distance" colouring: near links bright, far links dark (plasma-like stops)
DISTANCE_STOPS = torch.tensor([[0.94, 0.98, 0.13], [0.97, 0.58, 0.25], [0.80, 0.28, 0.47], [0.49, 0.01, 0.66]])


def _gradient(t: torch.Tensor) -> torch.Tensor:
    """float [E] in 0..1 -> RGB [E,3] along DISTANCE_STOPS."""
    stops = DISTANCE_STOPS.to(t.device)
    position = t.clamp(0, 1) * (len(stops) - 1)
    low = position.floor().long().clamp(max=len(stops) - 2)
    frac = (position - low)[:, None]
    return stops[low] * (1 - frac) + stops[low + 1] * frac


def _points(images, tracks, ys_tracks, tracks_json):
    """The track source as xy [B,N,2], visible [B,N] and the tracks' Labels: the connected socket, else
    the tracks_json text (a connected socket wins over the text, so that its default never blocks a
    connection; empty text and no socket: no points)."""
    frames = images.shape[0]
    if tracks is not None and ys_tracks is not None:
        raise ValueError("tracks: connect one of tracks and ys_tracks, got both")
    if tracks is not None:
        return track_sources.labelled_tracks(tracks, frames)
    if ys_tracks is not None:
        xy, visible = track_sources.from_ys_tracks(ys_tracks, frames)
        return xy, visible, track_sources.Labels.none(frames, xy.shape[1])
    return track_sources.labelled_json(tracks_json, frames)


def _faded(colours: torch.Tensor | None, alpha_scale: float) -> torch.Tensor | None:
    """RGBA colours [E,4] with their opacity scaled."""
    if colours is None or alpha_scale == 1:
        return colours
    return colours * torch.tensor([1.0, 1.0, 1.0, alpha_scale], device=colours.device)


def _trails(xy, visible, frames, smooth, width, rgb, opacity) -> R.Primitives:
    """Each visible point's path over its last `frames` frames (xy [T,N,2], visible [T,N]), fading from
    opacity at the point to nothing at the oldest position."""
    frame, points, lengths = styles.trail_paths(xy, visible, frames)
    if smooth:
        points, lengths = styles.catmull_rom(points, lengths)
    head = torch.tensor([*rgb, opacity], device=xy.device).expand(len(frame), 4)
    return styles.styled_polylines(frame, points, lengths, width, head, _faded(head, 0.0))


def _point_texts(xy, at, index, labels, mode: str, size: int, offset: float, rgba):
    """Text beside the visible points of xy float [T,N,2] (on the render device), frame at and point
    index int64 [P] (on the host): each point's id, or with mode "label" its label (its id where it has
    none; an empty label: no text), one sprite a point, its ink's lower left corner `offset` px right of
    and above the point; the frame's edges cut what lies beyond them. Returns the sprites and the atlas
    of the distinct strings drawn (None when there is no text)."""
    strings = labels.names + [str(i) for i in range(xy.shape[1])]  # the labels, then the ids
    string = len(labels.names) + index
    if mode == "label":
        named = labels.index[at, index]
        string = torch.where(named >= 0, named, string)
    keep = torch.tensor([bool(text) for text in strings], dtype=torch.bool)[string]  # host data: no sync
    if not bool(keep.any()):
        return R.empty(xy.device), None
    used, string = torch.unique(string[keep], return_inverse=True)
    atlas, rects = text_atlas([strings[i] for i in used.tolist()], size, DEFAULT_FONT)
    moved = torch.cat([at[keep, None], index[keep, None], rects[string]], 1).to(xy.device)  # one transfer
    frame, point, rect = moved[:, 0], moved[:, 1], moved[:, 2:]
    corner = xy[frame, point] + torch.tensor([offset, -offset], device=xy.device)
    return R.sprites(frame, torch.stack([corner[:, 0], corner[:, 1] - rect[:, 3]], 1), rect, rgba), atlas


class LineLinkRenderer(RasterKitNode):
    NODE_ID = "RasterKit_LineLinkRenderer"
    DISPLAY_NAME = "Line Link Renderer (RasterKit)"
    CATEGORY = "RasterKit/overlay"
    DESCRIPTION = ("Links tracked points in every frame (each to its nearest neighbours, all pairs within a radius, "
                   "the Delaunay triangulation or the minimum spanning tree, or the walls of their Voronoi cells; with "
                   "caps, and kept stable across frames by hysteresis) and draws the links as anti-aliased lines or "
                   "curves: solid, dashed (marching ants with dash_speed), dotted, in a colour gradient, with a glow; "
                   "point markers, ids or labels; fading trails.")
    INPUTS = [
        Socket("images", "IMAGE", tooltip="the frames to draw on"),
        String("tracks_json", '[[{"x": 100, "y": 100}], [{"x": 220, "y": 140}], [{"x": 160, "y": 260}]]',
               multiline=True, tooltip="Tracks as JSON: a list of tracks, each a list of per-frame points ({x, y} or "
                                       "[x, y]); a flat list of points is one point moving over frames (KJNodes' "
                                       "coordinates); a short track holds its last point; negative coordinates "
                                       "are hidden. A connected tracks or ys_tracks input wins over this text"),
        Int("k", 3, 1, 32, tooltip="neighbours per point (graph knn)"),
        Float("max_distance", 0.0, 0.0, 100000.0, 1.0, tooltip="longest link in pixels; 0: no limit (graph radius "
                                                               "needs one: it links every pair within it)"),
        Float("delta_y_cap", 0.0, 0.0, 100000.0, 1.0, tooltip="largest vertical extent of a link; 0: no limit"),
        Int("degree_cap", 0, 0, 64, tooltip="most links per point, shortest kept; 0: no limit"),
        Bool("mutual", False, tooltip="link only points that are among each other's k nearest (graph knn)"),
        Float("hysteresis", 1.3, 1.0, 4.0, 0.05, tooltip="a link stays while within this factor of its limits "
                                                        "(graphs knn and radius)"),
        Combo("curve", ("straight", "bezier", "cubic"),
              tooltip="straight lines; quadratic Bezier curves bent to alternating sides; or cubic Bezier S-curves"),
        Float("curvature", 0.2, -2.0, 2.0, 0.01, tooltip="bend of the Bezier curves, as a fraction of the link's "
                                                         "length; negative bends the other way"),
        Float("width", 1.5, 0.1, 64.0, 0.1, tooltip="line width in pixels"),
        Float("opacity", 0.8, 0.0, 1.0, tooltip="opacity of the links and point markers"),
        String("color", "#FFFFFF", tooltip="hex colour, or 'distance' to colour links by length"),
        Float("point_radius", 3.0, 0.0, 64.0, 0.5, tooltip="radius of the marker drawn on each visible point; "
                                                           "0: no markers"),
        Combo("layer_alpha", LAYER_ALPHA_MODES, tooltip=LAYER_ALPHA_TOOLTIP),
        Combo("graph", GRAPH_CHOICES, tooltip="which points link: knn, each to its k nearest; radius, every pair "
                                              "within max_distance; delaunay, the Delaunay triangulation's edges; "
                                              "mst, the minimum spanning tree (a forest where max_distance cuts it); "
                                              "voronoi, not links but the walls between the points' Voronoi cells "
                                              "(one for each Delaunay link, cut at the frame's edges). The caps "
                                              "apply to all, hysteresis to knn and radius"),
        Combo("line_style", styles.LINE_STYLES, tooltip="solid lines; dashed, dash_length on and gap_length off; "
                                                         "dotted, dots as wide as the line, gap_length apart"),
        Float("dash_length", 8.0, 0.5, 10000.0, 0.5, tooltip="length of a dash in pixels (line_style dashed)"),
        Float("gap_length", 6.0, 1.0, 10000.0, 0.5, tooltip="pixels between dashes or dots"),
        Float("dash_phase", 0.0, -100000.0, 100000.0, 0.5, tooltip="shift of the dash or dot pattern towards the "
                                                                  "link's far end, in pixels"),
        Float("dash_speed", 0.0, -1000.0, 1000.0, 0.5, tooltip="pixels the pattern moves each frame (marching "
                                                              "ants); negative moves it back"),
        String("end_color", "", tooltip="hex colour at each link's far end, blended from its colour along the link "
                                        "(links then end square); empty: one colour"),
        Float("glow", 0.0, 0.0, 1.0, tooltip="opacity of a wide, fainter stroke under each link, relative to opacity; "
                                             "0: no glow"),
        Float("glow_scale", 4.0, 1.0, 32.0, 0.1, tooltip="width of the glow as a multiple of the line width (of "
                                                         "the marker radius for marker_glow)"),
        Combo("width_by_length", styles.WIDTH_BY_LENGTH,
              tooltip="per-link width: the same for all; shorter_thicker, 1.5 x width for the shortest down to "
                      "0.5 x at max_distance (or the longest link); longer_thicker, the reverse"),
        Combo("point_style", styles.POINT_STYLES, tooltip="the marker on each point: a filled dot, or a ring, "
                                                          "cross, square or diamond outline of the line width"),
        Bool("marker_glow", False, tooltip="a glow disc under each marker, at the glow opacity"),
        Int("trail_frames", 0, 0, 1000, tooltip="draw each point's path over this many past frames, fading "
                                                "towards the oldest; 0: no trails"),
        Bool("trail_smooth", False, tooltip="smooth the trails through the tracked positions (Catmull-Rom)"),
        Combo("point_labels", POINT_LABELS,
              tooltip="text up and right of each visible point: none; id, its track's number (its index in "
                      "edges_json); label, its track's label (a \"label\" string on a point of tracks_json "
                      "names its track from that frame on; RASTERKIT_TRACKS' optional labels list), else its id"),
        Int("text_size", 12, 6, 128, tooltip="size of the point labels' text in pixels"),
        String("text_color", "", tooltip="hex colour of the point labels' text; empty: the points' colour"),
        Combo("outputs", OVERLAY_OUTPUTS, tooltip=OVERLAY_OUTPUTS_TOOLTIP, optional=True),  # old API prompts lack it
        Socket("tracks", "RASTERKIT_TRACKS", optional=True, tooltip="tracks from Point Tracker (RasterKit)"),
        Socket("ys_tracks", "TRACKS", optional=True,
               tooltip="ys-vision-tools' TRACKS: an array of x, y, or a list of per-frame arrays; point n is row n "
                       "of every frame, rows a frame lacks are hidden"),
    ]
    OUTPUTS = [Output("IMAGE", "image", "the frames with the links and points drawn over them"),
               Output("MASK", "alpha", "the overlay's coverage of each pixel"),
               Output("IMAGE", "layer", LAYER_TOOLTIP),
               Output("STRING", "edges_json", "per frame, the [i, j] point pairs linked (voronoi: the pairs whose "
                                                 "cells' wall is drawn)")]

    @classmethod
    def run(cls, images, tracks_json="", k=3, max_distance=0.0, delta_y_cap=0.0, degree_cap=0, mutual=False,
            hysteresis=1.3, curve="straight", curvature=0.2, width=1.5, opacity=0.8, color="#FFFFFF",
            point_radius=3.0, layer_alpha="straight", graph="knn", line_style="solid", dash_length=8.0,
            gap_length=6.0, dash_phase=0.0, dash_speed=0.0, end_color="", glow=0.0, glow_scale=4.0,
            width_by_length="none", point_style="dot", marker_glow=False, trail_frames=0, trail_smooth=False,
            point_labels="none", text_size=12, text_color="", outputs=OVERLAY_OUTPUTS[0], tracks=None, ys_tracks=None):
        check_images(images, "images")
        for name, value, options in (("line_style", line_style, styles.LINE_STYLES),
                                     ("width_by_length", width_by_length, styles.WIDTH_BY_LENGTH),
                                     ("point_style", point_style, styles.POINT_STYLES),
                                     ("point_labels", point_labels, POINT_LABELS),
                                     ("graph", graph, GRAPH_CHOICES)):
            if value not in options:
                raise ValueError(f"{name}: expected one of {', '.join(options)}, got {value!r}")
        ink = parse_hex(text_color, "text_color")[:3] if text_color.strip() else None
        device = render_device()
        xy, visible, labels = _points(images, tracks, ys_tracks, tracks_json)
        options = GraphOptions(k, max_distance or math.inf, delta_y_cap or math.inf, degree_cap, mutual, hysteresis)
        xy_dev = xy.to(device)
        if graph == "voronoi":  # the wall between the cells of each Delaunay pair, in place of its link
            edges, walls = voronoi_graph(xy, visible, options, images.shape[1:3], device=device)
            pairs, frame = edges.flat()
            start, end = walls.flat()[0].unbind(1)
        else:
            searched = {"on_chunk": lambda done, total: check_interrupt()} if graph in ("knn", "radius") else {}
            edges = GRAPHS[graph](xy, visible, options, device=device, **searched)
            pairs, frame = edges.flat()
            start, end = xy_dev[frame, pairs[:, 0]], xy_dev[frame, pairs[:, 1]]
        by_distance = color.strip().lower() == "distance"
        dashes = line_style != "solid"
        length = (end - start).norm(dim=-1) if by_distance or width_by_length != "none" or dashes else None
        longest = 0.0  # the longest link (one sync): the scale without max_distance, the bound on dashes
        if length is not None and length.numel() and (dashes or not max_distance):
            longest = float(length.amax())
        scale = (max_distance or longest) if length is not None and length.numel() else 1.0
        if by_distance:
            rgb = _gradient(length / max(scale, 1e-6))
        else:
            rgb = torch.tensor(parse_hex(color, "color")[:3], device=device).expand(len(frame), 3)
        colours = torch.cat([rgb, torch.full((len(frame), 1), opacity, device=device)], 1)
        end_colours = None
        if end_color.strip():
            end_colours = torch.tensor([*parse_hex(end_color, "end_color")[:3], opacity], device=device).expand_as(colours)
        widths = width if length is None else styles.width_by_length(length, scale, width, width_by_length)
        plain = curve == "straight" and line_style == "solid" and end_colours is None  # one segment per link
        if curve != "straight":
            points, lengths = bezier_polylines(start, end, curvature, alternating_sign(pairs[:, 0], pairs[:, 1]),
                                               cubic=curve == "cubic")
        elif not plain:
            points, lengths = torch.stack([start, end], 1), torch.full_like(frame, 2)
        phase = dash_phase + dash_speed * frame.float() if dashes else 0.0
        max_length = longest * control_polygon_length(curve, curvature)

        def strokes(stroke_width, alpha_scale):
            """The links, stroke_width wide, at alpha_scale times their opacity (dots spaced as the line's)."""
            if plain:
                return R.segments(frame, start, end, stroke_width, _faded(colours, alpha_scale))
            return styles.styled_polylines(frame, points, lengths, stroke_width, _faded(colours, alpha_scale),
                                           _faded(end_colours, alpha_scale), line_style, dash_length, gap_length,
                                           phase, max_length, pattern_width=widths)

        dot_rgb = (1.0, 1.0, 1.0) if by_distance else parse_hex(color, "color")[:3]
        layers = []
        if glow > 0:
            layers.append(strokes(widths * glow_scale, glow))
        if trail_frames > 0 and images.shape[0] > 1:
            layers.append(_trails(xy_dev, visible.to(device), trail_frames, trail_smooth, width, dot_rgb, opacity))
        layers.append(strokes(widths, 1))
        atlas = None
        if (point_radius > 0 or point_labels != "none") and visible.any():
            at, index = visible.cpu().nonzero(as_tuple=True)
            if point_radius > 0:
                frame_dev = at.to(device)
                centre = xy_dev[frame_dev, index.to(device)]
                if marker_glow and glow > 0:
                    layers.append(R.discs(frame_dev, centre, point_radius * glow_scale, (*dot_rgb, opacity * glow)))
                layers.append(styles.markers(frame_dev, centre, point_radius, (*dot_rgb, opacity), point_style, width))
            if point_labels != "none":
                texts, atlas = _point_texts(xy_dev, at, index, labels, point_labels, text_size, point_radius + 2,
                                            (*(ink or dot_rgb), opacity))
                layers.append(texts)
        prims = R.concat(*layers)
        check_memory(draw_memory(images, prims, atlas, outputs == "image only", device),
                     f"tracks: {len(prims):,} lines and points on {images.shape[0]} frames of "
                     f"{images.shape[1]} x {images.shape[2]}", device)
        drawn = R.draw(images, prims, atlas, device=device, on_progress=Progress(images.shape[0]),
                       layer_alpha=layer_alpha, image_only=outputs == "image only")
        edges_json = json.dumps([e[:n].tolist() for e, n in zip(edges.values.cpu(), edges.lengths.cpu().tolist())])
        return (*overlay_outputs(*drawn), edges_json)

    @classmethod
    def preview(cls, inputs, outputs):
        return frame_preview(inputs["images"])  # the tracks editor draws over the first input frame


def _gray(images: torch.Tensor) -> np.ndarray:
    luminance = images[..., :3] @ torch.tensor([0.299, 0.587, 0.114], dtype=images.dtype)
    return (luminance.clamp(0, 1) * 255 + 0.5).to(torch.uint8).cpu().numpy()


class PointTracker(RasterKitNode):
    NODE_ID = "RasterKit_PointTracker"
    DISPLAY_NAME = "Point Tracker (RasterKit)"
    CATEGORY = "RasterKit/tracking"
    DESCRIPTION = ("Finds corner features (Shi-Tomasi) and follows them through the batch with pyramidal "
                   "Lucas-Kanade optical flow; points that fail the forward-backward check are dropped and new "
                   "ones detected, so the count stays near max_points.")
    INPUTS = [
        Socket("images", "IMAGE", tooltip="the frames to track points through, in order"),
        Int("max_points", 200, 1, 10000, tooltip="most points tracked at once; lost points are replaced by new "
                                                  "corners"),
        Float("quality", 0.01, 0.0001, 1.0, 0.001, tooltip="corner quality relative to the best corner"),
        Float("min_distance", 10.0, 1.0, 1000.0, 1.0, tooltip="pixels between detected points"),
        Float("max_error", 1.0, 0.1, 50.0, 0.1, tooltip="forward-backward flow error in pixels that drops a point"),
    ]
    OUTPUTS = [Output("RASTERKIT_TRACKS", "tracks", "the points of every frame, for Line Link Renderer (RasterKit)"),
               Output("STRING", "tracks_json", "the same tracks as JSON: one list of per-frame {x, y} per track, "
                                               "hidden points at -100, -100")]

    @classmethod
    def run(cls, images, max_points=200, quality=0.01, min_distance=10.0, max_error=1.0):
        import cv2

        check_images(images, "images")
        gray = _gray(images)
        frames = len(gray)
        flow = dict(winSize=(21, 21), maxLevel=3, criteria=(cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 30, 0.01))
        progress = Progress(frames)
        positions, ids = [], []  # per frame: points float [n,2] and their track ids int [n]
        points = np.zeros((0, 2), np.float32)
        track_ids = np.zeros(0, np.int64)
        next_id = 0
        for t in range(frames):  # optical flow is a recurrence over frames; each call handles all points
            if t > 0 and len(points):
                moved, ok, _ = cv2.calcOpticalFlowPyrLK(gray[t - 1], gray[t], points[:, None], None, **flow)
                back, ok_back, _ = cv2.calcOpticalFlowPyrLK(gray[t], gray[t - 1], moved, None, **flow)
                error = np.abs(back[:, 0] - points).max(1)
                inside = (moved[:, 0] >= 0).all(1) & (moved[:, 0, 0] < gray.shape[2]) & (moved[:, 0, 1] < gray.shape[1])
                good = ok[:, 0].astype(bool) & ok_back[:, 0].astype(bool) & (error < max_error) & inside
                points, track_ids = moved[good, 0], track_ids[good]
            if len(points) < max_points:
                found = cv2.goodFeaturesToTrack(gray[t], max_points, quality, min_distance)
                if found is not None:
                    found = found[:, 0]
                    if len(points):  # only corners away from the points already tracked
                        near = np.linalg.norm(found[:, None] - points[None], axis=-1).min(1) < min_distance
                        found = found[~near]
                    found = found[: max_points - len(points)]
                    points = np.concatenate([points, found]).astype(np.float32)
                    track_ids = np.concatenate([track_ids, np.arange(next_id, next_id + len(found))])
                    next_id += len(found)
            positions.append(points.copy())
            ids.append(track_ids.copy())
            progress(t + 1)
        xy = torch.full((frames, next_id, 2), -1.0)
        visible = torch.zeros(frames, next_id, dtype=torch.bool)
        frame_index = torch.from_numpy(np.repeat(np.arange(frames), [len(i) for i in ids]))
        track_index = torch.from_numpy(np.concatenate(ids)) if ids else torch.zeros(0, dtype=torch.long)
        xy[frame_index, track_index] = torch.from_numpy(np.concatenate(positions)) if positions else xy[:0, 0]
        visible[frame_index, track_index] = True
        return {"xy": xy, "visible": visible}, track_sources.to_json(xy, visible)


NODES = [PointTracker, LineLinkRenderer]
