"""SeriesToImages: text and audio sources, styles, bad input."""

import math

import pytest
import torch

from rasterkit.nodes.series import SeriesToImages as Node
from rasterkit.utils.core.batching import Ragged
from rasterkit.utils.gpu_rendering import series as S
from rasterkit.utils.inputs import audio as A
from rasterkit.utils.inputs import series as P


def run(**kw):
    kw.setdefault("width", 64)
    kw.setdefault("height", 48)
    return Node.run(**kw)[0]


def test_json_and_csv_give_the_same_plots():
    from_json = run(series="[[1, 3, 2, 5], [4, 4, 1, 0]]")
    assert from_json.shape == (2, 48, 64, 3) and from_json.max() == 1.0
    assert torch.equal(run(series="1,3,2,5\n4,4,1,0"), from_json)
    assert torch.equal(run(series="a,b\n1,4\n3,4\n2,1\n5,0", csv_series="columns"), from_json)
    assert run(series="[1, 2, 3]").shape[0] == 1  # a flat list is one series


def test_ragged_series_and_gaps():
    table = P.from_text("[[1, 2, 3, 4], [1, null, 3]]")
    assert table.lengths.tolist() == [4, 3] and math.isnan(table.values[1, 1])
    assert P.from_text("1,,3\n4,5,6").values[0, 1].isnan()
    images = run(series="[[1, 2, 3, 4], [1, 2, null, 3, 4]]", mode="aliased")
    assert images[1].sum() > 0


def test_styles():
    image = run(series="[[0, 1]]", line_color="#FF0000", background="#0000FF", mode="aliased")[0]
    assert image[0, 0].tolist() == [0, 0, 1] and image[47, 0].tolist() == [1, 0, 0]
    filled = run(series="[[1, 1]]", fill=True, fill_color="#00FF0080", background="#000000")[0]
    assert filled[40, 30, 1] == pytest.approx(128 / 255, abs=1e-3) and filled[5, 30].sum() == 0


def test_audio_windows_become_frames():
    waveform = torch.sin(torch.linspace(0, 200, 4800))[None, None].repeat(1, 2, 1)
    images = run(audio={"waveform": waveform, "sample_rate": 48000}, frames=12, scale="shared")
    assert images.shape == (12, 48, 64, 3)


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(series="[[1, 2,"), "series: not valid JSON"),
        (dict(series=""), "series: empty"),
        (dict(series='{"a": 1}'), "series: series 'a' is not a list: 1"),
        (dict(series="[[1, 2], 3]"), "series: series 1 is not a list"),
        (dict(series='[[1, "x"]]'), "series: series 0 value 1 is not a number"),
        (dict(series="[[1, Infinity]]"), "series: series 0 value 1 is infinite"),
        (dict(series="1,2\n3,abc"), "series: row 2, column 2 is not a number"),
        (dict(series="[[1, 2]]", line_color="white"), "line_color: expected a hex colour"),
        (dict(series="[[1, 2]]", fill=True, fill_color="#12"), "fill_color: expected a hex colour"),
        (dict(audio={"waveform": torch.zeros(1, 1, 10)}, frames=48), "audio: 10 samples cannot make 48 frames"),
        (dict(audio={"waveform": torch.zeros(1, 2, 0)}, frames=1), "audio: 0 samples cannot make 1 frames"),
        (
            dict(audio={"waveform": torch.zeros(0, 1, 100)}, frames=4),
            r"audio: the waveform holds no clip .*\(0, 1, 100\)",
        ),
        (dict(audio={"waveform": torch.zeros(1, 1, 100)}, frames=0), "frames: expected at least 1 window, got 0"),
        (dict(audio={"samples": []}), "audio: expected ComfyUI AUDIO"),
        (dict(audio={"waveform": torch.zeros(10)}), "audio: waveform must be a tensor"),
    ],
)
def test_bad_input_names_the_input(kw, message):
    with pytest.raises(ValueError, match=message):
        run(**kw)


