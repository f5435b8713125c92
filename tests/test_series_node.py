"""SeriesToImages: text and audio sources, styles, bad input."""
import math

import pytest
import torch

from rasterkit.nodes.series import SeriesToImages as Node
from rasterkit.utils import series as S


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
    table = S.from_text("[[1, 2, 3, 4], [1, null, 3]]")
    assert table.lengths.tolist() == [4, 3] and math.isnan(table.values[1, 1])
    assert S.from_text("1,,3\n4,5,6").values[0, 1].isnan()
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


@pytest.mark.parametrize("kw,message", [
    (dict(series="[[1, 2,"), "series: not valid JSON"),
    (dict(series=""), "series: empty"),
    (dict(series='{"a": 1}'), "series: expected a list"),
    (dict(series="[[1, 2], 3]"), "series: series 1 is not a list"),
    (dict(series='[[1, "x"]]'), "series: series 0 value 1 is not a number"),
    (dict(series="[[1, Infinity]]"), "series: series 0 value 1 is infinite"),
    (dict(series="1,2\n3,abc"), "series: row 2, column 2 is not a number"),
    (dict(series="[[1, 2]]", line_color="white"), "line_color: expected a hex colour"),
    (dict(series="[[1, 2]]", fill=True, fill_color="#12"), "fill_color: expected a hex colour"),
    (dict(audio={"waveform": torch.zeros(1, 1, 10)}, frames=48), "audio: 10 samples cannot make 48 frames"),
    (dict(audio={"waveform": torch.zeros(1, 2, 0)}, frames=1), "audio: 0 samples cannot make 1 frames"),
    (dict(audio={"waveform": torch.zeros(0, 1, 100)}, frames=4), r"audio: the waveform holds no clip .*\(0, 1, 100\)"),
    (dict(audio={"waveform": torch.zeros(1, 1, 100)}, frames=0), "frames: expected at least 1 window, got 0"),
    (dict(audio={"samples": []}), "audio: expected ComfyUI AUDIO"),
    (dict(audio={"waveform": torch.zeros(10)}), "audio: waveform must be a tensor"),
])
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
