"""The mask overlay's passes on the CPU (utils/gpu_rendering/masks_cpu.py, numba's loops; chosen by
masks._cpu_loops) against the torch path of masks.py: the same tile peaks, listed tiles, values and outline
pieces bit for bit, the objects' bounds exactly and their centroid sums to float32 rounding (the order of
the additions differs), and the Mask Renderer's outputs bit for bit."""

import pytest
import torch

from rasterkit.nodes.masks import MaskRenderer
from rasterkit.utils.gpu_rendering import masks as M
from rasterkit.utils.gpu_rendering import masks_cpu


def torch_path(monkeypatch, fn, *args, **kwargs):
    with monkeypatch.context() as patch:
        patch.setattr(M, "_cpu_loops", lambda masks: None)
        return fn(*args, **kwargs)


def soft_masks(count=3, height=61, width=83):
    """Soft blobs (values between the levels) with a NaN patch, infinities and values past 1; the sizes are
    no multiples of the tile, and the last blob touches the frame's bottom right corner."""
    g = torch.Generator().manual_seed(3)
    masks = (torch.rand(count, 1, height, width, generator=g) > 0.55).float()
    masks = torch.nn.functional.avg_pool2d(masks, 5, 1, 2)[:, 0]
    masks[0, 3:7, 4:9] = float("nan")
    masks[1, 0, 0], masks[1, 5, 5] = float("inf"), -float("inf")
    masks[2, -3:, -4:] = 2.0
    return masks


def test_the_loops_are_taken(monkeypatch):
    calls = []
    names = (
        "tile_peaks",
        "listed_counts",
        "list_tiles",
        "contour_pieces",
        "joined",
        "fills_and_outlines",
        "extents",
        "blurred",
    )
    for name in names:
        loop = getattr(masks_cpu, name)
        monkeypatch.setattr(masks_cpu, name, lambda *a, loop=loop, name=name: calls.append(name) or loop(*a))
    # no budget: the memory estimate counts the tiles (listed_counts); a halo: its blur
    monkeypatch.setattr("rasterkit.nodes.masks.memory_budget", lambda device: 0)
    MaskRenderer.run(torch.zeros(1, 61, 83, 3), masks=soft_masks(), labels="id", halo_width=4.0)
    assert sorted(set(calls)) == sorted(names)


@pytest.mark.parametrize("threshold", [0.0, 0.1, 0.3, 0.5])
@pytest.mark.parametrize("outlines", [True, False])
def test_tiles_pieces_and_extents_match_the_torch_path(monkeypatch, threshold, outlines):
    masks = soft_masks()
    peak = M.tile_peaks(masks)
    expected_peak = torch_path(monkeypatch, M.tile_peaks, masks)
    assert torch.equal(peak.isnan(), expected_peak.isnan()) and bool(peak.isnan().any())
    assert torch.equal(peak.nan_to_num(-1.0), expected_peak.nan_to_num(-1.0))
    ours = M._list_tiles(masks, threshold, outlines, peak)
    theirs = torch_path(monkeypatch, M._list_tiles, masks, threshold, outlines, peak)
    for field in ("source", "ty", "tx", "values", "fill", "cells"):
        a, b = getattr(ours, field), getattr(theirs, field)
        assert a.dtype == b.dtype and torch.equal(a, b), field
    assert bool(ours.cells.any()) == outlines
    pieces = M._contour_pieces(ours, threshold)
    expected = torch_path(monkeypatch, M._contour_pieces, theirs, threshold)
    assert all(a.dtype == b.dtype and torch.equal(a, b) for a, b in zip(pieces, expected, strict=True))
    assert len(pieces[0]) == 0 or outlines
    (low, high, sums), (low_t, high_t, sums_t) = (
        M._extents(ours, 3, 61, 83, threshold),
        torch_path(monkeypatch, M._extents, theirs, 3, 61, 83, threshold),
    )
    assert torch.equal(low, low_t) and torch.equal(high, high_t)
    assert sums.dtype == sums_t.dtype and torch.allclose(sums, sums_t, rtol=1e-5, atol=0)


