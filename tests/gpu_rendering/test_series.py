"""render_series' bar looks (radial, mirror, reflection, gradient, peak caps) and render_spectrogram:
geometry against supersampled references, symmetry, caps falling at their speed, a chirp's ridge."""

import math

import numpy as np
import pytest
import torch

from rasterkit.utils.core.batching import Ragged
from rasterkit.utils.gpu_rendering import series as S
from rasterkit.utils.inputs import audio as A
from sdf_reference import H, W, assert_close, pixel_mean, samples


def bars(values, height=H, width=W, **kw):
    values = torch.as_tensor(values, dtype=torch.float32)
    values = values[None] if values.ndim == 1 else values
    data = Ragged(values, torch.full((values.shape[0],), values.shape[1]))
    look = S.Look(**{k: kw.pop(k) for k in ("layout", "mirror", "gradient", "peak_fall") if k in kw})
    return S.render_series(data, height, width, style="bars", look=look, **kw)


def fraction(values, height):
    """Each bar's length as a fraction of its full length (series_points' mapping, scale per image)."""
    values = np.asarray(values, np.float64)
    unit = (values - values.min()) / (values.max() - values.min())
    return (0.5 + unit * (height - 1)) / height


@pytest.mark.parametrize("values", [[0.0, 1.0, 0.4, 0.7, 0.2], [1.0, 0.1, 0.6], [0.3, 0.9, 0.5, 1.0, 0.0, 0.8, 0.6]])
def test_radial_bars_match_a_supersampled_reference(values):
    """Annular sectors: value k of n between angles 2 pi (k + 1/2 -+ (1 - BAR_GAP)/2) / n clockwise from
    the top, from the hole's radius out by its fraction of the ring."""
    _, alpha = bars(values, layout="radial")
    X, Y = samples()
    dx, dy = X - W / 2, Y - H / 2
    radius, angle = np.hypot(dx, dy), np.arctan2(dx, -dy) % (2 * np.pi)
    outer = min(H, W) / 2
    base, span = S.RADIAL_HOLE * outer, (1 - S.RADIAL_HOLE) * outer
    n = len(values)
    slot = np.floor(angle * n / (2 * np.pi)).astype(int).clip(0, n - 1)
    offset = angle - 2 * np.pi * (slot + 0.5) / n
    length = fraction(values, H)[slot] * span
    inside = (np.abs(offset) <= np.pi * (1 - S.BAR_GAP) / n) & (radius >= base) & (radius <= base + length)
    assert_close(alpha[0].numpy(), pixel_mean(inside))


def test_radial_bar_of_each_value_points_at_its_angle():
    n = 12
    for k in [0, 3, 7, 11]:
        values = torch.zeros(n)
        values[k] = 1.0
        alpha = bars(values, 96, 96, layout="radial")[1][0]
        y, x = torch.nonzero(alpha > 0.5, as_tuple=True)
        dx, dy = x + 0.5 - 48, y + 0.5 - 48
        far = torch.hypot(dx, dy).argmax()  # the tip of the only long bar
        angle = math.atan2(float(dx[far]), -float(dy[far])) % (2 * math.pi)
        assert abs(angle - 2 * math.pi * (k + 0.5) / n) < math.pi / n


@pytest.mark.parametrize("mode", ["antialiased", "aliased"])
@pytest.mark.parametrize("layout", ["linear", "radial"])
def test_centre_mirror_is_symmetric(mode, layout):
    values = torch.rand(3, 9, generator=torch.Generator().manual_seed(1))
    images, alpha = bars(values, 40, 40, mirror="centre", mode=mode, layout=layout)
    assert alpha.sum() > 0
    if layout == "linear":  # about the middle line
        assert torch.allclose(alpha, alpha.flip(1), atol=1e-5)
    else:  # the tallest bar reaches as far in from the middle circle as out
        radius = torch.hypot(*torch.meshgrid(torch.arange(40) - 19.5, torch.arange(40) - 19.5, indexing="ij"))
        ink = radius[None].expand_as(alpha)[alpha > 0.5]
        middle = (S.RADIAL_HOLE + 1) / 2 * 20
        assert abs((ink.max() - middle) - (middle - ink.min())) <= 1.5


