"""The engines' "render elsewhere, copy back" branches, on the CPU. They are taken when the render device
differs from the inputs' device (a GPU rendering ComfyUI's CPU frames); torch.device("cpu", 0) compares
unequal to the device of any CPU tensor, so asking for it takes those branches with CPU tensors. Frames
are rendered two at a time, each frame different, so that a chunk copied to the wrong frames, or not
copied back, shows; the expected values are the same calls rendering where the inputs are (the torch
path, which tests/gpu_rendering/test_compositor.py and test_line_plots.py check against references)."""

import pytest
import torch

from rasterkit.utils import gpu_rendering as R
from rasterkit.utils.core import device as D
from rasterkit.utils.gpu_rendering import compositor, line_plots

ELSEWHERE = torch.device("cpu", 0)
B, H, W = 5, 27, 38


def test_an_indexed_cpu_device_is_elsewhere_for_cpu_tensors():
    assert D.normalize(ELSEWHERE) == ELSEWHERE
    assert torch.zeros(1).device != ELSEWHERE and torch.zeros(1, device=ELSEWHERE).device != ELSEWHERE


@pytest.fixture
def two_frames_a_chunk(monkeypatch):
    """Chunks of two frames in every run_chunked of the renderer; records the devices each chunk ran on.
    The OpenCV path of aliased plots (CPU only, drawn where the output is) is off: these are the
    branches a GPU takes."""
    chunks = []
    monkeypatch.setattr(line_plots, "_draw_cpu", lambda *args, **kwargs: False)

    def run_chunked(fn, total, bytes_per_item, device, on_chunk=None, limit=None):
        def recorded(start, stop, dev):
            chunks.append((start, stop, dev))
            return fn(start, stop, dev)

        return D.run_chunked(recorded, total, bytes_per_item, device, on_chunk, limit=2)

    monkeypatch.setattr(compositor, "run_chunked", run_chunked)
    monkeypatch.setattr(line_plots, "run_chunked", run_chunked)
    return chunks


def scene():
    """A different drawing on each of B frames, over random RGBA frames."""
    g = torch.Generator().manual_seed(5)
    frames = torch.arange(B)
    corner = torch.rand(B, 2, generator=g) * torch.tensor([W - 12.0, H - 12.0])
    prims = R.concat(
        R.rounded_boxes(
            frames,
            torch.cat([corner, corner + 4 + frames[:, None] * 2.0], 1),
            2.0,
            3.0,
            (1, 0.5, 0, 1),
            (0, 0.5, 1, 0.6),
        ),
        R.discs(frames, corner + 6, 2.0 + frames, (0.2, 1, 0.2, 0.8)),
    )
    return torch.rand(B, H, W, 4, generator=g), prims


def test_draw_rendered_elsewhere_comes_back_frame_for_frame(two_frames_a_chunk):
    images, prims = scene()
    before = images.clone()
    expected = R.draw(images, prims)
    assert [dev for _, _, dev in two_frames_a_chunk] == [torch.device("cpu")] * 3
    two_frames_a_chunk.clear()
    got = R.draw(images, prims, device=ELSEWHERE)
    assert two_frames_a_chunk == [(0, 2, ELSEWHERE), (2, 4, ELSEWHERE), (4, 5, ELSEWHERE)]
    assert torch.equal(images, before)
    for name, e, g in zip(("image", "alpha", "layer"), expected, got, strict=False):
        assert g.device == images.device and g.shape == e.shape, name
        assert torch.equal(g, e), name
    assert all(float(got[1][b].sum()) > 10 for b in range(B))  # every frame draws something


def test_draw_falls_back_to_the_cpu_when_one_frame_does_not_fit_elsewhere(two_frames_a_chunk, monkeypatch):
    """run_chunked's last resort inside draw: out of memory on a single frame moves the rest to the CPU,
    where the primitives must be too."""
    images, prims = scene()
    expected = R.draw(images, prims)
    two_frames_a_chunk.clear()
    render = compositor._render

    def out_of_memory_on_meta(frames, *args):
        if frames.device.type == "meta":
            raise torch.OutOfMemoryError("simulated")
        render(frames, *args)

    monkeypatch.setattr(compositor, "_render", out_of_memory_on_meta)
    got = R.draw(images, prims, device="meta")
    cpu, meta = torch.device("cpu"), torch.device("meta")
    assert two_frames_a_chunk == [
        (0, 2, meta),
        (0, 1, meta),
        (0, 1, cpu),
        (1, 2, cpu),
        (2, 3, cpu),
        (3, 4, cpu),
        (4, 5, cpu),
    ]
    assert all(torch.equal(g, e) for g, e in zip(got, expected, strict=False))


@pytest.mark.parametrize(
    "options",
    [
        dict(mode="aliased"),  # the fast path: _plot_lines
        dict(mode="aliased", channels=3, color=(1, 0.5, 0, 1)),
        dict(mode="antialiased", line_width=2.5, fill_color=(0, 0, 1, 0.4)),
        dict(mode="aliased", dtype=torch.uint8),
    ],
)
def test_polylines_rendered_elsewhere_come_back_image_for_image(two_frames_a_chunk, options):
    g = torch.Generator().manual_seed(2)
    values = torch.cumsum(torch.randn(B, 30, generator=g) * (1 + torch.arange(B)[:, None]), 1)
    lengths = torch.tensor([30, 12, 30, 2, 25])
    expected = R.render_polylines(values, H, W, lengths=lengths, **options)
    two_frames_a_chunk.clear()
    got = R.render_polylines(values, H, W, lengths=lengths, device=ELSEWHERE, **options)
    # (antialiased lines call draw on each chunk, which runs chunks of its own where they are)
    assert [(start, stop) for start, stop, dev in two_frames_a_chunk if dev == ELSEWHERE] == [(0, 2), (2, 4), (4, 5)]
    assert got.device == values.device and got.dtype == expected.dtype
    assert torch.equal(got, expected)
    assert all(bool(got[b].any()) for b in range(B))
