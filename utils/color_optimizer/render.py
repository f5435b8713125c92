"""PrimitiveMesh's shapes drawn anti-aliased at any scale (`render`, frame by frame if asked) and as SVG
(`svg`): the torch path, or one CUDA kernel (render_cuda.py) where CuPy kernels run.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from ..core.batching import expand_counts
from ..core.device import MEMORY_FRACTION, cupy_usable, free_memory_bytes
from .shapes import (
    _ELLIPTIC,
    _STROKE,
    _VERTICES,
    CIRCLE,
    ELLIPSE,
    KINDS,
    LINE,
    N_PARAMS,
    PARAM_COUNTS,
    POLYGON,
    POLYLINE,
    RECTANGLE,
    ROTATED_ELLIPSE,
    ROTATED_RECTANGLE,
    STROKES,
    SUBROWS,
    TRIANGLE,
    Approximation,
    _checked_result,
    _ellipse_crossings,
    _ellipse_form,
    _family_of,
    _paint,
    _polygon4,
    _polygon_crossings,
    _rotation,
    _stroke_outline,
    render_curve_steps,
)


def scale_params(kind, params, factor: float):
    """Shape parameters [..,8] in coordinates `factor` times larger (angles unchanged)."""
    keep_angle = ((kind == ROTATED_RECTANGLE) | (kind == ROTATED_ELLIPSE))[..., None] & (
        torch.arange(N_PARAMS, device=params.device) == 4
    )
    return torch.where(keep_angle, params, params * factor)


_ALL_KINDS = tuple(range(len(KINDS)))


class _Outlines(NamedTuple):
    """S shapes (the B*N of a result, image after image) at the output scale, in the forms whose
    crossings with the sample rows `render` needs: 4-gon vertices [S,4,2] (triangles with their last
    vertex repeated, rectangles, 4-gons), stroke outlines [S,2*(steps+1),2], ellipse forms [S,5]
    (cx, cy, A, B, C), the family [S], and the sample rows (SUBROWS per pixel row) whose y lies in
    the shape's y extent: the first int64 [S] and the count int64 [S] (0 for shapes not drawn)."""

    polygon: torch.Tensor
    outline: torch.Tensor
    ellipse: torch.Tensor
    family: torch.Tensor
    first: torch.Tensor
    count: torch.Tensor


def _outlines(kind, params, alpha, height: int, width: int, kinds=_ALL_KINDS) -> _Outlines:
    """`_Outlines` of shapes kind [S] (among `kinds`), params [S,8] (output pixels) and opacities alpha
    [S], on a height x width canvas: every form of every shape (the 4-gons and strokes of `kinds`),
    made on the device (no host read)."""
    turn = _rotation(params[:, 4])  # rotated rectangles' and ellipses'
    polygon = _polygon4(kind, params, tuple(k for k in _VERTICES if k in kinds) or (TRIANGLE,), turn)
    strokes = tuple(k for k in STROKES if k in kinds) or STROKES[:1]
    outline = _stroke_outline(params, render_curve_steps(height, width), kind, strokes)
    cx, cy, a, b, c, half = _ellipse_form(kind, params, turn)
    family = _family_of(kind.clamp(0, len(KINDS) - 1))  # codes out of range are refused after the read
    stroke, elliptic = family == _STROKE, family == _ELLIPTIC
    top = torch.where(elliptic, cy - half, torch.where(stroke, outline[..., 1].amin(1), polygon[..., 1].amin(1)))
    bottom = torch.where(elliptic, cy + half, torch.where(stroke, outline[..., 1].amax(1), polygon[..., 1].amax(1)))
    samples = height * SUBROWS
    first = torch.ceil(top * SUBROWS - 0.5).clamp(0, samples).long()
    last = torch.floor(bottom * SUBROWS - 0.5).clamp(-1, samples - 1).long()
    count = (last - first + 1).clamp_min(0) * (alpha > 0)
    return _Outlines(polygon, outline, torch.stack([cx, cy, a, b, c], 1), family, first, count)


