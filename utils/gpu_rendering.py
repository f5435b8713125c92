"""Anti-aliased 2D primitives from signed distance fields, tile-binned, on batches of frames.

Conventions: pixel coordinates, x right, y down, pixel centres at +0.5. A primitive's coverage of a
pixel is clamp(0.5 - d, 0, 1), d the signed distance from the pixel centre to the shape's edge
(negative inside): exact box-filter coverage for straight edges along the axes, within 0.05 for
any other straight edge. Primitives are composited source-over in index order with premultiplied
alpha, so overlapping translucent fills build up as they would drawn one after another.

The work is organised in three steps, each one batched over every primitive of every frame:
  1. `bin_tiles`: each primitive is listed in the 16x16 tiles that its bounds touch;
  2. coverage of each (tile, primitive) pair on the tile's 256 pixels, per primitive kind;
  3. in-tile compositing by a cumulative sum of log transmittance over the pairs sorted by tile.
Cost follows the covered area, not frame area times primitive count.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .device import normalize, run_chunked

TILE = 16
SEGMENT, BOX_FILL, BOX_STROKE, DISC, SPRITE = range(5)
N_PARAMS = 10
# Opaque coverage is clamped below 1 so that log(1 - a) stays finite; 1 - 1e-7 keeps the result
# within 1e-6 of exact source-over.
_MAX_ALPHA = 1.0 - 1e-7


@dataclass
class Primitives:
    """P primitives over a batch of frames, drawn in index order (later ones over earlier ones).

    frame  int64   [P]     frame index in the batch
    kind   int64   [P]     SEGMENT, BOX_FILL, BOX_STROKE, DISC or SPRITE
    params float32 [P,10]  geometry, by kind (see the builders)
    color  float32 [P,4]   straight RGB in 0..1 and opacity
    bounds float32 [P,4]   x0, y0, x1, y1: pixels outside have zero coverage
    """

    frame: torch.Tensor
    kind: torch.Tensor
    params: torch.Tensor
    color: torch.Tensor
    bounds: torch.Tensor

    def __len__(self) -> int:
        return int(self.kind.shape[0])

    def to(self, device) -> "Primitives":
        return Primitives(*(t.to(device) for t in (self.frame, self.kind, self.params, self.color, self.bounds)))

    def select(self, keep: torch.Tensor) -> "Primitives":
        return Primitives(*(t[keep] for t in (self.frame, self.kind, self.params, self.color, self.bounds)))


def concat(*parts: Primitives) -> Primitives:
    """Primitives of `parts` in that order (the later parts are drawn over the earlier ones)."""
    return Primitives(*(torch.cat(ts) for ts in zip(*((p.frame, p.kind, p.params, p.color, p.bounds) for p in parts))))


def empty(device=None) -> Primitives:
    return Primitives(torch.zeros(0, dtype=torch.int64, device=device), torch.zeros(0, dtype=torch.int64, device=device),
                      torch.zeros(0, N_PARAMS, device=device), torch.zeros(0, 4, device=device),
                      torch.zeros(0, 4, device=device))


def _column(value, n: int, like: torch.Tensor) -> torch.Tensor:
    """A per-primitive float [n] from a scalar or a tensor of n values."""
    return torch.as_tensor(value, dtype=torch.float32, device=like.device).expand(n).clone()


def _colors(color, n: int, like: torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(color, dtype=torch.float32, device=like.device).expand(n, 4).clone()


def _make(frame, kind: int, params: list[torch.Tensor], color, bounds) -> Primitives:
    n = bounds.shape[0]
    packed = torch.zeros(n, N_PARAMS, dtype=torch.float32, device=bounds.device)
    packed[:, : len(params)] = torch.stack(params, dim=1) if params else packed[:, :0]
    frame = torch.as_tensor(frame, dtype=torch.int64, device=bounds.device).expand(n).clone()
    return Primitives(frame, torch.full((n,), kind, dtype=torch.int64, device=bounds.device), packed,
                      _colors(color, n, bounds), bounds.float())


def segments(frame, a: torch.Tensor, b: torch.Tensor, width, color, caps: str = "round",
             cut_start: torch.Tensor | None = None, cut_end: torch.Tensor | None = None) -> Primitives:
    """Line segments a->b (float [P,2] each) of `width` pixels, round or butt caps.

    cut_start / cut_end (float [P,2], optional): where a segment continues a polyline, the joint is
    cut by the half-plane (p - a).n >= 0 (resp. (p - b).n <= 0) with n the joint's bisector, so
    that neighbouring segments share the joint's pixels exactly once; zero vectors mean no cut.
    params: ax, ay, bx, by, half width, butt (0/1), cut_start xy, cut_end xy.
    """
    n = a.shape[0]
    half = _column(width, n, a) / 2
    zero = torch.zeros(n, 2, device=a.device)
    cut_start = zero if cut_start is None else cut_start
    cut_end = zero if cut_end is None else cut_end
    butt = torch.full((n,), float(caps == "butt"), device=a.device)
    reach = torch.maximum(half, torch.full_like(half, 0.5)) + 1.0
    bounds = torch.stack([torch.minimum(a[:, 0], b[:, 0]) - reach, torch.minimum(a[:, 1], b[:, 1]) - reach,
                          torch.maximum(a[:, 0], b[:, 0]) + reach, torch.maximum(a[:, 1], b[:, 1]) + reach], dim=1)
    return _make(frame, SEGMENT, [a[:, 0], a[:, 1], b[:, 0], b[:, 1], half, butt,
                                  cut_start[:, 0], cut_start[:, 1], cut_end[:, 0], cut_end[:, 1]], color, bounds)


def polylines(frame, points: torch.Tensor, lengths: torch.Tensor, width, color) -> Primitives:
    """Open polylines with round caps and round joins, each pixel drawn once per polyline.

    frame int64 [L] (or scalar), points float [L, N, 2] padded, lengths int64 [L] (points used,
    >= 2 to draw anything), width scalar or [L], color [4] or [L, 4].
    Segments with a NaN end are left out, so a NaN point makes a gap.
    """
    n_lines, n_points = points.shape[:2]
    if n_points < 2:
        return empty(points.device)
    a, b = points[:, :-1], points[:, 1:]
    steps = torch.arange(n_points - 1, device=points.device)
    valid = (steps[None] < (lengths.to(points.device)[:, None] - 1)) & torch.isfinite(a).all(-1) & torch.isfinite(b).all(-1)
    direction = b - a
    direction = direction / direction.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    # bisector normal at each interior joint, where both neighbouring segments are drawn
    joint = direction[:, :-1] + direction[:, 1:]
    joint = joint / joint.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    shared = valid[:, :-1] & valid[:, 1:]
    joint = joint * shared[..., None]
    zeros = torch.zeros(n_lines, 1, 2, device=points.device)
    cut_start = torch.cat([zeros, joint], dim=1)
    cut_end = torch.cat([joint, zeros], dim=1)
    frames = torch.as_tensor(frame, dtype=torch.int64, device=points.device).expand(n_lines)
    widths = torch.as_tensor(width, dtype=torch.float32, device=points.device).expand(n_lines)
    colors = torch.as_tensor(color, dtype=torch.float32, device=points.device).expand(n_lines, 4)
    expand = lambda t: t[:, None].expand(n_lines, n_points - 1, *t.shape[1:])[valid]  # noqa: E731
    return segments(expand(frames), a[valid], b[valid], expand(widths), expand(colors),
                    cut_start=cut_start[valid], cut_end=cut_end[valid])


def rounded_boxes(frame, xyxy: torch.Tensor, stroke_width=2.0, radius=0.0, stroke_color=(1, 1, 1, 1),
                  fill_color=(1, 1, 1, 0), corner_length=0.0) -> Primitives:
    """Boxes [P,4] (x1,y1,x2,y2, any order) with a stroke centred on the outline and a fill.

    Each box gives its fill then its stroke (zero-opacity or zero-width parts are dropped).
    corner_length > 0 draws only the corners of the outline, each arm that long.
    params: cx, cy, half width, half height, radius, stroke half width, corner length.
    """
    n = xyxy.shape[0]
    x0 = torch.minimum(xyxy[:, 0], xyxy[:, 2])
    x1 = torch.maximum(xyxy[:, 0], xyxy[:, 2])
    y0 = torch.minimum(xyxy[:, 1], xyxy[:, 3])
    y1 = torch.maximum(xyxy[:, 1], xyxy[:, 3])
    hx, hy = (x1 - x0) / 2, (y1 - y0) / 2
    r = torch.minimum(_column(radius, n, xyxy).clamp_min(0), torch.minimum(hx, hy))
    stroke_half = _column(stroke_width, n, xyxy) / 2
    corner = _column(corner_length, n, xyxy)
    params = [(x0 + x1) / 2, (y0 + y1) / 2, hx, hy, r, stroke_half, corner]
    reach = stroke_half.clamp_min(0.5) + 1.0
    fill = _make(frame, BOX_FILL, params, fill_color, torch.stack([x0 - 1, y0 - 1, x1 + 1, y1 + 1], dim=1))
    stroke = _make(frame, BOX_STROKE, params, stroke_color,
                   torch.stack([x0 - reach, y0 - reach, x1 + reach, y1 + reach], dim=1))
    keep = torch.stack([fill.color[:, 3] > 0, (stroke.color[:, 3] > 0) & (stroke_half > 0)], dim=1).reshape(-1)
    interleaved = Primitives(*(torch.stack([f, s], dim=1).reshape(2 * n, *f.shape[1:])
                               for f, s in zip((fill.frame, fill.kind, fill.params, fill.color, fill.bounds),
                                               (stroke.frame, stroke.kind, stroke.params, stroke.color, stroke.bounds))))
    return interleaved.select(keep)


def discs(frame, center: torch.Tensor, radius, color, ring_width=0.0) -> Primitives:
    """Filled discs (ring_width 0) or rings of `ring_width` centred on the circle, center [P,2].

    params: cx, cy, radius, ring half width.
    """
    n = center.shape[0]
    r = _column(radius, n, center)
    ring_half = _column(ring_width, n, center) / 2
    reach = r + ring_half + 1.0
    bounds = torch.stack([center[:, 0] - reach, center[:, 1] - reach, center[:, 0] + reach, center[:, 1] + reach], 1)
    return _make(frame, DISC, [center[:, 0], center[:, 1], r, ring_half], color, bounds)


def sprites(frame, origin: torch.Tensor, atlas_rect: torch.Tensor, color) -> Primitives:
    """Alpha bitmaps from an atlas (glyph runs of labels), placed at integer pixel `origin` [P,2].

    atlas_rect int [P,4]: x, y, width, height inside the atlas passed to `draw`; the atlas value
    is the coverage, `color` tints it. params: x0, y0, width, height, atlas x, atlas y.
    """
    origin = origin.float().floor()
    rect = atlas_rect.float()
    bounds = torch.stack([origin[:, 0], origin[:, 1], origin[:, 0] + rect[:, 2], origin[:, 1] + rect[:, 3]], 1)
    return _make(frame, SPRITE, [origin[:, 0], origin[:, 1], rect[:, 2], rect[:, 3], rect[:, 0], rect[:, 1]],
                 color, bounds)


# -- coverage per kind: params [m,10], pixel centres x, y [m, T*T] -> coverage [m, T*T] ------------

def _from_distance(d: torch.Tensor) -> torch.Tensor:
    return (0.5 - d).clamp(0.0, 1.0)


def _thin(half: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Strokes thinner than 1 px are drawn 1 px wide at proportionally lower opacity."""
    return half.clamp_min(0.5)[:, None], (2 * half).clamp(0, 1)[:, None]