def test_series_of_different_lengths_each_span_the_width():
    images = run(series="1,2,3,4,5,6\n6,5,4\n2,2", mode="aliased", scale="shared")
    assert images.shape[0] == 3
    for image in images:
        assert image[:, 0].sum() > 0 and image[:, -1].sum() > 0
    assert torch.equal(run(series="[[1, 2, 3, 4, 5, 6], [6, 5, 4], [2, 2]]", mode="aliased", scale="shared"), images)


def test_empty_and_nan_series_are_blank():
    images = run(series="[[], [NaN, NaN], [5]]", background="#000000")
    assert images.shape[0] == 3 and images.sum() == 0


# -- spectrum, fps, overlay, alpha ----------------------------------------------------------------------

RATE = 48000


def tone(frequency, seconds=1.0, channels=1, amplitude=1.0):
    t = torch.arange(int(RATE * seconds)) / RATE
    return {
        "waveform": (amplitude * torch.sin(2 * math.pi * frequency * t))[None, None].repeat(1, channels, 1),
        "sample_rate": RATE,
    }


def numpy_bands(samples, fft_size, bands):
    """Reference band amplitudes of one window (numpy FFT, periodic Hann): per band, the largest bin
    within its log-frequency edges, where it has one."""
    import numpy as np

    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(fft_size) / fft_size)
    amplitude = np.abs(np.fft.rfft(samples * hann)) * 2 / hann.sum()
    centres = np.geomspace(max(20.0, RATE / fft_size), RATE / 2, bands)
    edges = np.concatenate(
        [
            [centres[0] ** 1.5 / centres[1] ** 0.5],
            np.sqrt(centres[:-1] * centres[1:]),
            [centres[-1] ** 1.5 / centres[-2] ** 0.5],
        ]
    )
    frequency = np.arange(len(amplitude)) * RATE / fft_size
    return centres, [
        amplitude[(frequency >= lo) & (frequency < hi)].max(initial=-1.0)
        for lo, hi in zip(edges[:-1], edges[1:], strict=False)
    ]


@pytest.mark.parametrize("frequency", [110.0, 1000.0, 7040.0])
def test_spectrum_of_a_sine_peaks_at_its_band_as_numpy_computes_it(frequency):
    import numpy as np

    audio = tone(frequency)
    spectrum = A.from_audio_spectrum(audio, frames=4, fft_size=2048, bands=48, magnitude="linear")
    assert spectrum.values.shape == (4, 48) and spectrum.lengths.tolist() == [48] * 4
    centres, reference = numpy_bands(
        audio["waveform"][0, 0, 6000 - 1024 : 6000 + 1024].numpy().astype(np.float64), 2048, 48
    )
    frame = spectrum.values[0].numpy()  # frame 0 of 4 over 48000 samples: centred on sample 6000
    for value, expected in zip(frame, reference, strict=False):
        if expected >= 0:  # bands that hold a bin: their largest bin
            assert value == pytest.approx(expected, rel=1e-3, abs=1e-5)
    peak = int(np.argmin(np.abs(np.log(centres / frequency))))
    assert abs(int(frame.argmax()) - peak) <= 1 and frame.max() == pytest.approx(1.0, abs=0.2)  # Hann scalloping
    decibels = A.from_audio_spectrum(audio, frames=4, fft_size=2048, bands=48).values[0]
    assert torch.allclose(decibels, 20 * torch.from_numpy(frame).clamp_min(1e-4).log10(), atol=1e-4)


def test_spectrum_image_draws_the_peak_at_its_x_position():
    centres = A.spectrum_bands(RATE, 2048, 32)
    peak = int((centres / 2000.0).log().abs().argmin())
    line = run(audio=tone(2000.0), frames=2, audio_plot="spectrum", bands=32, mode="aliased", width=320, height=60)
    top_row = (line[0].sum(-1) > 0).float().argmax(0)  # first ink row of each column
    top_row[line[0].sum((0, 2)) == 0] = 60
    expected_x = 0.5 + peak * 319 / 31
    assert abs(int(top_row.argmin()) + 0.5 - expected_x) <= 1
    bars = run(
        audio=tone(2000.0),
        frames=2,
        audio_plot="spectrum",
        bands=32,
        style="bars",
        mode="aliased",
        width=320,
        height=60,
    )[0]
    assert int(bars[0].sum(-1).argmax()) // 10 == peak and bars[0, peak * 10 + 5].sum() > 0  # 10 px slots
    assert bars[:, peak * 10 + 0].sum() == 0  # the gap between bars


