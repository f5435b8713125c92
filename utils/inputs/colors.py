"""Colours: hex strings and named palettes, as float RGBA in 0..1."""

from __future__ import annotations

import re
import zlib

from .text import check_size, short

_HEX = re.compile(r"^#?([0-9a-fA-F]{6})([0-9a-fA-F]{2})?$")

# Categorical palettes; "default" is ordered so that neighbours differ strongly in hue.
PALETTES = {
    "default": [
        "#E6194B",
        "#3CB44B",
        "#FFE119",
        "#4363D8",
        "#F58231",
        "#911EB4",
        "#46F0F0",
        "#F032E6",
        "#BCF60C",
        "#FABEBE",
        "#008080",
        "#E6BEFF",
        "#9A6324",
        "#FFFAC8",
        "#800000",
        "#AAFFC3",
    ],
    "tab10": [
        "#1F77B4",
        "#FF7F0E",
        "#2CA02C",
        "#D62728",
        "#9467BD",
        "#8C564B",
        "#E377C2",
        "#7F7F7F",
        "#BCBD22",
        "#17BECF",
    ],
    "pastel": ["#FBB4AE", "#B3CDE3", "#CCEBC5", "#DECBE4", "#FED9A6", "#FFFFCC", "#E5D8BD", "#FDDAEC"],
    "neon": ["#FF073A", "#39FF14", "#00FFFF", "#FF00FF", "#FFFF33", "#FF6EC7"],
    "white": ["#FFFFFF"],
    "black": ["#000000"],
}


def parse_hex(value: str, input_name: str) -> tuple[float, float, float, float]:
    """'#RRGGBB' or '#RRGGBBAA' (leading # optional) -> (r, g, b, a) floats in 0..1."""
    match = _HEX.match(str(value).strip())
    if match is None:
        raise ValueError(f"{input_name}: expected a hex colour like #RRGGBB or #RRGGBBAA, got {short(value)}")
    digits = match.group(1) + (match.group(2) or "FF")
    return tuple(int(digits[i : i + 2], 16) / 255 for i in range(0, 8, 2))


def palette(name: str, input_name: str = "palette") -> list[tuple[float, float, float, float]]:
    if name not in PALETTES:
        raise ValueError(f"{input_name}: unknown palette {name!r}; choose one of {', '.join(PALETTES)}")
    return [parse_hex(c, input_name) for c in PALETTES[name]]


def palette_from_hex(text: str, input_name: str = "palette_colors") -> list[tuple[float, float, float, float]]:
    """A palette from hex colours separated by commas, semicolons or spaces ("#ff0000, #00ff00");
    ValueError naming the input for an empty list or a colour that is not hex."""
    check_size(text, input_name)
    colours = [c for c in re.split(r"[\s,;]+", text.strip()) if c]
    if not colours:
        raise ValueError(f"{input_name}: expected hex colours like #ff0000, #00ff00, got {short(text)}")
    return [parse_hex(c, f"{input_name}: colour {i + 1}") for i, c in enumerate(colours)]


def stable_index(key, size: int) -> int:
    """The same palette slot for the same class label or id in every frame and every run."""
    if isinstance(key, int):
        return key % size
    return zlib.crc32(str(key).encode()) % size