def _segment_coverage(p, x, y):
    ax, ay, bx, by = p[:, 0:1], p[:, 1:2], p[:, 2:3], p[:, 3:4]
    half, weight = _thin(p[:, 4])
    dx, dy = bx - ax, by - ay
    length = torch.sqrt(dx * dx + dy * dy).clamp_min(1e-12)
    ux, uy = dx / length, dy / length
    px, py = x - ax, y - ay
    along = px * ux + py * uy
    across = (px * uy - py * ux).abs()
    nearest = along.clamp(torch.zeros_like(length), length)
    round_d = torch.sqrt((along - nearest) ** 2 + across * across) - half
    butt_d = torch.maximum(across - half, torch.maximum(-along, along - length))
    d = torch.where(p[:, 5:6] > 0, butt_d, round_d)
    inside_cuts = ((px * p[:, 6:7] + py * p[:, 7:8]) >= 0) & (((x - bx) * p[:, 8:9] + (y - by) * p[:, 9:10]) <= 0)
    return _from_distance(d) * weight * inside_cuts


def _box_distance(p, x, y):
    qx = (x - p[:, 0:1]).abs() - (p[:, 2:3] - p[:, 4:5])
    qy = (y - p[:, 1:2]).abs() - (p[:, 3:4] - p[:, 4:5])
    outside = torch.sqrt(qx.clamp_min(0) ** 2 + qy.clamp_min(0) ** 2)
    return outside + torch.maximum(qx, qy).clamp_max(0) - p[:, 4:5]


