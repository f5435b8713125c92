"""Line plots: B series drawn as B images at once, 1-px aliased lines exactly as Bresenham's algorithm
(and OpenCV) draws them, or anti-aliased lines of any width through the compositor (`draw`'s
polylines), with the area under the curve filled if asked.

The aliased lines' torch path enumerates the pixels of every segment of a chunk of images at once (dense
pieces of _PIECE steps, no per-pixel gathers); on the CPU, numba's loop (line_plots_cpu.py) or else
OpenCV draws the same pixels straight into the output batch, faster (bench/bench_series.py).
The anti-aliased lines of y values (evenly spaced x) take a dense torch path where the compositor would
take its own (_dense_lines: the same pixels, a fixed number of operations and no host wait); elsewhere
the compositor draws them (numba's loop, the CUDA kernel, or its tile binning).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np
import torch

from ..core.batching import Ragged, expand_counts
from ..core.device import cupy_usable, numba_usable, on_huge_pages, run_chunked
from .compositor import _segment_coverage, coverage
from .constants import TILE
from .primitives import filled, finite, polylines


def value_range(values: torch.Tensor, lengths: torch.Tensor, scale: str, per_image: int = 1):
    """(low, high) float [B,1] of the finite y values within each length of values [B,T]: over the
    per_image consecutive series of each image (scale "per_image"), or over all ("shared")."""
    ignored = ~((torch.arange(values.shape[1], device=values.device)[None] < lengths[:, None]) & finite(values))
    low = values.masked_fill(ignored, float("inf")).amin(1, keepdim=True)
    high = values.masked_fill(ignored, -float("inf")).amax(1, keepdim=True)
    if scale == "shared":
        low, high = low.amin(0, keepdim=True).expand_as(low), high.amax(0, keepdim=True).expand_as(high)
    elif per_image > 1:  # the series of an image share its range
        low = low.view(-1, per_image).amin(1, keepdim=True).expand(-1, per_image).reshape(-1, 1)
        high = high.view(-1, per_image).amax(1, keepdim=True).expand(-1, per_image).reshape(-1, 1)
    return low, high


def stroke_inset(mode: str, line_width: float) -> float:
    """How far in from the frame's edges render_polylines puts a plot's extremes (px): half the drawn
    stroke, so that the stroke's outer edge touches the edge, whole. Aliased lines are 1 px (0.5: pixel
    centres), anti-aliased ones line_width, at least 1 px (thinner ones are drawn 1 px wide, fainter)."""
    return 0.5 if mode == "aliased" else max(line_width, 1.0) / 2


def series_points(values: torch.Tensor, lengths: torch.Tensor, low, high, height: int, width: int, inset: float = 0.5):
    """Pixel-space points [B,T,2] of B series: y values [B,T] at evenly spaced x, or xy [B,T,2].

    y values are mapped low -> `inset` px above the bottom edge, high -> `inset` below the top one (a
    flat series: the middle row), the first point `inset` px right of the left edge and the last `inset`
    left of the right one (0.5: pixel centres; stroke_inset: a stroke's half width, so that it is not
    cut off; at most half the frame); xy are taken as pixel coordinates. Padding and non-finite values
    become NaN (gaps)."""
    batch, steps = values.shape[:2]
    valid = torch.arange(steps, device=values.device)[None] < lengths[:, None]
    if values.ndim == 3:
        return values.masked_fill(~(valid[..., None] & finite(values)), float("nan"))
    across, down = min(inset, width / 2), min(inset, height / 2)
    unit = ((values - low) / (high - low)).nan_to_num_(0.5)  # a flat series: 0 / 0
    y = (height - down) - unit * (height - 2 * down)
    along = torch.arange(steps, device=values.device)[None] * (width - 2 * across)
    x = across + along / (lengths[:, None] - 1).clamp_min(1)
    return torch.stack([x.expand(batch, -1), y], -1).masked_fill_(~(valid & finite(values))[..., None], float("nan"))


_PIECE = 8  # Bresenham steps per piece: dense [piece, pieces] operations, no per-pixel gathers


@dataclass
class _Lines:
    """Bresenham's algorithm for every segment of B polylines, up to the enumeration of its pixels.

    columns [k,S]: per segment (S = B * (T-1), image after image) the major extent (>= 1) and twice
    it, twice the minor one, the first and last step, then the values a step's pixel is computed from
    (see _line_pixels), all float32 when exact (`flat`: every point inside a frame of at most 2**23
    pixels), else int64. segment, rank int64 [P]: the pieces of _PIECE steps, each with its segment
    and its rank in it; piece_start: the first piece of each image and the number of pieces (host
    ints)."""

    columns: torch.Tensor
    segment: torch.Tensor
    rank: torch.Tensor
    piece_start: list
    flat: bool


def _lines(points: torch.Tensor, height: int, width: int, inside: bool = False) -> _Lines:
    """The segments of B polylines, points float [B,T,2] (NaN = gap, T >= 2): pixel (i, j) spans
    [i, i+1) x [j, j+1), so a segment joins the pixels that hold its ends. inside: every finite point
    is known to lie in the frame (else a host sync checks). Waits for the device once for the sizes."""
    batch, steps = points.shape[:2]
    ends = points.floor()
    usable = finite(ends[..., 0] + ends[..., 1])
    ok = usable[:, :-1] & usable[:, 1:]
    # the common case in float32 (exact: Bresenham's numerators stay below 2**24), else int64
    flat = 2 * height * width <= 2**24 and (
        inside
        or bool(((ends >= 0).all(-1) & (ends[..., 0] < width) & (ends[..., 1] < height)).logical_or_(~usable).all())
    )
    ends = ends.nan_to_num(0.0, 0.0, 0.0)  # segments with a non-finite end get no step
    if not flat:  # far points clamped: exact within 2**29 px
        ends = ends.clamp(-(2**29), 2**29).long()
    # each segment walked from its end with the larger x, as OpenCV's line iterator walks it: where a
    # step falls exactly halfway between two rows (or columns), it takes the one nearer to that end
    a, b = ends[:, :-1], ends[:, 1:]
    from_b = a[..., :1] < b[..., :1]
    a, delta = torch.where(from_b, b, a), torch.where(from_b, a - b, b - a)
    size_of = delta.abs()
    major_is_x = size_of[..., 0] >= size_of[..., 1]
    major, minor = size_of.amax(-1), size_of.amin(-1)
    unit = delta.sign()
    # x and y moved by one step along the longer axis of each segment, and by one along the shorter
    major_step = unit * torch.stack([major_is_x, ~major_is_x], -1)
    minor_step = unit - major_step
    if flat:  # all inside the frame: flat indices within the image, strides 1 along x and W along y
        first, last = torch.zeros_like(major), major
        # x + width * y of the steps (whole numbers: exact in float32)
        per_segment = [
            major_step[..., 0] + major_step[..., 1] * width,
            minor_step[..., 0] + minor_step[..., 1] * width,
            a[..., 1] * width + a[..., 0],
        ]
    else:  # segments that leave the frame: only the steps whose major coordinate is inside it
        start = torch.where(major_is_x, a[..., 0], a[..., 1])
        direction = torch.where(major_is_x, unit[..., 0], unit[..., 1])
        extent = torch.where(major_is_x, width, height)
        # steps s with start + direction * s in [0, extent); a one-pixel segment (direction 0) has step 0
        first = torch.where(direction > 0, -start, start - (extent - 1))
        last = torch.where(direction > 0, extent - 1 - start, start)
        point_inside = (start >= 0) & (start < extent)
        first = torch.where(direction == 0, (~point_inside).long(), first.clamp_min(0))
        last = torch.where(direction == 0, 0, torch.minimum(last, major))
        per_segment = [a[..., 0], a[..., 1], *major_step.unbind(-1), *minor_step.unbind(-1)]
    pieces = torch.div(last - first, _PIECE, rounding_mode="floor").long().add_(1).clamp_min_(0).mul_(ok)
    length = major.clamp_min(1)
    columns = torch.stack([length, 2 * length, 2 * minor, first, last, *per_segment]).view(5 + len(per_segment), -1)
    piece_start = [0] + np.cumsum(pieces.sum(1).tolist()).tolist()  # the one wait for the device
    segment, rank = expand_counts(pieces.view(-1), piece_start[-1])
    return _Lines(columns, segment, rank, piece_start, flat)


def _line_pixels(lines: _Lines, start: int, stop: int, height: int, width: int) -> torch.Tensor:
    """Flat indices int64 [N] (within images start .. stop-1: (b - start)*H*W + y*W + x) of the pixels
    that Bresenham's algorithm draws for their segments, image after image; where segments meet, a
    pixel is listed twice. Steps outside the frame are listed as (stop - start)*H*W, past the last
    pixel, when the lines leave the frame (not lines.flat)."""
    pieces = slice(lines.piece_start[start], lines.piece_start[stop])
    segment = lines.segment[pieces]
    step, offset, rest = _dda_steps(lines.columns, segment, lines.rank[pieces])
    per_image = lines.columns.shape[1] // (len(lines.piece_start) - 1)
    image = segment // per_image - start
    if lines.flat:
        along, across, base = rest
        local = offset.mul_(across).addcmul_(step, along).add_(base).long()
        return local.add_(image * (height * width)).T.reshape(-1)
    x0, y0, major_x, major_y, minor_x, minor_y = rest
    x = x0 + step * major_x + offset * minor_x
    y = y0 + step * major_y + offset * minor_y
    pixel = (image * height + y) * width + x
    outside = (x < 0) | (x >= width) | (y < 0) | (y >= height)
    return pixel.masked_fill_(outside, (stop - start) * height * width).T.reshape(-1)


def _bresenham(points: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Flat indices (b*H*W + y*W + x) int64 [N] of the pixels that Bresenham's algorithm draws for
    every segment of every polyline (points float [B,T,2], NaN = gap), all segments at once. Pixels
    outside the frame are left out."""
    if points.shape[1] < 2:
        return torch.zeros(0, dtype=torch.int64, device=points.device)
    lines = _lines(points, height, width)
    pixel = _line_pixels(lines, 0, points.shape[0], height, width)
    return pixel if lines.flat else pixel[pixel < points.shape[0] * height * width]


