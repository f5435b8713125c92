"""RasterKit_PointTracker and RasterKit_LineLinkRenderer: tracked points linked into graphs (stable
kNN, radius, Delaunay, minimum spanning tree) drawn as anti-aliased lines or curves."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import torch

from ..utils.core.batching import expand_counts
from ..utils.gpu_curves import CURVES
from ..utils.gpu_graph import (
    GRAPHS,
    GraphOptions,
    edge_list_graph,
    parse_edges,
    parse_groups,
    track_points,
    voronoi_graph,
)
from ..utils.gpu_rendering import link_styles as styles
from ..utils.gpu_rendering.link_layers import POINT_LABELS, LinkStyle, link_layers
from ..utils.inputs import tracks as track_sources
from ..utils.inputs.colors import PALETTES, parse_hex
from ..utils.inputs.colors import palette as palette_colours
from ..utils.inputs.tracks import Labels
from ._comfy import (
    LAYER_ALPHA_MODES,
    LAYER_ALPHA_TOOLTIP,
    LAYER_TOOLTIP,
    OVERLAY_OUTPUTS,
    OVERLAY_OUTPUTS_TOOLTIP,
    Progress,
    check_interrupt,
    draw_overlay_in_windows,
    frame_preview,
    frame_windows,
    render_device,
)
from ._schema import Bool, Combo, Float, Int, Output, RasterKitNode, Socket, String
from ._validate import check_images

GRAPH_CHOICES = (*GRAPHS, "voronoi", "edges")
# Links and points of a window of frames whose layers are built and drawn together (~0.3 s of building on
# a 2-core CPU): a long video of a dense graph is built window by window, its primitives' memory bounded
# and interrupts seen between windows
WINDOW_ITEMS = 1 << 18


def _links(graph: str, xy, visible, options: GraphOptions, size, device, edge_list=None):
    """The graph's links of points xy float [T,N,2] and visible bool [T,N] (on the device), in
    frames of size (H, W): the edges as edges_json lists them (per frame, [i, j] pairs), a host bound on
    the links' lengths (whole pixels; read back with them in one transfer), and per link its frame int64
    [E], its pair int64 [E,2] and the ends drawn float [E,2] (the points, or with voronoi their cells'
    wall), on the device. edge_list: the pairs int64 [P,2] of graph "edges" (host)."""
    if graph == "voronoi":  # the wall between the cells of each Delaunay pair, in place of its link
        edges, walls = voronoi_graph(xy, visible, options, size, device=device)
        ends = walls.values  # [T,E,2,2]
    else:
        if graph == "edges":
            edges = edge_list_graph(xy, visible, options, edge_list, device=device)
        else:
            searched = {"on_chunk": lambda done, total: check_interrupt()} if graph in ("knn", "radius") else {}
            edges = GRAPHS[graph](xy, visible, options, device=device, **searched)
        ends = xy[torch.arange(xy.shape[0], device=xy.device)[:, None, None], edges.values]  # [T,E,2,2]
    frames, width = edges.values.shape[:2]
    # the longest link (padding: a point to itself) bounds the curves' segments, with no read of its own
    longest = (
        (ends[:, :, 1] - ends[:, :, 0]).norm(dim=-1).amax().ceil().long()
        if ends.numel()
        else ends.new_zeros((), dtype=torch.long)
    )
    host = torch.cat([edges.lengths.to(edges.values.device), edges.values.view(-1), longest.view(1)]).cpu().numpy()
    lengths, values = host[:frames].tolist(), host[frames:-1].reshape(frames, width, 2)
    lists = [values[t, :n].tolist() for t, n in enumerate(lengths)]  # numpy's tolist: ~10x a Python loop
    frame, rank = expand_counts(edges.lengths.to(ends.device), sum(lengths))  # the host knows the count: no sync
    start, end = ends[frame, rank].unbind(1)
    return lists, int(host[-1]), frame, edges.values[frame, rank], start, end


class LineLinkRenderer(RasterKitNode):
    NODE_ID = "RasterKit_LineLinkRenderer"
    DISPLAY_NAME = "Line Link Renderer (RasterKit)"
    CATEGORY = "RasterKit/overlay"
    DESCRIPTION = (
        "Links tracked points in every frame (each to its nearest neighbours, all pairs within a radius, "
        "the Delaunay triangulation or the minimum spanning tree, or the walls of their Voronoi cells; with "
        "caps, and kept stable across frames by hysteresis) and draws the links as anti-aliased lines or "
        "curves (Bezier, spiral, elastic and Fourier waves): solid, dashed (marching ants with dash_speed), dotted, "
        "pulsing, electric, in a colour gradient, with a glow; "
        "point markers, ids or labels; fading trails. Plexus controls: links that fade or thin with their "
        "length, coloured from their two points, only between groups of points; or a fixed edge list (a "
        "skeleton such as COCO-17 keypoints)."
    )
    INPUTS = [
        Socket("images", "IMAGE", tooltip="the frames to draw on"),
        String(
            "tracks_json",
            '[[{"x": 100, "y": 100}], [{"x": 220, "y": 140}], [{"x": 160, "y": 260}]]',
            multiline=True,
            tooltip="Tracks as JSON: a list of tracks, each a list of per-frame points ({x, y} or "
            "[x, y]); a flat list of points is one point moving over frames (KJNodes' "
            "coordinates); a short track holds its last point; negative coordinates "
            "are hidden. A connected tracks or ys_tracks input wins over this text",
        ),
        Int("k", 3, 1, 32, tooltip="neighbours per point (graph knn)"),
        Float(
            "max_distance",
            0.0,
            0.0,
            100000.0,
            1.0,
            tooltip="longest link in pixels; 0: no limit (graph radius needs one: it links every pair within it)",
        ),
        Float("delta_y_cap", 0.0, 0.0, 100000.0, 1.0, tooltip="largest vertical extent of a link; 0: no limit"),
        Int("degree_cap", 0, 0, 64, tooltip="most links per point, shortest kept; 0: no limit"),
        Bool("mutual", False, tooltip="link only points that are among each other's k nearest (graph knn)"),
        Float(
            "hysteresis",
            1.3,
            1.0,
            4.0,
            0.05,
            tooltip="a link stays while within this factor of its limits (graphs knn and radius)",
        ),
        Combo(
            "curve",
            CURVES,
            tooltip="straight lines; quadratic Bezier curves bent to alternating sides; cubic Bezier S-curves; "
            "spiral, each link winding out of its first point to its second (2.5 x curvature turns); "
            "elastic, a damped wave of two swings across the link; fourier, a wave of five harmonics "
            "(a sawtooth's) across it",
        ),
        Float(
            "curvature",
            0.2,
            -2.0,
            2.0,
            0.01,
            tooltip="bend of the Bezier curves and largest swing of the waves, as a fraction of the link's "
            "length (spiral: 2.5 x this many turns); negative bends the other way",
        ),
        Float("width", 1.5, 0.1, 64.0, 0.1, tooltip="line width in pixels"),
        Float("opacity", 0.8, 0.0, 1.0, tooltip="opacity of the links and point markers"),
        String(
            "color",
            "#FFFFFF",
            tooltip="hex colour; 'distance' to colour links by length; 'points' to colour each point by its "
            "track's colour of the palette and each link from its one point's colour to the other's",
        ),
        Float(
            "point_radius",
            3.0,
            0.0,
            64.0,
            0.5,
            tooltip="radius of the marker drawn on each visible point; 0: no markers",
        ),
        Combo("layer_alpha", LAYER_ALPHA_MODES, tooltip=LAYER_ALPHA_TOOLTIP),
        Combo(
            "graph",
            GRAPH_CHOICES,
            tooltip="which points link: knn, each to its k nearest; radius, every pair "
            "within max_distance; delaunay, the Delaunay triangulation's edges; "
            "mst, the minimum spanning tree (a forest where max_distance cuts it); "
            "voronoi, not links but the walls between the points' Voronoi cells "
            "(one for each Delaunay link, cut at the frame's edges); edges, the "
            "pairs listed in edges (a skeleton). The caps and groups apply to "
            "all, hysteresis to knn and radius",
        ),
        Combo(
            "line_style",
            styles.LINE_STYLES,
            tooltip="solid lines; dashed, dash_length on and gap_length off; "
            "dotted, dots as wide as the line, gap_length apart; pulsing, a wave of width and opacity "
            "along each link, crests dash_length + gap_length apart (marching with dash_speed); "
            "electric, a zigzag that changes every frame, kinks at most dash_length apart swung up to "
            "jitter across",
        ),
        Float(
            "dash_length",
            8.0,
            0.5,
            10000.0,
            0.5,
            tooltip="length of a dash in pixels (line_style dashed); most pixels between an electric link's kinks",
        ),
        Float("gap_length", 6.0, 1.0, 10000.0, 0.5, tooltip="pixels between dashes or dots"),
        Float(
            "dash_phase",
            0.0,
            -100000.0,
            100000.0,
            0.5,
            tooltip="shift of the dash or dot pattern towards the link's far end, in pixels",
        ),
        Float(
            "dash_speed",
            0.0,
            -1000.0,
            1000.0,
            0.5,
            tooltip="pixels the pattern (dashes, dots, pulses) moves each frame (marching ants); negative moves "
            "it back",
        ),
        String(
            "end_color",
            "",
            tooltip="hex colour at each link's far end, blended from its colour along the link "
            "(links then end square); empty: one colour",
        ),
        Float(
            "glow",
            0.0,
            0.0,
            1.0,
            tooltip="opacity of a wide, fainter stroke under each link, relative to opacity; 0: no glow",
        ),
        Float(
            "glow_scale",
            4.0,
            1.0,
            32.0,
            0.1,
            tooltip="width of the glow as a multiple of the line width (of the marker radius for marker_glow)",
        ),
        Combo(
            "width_by_length",
            styles.WIDTH_BY_LENGTH,
            tooltip="per-link width: the same for all; shorter_thicker, 1.5 x width for the shortest down to "
            "0.5 x at max_distance (or the longest link); longer_thicker, the reverse",
        ),
        Combo(
            "point_style",
            styles.POINT_STYLES,
            tooltip="the marker on each point: a filled dot, or a ring, "
            "cross, square or diamond outline of the line width",
        ),
        Bool("marker_glow", False, tooltip="a glow disc under each marker, at the glow opacity"),
        Int(
            "trail_frames",
            0,
            0,
            1000,
            tooltip="draw each point's path over this many past frames, fading towards the oldest; 0: no trails",
        ),
        Bool("trail_smooth", False, tooltip="smooth the trails through the tracked positions (Catmull-Rom)"),
        Combo(
            "point_labels",
            POINT_LABELS,
            tooltip="text up and right of each visible point: none; id, its track's number (its index in "
            'edges_json); label, its track\'s label (a "label" string on a point of tracks_json '
            "names its track from that frame on; RASTERKIT_TRACKS' optional labels list), else its id",
        ),
        Int("text_size", 12, 6, 128, tooltip="size of the point labels' text in pixels"),
        String("text_color", "", tooltip="hex colour of the point labels' text; empty: the points' colour"),
        Combo("outputs", OVERLAY_OUTPUTS, tooltip=OVERLAY_OUTPUTS_TOOLTIP, optional=True),  # old API prompts lack it
        # the plexus controls: optional (older prompts lack them), their defaults today's drawing
        Float(
            "length_falloff",
            0.0,
            0.0,
            1.0,
            0.05,
            tooltip="links fade with their length: full up to (1 - this) x max_distance (or the longest "
            "link when max_distance is 0), down to nothing at max_distance, so links appear and go "
            "without popping; 1: from full at length 0; 0: off",
            optional=True,
        ),
        Combo(
            "falloff_on",
            styles.FALLOFF_TARGETS,
            tooltip="what length_falloff fades: the links' opacity, their width, or both",
            optional=True,
        ),
        Combo(
            "palette",
            tuple(PALETTES),
            tooltip="the track colours of color 'points' (track id mod the palette's size)",
            optional=True,
        ),
        String(
            "groups",
            "",
            tooltip="link only points of different groups: groups of track ids separated by | "
            "(0-9 | 10-19; ids and ranges a-b), or 'labels' (the tracks' labels are the groups); tracks in "
            "no group take no links; empty: every pair may link",
            optional=True,
        ),
        String(
            "edges",
            "coco17",
            tooltip="the links of graph edges, in every frame where both points show: pairs of track ids "
            "(0-1, 1-2, 2-3) or JSON pairs ([[0, 1], [1, 2]]), or coco17 (the 19 limbs of COCO's 17 "
            "keypoints, as pose models number them)",
            optional=True,
        ),
        Float(
            "jitter",
            3.0,
            0.0,
            1000.0,
            0.5,
            tooltip="pixels an electric link's kinks swing across it, at most, either way (line_style electric)",
            optional=True,
        ),
        Int(
            "seed",
            0,
            0,
            0xFFFFFFFF,
            tooltip="the electric links' zigzags: the same seed, points and frames draw the same zigzags",
            optional=True,
        ),
        Socket("tracks", "RASTERKIT_TRACKS", optional=True, tooltip="tracks from Point Tracker (RasterKit)"),
        Socket(
            "ys_tracks",
            "TRACKS",
            optional=True,
            tooltip="TRACKS of core ComfyUI (the WanMove nodes, Point Tracker's core_tracks: track_path and "
            "track_visibility) or of ys-vision-tools (an array of x, y, or a list of per-frame arrays; "
            "point n is row n of every frame, rows a frame lacks are hidden), told apart by their contents",
        ),
    ]
    OUTPUTS = [
        Output("IMAGE", "image", "the frames with the links and points drawn over them"),
        Output("MASK", "alpha", "the overlay's coverage of each pixel"),
        Output("IMAGE", "layer", LAYER_TOOLTIP),
        Output(
            "STRING",
            "edges_json",
            "per frame, the [i, j] point pairs linked (voronoi: the pairs whose cells' wall is drawn)",
        ),
    ]

    @classmethod
    def run(
        cls,
        images,
        tracks_json="",
        k=3,
        max_distance=0.0,
        delta_y_cap=0.0,
        degree_cap=0,
        mutual=False,
        hysteresis=1.3,
        curve="straight",
        curvature=0.2,
        width=1.5,
        opacity=0.8,
        color="#FFFFFF",
        point_radius=3.0,
        layer_alpha="straight",
        graph="knn",
        line_style="solid",
        dash_length=8.0,
        gap_length=6.0,
        dash_phase=0.0,
        dash_speed=0.0,
        end_color="",
        glow=0.0,
        glow_scale=4.0,
        width_by_length="none",
        point_style="dot",
        marker_glow=False,
        trail_frames=0,
        trail_smooth=False,
        point_labels="none",
        text_size=12,
        text_color="",
        outputs=OVERLAY_OUTPUTS[0],
        length_falloff=0.0,
        falloff_on="opacity",
        palette="default",
        groups="",
        edges="coco17",
        jitter=3.0,
        seed=0,
        tracks=None,
        ys_tracks=None,
    ):
        check_images(images, "images")
        for name, value, options in (
            ("curve", curve, CURVES),
            ("line_style", line_style, styles.LINE_STYLES),
            ("width_by_length", width_by_length, styles.WIDTH_BY_LENGTH),
            ("point_style", point_style, styles.POINT_STYLES),
            ("point_labels", point_labels, POINT_LABELS),
            ("graph", graph, GRAPH_CHOICES),
            ("falloff_on", falloff_on, styles.FALLOFF_TARGETS),
            ("palette", palette, tuple(PALETTES)),
        ):
            if value not in options:
                raise ValueError(f"{name}: expected one of {', '.join(options)}, got {value!r}")
        ink = parse_hex(text_color, "text_color")[:3] if text_color.strip() else None
        device = render_device()
        edge_list = parse_edges(edges) if graph == "edges" else None
        by_points = color.strip().lower() == "points"
        track_colours = tuple(rgba[:3] for rgba in palette_colours(palette)) if by_points else None
        xy, visible, labels = track_sources.track_points(images.shape[0], tracks, ys_tracks, tracks_json)
        grouped = labels.index if groups.strip().lower() == "labels" else parse_groups(groups, xy.shape[1])
        options = GraphOptions(
            k, max_distance or math.inf, delta_y_cap or math.inf, degree_cap, mutual, hysteresis, grouped
        )
        xy_dev = xy.to(device)  # the tracks go to the device once, for the graph and the layers
        edges, longest, frame, pairs, start, end = _links(
            graph, xy_dev, visible.to(device), options, images.shape[1:3], device, edge_list
        )
        by_distance = color.strip().lower() == "distance"
        style = LinkStyle(
            rgb=None if by_distance else (1.0, 1.0, 1.0) if by_points else parse_hex(color, "color")[:3],
            opacity=opacity,
            width=width,
            curve=curve,
            curvature=curvature,
            max_distance=max_distance,
            line_style=line_style,
            dash_length=dash_length,
            gap_length=gap_length,
            dash_phase=dash_phase,
            dash_speed=dash_speed,
            end_rgb=parse_hex(end_color, "end_color")[:3] if end_color.strip() else None,
            glow=glow,
            glow_scale=glow_scale,
            width_by_length=width_by_length,
            point_radius=point_radius,
            point_style=point_style,
            marker_glow=marker_glow,
            trail_frames=trail_frames,
            trail_smooth=trail_smooth,
            point_labels=point_labels,
            text_size=text_size,
            text_rgb=ink,
            point_palette=track_colours,
            length_falloff=length_falloff,
            falloff_on=falloff_on,
            jitter=jitter,
            seed=seed,
        )
        per_frame = np.array([len(links) for links in edges], np.int64)
        windows = frame_windows(per_frame + xy.shape[1], WINDOW_ITEMS)  # links and points: a bound the host knows
        if len(windows) > 1 and not style.max_distance and len(start):
            # every window's colours and widths scale with the batch's longest link
            style = dataclasses.replace(style, max_distance=float((end - start).norm(dim=-1).amax()))
        first_link = np.concatenate([[0], np.cumsum(per_frame)]).tolist()

        def layers(begin, stop):
            """The primitives of frames begin..stop (and the atlas of their text), numbered from begin."""
            if (begin, stop) == (0, len(per_frame)):
                return link_layers(xy_dev, visible, labels, frame, pairs, start, end, style, images.shape[1:3], longest)
            since = max(0, begin - style.trail_frames)  # the trails reach back from the window's frames
            chosen = slice(first_link[begin], first_link[stop])
            prims, atlas = link_layers(
                xy_dev[since:stop],
                visible[since:stop],
                Labels(labels.names, labels.index[since:stop]),
                frame[chosen] - since,
                pairs[chosen],
                start[chosen],
                end[chosen],
                style,
                images.shape[1:3],
                longest,
                first_frame=since,
            )
            return prims.window(begin - since, stop - since), atlas

        size = "{} frames of {} x {}".format(*images.shape[:3])
        job = f"tracks: {int(per_frame.sum()):,} links of {xy.shape[1]:,} points on {size}"
        drawn = draw_overlay_in_windows(images, windows, layers, device, layer_alpha, outputs, job)
        return (*drawn, json.dumps(edges))

    @classmethod
    def preview(cls, inputs, outputs):
        return frame_preview(inputs["images"])  # the tracks editor draws over the first input frame


class PointTracker(RasterKitNode):
    NODE_ID = "RasterKit_PointTracker"
    DISPLAY_NAME = "Point Tracker (RasterKit)"
    CATEGORY = "RasterKit/tracking"
    DESCRIPTION = (
        "Finds corner features (Shi-Tomasi) and follows them through the batch with pyramidal "
        "Lucas-Kanade optical flow; points that fail the forward-backward check are dropped and new "
        "ones detected, so the count stays near max_points."
    )
    INPUTS = [
        Socket("images", "IMAGE", tooltip="the frames to track points through, in order"),
        Int(
            "max_points", 200, 1, 10000, tooltip="most points tracked at once; lost points are replaced by new corners"
        ),
        Float("quality", 0.01, 0.0001, 1.0, 0.001, tooltip="corner quality relative to the best corner"),
        Float("min_distance", 10.0, 1.0, 1000.0, 1.0, tooltip="pixels between detected points"),
        Float("max_error", 1.0, 0.1, 50.0, 0.1, tooltip="forward-backward flow error in pixels that drops a point"),
    ]
    OUTPUTS = [
        Output("RASTERKIT_TRACKS", "tracks", "the points of every frame, for Line Link Renderer (RasterKit)"),
        Output(
            "STRING",
            "tracks_json",
            "the same tracks as JSON: one list of per-frame {x, y} per track, hidden points at -100, -100",
        ),
        # core ComfyUI's TRACKS (io.Tracks, since 0.3.7x), declared by name: loads on 0.3.64 too
        Output(
            "TRACKS",
            "core_tracks",
            "the tracks seen in the first frame as core ComfyUI's TRACKS, for WanMove (WanMove Track To Video, "
            "WanMove Visualize Tracks) and Track Trails (RasterKit): visibility kept, a hidden point where "
            "its track was last seen",
        ),
    ]

    @classmethod
    def run(cls, images, max_points=200, quality=0.01, min_distance=10.0, max_error=1.0):
        check_images(images, "images")
        xy, visible, text = track_points(
            images, max_points, quality, min_distance, max_error, on_frame=Progress(images.shape[0])
        )
        # WanMove moves each track from its first frame's position (a track hidden there would take
        # its features from the latent's last pixel): core TRACKS keep the tracks seen in frame 0
        first = visible[0]
        return {"xy": xy, "visible": visible}, text, track_sources.to_core_tracks(xy[:, first], visible[:, first])


NODES = [PointTracker, LineLinkRenderer]