def test_reflection_is_the_bars_mirrored_below_their_baseline_fading():
    height = 60
    _, alpha = bars([0.2, 1.0, 0.5, 0.8], height, 40, mirror="reflection")
    base = height - height * S.REFLECTION_SHARE  # the baseline's row edge: 40
    above, below = alpha[0, : int(base)].flip(0), alpha[0, int(base) :]  # rows 39, 38, ... and 40, 41, ...
    v = height - (torch.arange(int(base), height) + 0.5)  # the rows' distance from the bottom
    fade = S.REFLECTION_OPACITY * v / (height * S.REFLECTION_SHARE)
    assert torch.allclose(below, above[: len(below)] * fade[:, None], atol=1e-5)
    assert alpha[0, :, 15].max() == 1 and alpha[0, 39, 15] == 1 and alpha[0, 40, 15] < S.REFLECTION_OPACITY


def test_gradient_runs_along_each_bar_from_its_base():
    images, alpha = bars([1.0, 1.0, 0.0], 50, 30, gradient=((1, 0, 0, 1), (0, 0, 1, 1)))
    column = images[0, :, 5]  # a full-height bar
    assert column[-1].tolist() == pytest.approx([1 - 0.5 / 50, 0, 0.5 / 50], abs=1e-5)
    assert column[1].tolist() == pytest.approx([1.5 / 50, 0, 1 - 1.5 / 50], abs=1e-5)  # row 0: half covered
    faded, faded_alpha = bars([1.0, 1.0, 0.0], 50, 30, gradient=((1, 1, 1, 0), (1, 1, 1, 1)))
    expected = (1 - (torch.arange(50) + 0.5) / 50) * torch.tensor([0.5] + [1.0] * 49)  # the gradient's alpha
    assert faded_alpha[0, :, 5].tolist() == pytest.approx(expected.tolist(), abs=1e-5)


def test_peak_caps_fall_at_their_speed_after_an_impulse():
    """An impulse in frame 0, then silence: the cap of band 0 drops fall x the height per frame (its
    centre measured on the image: the cap's alpha over its column, CAP_PIXELS thick) until it lands."""
    height, fall, frames = 50, 0.1, 12
    values = torch.zeros(frames, 4)
    values[0, 0] = 1.0
    data = Ragged(values, torch.full((frames,), 4))
    images, alpha = S.render_series(
        data, height, 40, style="bars", scale="shared", look=S.Look(peak_fall=fall)
    )  # 10 px slots: band 0 fills columns 1..8
    column = alpha[:, :, 5]
    for t in range(1, 7):
        cap = column[t, : height - 1]  # above silence's bar, half a pixel
        assert float(cap.sum()) == pytest.approx(S.CAP_PIXELS, abs=1e-4)
        centre = float((cap * (torch.arange(height - 1) + 0.5)).sum() / cap.sum())
        peak = (height - 0.5) / height - fall * t  # the impulse's bar, less the fall
        assert centre == pytest.approx(height - peak * height - S.CAP_PIXELS / 2, abs=1e-3), t
    assert column[frames - 1, : height - 4].sum() == 0  # landed on the bar by the last frame
    peaks = S.bar_peaks(S.series_points(values, data.lengths, values.min(), values.max(), height, 40), height, 1, fall)
    assert peaks[:, 0].tolist() == pytest.approx([max(0.99 - fall * t, 0.01) for t in range(frames)], abs=1e-6)


def test_caps_and_looks_stay_in_order_over_chunks(monkeypatch):
    """Peaks run over every image before the chunks: one image per chunk gives the same images."""
    values = torch.rand(6, 2, 8, generator=torch.Generator().manual_seed(3)).flatten(0, 1)
    data = Ragged(values, torch.full((12,), 8))
    look = S.Look(layout="radial", mirror="reflection", gradient=((1, 0, 0, 1), (0, 1, 0, 0.5)), peak_fall=0.05)
    kw = dict(per_image=2, style="bars", colors=[(1, 1, 1, 1), (0, 0, 1, 0.7)], look=look)
    whole = S.render_series(data, 32, 32, **kw)
    monkeypatch.setattr(S, "CHUNK_WORK", 1)
    chunked = S.render_series(data, 32, 32, **kw)
    assert all(torch.equal(a, b) for a, b in zip(whole, chunked, strict=True)) and whole[1].sum() > 0


RATE = 48000
GRAY = [(0, 0, 0, 1), (1, 1, 1, 1)]


