"""Text inputs (JSON, Python-style lists, CSV) read with limits, so that a hostile or mistaken input
gets an error naming it instead of a RecursionError, Python's integer digit limit or gigabytes of
parsed objects."""

from __future__ import annotations

import json
import math

# 4 million characters: about 100k boxes or 200k tracked points, well past any hand-made input; the
# parsed Python objects take roughly 50x the text, so this bounds a parse near 200 MB.
MAX_TEXT_CHARS = 4_000_000

# Characters read from each text input, by input name (errors name it): far past any hand-made input,
# and each bounds the objects parsed from it (roughly 50x the text) and what they make the engines
# allocate (whose estimates then refuse what does not fit). Inputs not listed: MAX_TEXT_CHARS.
TEXT_LIMITS = {
    "boxes": 1_000_000,  # ~30k boxes
    "points": 1_000_000,  # ~50k drawn points
    "negative_points": 1_000_000,
    "tracks_json": MAX_TEXT_CHARS,  # Point Tracker's own output for long videos
    "series": MAX_TEXT_CHARS,  # 20 series of 65,536 values at ~3 characters
    "label": 1_000,  # one box's or track's label text
    "colors": 4_096,  # ~500 hex colours
    "palette_colors": 4_096,
}

# Coordinates are clipped to +-this many pixels: far outside any frame, and exact to 1/16 px in float32,
# where 1e308 would become infinite.
COORDINATE_LIMIT = 1e6


def coordinates(values, where: str, input_name: str) -> list[float]:
    """Numbers as floats clipped to +-COORDINATE_LIMIT (integers of any size too); ValueError naming
    the input for non-numbers, NaN and infinity."""
    numbers = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"{input_name}: {where} has a non-numeric coordinate {short(value)}")
        try:
            number = float(value)
        except OverflowError:  # an integer past float range: finite, so clipped like the others
            number = COORDINATE_LIMIT if value > 0 else -COORDINATE_LIMIT
        except ValueError:
            raise ValueError(f"{input_name}: {where} has a non-numeric coordinate {short(value)}") from None
        if not math.isfinite(number):
            raise ValueError(f"{input_name}: {where} has a non-finite coordinate {short(value)}")
        numbers.append(min(max(number, -COORDINATE_LIMIT), COORDINATE_LIMIT))
    return numbers


def short(value, limit: int = 120) -> str:
    """repr(value), cut to `limit` characters for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def text_limit(input_name: str) -> int:
    """Characters read from the input `input_name` ("tracks_json: track 3" is tracks_json's)."""
    return TEXT_LIMITS.get(input_name.split(":")[0].strip(), MAX_TEXT_CHARS)


def check_size(text: str, input_name: str, limit: int | None = None) -> None:
    """ValueError naming the input when `text` is longer than its limit (text_limit, or `limit`)."""
    limit = text_limit(input_name) if limit is None else limit
    if len(text) > limit:
        raise ValueError(
            f"{input_name}: {len(text):,} characters; at most {limit:,} are read "
            f"(split the data over several nodes or runs)"
        )


def load_json(text: str, input_name: str, single_quotes: bool = False):
    """The value of JSON `text`; with `single_quotes`, Python-style 'quoted' keys and strings too (as
    some nodes write them; read as JSON with the quotes swapped, not by Python's parser, whose memory
    use is hundreds of times the text). ValueError naming `input_name` for anything that does not parse."""
    check_size(text, input_name)
    try:
        return _parse(text, input_name)
    except json.JSONDecodeError as error:
        if single_quotes and "'" in text and '"' not in text:
            try:
                return _parse(text.replace("'", '"'), input_name)
            except json.JSONDecodeError:
                pass
        raise ValueError(
            f"{input_name}: not valid JSON ({error.msg} at line {error.lineno} column {error.colno}): {short(text)}"
        ) from None


def _parse(text: str, input_name: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:  # a ValueError too: load_json words it (and may retry with swapped quotes)
        raise
    except RecursionError:
        raise ValueError(f"{input_name}: nested too deeply to be boxes, tracks or series") from None
    except ValueError as error:  # an integer past Python's digit limit
        raise ValueError(f"{input_name}: not readable: {error}") from None
