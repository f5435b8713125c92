"""Audio spectra's bands: frequency range and scales (log, linear, mel, bark, 1/3 octave) against known
signals and the scales' own formulas."""

import math

import numpy as np
import pytest
import torch

from rasterkit.utils.inputs import audio as A

RATE = 48000
SCALES = ["log", "linear", "mel", "bark", "1/3 octave"]


def tone(frequency, seconds=0.5):
    t = torch.arange(int(RATE * seconds)) / RATE
    return {"waveform": torch.sin(2 * math.pi * frequency * t)[None, None], "sample_rate": RATE}


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("frequency", [150.0, 1000.0, 5000.0])
def test_a_sine_lands_in_the_band_that_holds_its_frequency(scale, frequency):
    range_ = dict(min_hz=60.0, max_hz=12000.0, frequency_scale=scale)
    spectrum = A.from_audio_spectrum(tone(frequency), 2, fft_size=4096, bands=24, magnitude="linear", **range_)
    centres, edges = A.band_layout(RATE, 4096, 24, None, 60.0, 12000.0, scale)
    assert spectrum.values.shape == (2, len(centres)) and len(edges) == len(centres) + 1
    expected = int(torch.bucketize(torch.tensor(frequency), edges, right=True)) - 1
    assert edges[expected] <= frequency < edges[expected + 1]
    assert int(spectrum.values[0].argmax()) == expected
    assert float(spectrum.values[0].max()) == pytest.approx(1.0, abs=0.2)  # a full-scale sine (Hann scalloping)


def test_scales_space_their_centres_by_their_formulas_within_the_range():
    def even(values):
        steps = np.diff(values)
        return np.allclose(steps, steps[0], rtol=1e-3)

    low, high = 50.0, 16000.0
    centres = {s: A.spectrum_bands(RATE, 2048, 20, None, low, high, s).double().numpy() for s in SCALES}
    for scale in ["log", "linear", "mel", "bark"]:
        assert centres[scale][0] == pytest.approx(low, rel=1e-4) and centres[scale][-1] == pytest.approx(high, rel=1e-4)
    assert even(np.log(centres["log"])) and even(centres["linear"])
    assert even(2595 * np.log10(1 + centres["mel"] / 700))
    assert even(26.81 * centres["bark"] / (1960 + centres["bark"]) - 0.53)
    nominal = [63, 80, 100, 125, 160, 200, 250, 315, 400, 500, 630, 800, 1000, 1250, 1600, 2000, 2500, 3150]
    nominal += [4000, 5000, 6300, 8000, 10000, 12500, 16000]  # IEC 61260 / ANSI S1.11 third-octave names
    assert np.allclose(centres["1/3 octave"], nominal, rtol=0.03)


def test_default_range_is_20_hz_to_nyquist_on_log_bands():
    centres = A.spectrum_bands(RATE, 2048, 64)
    assert centres[0] == pytest.approx(RATE / 2048) and centres[-1] == pytest.approx(RATE / 2)
    assert A.spectrum_bands(RATE, 256, 8, max_hz=30000.0)[-1] == pytest.approx(RATE / 2)  # capped at Nyquist


@pytest.mark.parametrize(
    "kw,message",
    [
        (dict(min_hz=5000.0, max_hz=2000.0), r"min_hz: 5000 Hz is not below the highest band, 2000 Hz"),
        (dict(min_hz=30000.0), r"min_hz: 30000 Hz is not below the highest band, 24000 Hz"),
        (dict(max_hz=10.0), r"max_hz: 10 Hz is not above the lowest band the FFT resolves, 23.4375 Hz"),
        (dict(min_hz=-1.0), r"min_hz, max_hz: expected frequencies >= 0 Hz"),
        (dict(min_hz=1010.0, max_hz=1100.0, scale="1/3 octave"), r"min_hz, max_hz: no 1/3-octave band centre"),
        (dict(scale="erb"), r"frequency_scale: expected one of log, linear, mel, bark, 1/3 octave, got 'erb'"),
    ],
)
def test_bad_ranges_name_the_input(kw, message):
    with pytest.raises(ValueError, match=message):
        A.band_layout(RATE, 2048, 16, None, **kw)