def _row_crossings(shapes: _Outlines, owner, y, families: set):
    """Crossings of sample rows y [Q] with their shapes (owner [Q]: an index into `shapes`, whose
    families among `families`): x [Q,V] and the change of inside-ness s int8 [Q,V] at each, 0 for
    padding. Polygons (4-gons, stroke outlines) by nonzero winding over their sorted crossings (a
    convex polygon's row: +1 at its leftmost crossing, -1 at its rightmost), then an ellipse's two
    roots, +1 and -1 where the row meets it."""
    xs, ss = [], []
    if families - {_ELLIPTIC}:
        if _STROKE not in families:
            vertices = shapes.polygon
        elif families <= {_STROKE, _ELLIPTIC}:
            vertices = shapes.outline
        else:  # 4-gons padded to the outline's length by repeating their last vertex: null edges
            padded = torch.cat([shapes.polygon, shapes.polygon[:, 3:].expand(-1, shapes.outline.shape[1] - 4, 2)], 1)
            vertices = torch.where((shapes.family == _STROKE)[:, None, None], shapes.outline, padded)
        if _ELLIPTIC in families:  # an ellipse's edges cross no row
            vertices = vertices.masked_fill((shapes.family == _ELLIPTIC)[:, None, None], float("nan"))
        x, s = _polygon_crossings(vertices.index_select(0, owner), y)
        xs.append(x)
        ss.append(s)
    if _ELLIPTIC in families:
        x, s = _ellipse_crossings(shapes.ellipse.index_select(0, owner).unbind(1), y)
        xs.append(x)
        ss.append(s if families == {_ELLIPTIC} else s * (shapes.family.index_select(0, owner) == _ELLIPTIC)[:, None])
    return (xs[0], ss[0]) if len(xs) == 1 else (torch.cat(xs, 1), torch.cat(ss, 1))