def _dda_steps(columns: torch.Tensor, segment: torch.Tensor, rank: torch.Tensor, piece: int = _PIECE):
    """Bresenham's steps of pieces of `piece` steps of segments (columns [5+k,S] as _Lines holds them:
    the major extent (>= 1), twice it, twice the minor extent, first and last step, then k values),
    the pieces given by segment and rank int64 [P], so that per pixel there are only dense [piece, P]
    operations and no gathers. Returns step [piece,P] (steps along the major axis; the last one
    repeated to fill the last piece), offset [piece,P] (the step along the minor axis that Bresenham
    picks: step * minor / major rounded half up), and the k values as [1,P] rows."""
    # one gather for every per-segment value a piece needs
    length, double_length, twice_minor, first, last, *rest = columns.index_select(1, segment)[:, None]  # [1, P]
    # [piece, P]: long rows of P make fast elementwise loops (rows of `piece` would not)
    step = torch.minimum(first + rank * piece + torch.arange(piece, device=columns.device)[:, None], last)
    if columns.dtype.is_floating_point:
        # (2 step minor + major) // (2 major), in floating point: numerator and denominator are whole
        # numbers held exactly, and a correctly rounded quotient is a whole number only if it is exact
        offset = torch.addcmul(length, step, twice_minor).div_(double_length).floor_()
    else:
        offset = torch.addcmul(length, step, twice_minor).div_(double_length, rounding_mode="floor")
    return step, offset, rest