def _box_fill_coverage(p, x, y):
    return _from_distance(_box_distance(p, x, y))


def _box_stroke_coverage(p, x, y):
    half, weight = _thin(p[:, 5])
    coverage = _from_distance(_box_distance(p, x, y).abs() - half) * weight
    corner = p[:, 6:7]
    # corner-only outlines keep pixels near both a vertical and a horizontal side; soft ends (AA)
    keep_x = ((x - p[:, 0:1]).abs() - (p[:, 2:3] - corner) + 0.5).clamp(0, 1)
    keep_y = ((y - p[:, 1:2]).abs() - (p[:, 3:4] - corner) + 0.5).clamp(0, 1)
    return torch.where(corner > 0, coverage * keep_x * keep_y, coverage)


def _disc_coverage(p, x, y):
    distance = torch.sqrt((x - p[:, 0:1]) ** 2 + (y - p[:, 1:2]) ** 2) - p[:, 2:3]
    ring_half, weight = _thin(p[:, 3])
    ring = _from_distance(distance.abs() - ring_half) * weight
    return torch.where(p[:, 3:4] > 0, ring, _from_distance(distance))


def _sprite_coverage(p, x, y, atlas):
    u = (x - 0.5 - p[:, 0:1]).round().long()
    v = (y - 0.5 - p[:, 1:2]).round().long()
    inside = (u >= 0) & (v >= 0) & (u < p[:, 2:3].long()) & (v < p[:, 3:4].long())
    ax = (p[:, 4:5].long() + u).clamp(0, atlas.shape[1] - 1)
    ay = (p[:, 5:6].long() + v).clamp(0, atlas.shape[0] - 1)
    return atlas[ay, ax] * inside