def test_spectrum_smoothing_is_an_exponential_moving_average_over_frames():
    import numpy as np

    for frames, factor in [(1, 0.5), (2, 0.3), (10, 0.9), (37, 0.5), (101, 0.99)]:
        values = torch.rand(frames, 5)
        expected = values.numpy().astype(np.float64).copy()
        for t in range(1, frames):
            expected[t] = factor * expected[t - 1] + (1 - factor) * expected[t]
        assert np.allclose(A.exponential_smoothing(values, factor).numpy(), expected, atol=1e-5), (frames, factor)
    burst = torch.zeros(1, 1, RATE)
    burst[0, 0, : RATE // 4] = torch.sin(torch.arange(RATE // 4) * 0.3)  # sound, then silence
    raw = A.from_audio_spectrum({"waveform": burst, "sample_rate": RATE}, 8, magnitude="linear").values
    smooth = A.from_audio_spectrum(
        {"waveform": burst, "sample_rate": RATE}, 8, magnitude="linear", smoothing=0.5
    ).values
    assert torch.allclose(smooth[3], 0.5 * smooth[2] + 0.5 * raw[3], atol=1e-6) and smooth[5].max() > raw[5].max()


@pytest.mark.parametrize("seconds,fps,frames", [(2.0, 24.0, 48), (2.0, 29.97, 60), (1.0, 12.5, 12), (0.01, 24.0, 1)])
def test_fps_gives_duration_times_fps_frames(seconds, fps, frames):
    audio = tone(440.0, seconds)
    assert A.from_audio(audio, 7, fps=fps).batch == frames
    assert A.from_audio_spectrum(audio, 7, fps=fps, fft_size=256).batch == frames
    images, alpha = Node.run(audio=audio, fps=fps, audio_plot="spectrum", width=32, height=16)
    assert images.shape == (frames, 16, 32, 3) and alpha.shape == (frames, 16, 32)


def test_fps_windows_are_centred_on_their_frames():
    clicks = torch.zeros(1, 1, RATE)
    clicks[0, 0, [1000, 21700, 47999]] = 1.0
    audio = {"waveform": clicks, "sample_rate": RATE}
    windows = A.from_audio(audio, 1, fps=10.0).values  # 4800 samples per frame
    assert windows.shape == (10, 4800)
    assert windows.nonzero().tolist() == [[0, 1000], [4, 21700 - 4 * 4800], [9, 47999 - 9 * 4800]]
    spectrum = A.from_audio_spectrum(audio, 1, fps=10.0, fft_size=1024, magnitude="linear").values
    loud = spectrum.amax(1) > 0  # a click is heard by the window around it (frame centres at 2400 + 4800 i)
    assert loud.nonzero().flatten().tolist() == [4]
    frames_mode = A.from_audio(tone(440.0, 0.1), 12).values
    assert torch.equal(frames_mode, tone(440.0, 0.1)["waveform"][0, 0, :4800].reshape(12, 400))  # as before fps


def test_overlay_draws_every_series_in_one_image_in_its_colour():
    image = run(series='{"low": [0, 0], "high": [1, 1]}', overlay=True, colors="#FF0000, #00FF00", mode="aliased")
    assert image.shape == (1, 48, 64, 3)
    assert image[0, 47, 10].tolist() == [1, 0, 0] and image[0, 0, 10].tolist() == [0, 1, 0]
    assert image[0, 20, 10].tolist() == [0, 0, 0]
    crossing = run(
        series="[[0, 0, 1, 1], [1, 1, 0, 0], [0.5, 0.5, 0.5, 0.5]]",
        overlay=True,
        colors="#FF0000,#0000FF",
        mode="aliased",
        width=61,
        height=61,
    )[0]
    assert crossing[30, 30].tolist() == [1, 0, 0]  # series 2 cycles back to red and is drawn last, on top
    assert crossing[60, 0].tolist() == [1, 0, 0] and crossing[0, 0].tolist() == [0, 0, 1]
    tab10 = run(series="[[1, 2], [2, 1]]", overlay=True, mode="aliased")[0]
    assert tab10[47, 0].tolist() == pytest.approx([0x1F / 255, 0x77 / 255, 0xB4 / 255])
    filled = run(
        series="[[0, 1], [1, 1]]",
        overlay=True,
        colors="#FF0000,#0000FF",
        fill=True,
        fill_color="#FFFFFF80",
        mode="aliased",
    )[0]
    assert filled[46, 10].tolist() == pytest.approx([0.251, 0, 0.502], abs=2e-3)  # both areas: blue over red
    assert filled[20, 5].tolist() == pytest.approx([0, 0, 0.502], abs=2e-3)  # above the red line: blue only


def test_overlaid_audio_channels_share_each_frame():
    stereo = tone(440.0, 0.1, channels=2)
    stereo["waveform"][:, 1] *= 0.25
    images, alpha = Node.run(audio=stereo, frames=6, overlay=True, colors="#FF0000,#00FF00", width=64, height=48)
    assert images.shape == (6, 48, 64, 3) and alpha.shape == (6, 48, 64)
    assert images[..., 0].amax() > 0.9 and images[..., 1].amax() > 0.9  # both channels drawn in each frame
    assert images[:, :8, :, 1].sum() == 0  # the quiet channel stays near the middle (scale per image)


@pytest.mark.parametrize(
    "kw",
    [
        dict(),
        dict(fill=True, line_color="#FF8000C0", fill_color="#00FFFF60"),
        dict(style="bars", mode="aliased"),
        dict(overlay=True, fill=True),
    ],
)
def test_alpha_output_is_the_opacity_of_the_ink(kw):
    kw = dict(series="[[3, 1, 4, 1, 5, 9], [2, 6, 5, 3, 5, 8]]", width=64, height=48, **kw)
    on_black, alpha = Node.run(background="#000000", **kw)
    on_white, alpha_again = Node.run(background="#FFFFFF", **kw)
    assert torch.equal(alpha, alpha_again) and alpha.max() > 0.5 and alpha.min() == 0
    assert torch.allclose(1 - (on_white - on_black), alpha[..., None].expand_as(on_black), atol=1e-5)
    layer, alpha_transparent = Node.run(background="#00000000", **kw)
    assert layer.shape[-1] == 4 and torch.equal(layer[..., 3], alpha_transparent)
    assert torch.allclose(layer[..., :3] * layer[..., 3:], on_black, atol=1e-5)
    half, _ = Node.run(background="#0000FF80", **kw)
    assert torch.allclose(half[..., 3], alpha + (1 - alpha) * 128 / 255, atol=1e-6)


def test_bars_span_their_slots():
    image = run(series="[[1, 2, 3, 4]]", style="bars", mode="aliased", width=40, height=40)[0].sum(-1) > 0
    columns = image.any(0).nonzero().flatten().tolist()
    assert columns == [c for k in range(4) for c in range(10 * k + 1, 10 * k + 9)]  # gaps of 2 px
    heights = image.sum(0)[[5, 15, 25, 35]].tolist()
    assert heights[0] == 1 and heights[-1] == 40 and heights == sorted(heights)


@pytest.mark.parametrize(
    "kw",
    [
        dict(series="[[NaN, 1, 2, NaN, 4]]", overlay=True),
        dict(series="[[], [1, 2]]", overlay=True),
        dict(series="[[1, 2, 3, 4, 5, 6], [6, 5]]", overlay=True),
        dict(series="[[NaN]]", style="bars"),
        dict(audio={"waveform": torch.zeros(1, 2, 4800), "sample_rate": RATE}, frames=4, audio_plot="spectrum"),
        dict(audio={"waveform": torch.zeros(1, 1, 100), "sample_rate": RATE}, frames=2, audio_plot="spectrum"),
        dict(
            audio={"waveform": torch.rand(1, 1, 100), "sample_rate": RATE},
            fps=1000.0,
            audio_plot="spectrum",
            style="bars",
        ),
    ],
)
def test_degenerate_input_draws_finite_images(kw):
    images, alpha = Node.run(width=32, height=24, **kw)
    assert images.isfinite().all() and alpha.isfinite().all() and 0 <= float(alpha.min()) <= float(alpha.max()) <= 1
    if "series" in kw and "NaN]]" in kw["series"]:
        assert alpha.sum() == 0


def test_ragged_overlay_series_each_span_the_width():
    image = run(series="[[1, 2, 3, 4, 5, 6], [6, 5]]", overlay=True, colors="#FF0000,#00FF00", mode="aliased")[0]
    assert image[:, -1, 0].sum() > 0 and image[:, -1, 1].sum() > 0


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(series="[[1, 2]]", overlay=True, colors="tab11"), "colors: colour 1: expected a hex colour .* 'tab11'"),
        (dict(series="[[1, 2]]", overlay=True, colors=" , "), "colors: expected hex colours like"),
        (dict(audio={"waveform": torch.zeros(1, 1, 100)}, fps=24.0), "audio: needs a positive 'sample_rate'"),
        (
            dict(audio={"waveform": torch.zeros(1, 1, 100)}, audio_plot="spectrum"),
            "audio: needs a positive 'sample_rate'",
        ),
        (
            dict(audio={"waveform": torch.zeros(1, 1, 100), "sample_rate": 8000}, fps=6000.0),
            "fps: 6000 frames per second leave fewer than 2 samples per frame at 8000 Hz",
        ),
        (
            dict(audio={"waveform": torch.zeros(1, 1, 10), "sample_rate": 8000}, frames=11, audio_plot="spectrum"),
            "audio: 10 samples cannot make 11 frames of at least 1 sample",
        ),
    ],
)
def test_bad_audio_and_colour_input_names_the_input(kw, message):
    with pytest.raises(ValueError, match=message):
        run(**kw)