def chirp(seconds=2.0, low=200.0, high=8000.0):
    """A linear chirp: its frequency at time t is low + (high - low) t / seconds."""
    t = torch.arange(int(RATE * seconds), dtype=torch.float64) / RATE
    phase = 2 * math.pi * (low * t + (high - low) / (2 * seconds) * t**2)
    return {"waveform": torch.sin(phase).float()[None, None], "sample_rate": RATE}


def ridge_bands(image, bands):
    """The band of the brightest pixel of each column of a gray spectrogram image [H,W,C]."""
    row = image[..., 0].argmax(0)
    return ((image.shape[0] - 0.5 - row) * bands / image.shape[0]).long()


@pytest.mark.parametrize("scale", ["log", "mel"])
def test_spectrogram_ridge_of_a_chirp_follows_its_frequency(scale):
    frames, bands, seconds = 32, 40, 2.0
    spectra = A.from_audio_spectrum(chirp(seconds), frames, bands=bands, min_hz=100.0, frequency_scale=scale)
    images, alpha = S.render_spectrogram(spectra.values, 2 * bands, 4 * frames, GRAY)
    assert images.shape == (1, 2 * bands, 4 * frames, 3) and bool((alpha == 1).all())
    found = ridge_bands(images[0], bands)[1::4]  # one column per frame
    _, edges = A.band_layout(RATE, 2048, bands, None, 100.0, 0.0, scale)
    time = (torch.arange(frames) + 0.5) * seconds / frames  # each frame's centre
    expected = torch.bucketize(200.0 + (8000.0 - 200.0) * time / seconds, edges, right=True) - 1
    assert (found - expected).abs().max() <= 1, (found, expected)
    assert bool((found[1:] >= found[:-1]).all())  # the ridge only rises, as the chirp does


def test_scrolling_spectrogram_shows_each_frames_history_latest_at_the_right():
    frames, bands, history = 24, 32, 8
    spectra = A.from_audio_spectrum(chirp(1.5), frames, bands=bands, min_hz=100.0)
    whole = ridge_bands(S.render_spectrogram(spectra.values, 64, frames * 2, GRAY)[0][0], bands)[::2]
    images, _ = S.render_spectrogram(spectra.values, 64, history * 2, GRAY, history=history, scale="shared")
    assert images.shape == (frames, 64, history * 2, 3)
    for t in range(history - 1, frames):
        assert torch.equal(ridge_bands(images[t], bands)[::2], whole[t - history + 1 : t + 1]), t
    assert images[0, :, : 2 * (history - 1)].sum() == 0 and images[0, :, -1].sum() > 0  # before frame 0: black
    lowest = S.render_spectrogram(spectra.values, 64, 16, GRAY, history=history, scale="shared")[0]
    assert float(lowest.min()) == 0 and float(lowest.max()) == 1


def test_spectrogram_over_a_transparent_background_keeps_the_colour_maps_alpha():
    values = torch.linspace(0, 1, 12).view(3, 4)
    layer, alpha = S.render_spectrogram(values, 8, 6, [(1, 0, 0, 0), (1, 0, 0, 1)], background=(0, 0, 0, 0))
    assert layer.shape == (1, 8, 6, 4) and torch.equal(layer[..., 3], alpha)
    assert float(alpha.min()) == 0 and float(alpha.max()) == 1 and bool((layer[..., 0][alpha > 0] == 1).all())


def test_spectrogram_rendered_elsewhere_equals_in_place(monkeypatch):
    """torch.device("cpu", 0) is not the device of CPU tensors: the render-elsewhere branch, one image a
    chunk, against the lookups written straight into the outputs."""
    values = torch.rand(9, 7, generator=torch.Generator().manual_seed(2))
    kw = dict(colormap=[(0, 0, 1, 0.5), (1, 1, 0, 1)], history=4, background=(0.2, 0, 0, 0.5))
    here = S.render_spectrogram(values, 12, 10, **kw)
    monkeypatch.setattr(S, "CHUNK_WORK", 1)
    elsewhere = S.render_spectrogram(values, 12, 10, device=torch.device("cpu", 0), **kw)
    assert all(torch.equal(a, b) for a, b in zip(here, elsewhere, strict=True)) and here[0].shape == (9, 12, 10, 4)