def _coverage(params, kind, x, y, atlas) -> torch.Tensor:
    coverage = torch.zeros_like(x)
    for code, fn in ((SEGMENT, _segment_coverage), (BOX_FILL, _box_fill_coverage),
                     (BOX_STROKE, _box_stroke_coverage), (DISC, _disc_coverage)):
        rows = (kind == code).nonzero().squeeze(1)
        if rows.numel():
            coverage[rows] = fn(params[rows], x[rows], y[rows])
    rows = (kind == SPRITE).nonzero().squeeze(1)
    if rows.numel():
        if atlas is None:
            raise ValueError("sprite primitives need the atlas they index")
        coverage[rows] = _sprite_coverage(params[rows], x[rows], y[rows], atlas)
    return coverage


# -- binning and compositing -----------------------------------------------------------------------

def _stroke_misses_tile(params, tile_x0, tile_y0, tile):
    """True where a box outline cannot reach any pixel of the tile: the tile lies inside the box,
    at least (stroke half width + radius + 1) from every side."""
    inset_x = params[:, 2] - params[:, 5] - params[:, 4] - 1
    inset_y = params[:, 3] - params[:, 5] - params[:, 4] - 1
    return (((tile_x0 - params[:, 0]).abs().maximum((tile_x0 + tile - params[:, 0]).abs()) < inset_x)
            & ((tile_y0 - params[:, 1]).abs().maximum((tile_y0 + tile - params[:, 1]).abs()) < inset_y))