@pytest.mark.parametrize(
    "options", [dict(style="line", fill_colors=[(0, 1, 0, 0.5)] * 2), dict(style="bars", background=(0, 0, 1, 0.5))]
)
def test_render_series_elsewhere_copies_every_chunk_back(monkeypatch, options):
    """torch.device("cpu", 0) is not the device of CPU tensors: the render-elsewhere branch, in chunks of
    one image (two series each), against the same call rendered where the data is."""
    from rasterkit.utils.core import device as D

    elsewhere, chunks = torch.device("cpu", 0), []

    def run_chunked(fn, total, bytes_per_item, device, on_chunk=None, limit=None):
        def recorded(start, stop, dev):
            chunks.append((start, stop, dev))
            return fn(start, stop, dev)

        return D.run_chunked(recorded, total, bytes_per_item, device, on_chunk, limit=1)

    monkeypatch.setattr(S, "run_chunked", run_chunked)
    data = P.from_text("[[1, 5, 2, 8], [3, 3, 1], [9, 1, 9, 1, 9], [2, 4], [7, 1, 2, 6], [0, 0, 1]]")
    kw = dict(colors=[(1, 0, 0, 1), (0, 0, 1, 0.75)], **options)
    expected = S.render_series(data, 20, 30, per_image=2, **kw)
    chunks.clear()
    got = S.render_series(data, 20, 30, per_image=2, device=elsewhere, **kw)
    assert [(start, stop) for start, stop, dev in chunks if dev == elsewhere] == [(0, 1), (1, 2), (2, 3)]
    for image, expected_image in zip(got, expected, strict=False):
        assert image.device == data.values.device and torch.equal(image, expected_image)
        assert all(bool(frame.any()) for frame in image)