def _layer_coverage(
    shapes: _Outlines, layer, start, count, samples: int, families: set, layers: int, band: tuple[int, int], width: int
):
    """Anti-aliased coverage float32 [L,R,W] of shapes on `layers` layers (layer [S]: each shape's, -1
    for none) in the pixel rows band = (first, R), from the sample rows start .. start+count-1 [S] of
    each shape (within the band; `samples` of them in all, a host figure: no sync), its families among
    `families`. Per sample row, each crossing x adds its transition s as a ramp over the pixel it falls
    in (exact box-filter coverage along x), averaged over the SUBROWS sample rows of a pixel row and
    clamped to 0..1."""
    first, rows = band
    owner, rank = expand_counts(count * (layer >= 0), samples)
    sample = start.index_select(0, owner) + rank
    x, s = _row_crossings(shapes, owner, (sample.float() + 0.5) / SUBROWS, families)
    x = x.clamp(-1, width + 1)
    column = x.floor()
    fraction = x - column
    base = ((layer.index_select(0, owner) * rows + sample // SUBROWS - first) * (width + 2))[:, None]
    column = column.long()
    weight = s.float() / SUBROWS
    edges = torch.zeros(layers * rows * (width + 2), device=x.device)
    edges.index_put_(
        ((base + (column + 1).clamp(0, width + 1)).view(-1),), (weight * (1 - fraction)).view(-1), accumulate=True
    )
    edges.index_put_(
        ((base + (column + 2).clamp(0, width + 1)).view(-1),), (weight * fraction).view(-1), accumulate=True
    )
    # pixel j gets the ramps of crossings in pixels < j fully and of pixel j by the covered part
    return torch.cumsum(edges.view(layers, rows, width + 2), 2)[..., 1 : width + 1].clamp(0, 1)


# Bytes `render` holds per layer pixel (coverage with its ramps, opacities, transmittances: float32,
# three at once), per pixel of a group between frames (its paint and transmittance: 4 (C + 1)) and per
# crossing of a sample row (its x, transition, sort order, indices and weights). Measured by peak RSS
# (tests/test_primitive_memory.py): 12 bytes per layer pixel at 512 and 768 px.
_LAYER_PIXEL_BYTES = 12
_CROSSING_BYTES = 64


def _render_outputs(batch: int, shapes: int, height: int, width: int, channels: int, frame_every: int) -> int:
    """Bytes of `render`'s outputs: the image, its clamped copy and the frames."""
    frames = -(-shapes // frame_every) if frame_every else 0
    return batch * height * width * channels * 4 * (frames + 2)


def render_memory(
    batch: int, shapes: int, height: int, width: int, channels: int, frame_every: int, budget: float
) -> int:
    """Estimated peak bytes of `render` of `shapes` shapes per image (B of them) on a height x width
    canvas of `channels` with frames every `frame_every`, where `budget` bytes may be used: its outputs,
    and its chunks' work (every shape over the whole canvas, its sample rows crossing a 4-gon and an
    ellipse), which `render` cuts into chunks of what the budget leaves (one shape's row at least)."""
    outputs = _render_outputs(batch, shapes, height, width, channels, frame_every)
    groups = -(-shapes // frame_every) if frame_every else 1
    pixels = batch * height * width
    work = (
        shapes * pixels * _LAYER_PIXEL_BYTES
        + groups * pixels * 4 * (channels + 1)
        + batch * shapes * height * SUBROWS * 6 * _CROSSING_BYTES
    )
    least = batch * width * (_LAYER_PIXEL_BYTES + 4 * (channels + 1)) + batch * SUBROWS * 6 * _CROSSING_BYTES
    return int(outputs + min(work, max(budget - outputs, least)))


class _Chunk(NamedTuple):
    """Shapes start..stop-1 of every image composited at once: `groups` groups of `per_group` layers
    (the shapes between two build-up frames, or all of them), the first frame they end (None: none),
    the pixel row blocks drawn [(first row, rows, sample rows crossed)] and the families present."""

    start: int
    stop: int
    per_group: int
    groups: int
    frame: int | None
    blocks: list
    families: set


def _render_plan(
    first: list,
    count: list,
    family: list,
    batch: int,
    total: int,
    height: int,
    width: int,
    channels: int,
    frame_every: int,
    outline: int,
    budget: float,
) -> list[_Chunk]:
    """`render`'s chunks, planned on the host from each shape's sample rows (first, count) and family
    (lists [B*N], image after image): as many shapes at once as `budget` bytes hold, whole groups of
    frame_every shapes where they fit, and pixel row blocks where one shape's layers do not."""
    rows, top, bottom = [0] * total, [height] * total, [0] * total
    families = [set() for _ in range(total)]
    for i, (start, samples, code) in enumerate(zip(first, count, family, strict=False)):
        if samples:
            n = i % total
            rows[n] += samples
            top[n] = min(top[n], start // SUBROWS)
            bottom[n] = max(bottom[n], (start + samples - 1) // SUBROWS + 1)
            families[n].add(code)

    def cost(layers: int, groups: int, band: int, samples: int, kinds: set) -> int:
        crossings = (outline if _STROKE in kinds else 4) + (2 if _ELLIPTIC in kinds else 0)
        pixels = batch * band * width
        return (
            layers * pixels * _LAYER_PIXEL_BYTES
            + groups * pixels * 4 * (channels + 1)
            + samples * crossings * _CROSSING_BYTES
        )

    chunks, start = [], 0
    while start < total:
        stop, low, high, samples, kinds = start, height, 0, 0, set()
        while stop < total:  # grow the chunk while it fits (one shape at least)
            grown = (min(low, top[stop]), max(high, bottom[stop]), samples + rows[stop], kinds | families[stop])
            size = stop + 1 - start
            groups = -(-size // frame_every) if frame_every else 1
            if stop > start and cost(size, groups, max(0, grown[1] - grown[0]), grown[2], grown[3]) > budget:
                break
            low, high, samples, kinds = grown
            stop += 1
        if frame_every:  # whole groups of frames, or a part of one group
            boundary = (start // frame_every + 1) * frame_every
            if start % frame_every or stop < boundary:
                stop = min(stop, boundary)
            elif stop < total:
                stop -= stop % frame_every
        size = stop - start
        if frame_every and start % frame_every == 0 and (stop % frame_every == 0 or stop == total):
            per_group, groups, frame = frame_every, -(-size // frame_every), start // frame_every
        else:
            per_group, groups = size, 1
            frame = (stop - 1) // frame_every if frame_every and (stop % frame_every == 0 or stop == total) else None
        low = min(top[start:stop])
        band = max(0, max(bottom[start:stop]) - low)
        kinds = set().union(*families[start:stop])
        samples = sum(rows[start:stop])
        blocks = []
        if band:
            full = cost(batch * groups * per_group, groups, band, samples, kinds)
            step = band if full <= budget else max(1, int(band * budget / full))
            for row in range(low, low + band, step):
                block = min(step, low + band - row)
                if block == band:
                    crossed = samples
                else:  # the sample rows of the chunk's shapes within the block
                    lo, hi = row * SUBROWS, (row + block) * SUBROWS
                    crossed = sum(
                        max(0, min(first[i] + count[i], hi) - max(first[i], lo))
                        for b in range(batch)
                        for i in range(b * total + start, b * total + stop)
                    )
                blocks.append((row, block, crossed))
        chunks.append(_Chunk(start, stop, per_group, groups, frame, blocks, kinds))
        start = stop
    return chunks


def render(result: Approximation, height: int, width: int, scale: float, frame_every: int = 0, on_chunk=None):
    """Draw the shapes anti-aliased on a height x width canvas, coordinates times `scale`.

    Returns image float [B,H,W,C] (C as the background: RGB, or premultiplied RGBA) and, with
    frame_every > 0, the build-up frames float [B,F,H,W,C] after every `frame_every` shapes
    (F = ceil(N / frame_every); the last frame is the image). on_chunk(done, total) after each chunk.

    The shapes' kinds, then their rows, are read on the host (two reads); then chunks of shapes (as
    many as free memory holds) are composited source-over, each over the rows its shapes touch: within
    a group of the shapes between two frames, each layer's paint is weighted by the transmittance of
    the layers above it
    (a cumulative product), and the groups' (transmittance, paint) pairs are chained by a parallel
    scan, which gives every frame of the chunk at once. Where CuPy kernels run, one kernel does it
    all (render_cuda.py).
    """
    result = _checked_result(result, height, width, scale, frame_every)
    if cupy_usable(result.params.device):
        from . import render_cuda

        image, frames = render_cuda.render_cuda(result, height, width, scale, frame_every)
        if on_chunk is not None:
            on_chunk(result.kind.shape[1], result.kind.shape[1])
        return image, frames
    batch, total = result.kind.shape
    device = result.params.device
    channels = result.background.shape[1]
    image = result.background[:, None, None, :].expand(batch, height, width, channels).clone()
    paint = _paint(result.color, channels)
    frames = (
        torch.empty(batch, math.ceil(total / frame_every), height, width, channels, device=device)
        if frame_every
        else None
    )
    params = scale_params(result.kind, result.params, scale)
    kind = result.kind.reshape(-1)
    # two reads: the kinds (only their forms are made: lines and polylines cost ~25 ops), then the rows
    kinds = set(kind.tolist())
    if kinds and not 0 <= min(kinds) <= max(kinds) < len(KINDS):
        raise ValueError(f"result.kind: expected kind codes 0..{len(KINDS) - 1}, got {min(kinds)}..{max(kinds)}")
    shapes = _outlines(kind, params.reshape(-1, N_PARAMS), result.alpha.reshape(-1), height, width, kinds)
    first, count, family = torch.stack([shapes.first, shapes.count, shapes.family]).tolist()
    plan = _render_plan(
        first,
        count,
        family,
        batch,
        total,
        height,
        width,
        channels,
        frame_every,
        shapes.outline.shape[1],
        free_memory_bytes(device) * MEMORY_FRACTION
        - _render_outputs(batch, total, height, width, channels, frame_every),
    )
    index = torch.arange(batch * total, device=device)
    image_of, shape_of = index // max(1, total), index % max(1, total)
    for chunk in plan:
        groups, per_group, size = chunk.groups, chunk.per_group, chunk.stop - chunk.start
        # each shape's layer: within a group the last drawn first, so that cumulative products run
        # from the top layer down; -1 for shapes of other chunks
        k = shape_of - chunk.start
        layer = torch.where(
            (k >= 0) & (k < size), (image_of * groups + k // per_group) * per_group + per_group - 1 - k % per_group, -1
        )
        padding = groups * per_group - size
        opacity = torch.nn.functional.pad(result.alpha[:, chunk.start : chunk.stop], (0, padding))
        opacity = opacity.view(batch * groups, per_group).flip(1)
        colour = torch.nn.functional.pad(paint[:, chunk.start : chunk.stop], (0, 0, 0, padding))
        colour = colour.view(batch * groups, per_group, channels).flip(1)
        framed = slice(chunk.frame, chunk.frame + groups) if chunk.frame is not None else None
        if framed is not None and sum(block[1] for block in chunk.blocks) < height:
            frames[:, framed] = image[:, None]  # the rows that the chunk leaves as they are
        for row, rows, samples in chunk.blocks:
            start, count = shapes.first, shapes.count
            if len(chunk.blocks) > 1:  # the sample rows within the block
                start = start.clamp_min(row * SUBROWS)
                count = ((shapes.first + count).clamp_max((row + rows) * SUBROWS) - start).clamp_min(0)
            coverage = _layer_coverage(
                shapes, layer, start, count, samples, chunk.families, batch * groups * per_group, (row, rows), width
            )
            a = coverage.view(batch * groups, per_group, rows, width).mul_(opacity[..., None, None])
            clear = torch.cumprod(1 - a, 1)  # transmittance of each layer and those above it in its group
            a[:, 1:] *= clear[:, :-1]  # each layer's paint shows through the layers above it
            add = torch.bmm(a.view(batch * groups, per_group, rows * width).transpose(1, 2), colour)
            add = add.view(batch, groups, rows, width, channels)
            keep = clear[:, -1].view(batch, groups, rows, width)
            step = 1
            while step < groups:  # a group after the others: inclusive scan of x -> keep * x + add
                add[:, step:] += add[:, :-step] * keep[:, step:, ..., None]
                keep[:, step:] = keep[:, step:] * keep[:, :-step]
                step *= 2
            painted = add.addcmul_(image[:, None, row : row + rows], keep[..., None])
            if framed is not None:
                frames[:, framed, row : row + rows] = painted
            image[:, row : row + rows] = painted[:, -1]
        if on_chunk is not None:
            on_chunk(chunk.stop, total)
    return image.clamp(0, 1), (frames.clamp_(0, 1) if frames is not None else None)


def shape_list(result: Approximation, index: int, height: int, width: int, scale: float) -> list[dict]:
    """The shapes of image `index` as geometrize's JSON exporter lists them (for plotters and games): the
    background first, as a rectangle over the whole height x width canvas, then one entry per placed
    shape in drawing order: {"type": kind name, "data": its parameters in output pixels (the module
    docstring of shapes.py: the kind's own, angles in degrees clockwise), "color": [r, g, b, a] 0..255}.
    A fit with a transparent background states its background's opacity as its alpha."""
    number = lambda v: round(float(v), 3)  # noqa: E731
    background = result.background[index].tolist()
    if len(background) == 4:  # premultiplied: the straight colour and its opacity
        opacity = background[3]
        background = [v / opacity if opacity > 0 else 0.0 for v in background[:3]] + [opacity]
    else:
        background = background + [1.0]
    entries = [
        {
            "type": "rectangle",
            "data": [0, 0, width, height],
            "color": [int(round(v * 255)) for v in background],
        }
    ]
    params = scale_params(result.kind[index], result.params[index], scale).tolist()
    for kind, p, rgb, alpha in zip(
        result.kind[index].tolist(), params, result.color[index].tolist(), result.alpha[index].tolist(), strict=False
    ):
        if alpha <= 0:
            continue
        entries.append(
            {
                "type": KINDS[kind],
                "data": [number(v) for v in p[: PARAM_COUNTS[kind]]],
                "color": [int(round(v * 255)) for v in (*rgb, alpha)],
            }
        )
    return entries


def svg(result: Approximation, index: int, height: int, width: int, scale: float) -> str:
    """SVG text of image `index`: viewBox in output pixels, a background rect (with its opacity where
    the fit is RGBA), one element per placed shape with its fill (stroke for Beziers) and opacity."""
    hex_color = lambda rgb: "#{:02x}{:02x}{:02x}".format(*tuple(int(round(v * 255)) for v in rgb))  # noqa: E731
    number = lambda v: f"{v:.3f}".rstrip("0").rstrip(".")  # noqa: E731
    background = result.background[index].tolist()
    if len(background) == 4:  # premultiplied: the straight colour and its opacity
        opacity = background[3]
        fill = (
            f'fill="{hex_color([v / opacity if opacity > 0 else 0.0 for v in background[:3]])}" '
            f'fill-opacity="{number(opacity)}"'
        )
    else:
        fill = f'fill="{hex_color(background)}"'
    lines = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f'<rect x="0" y="0" width="{width}" height="{height}" {fill}/>',
    ]
    kinds = result.kind[index].tolist()
    params = scale_params(result.kind[index], result.params[index], scale).tolist()
    for kind, p, rgb, alpha in zip(
        kinds, params, result.color[index].tolist(), result.alpha[index].tolist(), strict=False
    ):
        if alpha <= 0:
            continue
        paint = f'fill="{hex_color(rgb)}" fill-opacity="{number(alpha)}"'
        n = [number(v) for v in p]
        if kind in (TRIANGLE, POLYGON):
            points = " ".join(f"{n[i]},{n[i + 1]}" for i in range(0, 6 if kind == TRIANGLE else 8, 2))
            lines.append(f'<polygon points="{points}" {paint}/>')
        elif kind == RECTANGLE:
            x0, x1, y0, y1 = min(p[0], p[2]), max(p[0], p[2]), min(p[1], p[3]), max(p[1], p[3])
            lines.append(
                f'<rect x="{number(x0)}" y="{number(y0)}" width="{number(x1 - x0)}" '
                f'height="{number(y1 - y0)}" {paint}/>'
            )
        elif kind == ROTATED_RECTANGLE:
            lines.append(
                f'<rect x="{number(p[0] - p[2] / 2)}" y="{number(p[1] - p[3] / 2)}" width="{n[2]}" '
                f'height="{n[3]}" transform="rotate({n[4]} {n[0]} {n[1]})" {paint}/>'
            )
        elif kind == ELLIPSE:
            lines.append(f'<ellipse cx="{n[0]}" cy="{n[1]}" rx="{n[2]}" ry="{n[3]}" {paint}/>')
        elif kind == ROTATED_ELLIPSE:
            lines.append(
                f'<ellipse cx="{n[0]}" cy="{n[1]}" rx="{n[2]}" ry="{n[3]}" '
                f'transform="rotate({n[4]} {n[0]} {n[1]})" {paint}/>'
            )
        elif kind == CIRCLE:
            lines.append(f'<circle cx="{n[0]}" cy="{n[1]}" r="{n[2]}" {paint}/>')
        elif kind == LINE:
            stroke = paint.replace("fill", "stroke")
            lines.append(
                f'<line x1="{n[0]}" y1="{n[1]}" x2="{n[2]}" y2="{n[3]}" {stroke} stroke-width="{n[4]}" '
                f'stroke-linecap="butt"/>'
            )
        elif kind == POLYLINE:  # placed ones turn by at most 120 degrees: a miter within SVG's limit of 4
            stroke = paint.replace("fill", "stroke")
            lines.append(
                f'<polyline points="{n[0]},{n[1]} {n[2]},{n[3]} {n[4]},{n[5]}" fill="none" {stroke} '
                f'stroke-width="{n[6]}" stroke-linecap="butt" stroke-linejoin="miter"/>'
            )
        else:  # QUADRATIC
            stroke = paint.replace("fill", "stroke")
            lines.append(
                f'<path d="M {n[0]} {n[1]} Q {n[2]} {n[3]} {n[4]} {n[5]}" fill="none" {stroke} '
                f'stroke-width="{n[6]}" stroke-linecap="butt"/>'
            )
    lines.append("</svg>")
    return "\n".join(lines)