# Most segments a tile column may pair with on the dense path of anti-aliased lines (_dense_lines): points
# down to ~0.7 px apart at 2 px wide; denser series go through the compositor's tile binning, whose work
# follows the covered area rather than candidates x frame height.
_DENSE_CANDIDATES = 16
# bytes per pair pixel of _dense_lines at its peak (measured on the CPU: 45)
_DENSE_PAIR_PIXEL_BYTES = 48


def _dense_lines_run_on(device: torch.device) -> bool:
    """Where _dense_lines draws the anti-aliased lines of y values: on GPUs without the CUDA kernel,
    where the compositor's torch path costs ~200 launches and 2 host waits a chunk, the dense path ~90
    and none. The CPU keeps the compositor (numba's loop; without numba its torch path, whose work
    follows the covered area: 2.1 s against the dense path's 6.0 s for 64 plots of 224 x 224 from
    100 values at 2 px on a 2-core EPYC)."""
    return device.type != "cpu" and not cupy_usable(device)


def _dense_candidates(steps: int, width: int, line_width: float, inset: float) -> int:
    """How many consecutive segments of evenly spaced points (series_points' x with this inset, `steps`
    of them at most) can reach the pixels of one tile column: (the tile's span of pixel centres + twice
    the reach) / the least spacing, + 2 for the segments cut at either side; 0 where there are fewer
    than 2 points, and over _DENSE_CANDIDATES (the compositor's binning is the cheaper)."""
    spacing = (width - 2 * min(inset, width / 2)) / max(steps - 1, 1)
    if steps < 2 or spacing <= 0:
        return 0
    count = int((TILE - 1 + 2 * _reach(line_width)) / spacing) + 2
    return min(count, steps - 1) if count <= _DENSE_CANDIDATES else 0