@pytest.mark.parametrize(
    "options",
    [
        dict(),  # one layer on an opaque background
        dict(fill_colors=((0, 0, 1, 0.4),)),  # a fill under the line
        dict(background=(0.2, 0.1, 0, 0.5), fill_colors=((0, 1, 0, 0.3),)),  # RGBA out
        dict(
            per_image=2, colors=((1, 0, 0, 1), (0, 1, 0, 0.6)), fill_colors=((0, 0, 1, 0.3), (1, 1, 0, 0.2))
        ),  # 4 layers
    ],
)
def test_few_layers_blended_one_by_one_equal_the_product_over_layers(monkeypatch, options):
    g = torch.Generator().manual_seed(4)
    data = Ragged(torch.randn(4, 30, generator=g).cumsum(1), torch.tensor([30, 12, 30, 2]))
    one_by_one = S.render_series(data, 20, 30, **options)
    monkeypatch.setattr(S, "FEW_LAYERS", 0)  # every image through the product over its layers
    product = S.render_series(data, 20, 30, **options)
    for got, expected in zip(one_by_one, product, strict=False):
        assert got.shape == expected.shape and (got - expected).abs().max() <= 1e-5
    assert one_by_one[1].sum() > 10


def test_spectrum_bars_keep_a_gpu_budget(monkeypatch):
    """An audio spectrum video (96 frames of 64 bars, smoothed) and 200 series overlaid with fills on a
    transparent background: a bounded number of device ops whatever the frame count, no host sync
    for the spectrum, no float64."""
    from opcount import OpCount
    from rasterkit.utils.gpu_rendering import line_plots

    monkeypatch.setattr(line_plots, "_draw_cpu", lambda *a, **k: False)  # a GPU's path: the torch one
    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    audio = tone(440.0, 4.0, channels=2)
    with OpCount() as count:
        Node.run(audio=audio, frames=96, audio_plot="spectrum", style="bars", width=128, height=64)
    assert count.launches <= 200 and count.syncs == 0 and count.float64 == 0, count.summary()
    series = str(torch.randn(200, 100).cumsum(1).tolist())
    with OpCount() as count:
        Node.run(series=series, overlay=True, fill=True, mode="aliased", background="#00000000")
    assert count.launches <= 250 and count.syncs <= 2 and count.float64 == 0, count.summary()


