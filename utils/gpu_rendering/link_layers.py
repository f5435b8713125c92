"""The layers of a link overlay (Line Link Renderer): the links of every frame as styled strokes (with a
glow under them), the points' trails, markers (with a glow) and text, as one list of primitives and the
atlas of its text, drawn by `draw` in one call.

Links come as tensors (from a graph of gpu_graph): frame int64 [E], pairs int64 [E,2] (the points
linked), start and end float [E,2] (the ends drawn: the points, or a Voronoi wall's ends), all on the
render device; the points as xy float [T,N,2] (on the render device), visible bool [T,N] and their
labels (inputs.tracks.Labels).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

from ..gpu_curves import alternating_sign, bezier_polylines, control_polygon_length
from ..inputs.tracks import Labels
from . import link_styles as styles
from . import primitives as R
from .labels import DEFAULT_FONT, atlas_arrays

POINT_LABELS = ("none", "id", "label")
# px of a link per colour step when coloured from its points: a step is a primitive, and the draw's cost
# follows their count (4 px steps drew in 2.1x the plain links' time, 8 px in 1.5x: bench_plexus.py);
# a plexus' links are thin, where steps of 1/13 of the colours' difference on a 100 px link do not show
POINT_GRADIENT_STEP = 8.0
# "distance" colouring: near links bright, far links dark (plasma-like stops)
DISTANCE_STOPS = torch.tensor([[0.94, 0.98, 0.13], [0.97, 0.58, 0.25], [0.80, 0.28, 0.47], [0.49, 0.01, 0.66]])


@dataclass(frozen=True)
class LinkStyle:
    """How links and points are drawn. rgb: the links' and points' colour, None: links coloured by
    length along DISTANCE_STOPS (points white); end_rgb: the colour at each link's far end (None: one
    colour); max_distance: the length that scales colours and widths by length (0: the longest link);
    curve: straight, bezier or cubic; line_style one of link_styles.LINE_STYLES, width_by_length one of
    WIDTH_BY_LENGTH, point_style one of POINT_STYLES, point_labels one of POINT_LABELS; text_rgb: the
    point text's colour (None: the points'). point_palette: RGB triples that colour each point by its
    track id (id mod their count), and each link from its first point's colour to its second's (rgb
    and end_rgb then unused). length_falloff (0..1, 0: off): links fade (falloff_on one of
    link_styles.FALLOFF_TARGETS) from full at (1 - length_falloff) x max_distance to 0 at it (see
    link_styles.length_falloff)."""

    rgb: tuple | None = (1.0, 1.0, 1.0)
    opacity: float = 0.8
    width: float = 1.5
    curve: str = "straight"
    curvature: float = 0.2
    max_distance: float = 0.0
    line_style: str = "solid"
    dash_length: float = 8.0
    gap_length: float = 6.0
    dash_phase: float = 0.0
    dash_speed: float = 0.0
    end_rgb: tuple | None = None
    glow: float = 0.0
    glow_scale: float = 4.0
    width_by_length: str = "none"
    point_radius: float = 3.0
    point_style: str = "dot"
    marker_glow: bool = False
    trail_frames: int = 0
    trail_smooth: bool = False
    point_labels: str = "none"
    text_size: int = 12
    text_rgb: tuple | None = None
    point_palette: tuple | None = None
    length_falloff: float = 0.0
    falloff_on: str = "opacity"

    @property
    def point_rgb(self) -> tuple:
        return (1.0, 1.0, 1.0) if self.rgb is None else self.rgb


def link_layers(
    xy: torch.Tensor,
    visible: torch.Tensor,
    labels: Labels,
    frame: torch.Tensor,
    pairs: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    style: LinkStyle,
    frame_size: tuple[int, int],
    length_bound: float | None = None,
    first_frame: int = 0,
) -> tuple[R.Primitives, torch.Tensor | None]:
    """The overlay's primitives, bottom first: the links' glow, the trails, the links, the markers' glow,
    the markers, the point text (kept inside frames of frame_size, height and width); and the atlas of the
    text (None without text). Shapes in the module's docstring; length_bound: see link_strokes. first_frame:
    the batch's number of xy's first frame, where the frames are a part of a longer batch (dashes march
    with the batch's frames)."""
    glow, links = link_strokes(frame, pairs, start, end, style, length_bound, first_frame)
    layers = [glow] if glow is not None else []
    if style.trail_frames > 0 and xy.shape[0] > 1:
        layers.append(_trails(xy, visible.to(xy.device), style))
    layers.append(links)
    points, atlas = point_layers(xy, visible, labels, style, frame_size)
    return R.concat(*layers, *points), atlas


def link_strokes(
    frame: torch.Tensor,
    pairs: torch.Tensor,
    start: torch.Tensor,
    end: torch.Tensor,
    style: LinkStyle,
    length_bound: float | None = None,
    first_frame: int = 0,
) -> tuple[R.Primitives | None, R.Primitives]:
    """The links as strokes (E links, shapes in the module's docstring): (their glow, glow_scale times
    as wide at glow times their opacity, or None; the links). length_bound: a host bound on the links'
    lengths, which sizes the curves with no host sync (None: they read their own). first_frame: as
    link_layers'."""
    dashes = style.line_style != "solid"
    if style.falloff_on not in styles.FALLOFF_TARGETS:
        raise ValueError(f"falloff_on: expected one of {', '.join(styles.FALLOFF_TARGETS)}, got {style.falloff_on!r}")
    length, longest, scale = _lengths(start, end, style)
    colours, end_colours = _colours(pairs, length, scale, style, start.device)
    widths = (
        style.width if length is None else styles.width_by_length(length, scale, style.width, style.width_by_length)
    )
    if style.length_falloff > 0:
        fade = styles.length_falloff(length, scale, style.length_falloff)
        if style.falloff_on != "width":
            colours, end_colours = _faded(colours, fade[:, None]), _faded(end_colours, fade[:, None])
        if style.falloff_on != "opacity":
            widths = widths * fade
    plain = style.curve == "straight" and not dashes and end_colours is None  # one segment per link
    if style.curve != "straight":
        points, lengths = bezier_polylines(
            start,
            end,
            style.curvature,
            alternating_sign(pairs[:, 0], pairs[:, 1]),
            cubic=style.curve == "cubic",
            max_length=length_bound,
        )
    elif not plain:
        points, lengths = torch.stack([start, end], 1), torch.full_like(frame, 2)
    if dashes:
        phase = style.dash_phase + style.dash_speed * (frame + first_frame if first_frame else frame).float()
    else:
        phase = 0.0
    max_length = longest * control_polygon_length(style.curve, style.curvature)

    def strokes(stroke_width, alpha_scale):
        """The links, stroke_width wide, at alpha_scale times their opacity (dots spaced as the line's)."""
        if plain:
            return R.segments(frame, start, end, stroke_width, _faded(colours, alpha_scale))
        return styles.styled_polylines(
            frame,
            points,
            lengths,
            stroke_width,
            _faded(colours, alpha_scale),
            _faded(end_colours, alpha_scale),
            style.line_style,
            style.dash_length,
            style.gap_length,
            phase,
            max_length,
            pattern_width=widths,
            gradient_step=POINT_GRADIENT_STEP if style.point_palette is not None else styles.GRADIENT_STEP,
        )

    glow = strokes(widths * style.glow_scale, style.glow) if style.glow > 0 else None
    return glow, strokes(widths, 1)


def _lengths(start: torch.Tensor, end: torch.Tensor, style: LinkStyle):
    """The links' lengths float [E] (None when no colour, width or dash pattern depends on them), the
    longest (one sync, only where needed: the scale without max_distance, the bound on dashes; else 0)
    and the length that scales colours and widths."""
    dashes = style.line_style != "solid"
    by_length = style.rgb is None or style.width_by_length != "none" or dashes or style.length_falloff > 0
    length = (end - start).norm(dim=-1) if by_length else None
    longest = 0.0
    if length is not None and length.numel() and (dashes or not style.max_distance):
        longest = float(length.amax())
    scale = (style.max_distance or longest) if length is not None and length.numel() else 1.0
    return length, longest, scale


def _colours(pairs: torch.Tensor, length: torch.Tensor | None, scale: float, style: LinkStyle, device):
    """RGBA float [E,4] of the E links of points pairs int64 [E,2] (by length along DISTANCE_STOPS when
    style.rgb is None; their first point's with a point_palette), and of their far ends (None: one
    colour), on the device."""
    count = len(pairs)
    if style.point_palette is not None:
        return _point_colours(pairs[:, 0], style, device), _point_colours(pairs[:, 1], style, device)
    if style.rgb is None:
        rgb = _gradient(length / max(scale, 1e-6))
        colours = torch.cat([rgb, rgb.new_full((count, 1), style.opacity)], 1)
    else:  # filled in on the device: a tensor of host values is an upload
        colours = _ink((*style.rgb, style.opacity), torch.device(device)).expand(count, 4)
    end_colours = None
    if style.end_rgb is not None:
        end_colours = _ink((*style.end_rgb, style.opacity), torch.device(device)).expand_as(colours)
    return colours, end_colours


@functools.lru_cache(maxsize=16)
def _ink(rgba: tuple, device: torch.device) -> torch.Tensor:
    """One RGBA colour float [4] filled in on the device (no upload): once a colour and device, for the
    links, markers and text alike (the same colour by default); never written to."""
    return R.filled(list(rgba), device)


@functools.lru_cache(maxsize=8)
def _palette_table(palette: tuple, device: torch.device) -> torch.Tensor:
    """RGBA float [K,4] of a palette of K RGB triples on the device: one upload a palette and device (a
    value filled in per colour would be 4 K operations each time); never written to."""
    return torch.tensor([(*rgb, 1.0) for rgb in palette], dtype=torch.float32).to(device)


def _point_colours(point: torch.Tensor, style: LinkStyle, device, opacity: float | None = None) -> torch.Tensor:
    """RGBA float [P,4] of the points point int64 [P]: their track's colour of style.point_palette (id
    mod its size), at opacity (default style.opacity)."""
    table = _palette_table(style.point_palette, torch.device(device))
    colour = table[point.to(device) % len(table)]
    colour[:, 3] = style.opacity if opacity is None else opacity
    return colour


def point_layers(
    xy: torch.Tensor, visible: torch.Tensor, labels: Labels, style: LinkStyle, frame_size: tuple[int, int]
) -> tuple[list[R.Primitives], torch.Tensor | None]:
    """The visible points' layers, bottom first (markers' glow, markers, text inside frames of frame_size,
    height and width), and the text's atlas (None without text). visible and labels are the parsed
    tracks' host data: which points show, and which text, is decided on the host, and the markers' and
    texts' places go to the device in one upload."""
    layers, atlas = [], None
    if style.point_radius <= 0 and style.point_labels == "none":
        return layers, atlas
    at, index = np.nonzero(visible.cpu().numpy())
    device, rgb, opacity = xy.device, style.point_rgb, style.opacity
    rows = [np.stack([at, index, *np.zeros((6, at.size), np.int64)], 1)] if style.point_radius > 0 else []
    if style.point_labels != "none":
        texts = point_texts(xy.shape[1], at, index, labels, style.point_labels, style.text_size)
        if texts is not None:
            atlas, text_rows = torch.from_numpy(texts[0]), texts[1]
            # the room a text has in the frame: the frame's size less its own, worked out on the host
            room = np.maximum(np.array(frame_size[::-1]) - text_rows[:, 4:6], 0)
            rows.append(np.concatenate([text_rows, room], 1))
    if not sum(len(part) for part in rows):
        return [], None
    # frame, point, text rect and room [P,8]: one upload
    table = torch.from_numpy(np.concatenate(rows)).to(device)
    by_track = style.point_palette is not None

    def colour(point, alpha):  # the points' colour: one, or their track's
        return _point_colours(point, style, device, alpha) if by_track else _ink((*rgb, alpha), torch.device(device))

    if style.point_radius > 0:
        frame, point = table[: at.size, 0], table[: at.size, 1]
        centre = xy[frame, point]
        if style.marker_glow and style.glow > 0:
            glow = colour(point, opacity * style.glow)
            layers.append(R.discs(frame, centre, style.point_radius * style.glow_scale, glow))
        layers.append(
            styles.markers(frame, centre, style.point_radius, colour(point, opacity), style.point_style, style.width)
        )
        table = table[at.size :]
    if atlas is not None:
        frame, point, rect = table[:, 0], table[:, 1], table[:, 2:].float()  # the rects and room, in one op
        # a text for every marker (ids): the same points
        same = style.point_radius > 0 and np.array_equal(text_rows[:, :2], rows[0][:, :2])
        at_point = centre if same else xy[frame, point]
        origin = _text_origin(at_point, rect[:, 2:4], rect[:, 4:], style.point_radius + 2)
        rect = rect[:, :4]
        ink = (*style.text_rgb, opacity) if style.text_rgb is not None else colour(point, opacity)
        layers.append(R.sprites(frame, origin, rect, ink))
    return layers, atlas


def _gradient(t: torch.Tensor) -> torch.Tensor:
    """float [E] in 0..1 -> RGB [E,3] along DISTANCE_STOPS."""
    stops = DISTANCE_STOPS.to(t.device)
    position = t.clamp(0, 1) * (len(stops) - 1)
    low = position.floor().long().clamp(max=len(stops) - 2)
    frac = (position - low)[:, None]
    return stops[low] * (1 - frac) + stops[low + 1] * frac


def _faded(colours: torch.Tensor | None, alpha_scale) -> torch.Tensor | None:
    """RGBA colours [E,4] with their opacity scaled (alpha_scale a number or float [E,1])."""
    if colours is None or (not isinstance(alpha_scale, torch.Tensor) and alpha_scale == 1):
        return colours
    return torch.cat([colours[:, :3], colours[:, 3:] * alpha_scale], 1)


def _trails(xy, visible, style: LinkStyle) -> R.Primitives:
    """Each visible point's path over its last style.trail_frames frames (xy [T,N,2], visible [T,N]),
    fading from the points' colour and opacity at the point to nothing at the oldest position."""
    frame, points, lengths = styles.trail_paths(xy, visible, style.trail_frames)
    if style.trail_smooth:
        points, lengths = styles.catmull_rom(points, lengths)
    if style.point_palette is not None:  # trail_paths lists the points of each frame in order
        head = _point_colours(torch.arange(len(frame), device=xy.device) % xy.shape[1], style, xy.device)
    else:
        head = _ink((*style.point_rgb, style.opacity), xy.device).expand(len(frame), 4)
    return styles.styled_polylines(frame, points, lengths, style.width, head, _faded(head, 0.0))


def point_texts(n: int, at: np.ndarray, index: np.ndarray, labels: Labels, mode: str, size: int):
    """Text beside the visible points, frame at and point index int64 [P] (host arrays) of N = n points:
    each point's id, or with mode "label" its label (its id where it has none; an empty label: no
    text), one sprite a point. Returns the atlas float32 [Ha,Wa] of the distinct strings drawn and per
    sprite its frame, point and rect in the atlas (int64 [Q,6], host arrays), or None when there is no
    text."""
    strings = labels.names + [str(i) for i in range(n)]  # the labels, then the ids
    string = len(labels.names) + index
    if mode == "label":
        named = labels.index.numpy()[at, index]
        string = np.where(named >= 0, named, string)
    keep = np.array([bool(text) for text in strings], dtype=bool)[string]
    if not keep.any():
        return None
    used, string = np.unique(string[keep], return_inverse=True)
    atlas, rects = atlas_arrays([strings[i] for i in used], size, DEFAULT_FONT)
    return atlas, np.concatenate([at[keep, None], index[keep, None], rects[string]], 1)


def _text_origin(at_point: torch.Tensor, size: torch.Tensor, room: torch.Tensor, offset: float):
    """Top left corners float [P,2] of texts of size `size` float [P,2] beside points at_point [P,2]: the
    ink's lower left corner `offset` px right of and above the point; to its left where the frame has no
    room on the right, below it where there is none above, then moved inside the frame (at most room
    float [P,2]: the frame's size less the text's, >= 0), as box labels are."""
    after, before = at_point + offset, at_point - offset
    low = before - size  # left of the point, above it
    # right of the point where the frame has room (x + offset <= frame width - text width: room, or 0
    # where the text is wider than the frame, which then lands at 0 either way), else to its left; above
    # where there is room (y - offset - height >= 0), else below: both axes in each op
    far = torch.stack([after[:, 0] <= room[:, 0], low[:, 1] < 0], 1)
    return torch.where(far, after, low).clamp_min(0).minimum(room)