def _reach(line_width: float) -> float:
    """How far from a line's centre its anti-aliased coverage is not 0: half its width (lines thinner
    than 1 px are drawn 1 px wide, fainter), + 0.5 px of the coverage ramp, + 0.01 px for rounding."""
    return max(line_width / 2, 0.5) + 0.51


def _dense_lines(
    points: torch.Tensor,
    lengths: torch.Tensor,
    height: int,
    width: int,
    line_width: float,
    inset: float,
    candidates: int,
) -> torch.Tensor:
    """Coverage float [b,H,W] of anti-aliased polylines of width line_width (round caps and joins)
    through points [b,T,2] evenly spaced along x as series_points gives them with this inset (lengths
    [b] used; NaN: a gap), equal to coverage(polylines(...)) on the compositor's torch path: every
    TILE x TILE tile of every image paired with the `candidates` (_dense_candidates) consecutive
    segments that can reach its column, each pair's coverage from the compositor's own evaluation,
    merged by maximum. No binning, no sort, no host wait: a fixed number of operations on
    batch x tiles x candidates pairs."""
    batch, steps = points.shape[:2]
    device = points.device
    tiles_y, tiles_x = -(-height // TILE), -(-width // TILE)
    inset = min(inset, width / 2)  # as series_points takes it
    # the first segment that can reach each tile column: its far end's x is past the column's first pixel
    # centre less the reach (x_i = inset + i * spacing, spacing per image from its number of points)
    spacing = (width - 2 * inset) / (lengths[:, None] - 1).clamp_min(1)
    column = torch.arange(0, tiles_x * TILE, TILE, device=device) + (0.5 - inset - _reach(line_width))
    first = column.div(spacing).floor_().long()  # [b,tiles_x]
    segment = (first[..., None] + torch.arange(candidates, device=device)).clamp_(0, steps - 2)
    # params of every segment (ax, ay, bx, by, half width: the compositor's SEGMENT_* columns), per pair
    params = torch.cat(
        [points[:, :-1], points[:, 1:], points.new_full((), line_width / 2).expand(batch, steps - 1, 1)], -1
    )
    params = params.gather(1, segment.view(batch, -1, 1).expand(-1, -1, 5))
    params = params.view(batch, 1, tiles_x, candidates, 5).expand(-1, tiles_y, -1, -1, -1).reshape(-1, 5)
    # the centre of each tile's first pixel, per pair
    corner = torch.arange(0, max(tiles_x, tiles_y) * TILE, TILE, device=device, dtype=points.dtype) + 0.5
    origin = torch.stack(torch.broadcast_tensors(corner[None, :tiles_x], corner[:tiles_y, None]), -1)
    origin = origin[None, :, :, None].expand(batch, -1, -1, candidates, -1).reshape(-1, 2)
    pairs = _segment_coverage(params, origin, torch.arange(TILE, device=device), butt_caps=False)
    # segments with a NaN end (gaps, padding) are NaN: no coverage, as the compositor draws no pair of them
    tiles = pairs.view(batch, tiles_y, tiles_x, candidates, TILE, TILE).nan_to_num_(0.0).amax(3)
    return tiles.transpose(2, 3).reshape(batch, tiles_y * TILE, tiles_x * TILE)[:, :height, :width]


def fill_coverage(
    points: torch.Tensor, lengths: torch.Tensor, height: int, width: int, antialiased: bool, inset: float = 0.5
) -> torch.Tensor:
    """Coverage float [B,H,W] of the area under evenly spaced series (points [B,T,2] from
    series_points with this inset, lengths [B]): the rows below the curve, whose height at each pixel
    column is linearly interpolated between points and held level out to the frame's sides (beside the
    first and last points, under the stroke's ends); columns over a gap are left empty."""
    steps = points.shape[1]
    across = min(inset, width / 2)
    span = width - 2 * across  # from the first point's x to the last one's
    # the index (fractional) of the series point at each column centre: x_i = inset + i span / (n-1)
    column = (torch.arange(width, device=points.device, dtype=points.dtype) + (0.5 - across)).clamp_(0, span)
    position = column[None] * ((lengths[:, None] - 1).clamp_min(0) / (span if span > 0 else 1))
    left = position.floor().long().clamp(0, max(steps - 2, 0))
    t = position - left
    y0 = points[..., 1].gather(1, left)
    y1 = points[..., 1].gather(1, (left + 1).clamp(max=steps - 1))
    curve = torch.where(lengths[:, None] > 1, y0 + (y1 - y0) * t, float("nan"))  # [B,W]; NaN over gaps
    row = torch.arange(height, device=points.device, dtype=points.dtype)[None, :, None]
    if antialiased:
        coverage = (row + 1 - curve[:, None, :]).clamp(0, 1)
    else:
        coverage = (row + 0.5 >= curve[:, None, :]).to(points.dtype)
    return torch.nan_to_num(coverage, nan=0.0)


def render_polylines(
    values,
    height: int,
    width: int,
    lengths: torch.Tensor | None = None,
    mode: str = "aliased",
    line_width: float = 1.0,
    scale: str = "per_image",
    color=(1.0, 1.0, 1.0, 1.0),
    background=(0.0, 0.0, 0.0),
    fill_color=None,
    channels: int = 1,
    dtype: torch.dtype = torch.float32,
    device=None,
    on_progress=None,
) -> torch.Tensor:
    """B line plots at once: [B,H,W] (channels 1: coverage times the line's opacity) or [B,H,W,3].

    values: y float [B,T] at evenly spaced x (the first at the left pixel centre, the last at the
    right one), or pixel xy float [B,T,2]; or a Ragged of either. lengths int [B] for ragged series
    (points past a length are ignored; default all T). NaN or infinite values leave a gap (the
    segments to and from them are not drawn); a series of fewer than 2 points gives a blank image.
    mode: "aliased" draws 1-px lines exactly as Bresenham's algorithm would (8-connected, one pixel
    per step along the longer axis, pixel (i, j) holds the points in [i, i+1) x [j, j+1));
    "antialiased" draws `line_width` px lines with round joins and caps through `draw`.
    scale: y values min-max scaled "per_image" or "shared" by all, the lowest to the bottom, the
    highest to the top, the first and last to the sides, each inset by half the stroke (stroke_inset:
    the stroke's outer edge touches the frame's edge, whole; aliased lines: pixel centres); a flat
    series: the middle row.
    color RGBA, background RGB (channels 3), fill_color RGBA or None (y values only): the area
    under the curve, drawn under the line.
    dtype: a floating type (values 0..1) or torch.uint8 (0..255, as image pipelines store them).
    Rendered on `device` (default: that of values) in memory-sized chunks of images, all segments
    of a chunk at once; the result is on the device of `values`.
    """
    if isinstance(values, Ragged):
        values, lengths = values.values, values.lengths
    if mode not in ("aliased", "antialiased"):
        raise ValueError(f"mode: expected 'aliased' or 'antialiased', got {mode!r}")
    if scale not in ("per_image", "shared"):
        raise ValueError(f"scale: expected 'per_image' or 'shared', got {scale!r}")
    if values.ndim not in (2, 3) or (values.ndim == 3 and values.shape[2] != 2):
        raise ValueError(f"values: expected y values [B,T] or xy points [B,T,2], got shape {tuple(values.shape)}")
    if fill_color is not None and values.ndim == 3:
        raise ValueError("fill_color: filling under the curve needs y values, not xy points")
    if channels not in (1, 3):
        raise ValueError(f"channels: expected 1 or 3, got {channels!r}")
    if not (dtype.is_floating_point or dtype == torch.uint8):
        raise ValueError(f"dtype: expected a floating type or torch.uint8, got {dtype}")
    home = values.device
    device = torch.device(device) if device is not None else home
    batch, steps = values.shape[:2]
    lengths = torch.full((batch,), steps, dtype=torch.long) if lengths is None else lengths.long().clamp(0, steps)
    out = _output((batch, height, width) + ((3,) if channels == 3 else ()), dtype, home)
    # CPU chunks of 4 M pixels keep the per-pixel temporaries in a 1 MB L2 cache: measured 2x faster
    # per image than 16 M or 64 M on a 2-core EPYC
    limit = max(1, ((4 << 20) if device.type == "cpu" else (256 << 20)) // (height * width))
    if mode == "aliased" and channels == 1 and fill_color is None:
        _plot_lines(out, values, lengths, scale, color, device, limit, on_progress)
        return out
    low, high = value_range(values.float(), lengths.to(home), scale) if values.ndim == 2 else (None, None)
    inset = stroke_inset(mode, line_width)
    # y values (evenly spaced x from series_points) on the dense path where it runs, else the compositor
    candidates = 0
    if mode == "antialiased" and values.ndim == 2 and _dense_lines_run_on(device):
        candidates = _dense_candidates(steps, width, line_width, inset)
    tiles = -(-height // TILE) * -(-width // TILE)

    def plot(start, stop, dev):
        chunk = slice(start, stop)
        on = lambda t: None if t is None else t[chunk].to(dev)  # noqa: E731
        points = series_points(on(values).float(), on(lengths), on(low), on(high), height, width, inset)
        target = out[chunk] if dev == home else torch.empty(out[chunk].shape, dtype=dtype, device=dev)
        _plot(target, points, on(lengths), mode, line_width, color, background, fill_color, inset, candidates)
        if dev != home:
            out[chunk] = target.to(home)

    pair_bytes = candidates * tiles * TILE * TILE * _DENSE_PAIR_PIXEL_BYTES
    run_chunked(plot, batch, height * width * 4 * 12 + pair_bytes, device, on_progress, limit=limit)
    return out


def render_polylines_packed(
    values,
    height: int,
    width: int,
    lengths: torch.Tensor | None = None,
    scale: str = "per_image",
    device=None,
    on_progress=None,
) -> torch.Tensor:
    """render_polylines' 1-px aliased lines as bits: uint8 [B,H,ceil(W/8)], 8 pixels a byte, the leftmost
    the high bit (np.packbits' order), set where a line has a pixel; 1/8 of the bytes to keep, write
    or move off a GPU (1-bit PNG scanlines, masks). values, lengths, scale, device, on_progress: as
    render_polylines'. On the CPU numba's loop sets the bits straight into the output (no [B,H,W]
    image to fill, then read: 3x faster a 224x224 plot); elsewhere the lines are drawn as uint8 on
    `device` and packed there. The result is on the device of values."""
    if isinstance(values, Ragged):
        values, lengths = values.values, values.lengths
    home = values.device
    device = torch.device(device) if device is not None else home
    if device.type == "cpu" and home.type == "cpu" and values.ndim == 2 and scale in ("per_image", "shared"):
        batch, steps = values.shape
        counts = torch.full((batch,), steps, dtype=torch.long) if lengths is None else lengths.long().clamp(0, steps)
        points = _series_points_cpu(values, counts, scale, height, width)  # None where numba does not run
        if points is not None:
            from . import line_plots_cpu

            out = torch.empty((batch, height, -(-width // 8)), dtype=torch.uint8)
            if line_plots_cpu.polylines_packed(out.numpy(), points.numpy(), counts.numpy(), width, on_progress):
                return out
    lengths = None if lengths is None else lengths.to(device)
    images = render_polylines(
        values.to(device), height, width, lengths, scale=scale, dtype=torch.uint8, on_progress=on_progress
    )
    return _pack_bits(images).to(home)


def _pack_bits(images: torch.Tensor) -> torch.Tensor:
    """uint8 [B,H,W] as bits uint8 [B,H,ceil(W/8)]: a set bit for each pixel not 0, the leftmost the high bit."""
    batch, height, width = images.shape
    bits = torch.nn.functional.pad((images != 0).to(torch.uint8), (0, -width % 8))
    weights = torch.tensor([128, 64, 32, 16, 8, 4, 2, 1], dtype=torch.uint8, device=images.device)
    return (bits.view(batch, height, -1, 8) * weights).sum(-1, dtype=torch.uint8)


def _output(shape: tuple, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """The output batch of render_polylines, uninitialised: every path writes every pixel (the CPU
    loops clear each image just before drawing it, while it is in cache); on the CPU on huge pages."""
    out = torch.empty(shape, dtype=dtype, device=device)
    return on_huge_pages(out) if device.type == "cpu" else out


# -- aliased lines on the CPU: numba's Bresenham loop (line_plots_cpu.py) where numba is installed, else
# OpenCV. cv2.polylines draws 1-px lines with Bresenham's algorithm, walking each segment from its end with
# the larger x: the torch path's pixels, which follows the same convention (tested equal), and the numba
# loop's. Either, straight into the output batch, beats the torch path's pixel enumeration on the CPU
# (5000 plots of 224x224 from 100-point series: bench/bench_series.py); numba's loop also draws images in
# parallel without a Python call per image. OpenCV draws on one thread.

# the dtypes numpy and OpenCV share
NUMPY_DTYPES = {torch.uint8: np.uint8, torch.float16: np.float16, torch.float32: np.float32}


def _series_points_cpu(values: torch.Tensor, lengths: torch.Tensor, scale: str, height: int, width: int):
    """series_points of y values [B,T] over value_range(values, lengths, scale), the same points [B,T,2]
    from numba's loops in one pass each (the torch ops take 7 ms of 5000 series of 100 values here, the
    loops 0.5 ms); None where those loops are not used."""
    if not numba_usable(values.device):
        return None
    from . import line_plots_cpu  # numba: imported on first use (slow to import)

    points = line_plots_cpu.series_points(
        values.float().contiguous().numpy(), lengths.long().contiguous().numpy(), scale, height, width
    )
    return None if points is None else torch.from_numpy(points)


def _draw_cpu(
    out: torch.Tensor, points: torch.Tensor, lengths: torch.Tensor, value: float, on_progress=None, chunk: int = 1024
) -> bool:
    """1-px aliased polylines into out [B,H,W] (overwritten), points float [B,T,2] (pixel xy),
    lengths int [B]: pixel (i, j) holds the points in [i, i+1) x [j, j+1); a series of fewer than 2
    points leaves its image blank. on_progress(done, total) after every `chunk` images (interrupt
    checks). Draws with numba's loop (uint8 or float32 out, numba installed; a point not finite is a
    gap, as on the torch path), else with OpenCV. Returns False, drawing nothing, where these would
    not give the torch path's pixels: out or points not on the CPU, out of a dtype OpenCV does not draw
    into, a finite point within its series' length outside the frame (OpenCV clips a segment that
    leaves the frame before walking it, which can move its pixels), or for OpenCV one not finite."""
    if out.device.type != "cpu" or out.dtype not in NUMPY_DTYPES or points.device.type != "cpu":
        return False
    if numba_usable(out.device) and out.dtype in (torch.uint8, torch.float32):
        from . import line_plots_cpu

        return bool(
            line_plots_cpu.polylines(
                out.numpy(),
                points.float().contiguous().numpy(),
                lengths.long().contiguous().numpy(),
                value,
                on_progress,
                chunk,
            )
        )
    batch, steps = points.shape[:2]
    height, width = out.shape[1:3]
    xy, counts = points.numpy(), lengths.numpy()
    valid = np.arange(steps)[None] < counts[:, None]
    x, y = xy[..., 0][valid], xy[..., 1][valid]
    with np.errstate(invalid="ignore"):  # NaN compares False: not usable
        if not ((x >= 0) & (x < width) & (y >= 0) & (y < height)).all():
            return False
    ends = np.floor(np.nan_to_num(xy)).astype(np.int32)
    images = out.numpy()
    for start in range(0, batch, chunk):
        stop = min(batch, start + chunk)
        for index in range(start, stop):
            images[index] = 0
            if counts[index] > 1:
                cv2.polylines(images[index], [ends[index, : counts[index]]], False, value, 1, cv2.LINE_8)
        if on_progress is not None:
            on_progress(stop, batch)
    return True


def _plot_lines(out, values, lengths, scale, color, device, limit, on_progress) -> None:
    """The fast path of render_polylines: 1-px aliased lines into out [B,H,W] (float 0..1 or uint8),
    pixels written once each, straight into the output. On the CPU numba's loop or OpenCV draws them
    where either gives the same pixels (_draw_cpu); else the segments of the whole batch are set
    up at once (one transfer, one host sync for their sizes) and chunks of images enumerate their
    pixels."""
    batch, height, width = out.shape
    home = out.device
    levels = 1.0 if out.dtype.is_floating_point else 255.0
    value = float(color[3]) * levels
    value = value if levels == 1 else round(value)
    on = lambda t: None if t is None else t.to(device)  # noqa: E731
    points = None
    if device.type == "cpu" and values.ndim == 2:  # series_points: None unless numba runs where values are
        points = _series_points_cpu(values, lengths, scale, height, width)
    if points is None:
        low, high = value_range(values.float(), lengths.to(home), scale) if values.ndim == 2 else (None, None)
        points = series_points(on(values).float(), on(lengths), on(low), on(high), height, width)
    if device.type == "cpu" and _draw_cpu(out, points, lengths, value, on_progress):
        return
    lines = _lines(points, height, width, inside=values.ndim == 2) if values.shape[1] > 1 else None

    def plot(start, stop, dev):
        target = out[start:stop] if dev == home else torch.empty(out[start:stop].shape, dtype=out.dtype, device=dev)
        target.zero_()
        if lines is not None:
            pixels = _line_pixels(lines, start, stop, height, width).to(dev)
            if lines.flat:
                target.view(-1).index_fill_(0, pixels, value)
            else:  # steps outside the frame land one past its last pixel
                canvas = torch.zeros(target.numel() + 1, dtype=out.dtype, device=dev).index_fill_(0, pixels, value)
                target.copy_(canvas[:-1].view_as(target))
        if dev != home:
            out[start:stop] = target.to(home)

    run_chunked(plot, batch, height * width * 4 * 12, device, on_progress, limit=limit)


def _plot(out, points, lengths, mode, line_width, color, background, fill_color, inset=0.5, candidates=0):
    """Draw b plots of points [b,T,2] into out [b,H,W] or [b,H,W,3] (float 0..1 or uint8 0..255).
    color, background and fill_color: numbers, used as scalars or filled in on the device (no upload).
    candidates > 0: anti-aliased lines through points evenly spaced along x (series_points' with this
    inset) on the dense path (_dense_lines, that many segments per tile column), else the compositor."""
    batch, height, width = out.shape[:3]
    device = points.device
    scale = 1.0 if out.dtype.is_floating_point else 255.0
    if mode == "aliased":
        line = torch.zeros(batch * height * width, device=device)
        if points.shape[1] > 1:
            line.index_fill_(0, _bresenham(points, height, width), 1.0)
        line = line.view(batch, height, width)
    else:
        if candidates:
            line = _dense_lines(points, lengths, height, width, line_width, inset, candidates)
        else:
            prims = polylines(torch.arange(batch, device=device), points, lengths, line_width, (1.0, 1.0, 1.0, 1.0))
            line = coverage(prims, batch, height, width, device=device)
    line = line.mul_(color[3])  # a new tensor either way: scaled in place
    under = None
    if fill_color is not None:
        under = fill_coverage(points, lengths, height, width, mode == "antialiased", inset) * fill_color[3]
    if out.ndim == 3:  # source-over of the line's coverage on the fill's
        result = line if under is None else line + under * (1 - line)
    else:
        rgb = filled([float(v) for v in (*background[:3], *color[:3], *(fill_color or ())[:3])], device)
        result = rgb[:3].expand(batch, height, width, 3)
        if under is not None:
            result = torch.lerp(result, rgb[6:9].expand_as(result), under[..., None])
        result = torch.lerp(result, rgb[3:6].expand_as(result), line[..., None])
    out.copy_(result if scale == 1 else (result * scale).round_())