# -- audio visualiser looks: frequency range and scale, radial, mirror, gradient, caps, spectrogram ---------


@pytest.mark.parametrize("scale", ["log", "linear", "mel", "bark", "1/3 octave"])
def test_a_sine_draws_the_radial_bar_at_its_bands_angle(scale):
    range_ = dict(min_hz=100.0, max_hz=10000.0, frequency_scale=scale)
    centres, edges = A.band_layout(RATE, 2048, 24, None, 100.0, 10000.0, scale)
    band, count = int(torch.bucketize(torch.tensor(3000.0), edges, right=True)) - 1, len(centres)
    _, alpha = Node.run(
        audio=tone(3000.0, 0.2), frames=2, audio_plot="spectrum", bands=24, magnitude="linear", smoothing=0.0,
        style="bars", layout="radial", width=96, height=96, **range_,
    )  # fmt: skip
    y, x = torch.nonzero(alpha[0] > 0.5, as_tuple=True)
    dx, dy = x + 0.5 - 48, y + 0.5 - 48
    far = torch.hypot(dx, dy).argmax()  # the tip of the tallest bar
    angle = math.atan2(float(dx[far]), -float(dy[far])) % (2 * math.pi)
    assert abs(angle - 2 * math.pi * (band + 0.5) / count) < math.pi / count, (angle, band, count)


def test_new_inputs_at_their_defaults_draw_what_the_audio_spectrum_template_drew():
    import json
    from pathlib import Path

    prompt = json.loads((Path(__file__).parents[1] / "workflows" / "08 Audio spectrum.api.json").read_text())
    defaults = dict(min_hz=20.0, max_hz=0.0, frequency_scale="log", layout="linear", mirror="none", gradient="")
    defaults.update(peak_fall=0.0, history=0)
    # the template's inputs less the new ones (the API file now holds them at their defaults too)
    inputs = {k: v for k, v in prompt["2"]["inputs"].items() if not isinstance(v, list) and k not in defaults}
    inputs.update(audio=tone(440.0, 0.5, channels=2), width=128, height=48)
    before, alpha_before = Node.run(**inputs)
    after, alpha_after = Node.run(**inputs, **defaults)
    assert torch.equal(before, after) and torch.equal(alpha_before, alpha_after)
    assert not S.Look().styled  # the default look takes the plain bar path