def bin_tiles(prims: Primitives, batch: int, height: int, width: int, tile: int = TILE):
    """(tile, primitive) pairs sorted by tile then by drawing order.

    Returns tile_id int64 [Q] (frame * tiles_y * tiles_x + row * tiles_x + column) and
    primitive int64 [Q]. Tiles that a box outline passes over without touching are left out.
    """
    device = prims.bounds.device
    tiles_y, tiles_x = math.ceil(height / tile), math.ceil(width / tile)
    bounds = torch.nan_to_num(prims.bounds, nan=-1.0, posinf=-1.0, neginf=-1.0)
    visible = ((bounds[:, 2] >= 0) & (bounds[:, 3] >= 0) & (bounds[:, 0] < width) & (bounds[:, 1] < height)
               & (prims.frame >= 0) & (prims.frame < batch) & (prims.color[:, 3] > 0))
    tx0 = (bounds[:, 0] / tile).floor().clamp(0, tiles_x - 1).long()
    tx1 = (bounds[:, 2] / tile).floor().clamp(0, tiles_x - 1).long()
    ty0 = (bounds[:, 1] / tile).floor().clamp(0, tiles_y - 1).long()
    ty1 = (bounds[:, 3] / tile).floor().clamp(0, tiles_y - 1).long()
    span_x = tx1 - tx0 + 1
    counts = torch.where(visible, span_x * (ty1 - ty0 + 1), torch.zeros_like(span_x))
    primitive = torch.repeat_interleave(torch.arange(len(prims), device=device), counts)
    first = torch.cumsum(counts, 0) - counts
    local = torch.arange(primitive.numel(), device=device) - first[primitive]
    column = tx0[primitive] + local % span_x[primitive]
    row = ty0[primitive] + local // span_x[primitive]
    is_stroke = prims.kind[primitive] == BOX_STROKE
    if bool(is_stroke.any()):
        misses = _stroke_misses_tile(prims.params[primitive], column.float() * tile, row.float() * tile, tile)
        keep = ~(is_stroke & misses)
        primitive, column, row = primitive[keep], column[keep], row[keep]
    tile_id = (prims.frame[primitive] * tiles_y + row) * tiles_x + column
    tile_id, order = torch.sort(tile_id, stable=True)  # stable: drawing order survives within a tile
    return tile_id, primitive[order]


def draw(images: torch.Tensor, prims: Primitives, atlas: torch.Tensor | None = None, device=None,
         on_progress=None, tile: int = TILE):
    """Render `prims` over `images` and return (image, alpha, layer) on the images' device.

    images float [B,H,W,C], C = 3 or 4 (alpha is composited too); never modified.
    prims: primitives whose `frame` indexes the batch; atlas float [Ha,Wa] for SPRITE primitives.
    device: where to render (default: where the images are); frames move there one chunk at a
    time, each chunk in one transfer.
    Returns image float [B,H,W,C] (composite), alpha float [B,H,W] and layer float [B,H,W,4]
    (premultiplied RGB, alpha).
    """
    batch, height, width, channels = images.shape
    home = images.device
    device = normalize(device) if device is not None else home
    tiles_y, tiles_x = math.ceil(height / tile), math.ceil(width / tile)
    image_out = torch.empty_like(images)
    layer_out = torch.zeros(batch, height, width, 4, device=home)

    def render_frames(start, stop, dev):
        on_home = dev == home
        out = image_out[start:stop] if on_home else images[start:stop].to(dev)
        if on_home:
            out.copy_(images[start:stop])
        layer = layer_out[start:stop] if on_home else torch.zeros(stop - start, height, width, 4, device=dev)
        sel = prims.select((prims.frame >= start) & (prims.frame < stop)).to(dev)
        sel.frame = sel.frame - start
        tile_id, primitive = bin_tiles(sel, stop - start, height, width, tile)
        if tile_id.numel():
            _render_pairs(out, layer, sel, tile_id, primitive, tiles_y, tiles_x, tile,
                          atlas.to(dev) if atlas is not None else None)
        if not on_home:
            image_out[start:stop] = out.to(home)
            layer_out[start:stop] = layer.to(home)

    # per frame: output chunk, layer and binning temporaries
    run_chunked(render_frames, batch, height * width * (channels + 4) * 4 * 3, device, on_progress)
    return image_out, layer_out[..., 3].clone(), layer_out