@pytest.mark.parametrize("outlines", [True, False])
@pytest.mark.parametrize("halo", [0.0, 9.0])
def test_the_memory_estimate_matches_the_torch_path(monkeypatch, outlines, halo):
    """The same tiles counted (the torch path's listed tiles take more bytes each: set alike here)."""
    from rasterkit.utils.inputs.masks import from_masks

    monkeypatch.setattr(M, "TORCH_LISTED_TILE_BYTES", M.LISTED_TILE_BYTES)
    for masks in (soft_masks(), torch.zeros(2, 30, 40)):
        objects = from_masks(masks, 1)
        ours = M.overlay_memory(objects, *masks.shape[1:], 0.5, outlines, halo)
        assert ours == torch_path(monkeypatch, M.overlay_memory, objects, *masks.shape[1:], 0.5, outlines, halo)


def test_tile_peaks_of_whole_and_partial_bands(monkeypatch):
    """Bands of 8 rows take the unrolled loop, the last band of 5 rows the general one. Tiles whose sums are
    not finite are read again: a NaN (of either sign) is NaN, infinities and sums that overflow keep their
    maximum."""
    g = torch.Generator().manual_seed(1)
    masks = torch.rand(2, 45, 30, generator=g) - 0.5
    masks[1, 41, 29] = float("nan")
    masks[0, 9, 9] = -float("nan")
    masks[0, 20, 2], masks[0, 21, 3] = 3e38, 3e38
    masks[1, 2, 20], masks[1, 30, 12] = float("inf"), -float("inf")
    peak = M.tile_peaks(masks)
    expected = torch_path(monkeypatch, M.tile_peaks, masks)
    assert torch.equal(peak.nan_to_num(-9.0), expected.nan_to_num(-9.0))
    assert bool(peak[1, 5, 3].isnan()) and bool(peak[0, 1, 1].isnan()) and int(peak.isnan().sum()) == 2
    assert float(peak[0, 2, 0]) == float(torch.tensor(3e38)) and float(peak[1, 0, 2]) == float("inf")


def test_tile_peaks_of_empty_bands(monkeypatch):
    """A band whose bits are all 0 but the sign (0 and -0) is skipped; one pixel anywhere else in it (the
    smallest subnormal, a negative value, a NaN) has the band read."""
    masks = torch.zeros(4, 45, 30)
    masks[0, 16:24] = -0.0
    masks[1, 8, 5] = float(torch.tensor(1e-45))
    masks[2, 24:32, :8] = -0.25
    masks[3, 43, 29], masks[3, 3, 3] = float("nan"), -float("nan")
    peak = M.tile_peaks(masks)
    expected = torch_path(monkeypatch, M.tile_peaks, masks)
    assert torch.equal(peak.nan_to_num(-9.0), expected.nan_to_num(-9.0))
    assert float(peak[1, 1, 0]) > 0 and float(peak[2, 3, 0]) == -0.25 and int(peak.isnan().sum()) == 2


@pytest.mark.parametrize("radius", [1, 8, 30])
def test_the_halo_blur_matches_the_torch_path(monkeypatch, radius):
    """The halo grid's two blur passes, bit for bit: taps narrower and wider than the grid (zeros beyond)."""
    g = torch.Generator().manual_seed(radius)
    grid = torch.rand(3, 23, 41, generator=g) * (torch.rand(3, 23, 41, generator=g) > 0.5)
    taps = torch.exp(-0.5 * (torch.arange(-radius, radius + 1, dtype=torch.float32) / (radius / 3 + 0.5)) ** 2)
    taps = taps / taps.sum()
    assert torch.equal(M._blurred(grid, taps), torch_path(monkeypatch, M._blurred, grid, taps))


def test_joined_pieces_match_the_torch_path(monkeypatch):
    """Runs along one horizontal, vertical or diagonal line, end to end, whichever way each piece points,
    become one piece; not across tiles, not folding back, not at other angles, not pieces of no length."""
    pieces = [
        (0, (0, 0), (1, 0)),  # a horizontal run of three
        (0, (1, 0), (2, 0)),
        (0, (2, 0), (3, 0)),
        (0, (5, 1), (5, 2)),  # vertical, the second piece pointing back
        (0, (5, 3), (5, 2)),
        (1, (0, 0), (1, 1)),  # diagonal
        (1, (2, 2), (1, 1)),
        (1, (4, 0), (3, 1)),  # the other diagonal
        (1, (3, 1), (2, 2)),
        (2, (0, 0), (2, 0)),  # folding back onto itself
        (2, (2, 0), (1, 0)),
        (2, (1, 0), (1, 0)),  # no length
        (2, (1, 0), (3, 0)),
        (3, (3, 0), (4, 0)),  # another tile: not joined to the piece before
        (3, (4, 0), (4.3, 0.7)),  # another angle
        (3, (4.3, 0.7), (4.6, 1.4)),
    ]
    owner = torch.tensor([o for o, _, _ in pieces])
    a, b = (torch.tensor([p[k] for p in pieces], dtype=torch.float32) for k in (1, 2))
    ours = M._joined(owner, a, b)
    theirs = torch_path(monkeypatch, M._joined, owner, a, b)
    assert all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(ours, theirs, strict=True))
    found = [(int(o), tuple(p.tolist()), tuple(q.tolist())) for o, p, q in zip(*ours, strict=True)]
    assert found[:4] == [(0, (0, 0), (3, 0)), (0, (5, 1), (5, 3)), (1, (0, 0), (2, 2)), (1, (4, 0), (2, 2))]
    assert len(found) == 4 + 4 + 3
    for none in (0, 1):
        assert all(
            torch.equal(x, y)
            for x, y in zip(
                M._joined(owner[:none], a[:none], b[:none]), (owner[:none], a[:none], b[:none]), strict=True
            )
        )