@pytest.mark.parametrize(
    "look",
    [
        dict(layout="radial"),
        dict(mirror="centre"),
        dict(mirror="reflection", gradient="magma"),
        dict(peak_fall=0.02, gradient="#FF0000, #FFFF00"),
        dict(layout="radial", mirror="reflection", peak_fall=0.05, gradient="viridis"),
    ],
)
def test_looks_draw_finite_images_with_their_alpha(look):
    kw = dict(audio=tone(880.0, 0.5, channels=2), frames=6, audio_plot="spectrum", style="bars", width=48, height=40)
    images, alpha = Node.run(background="#00000000", overlay=True, **kw, **look)
    assert images.shape == (6, 40, 48, 4) and torch.equal(images[..., 3], alpha)
    assert images.isfinite().all() and 0 < float(alpha.max()) <= 1 and float(alpha.min()) == 0


def test_spectrogram_mode_gives_one_image_or_one_per_frame():
    audio = tone(1000.0, 0.5)
    whole, alpha = Node.run(audio=audio, frames=10, audio_plot="spectrogram", width=40, height=32)
    assert whole.shape == (1, 32, 40, 3) and bool((alpha == 1).all())
    scrolling, _ = Node.run(audio=audio, frames=10, audio_plot="spectrogram", history=5, width=40, height=32)
    assert scrolling.shape == (10, 32, 40, 3)
    row = int(whole[0, :, 20].sum(-1).argmax())  # 1 kHz on log bands from 23 Hz: ~58% of the way up
    assert abs((32 - 0.5 - row) / 32 - math.log(1000 / (RATE / 2048)) / math.log(24000 / (RATE / 2048))) < 0.06
    gray = Node.run(audio=audio, frames=10, audio_plot="spectrogram", gradient="gray", width=40, height=64)[0]
    assert torch.allclose(gray[..., 0], gray[..., 2]) and float(gray.max()) == 1  # a row per band: the peak shown


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(min_hz=5000.0, max_hz=1000.0), "min_hz: 5000 Hz is not below the highest band, 1000 Hz"),
        (dict(max_hz=5.0), "max_hz: 5 Hz is not above the lowest band"),
        (dict(gradient="rainbow"), "gradient: colour 1: expected a hex colour .*'rainbow'; or a colour map: magma"),
        (dict(frequency_scale="erb"), "frequency_scale: expected one of"),
        (dict(layout="spiral", style="bars"), "layout: expected one of linear, radial, got 'spiral'"),
        (dict(mirror="both", style="bars"), "mirror: expected one of none, centre, reflection"),
    ],
)
def test_bad_look_input_names_the_input(kw, message):
    with pytest.raises(ValueError, match=message):
        Node.run(audio=tone(440.0, 0.1), frames=2, audio_plot="spectrum", width=16, height=16, **kw)


def test_looks_and_spectrograms_keep_a_gpu_budget(monkeypatch):
    """Radial reflected bars with a gradient and caps, and a scrolling spectrogram: the same bounded
    number of device ops for 24 frames as for 96 (nothing per frame or per bar), no sync, no float64."""
    from opcount import OpCount

    monkeypatch.setenv("RASTERKIT_DISABLE_NUMBA", "1")
    looks = dict(layout="radial", mirror="reflection", gradient="magma", peak_fall=0.02, style="bars")
    counts = []
    for frames in (24, 96):
        for plot in (dict(audio_plot="spectrum", **looks), dict(audio_plot="spectrogram", history=16)):
            with OpCount() as count:
                Node.run(audio=tone(440.0, 4.0), frames=frames, width=128, height=64, **plot)
            assert count.syncs == 0 and count.float64 == 0, count.summary()
            counts.append(count.launches)
    assert counts[:2] == counts[2:] and max(counts) <= 300, counts