def _render_pairs(out, layer, prims, tile_id, primitive, tiles_y, tiles_x, tile, atlas):
    """Composite pairs into `out` and `layer` (both written in place) in chunks of whole tiles."""
    batch, height, width, channels = out.shape
    boundaries = torch.nonzero(tile_id[1:] != tile_id[:-1]).squeeze(1) + 1
    starts = torch.cat([torch.zeros(1, dtype=torch.long, device=tile_id.device), boundaries]).tolist()
    starts.append(tile_id.numel())
    n_tiles = len(starts) - 1
    pairs_per_tile = max(1.0, tile_id.numel() / n_tiles)
    flat_out = out.view(-1, channels)
    flat_layer = layer.view(-1, 4)
    offsets = torch.arange(tile * tile, device=tile_id.device)

    def render_tiles(first_tile, stop_tile, dev):
        lo, hi = starts[first_tile], starts[stop_tile]
        unique, rgb, alpha = _composite_tiles(prims, tile_id[lo:hi], primitive[lo:hi], tiles_y, tiles_x, tile, atlas)
        frame = unique // (tiles_y * tiles_x)
        rest = unique % (tiles_y * tiles_x)
        y = (rest // tiles_x * tile)[:, None] + offsets // tile
        x = (rest % tiles_x * tile)[:, None] + offsets % tile
        inside = (y < height) & (x < width)
        index = ((frame[:, None] * height + y) * width + x)[inside]
        rgb, alpha = rgb[inside], alpha[inside]
        base = flat_out[index]
        keep = (1 - alpha)[:, None]
        composite = torch.cat([base[:, :3] * keep + rgb, base[:, 3:] * keep + alpha[:, None]], dim=1)
        flat_out[index] = composite[:, :channels]
        flat_layer[index] = torch.cat([rgb, alpha[:, None]], dim=1)

    # ~48 bytes per pair pixel in the temporaries of _composite_tiles
    run_chunked(render_tiles, n_tiles, int(pairs_per_tile * tile * tile * 48), out.device, limit=4096)


def _composite_tiles(prims, tile_id, primitive, tiles_y, tiles_x, tile, atlas):
    """Premultiplied RGB [n, T*T, 3] and alpha [n, T*T] of the n distinct tiles of `tile_id`."""
    device = tile_id.device
    unique, segment = torch.unique_consecutive(tile_id, return_inverse=True)
    rest = unique % (tiles_y * tiles_x)
    offsets = torch.arange(tile * tile, device=device)
    x = ((rest % tiles_x * tile)[:, None] + offsets % tile).float() + 0.5
    y = ((rest // tiles_x * tile)[:, None] + offsets // tile).float() + 0.5
    coverage = _coverage(prims.params[primitive], prims.kind[primitive], x[segment], y[segment], atlas)
    colour = prims.color[primitive]
    a = (coverage * colour[:, 3:4]).clamp_max(_MAX_ALPHA)
    # source-over in order: pair k is attenuated by (1 - a_j) of every later pair j of its tile;
    # float64 because the running sum spans all tiles of the chunk
    log_clear = torch.log1p(-a).double().cumsum(0)
    count = torch.bincount(segment, minlength=unique.numel())
    last = torch.cumsum(count, 0) - 1
    after = torch.exp(log_clear[last][segment] - log_clear).float()
    rgb = torch.zeros(unique.numel(), tile * tile, 3, device=device)
    rgb.index_add_(0, segment, (a * after)[..., None] * colour[:, None, :3])
    before = torch.cat([torch.zeros(1, tile * tile, dtype=log_clear.dtype, device=device), log_clear[last[:-1]]])
    alpha = (1 - torch.exp(log_clear[last] - before)).float()
    return unique, rgb, alpha


def composite(images: torch.Tensor, layer: torch.Tensor) -> torch.Tensor:
    """Source-over of a premultiplied layer [B,H,W,4] on images [B,H,W,C]; a new tensor."""
    keep = 1 - layer[..., 3:4]
    rgb = images[..., :3] * keep + layer[..., :3]
    if images.shape[-1] == 4:
        return torch.cat([rgb, images[..., 3:] * keep + layer[..., 3:4]], dim=-1)
    return rgb
