"""RasterKit_SeriesToImages: line or bar plots of series, of audio windows or of audio spectra (bars
straight or radial, mirrored, in gradients, with falling peak caps), or audio spectrograms, as an IMAGE
batch and the ink's alpha."""

from __future__ import annotations

from ..utils.gpu_rendering.series import LAYOUTS, MIRRORS, Look, render_series, render_spectrogram
from ..utils.inputs.audio import FREQUENCY_SCALES, SPECTRUM_LOWEST_HZ, from_audio, from_audio_spectrum
from ..utils.inputs.colors import parse_hex
from ..utils.inputs.series import from_text, gradient_stops, series_colors
from ._comfy import Progress, intermediate_device, render_device
from ._schema import Bool, Combo, Float, Int, Output, RasterKitNode, Socket, String


class SeriesToImages(RasterKitNode):
    NODE_ID = "RasterKit_SeriesToImages"
    DISPLAY_NAME = "Series To Images (RasterKit)"
    CATEGORY = "RasterKit/plot"
    DESCRIPTION = (
        "Renders series as line or bar plots, all at once: from JSON or CSV text, or from audio, one "
        "window or spectrum per video frame (audio-reactive video), or a spectrogram. Bars can stand "
        "around a circle, mirror or reflect, take a colour gradient and peak caps that fall. Several "
        "series can share an image, a colour each; a background with alpha gives RGBA images. NaN or "
        "empty values leave a gap."
    )
    INPUTS = [
        String(
            "series",
            "[[3, 1, 4, 1, 5, 9, 2, 6], [2, 7, 1, 8, 2, 8, 1, 8]]",
            multiline=True,
            tooltip="JSON list of lists (or one list, or an object of named lists), or CSV numbers; ignored "
            "when audio is connected",
        ),
        Combo("csv_series", ("rows", "columns"), tooltip="CSV: one series per row or per column"),
        Int("width", 224, 8, 8192, 8, tooltip="width of every plot in pixels"),
        Int("height", 224, 8, 8192, 8, tooltip="height of every plot in pixels"),
        Combo("mode", ("antialiased", "aliased"), tooltip="aliased: 1 px Bresenham lines; antialiased: line_width"),
        Float("line_width", 2.0, 0.25, 64.0, 0.25, tooltip="line width in pixels (antialiased mode)"),
        String("line_color", "#FFFFFF", tooltip="hex colour of the line, #RRGGBB or #RRGGBBAA (AA: its opacity)"),
        String(
            "background",
            "#000000",
            tooltip="hex colour behind the plot, #RRGGBB; #RRGGBBAA with AA below FF gives RGBA images "
            "(straight alpha; #00000000: transparent)",
        ),
        Bool("fill", False, tooltip="fill the area under the curve with fill_color (line style)"),
        String(
            "fill_color",
            "#FFFFFF40",
            tooltip="hex colour under the curve when fill is on, #RRGGBBAA; with overlay, each series' colour "
            "at this opacity",
        ),
        Combo("scale", ("per_image", "shared"), tooltip="min-max of each image's series, or of all of them"),
        Int("frames", 48, 1, 100000, tooltip="audio: number of windows, one image each (when fps is 0)"),
        Socket(
            "audio",
            "AUDIO",
            optional=True,
            tooltip="plots the first clip instead of series: its waveform or spectrum per frame, channels "
            "averaged (or overlaid)",
        ),
        Float(
            "fps",
            0.0,
            0.0,
            1000.0,
            0.001,
            tooltip="audio: frames per second of the video to match: duration x fps frames, each from the "
            "audio around its time; 0: use frames",
        ),
        Combo(
            "audio_plot",
            ("waveform", "spectrum", "spectrogram"),
            tooltip="audio: the samples of each frame, or their spectrum (FFT amplitude on bands from min_hz "
            "to max_hz), or a spectrogram image (time across, frequency up, colours from gradient)",
        ),
        Int("fft_size", 2048, 16, 65536, tooltip="spectrum: samples per FFT window (Hann), centred on each frame"),
        Int(
            "bands",
            64,
            2,
            4096,
            tooltip="spectrum: frequencies plotted (spaced by frequency_scale), one value (or bar) each",
        ),
        Combo(
            "magnitude",
            ("dB", "linear"),
            tooltip="spectrum: amplitude in decibels (floor -80 dB) or linear (a full-scale sine is 1)",
        ),
        Float(
            "smoothing",
            0.5,
            0.0,
            0.99,
            0.01,
            tooltip="spectrum: each frame keeps this much of the last one (0: none), so bars fall smoothly",
        ),
        Combo("style", ("line", "bars"), tooltip="a line through the values, or one bar per value"),
        Bool(
            "overlay",
            False,
            tooltip="all series in one image (audio: its channels in each frame), a colour each from colors",
        ),
        String(
            "colors",
            "tab10",
            tooltip="overlay: a palette name (default, tab10, pastel, neon) or hex colours separated by "
            "commas; series i takes colour i, cycling",
        ),
        Float(
            "min_hz",
            SPECTRUM_LOWEST_HZ,
            0.0,
            100000.0,
            1.0,
            optional=True,
            tooltip="spectrum, spectrogram: the lowest band's frequency in Hz (at least the FFT's first bin, "
            "sample rate / fft_size)",
        ),
        Float(
            "max_hz",
            0.0,
            0.0,
            100000.0,
            1.0,
            optional=True,
            tooltip="spectrum, spectrogram: the highest band's frequency in Hz; 0: half the sample rate",
        ),
        Combo(
            "frequency_scale",
            FREQUENCY_SCALES,
            optional=True,
            tooltip="spectrum, spectrogram: bands evenly spaced in log frequency, in Hz, in mels or in barks; "
            "1/3 octave: the standard third-octave bands in the range (bands is ignored)",
        ),
        Combo(
            "layout",
            LAYOUTS,
            optional=True,
            tooltip="bars: side by side, or radial: around a circle, the first at the top, clockwise",
        ),
        Combo(
            "mirror",
            MIRRORS,
            optional=True,
            tooltip="bars: centre grows them both ways from the middle line (radial: circle); reflection "
            "stands them on a baseline with a fading mirror image below (radial: inside)",
        ),
        String(
            "gradient",
            "",
            optional=True,
            tooltip="colours along each bar from its base (lines: up the plot), replacing line_color and "
            "colors: hex colours separated by commas, or a colour map (magma, inferno, viridis, plasma, "
            "gray); spectrogram: its colour map (empty: magma)",
        ),
        Float(
            "peak_fall",
            0.0,
            0.0,
            1.0,
            0.005,
            optional=True,
            tooltip="bars: a cap on each bar at its peak, falling this fraction of the full height per frame "
            "(0: no caps)",
        ),
        Int(
            "history",
            0,
            0,
            100000,
            optional=True,
            tooltip="spectrogram: 0 gives one image of the whole clip; else one image per frame showing "
            "its last history frames, the latest at the right",
        ),
    ]
    OUTPUTS = [
        Output(
            "IMAGE",
            "images",
            "one plot per series (or one with overlay), or per audio frame, in order; "
            "RGBA when the background has alpha",
        ),
        Output("MASK", "alpha", "the drawn lines', fills' and bars' opacity in each image, background not counted"),
    ]

    @classmethod
    def run(
        cls,
        series="",
        csv_series="rows",
        width=224,
        height=224,
        mode="antialiased",
        line_width=2.0,
        line_color="#FFFFFF",
        background="#000000",
        fill=False,
        fill_color="#FFFFFF40",
        scale="per_image",
        frames=48,
        audio=None,
        fps=0.0,
        audio_plot="waveform",
        fft_size=2048,
        bands=64,
        magnitude="dB",
        smoothing=0.5,
        style="line",
        overlay=False,
        colors="tab10",
        min_hz=SPECTRUM_LOWEST_HZ,
        max_hz=0.0,
        frequency_scale="log",
        layout="linear",
        mirror="none",
        gradient="",
        peak_fall=0.0,
        history=0,
    ):
        bands_in = dict(min_hz=min_hz, max_hz=max_hz, frequency_scale=frequency_scale)
        stops = gradient_stops(gradient)
        if audio is not None and audio_plot == "spectrogram":
            spectra = from_audio_spectrum(audio, frames, fps, fft_size, bands, magnitude, smoothing, **bands_in)
            images, alpha = render_spectrogram(
                spectra.values,
                height,
                width,
                stops or gradient_stops("magma"),
                history,
                scale,
                parse_hex(background, "background"),
                render_device(),
                Progress(spectra.batch if history else 1),
            )
            return images.to(intermediate_device()), alpha.to(intermediate_device())
        if audio is None:
            data = from_text(series, csv_series)
        elif audio_plot == "spectrum":
            data = from_audio_spectrum(
                audio, frames, fps, fft_size, bands, magnitude, smoothing, channels=overlay, **bands_in
            )
        else:
            data = from_audio(audio, frames, fps, channels=overlay)
        if not overlay:
            per_image, inks = 1, [parse_hex(line_color, "line_color")]
        else:
            per_image = data.batch if audio is None else audio["waveform"].shape[1]
            inks = series_colors(colors, per_image)
        fills = None
        if fill:
            fill_rgba = parse_hex(fill_color, "fill_color")
            fills = [fill_rgba] if not overlay else [ink[:3] + fill_rgba[3:] for ink in inks]
        images, alpha = render_series(
            data,
            height,
            width,
            per_image,
            style=style,
            mode=mode,
            line_width=line_width,
            scale=scale,
            colors=inks,
            fill_colors=fills,
            background=parse_hex(background, "background"),
            device=render_device(),
            on_progress=Progress(data.batch // per_image),
            look=Look(layout, mirror, tuple(stops), peak_fall),
        )
        return images.to(intermediate_device()), alpha.to(intermediate_device())


NODES = [SeriesToImages]