def test_joined_outlines_draw_the_pieces_coverage():
    """A binary mask's outline as joined pieces covers what its pieces covered, to float rounding."""
    from rasterkit.utils.gpu_rendering import draw, segments

    masks = torch.zeros(1, 61, 83)
    masks[0, 10:40, 12:50] = 1
    masks[0, 20:55, 30:70] = 1
    masks[0, 5:9, 60:80] = 1
    tiles = M._list_tiles(masks, 0.5, True)
    owner, a, b = M._contour_pieces(tiles, 0.5)
    joined = M._joined(owner, a, b)
    assert len(joined[0]) < len(owner) / 3

    def alpha(a, b):
        lines = segments(torch.zeros(len(a), dtype=torch.int64), a, b, 1.0, torch.ones(len(a), 4))
        lines.group = torch.zeros(len(a), dtype=torch.int64)
        return draw(torch.zeros(1, 61, 83, 3), lines)[1]

    assert torch.allclose(alpha(*joined[1:]), alpha(a, b), atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"halo_width": 6.0},
        {"opacity": 0.0},
        {"outline_width": 0.0},
        {"outline_opacity": 0.0, "opacity": 0.3, "halo_width": 4.0},
        {"outline_width": 3.5, "threshold": 0.2},
    ],
)
@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("binary", [False, True])
def test_the_overlays_primitives_match_the_torch_path(monkeypatch, options, shared, binary):
    """Every field of the fills' and outlines' primitives and the atlas, bit for bit; `shared`: one source
    shown on three frames (its pairs are each object's), else an object per source on two frames; `binary`:
    the masks rounded to 0 and 1 (their outlines' pieces are joined into runs)."""
    from rasterkit.utils.inputs.masks import from_masks

    masks = soft_masks().nan_to_num(0.0).round().clamp(0, 1) if binary else soft_masks()
    objects = from_masks(masks[:1], 3) if shared else from_masks(torch.cat([masks, masks.flip(0)]), 2)
    colors = torch.rand(len(objects), 3, generator=torch.Generator().manual_seed(4))
    ours = M.overlay(objects, 61, 83, colors, **options)
    theirs = torch_path(monkeypatch, M.overlay, objects, 61, 83, colors, **options)
    for a, b in zip(ours.prims.fields(), theirs.prims.fields(), strict=True):
        assert a.dtype == b.dtype and torch.equal(a, b)
    assert torch.equal(ours.atlas, theirs.atlas) and len(ours.prims) == len(theirs.prims) > 0
    assert torch.equal(ours.bounds, theirs.bounds) and torch.equal(ours.present, theirs.present)
    assert torch.allclose(ours.centroid, theirs.centroid, rtol=1e-6, atol=0)


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"halo_width": 6.0, "labels": "id"},
        {"labels": "id", "label_position": "center", "label_size": 8, "mask_threshold": 0.3},
        {"opacity": 0.0, "mask_threshold": 0.0, "outline_width": 1.5},
    ],
)
def test_the_node_draws_the_torch_paths_pixels(monkeypatch, options):
    masks = soft_masks()
    images = torch.rand(1, 61, 83, 3, generator=torch.Generator().manual_seed(2))
    ours = MaskRenderer.run(images, masks=masks, **options)
    expected = torch_path(monkeypatch, MaskRenderer.run, images, masks=masks, **options)
    assert all(torch.equal(a, b) for a, b in zip(ours, expected, strict=True))
