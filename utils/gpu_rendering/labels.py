"""Box labels: each distinct string rendered once into an atlas, drawn as sprites on a rounded
background that stays inside the frame.

Fonts. Each word of a label is drawn with the first font of a chain whose character map has all of its
characters (a word that no font has whole: each character with the first font that has it); spaces stay
with the font before them; neighbouring text in one font is one run, shaped as a whole (ligatures, Arabic
joining, right-to-left order within the run), and runs follow each other left to right on one baseline.
The chain, for a font name from `font_names()`:
  1. the font chosen, if not "default";
  2. Pillow's bundled font (ASCII and a few signs: ASCII labels look as they always did);
  3. the fonts of PREFERRED_FONTS that are found, in that order: wide coverage of Latin, Greek,
     Cyrillic and more, then Chinese, Japanese and Korean, then symbols and emoji (drawn in one colour);
  4. every other font found, regular styles first;
  5. last-resort fonts that have a glyph for every code point (GNU Unifont, Last Resort), for single
     characters only.
A character that no font has is drawn with the first font's "missing glyph" box. Fonts are chosen per
distinct string, once (cached), from character maps read once per font file by fontTools (without it,
every label is drawn in Pillow's bundled font). Fonts are found in the system's font folders (Windows,
macOS, Linux) and beside matplotlib when it is installed (DejaVu and Last Resort). Colour bitmap fonts
(Noto Color Emoji, Apple Color Emoji) are left out: a label is a coverage mask, and Pillow draws those at
their one bitmap size only.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import logging
import os
import re
import sys
import unicodedata

import numpy as np
import torch

from ..core.device import check_memory
from ..inputs.text import short, text_limit
from . import primitives as R

PADDING = 3
# supervision's Position names, in the order of a keypad
ANCHORS = (
    "top_left",
    "top_center",
    "top_right",
    "center_left",
    "center",
    "center_right",
    "bottom_left",
    "bottom_center",
    "bottom_right",
)
AVOID_STEPS = 8  # moves a label may make to leave the labels placed before it
AVOID_MAX_LABELS = 100  # labels of a frame that move (host-side layout: about 0.1 s for a frame this full)
DEFAULT_FONT = "default"
BUNDLED = ""  # Pillow's bundled font, in a chain of font paths
FONT_EXTENSIONS = (".ttf", ".otf", ".ttc", ".otc")
# file names on Windows, macOS and Linux; the fallback tries those found in this order
PREFERRED_FONTS = (
    "DejaVuSans.ttf",
    "NotoSans-Regular.ttf",
    "segoeui.ttf",
    "Arial Unicode.ttf",
    "arialuni.ttf",
    "LiberationSans-Regular.ttf",
    "arial.ttf",
    "Nirmala.ttf",
    "LeelawUI.ttf",
    "NotoSansCJK-Regular.ttc",
    "NotoSansCJKsc-Regular.otf",
    "msyh.ttc",
    "YuGothR.ttc",
    "malgun.ttf",
    "Hiragino Sans GB.ttc",
    "PingFang.ttc",
    "AppleSDGothicNeo.ttc",
    "wqy-microhei.ttc",
    "wqy-zenhei.ttc",
    "DroidSansFallbackFull.ttf",
    "seguisym.ttf",
    "seguiemj.ttf",
    "Apple Symbols.ttf",
    "NotoSansSymbols2-Regular.ttf",
    "NotoEmoji-Regular.ttf",
    "Symbola.ttf",
)
LAST_RESORT_FONTS = ("unifont.otf", "unifont.ttf", "LastResort.otf", "LastResortHE-Regular.ttf")
_LAST_RESORT_NAMES = frozenset(name.lower() for name in LAST_RESORT_FONTS)
# Last Resort maps every code point to a glyph, by design: fontTools took 1.3 s and 190 MB to list them
_EVERY_CODE_POINT_FONTS = frozenset(("lastresort.otf", "lastresorthe-regular.ttf"))
_STYLE_WORDS = ("bold", "italic", "oblique", "light", "thin", "black", "heavy", "medium", "condensed", "mono")
_ZWJ = "\u200d"
# bytes per atlas pixel while it is made: Pillow's 8-bit canvas, numpy's float32 copy and its scaled
# copy, and the float32 copy the renderer takes
ATLAS_BYTES_PER_PIXEL = 13


def _font_folders() -> list[tuple[str, tuple[str, ...]]]:
    """(folder, name prefixes to take from it; empty: every font) in the order searched."""
    home = os.path.expanduser("~")
    if sys.platform == "win32":
        folders = [
            os.path.join(os.environ.get("WINDIR", r"C:\Windows"), "Fonts"),
            os.path.join(os.environ.get("LOCALAPPDATA", home), "Microsoft", "Windows", "Fonts"),
        ]
    elif sys.platform == "darwin":
        folders = ["/System/Library/Fonts", "/Library/Fonts", os.path.join(home, "Library", "Fonts")]
    else:
        data_home = os.environ.get("XDG_DATA_HOME") or os.path.join(home, ".local", "share")
        data_dirs = (os.environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share").split(":")
        folders = [os.path.join(d, "fonts") for d in [data_home, *data_dirs] if d] + [os.path.join(home, ".fonts")]
    found = [(folder, ()) for folder in folders]
    spec = importlib.util.find_spec("matplotlib")  # found, not imported
    if spec is not None and spec.submodule_search_locations:
        # DejaVu (Latin, Greek, Cyrillic and more) and Last Resort; not its TeX and STIX math fonts
        found.append(
            (os.path.join(spec.submodule_search_locations[0], "mpl-data", "fonts", "ttf"), ("DejaVu", "LastResort"))
        )
    return found


@functools.lru_cache(maxsize=1)
def font_files() -> dict[str, str]:
    """Font file name -> path of the outline fonts found (the first of a name wins), sorted by name.
    Asked once per process: a font installed later is listed after a restart. Empty without fontTools."""
    if importlib.util.find_spec("fontTools") is None:
        logging.getLogger("rasterkit").warning(
            "RasterKit: fontTools is not installed (pip install fonttools): "
            "labels are drawn in Pillow's bundled font only"
        )
        return {}
    found: dict[str, str] = {}
    for root, prefixes in _font_folders():
        for folder, subfolders, files in os.walk(root):
            subfolders.sort()
            for name in sorted(files):
                path = os.path.join(folder, name)
                wanted = name.lower().endswith(FONT_EXTENSIONS) and (not prefixes or name.startswith(prefixes))
                if wanted and name not in found and _has_outlines(path):
                    found[name] = path
    return dict(sorted(found.items(), key=lambda item: item[0].lower()))


def font_names() -> list[str]:
    """The choices of a `font` input: "default" (the automatic chain), then the fonts found."""
    return [DEFAULT_FONT, *font_files()]


def font_chain(name: str) -> tuple[str, ...]:
    """The paths of the fonts that draw labels in font `name` (BUNDLED for Pillow's), in the order of the
    module docstring. ValueError naming the input `font` for a name that is not one of `font_names()`."""
    if not isinstance(name, str):
        raise ValueError(f"font: expected a font name, got {short(name)}")
    return _chain(name)


@functools.lru_cache(maxsize=64)
def _chain(name: str) -> tuple[str, ...]:
    files = font_files()
    if name != DEFAULT_FONT and name not in files:
        shown = ", ".join(font_names()[:8]) + (f" and {len(files) - 7} more" if len(files) > 7 else "")
        raise ValueError(f"font: {short(name)} is not a font found on this machine; choose one of {shown}")
    if name != DEFAULT_FONT and _coverage(files[name]) is None:
        raise ValueError(f"font: {name!r} has no Unicode character map that Pillow can draw; choose another font")
    by_lower_name = {key.lower(): path for key, path in files.items()}
    preferred = [by_lower_name[n.lower()] for n in PREFERRED_FONTS if n.lower() in by_lower_name]
    last = [by_lower_name[n.lower()] for n in LAST_RESORT_FONTS if n.lower() in by_lower_name]
    others = sorted((p for p in files.values() if p not in preferred and p not in last), key=_regular_first)
    chosen = [files[name]] if name != DEFAULT_FONT else []
    return tuple(dict.fromkeys(chosen + [BUNDLED] + preferred + others + last))  # the chosen font once, first


def _regular_first(path: str) -> tuple[bool, str]:
    name = os.path.basename(path).lower()
    return any(word in name for word in _STYLE_WORDS), name


def _open_font(source):
    """fontTools' view of a font file or stream (the first font of a collection, as Pillow draws it), its
    tables read when asked; closes the file when used in a `with`."""
    from fontTools.ttLib import TTFont

    return TTFont(source, lazy=True, fontNumber=0)


def _draws_in_one_colour(font) -> bool:
    """Outlines (TrueType or CFF), not colour bitmaps (CBDT, sbix), which Pillow draws at one size only."""
    return any(tag in font for tag in ("glyf", "CFF ", "CFF2")) and not any(tag in font for tag in ("CBDT", "sbix"))


def _has_outlines(path: str) -> bool:
    try:
        with _open_font(path) as font:
            return _draws_in_one_colour(font)
    except Exception:  # fontTools raises many types for damaged files: such a font is left out
        return False


@functools.cache
def _coverage(path: str) -> np.ndarray | None:
    """The code points (int32, sorted) that the Unicode character map of the font at `path` (BUNDLED:
    Pillow's) gives a glyph; None for a font that Pillow cannot draw (unreadable, no Unicode map, colour
    bitmaps) or without fontTools."""
    from PIL import ImageFont

    try:
        if path == BUNDLED:
            source = io.BytesIO(ImageFont.load_default(size=12).font_bytes)
        else:
            ImageFont.truetype(path, 12)  # FreeType reads it too
            source = path
        if os.path.basename(path).lower() in _EVERY_CODE_POINT_FONTS:
            return np.arange(0x110000, dtype=np.int32)
        with _open_font(source) as font:
            if not _draws_in_one_colour(font):
                return None
            # only whether a code maps to glyph 0 matters: one name for every other glyph, and the font's
            # own names (post or CFF table), which took as long to read as the map, are not read
            font.setGlyphOrder(["missing"] + ["glyph"] * (font["maxp"].numGlyphs - 1))
            glyphs = font.getBestCmap()  # the map FreeType picks: full Unicode first, then the BMP's
    except Exception:  # fontTools and FreeType raise many types for damaged files
        return None
    if glyphs is None:
        return None
    return np.sort(np.array([code for code, glyph in glyphs.items() if glyph != "missing"], dtype=np.int32))


def _has(path: str, code: int) -> bool:
    codes = _coverage(path)
    if codes is None:
        return False
    i = int(np.searchsorted(codes, code))
    return i < codes.size and int(codes[i]) == code


def _ignorable(char: str) -> bool:
    """Joiners and variation selectors: no font needs a glyph for them (shaping hides them)."""
    return char in "\u200c\u200d" or "\ufe00" <= char <= "\ufe0f" or "\U000e0100" <= char <= "\U000e01ef"


def _clusters(text: str) -> list[str]:
    """Characters with the combining marks, variation selectors, skin tones and joined characters after
    them: the units that one font draws."""
    clusters: list[str] = []
    for char in text:
        joins = (
            (
                unicodedata.category(char).startswith("M")
                or _ignorable(char)
                or "\U0001f3fb" <= char <= "\U0001f3ff"
                or clusters[-1].endswith(_ZWJ)
            )
            if clusters
            else False
        )
        if joins:
            clusters[-1] += char
        else:
            clusters.append(char)
    return clusters


def _first_with(piece: str, chain: tuple[str, ...]) -> str | None:
    """The first font of the chain with every character of `piece` (joiners and selectors aside)."""
    codes = [ord(c) for c in piece if not _ignorable(c)]
    return next((path for path in chain if all(_has(path, code) for code in codes)), None)


def _is_last_resort(path: str) -> bool:
    return os.path.basename(path).lower() in _LAST_RESORT_NAMES


@functools.lru_cache(maxsize=4096)
def _runs(text: str, font: str) -> tuple[tuple[str, str], ...]:
    """(font path, text) runs of one label in font `font`, in reading order, on one line (control
    characters such as newlines become spaces). A word is drawn in the first font that has all of it,
    so that it keeps one look, else cluster by cluster; spaces keep the font of the run they are in, so
    that a phrase in one script stays one run (shaped, and ordered right to left where it should be)."""
    chain = font_chain(font)
    whole_words = tuple(path for path in chain if not _is_last_resort(path))  # they would take any word
    runs: list[list[str]] = []
    text = "".join(" " if unicodedata.category(c) == "Cc" else c for c in text)
    for word in filter(None, re.split(r"(\s+)", text)):
        if word.isspace():
            current = runs[-1][0] if runs else None
            kept = current is not None and not _is_last_resort(current) and _first_with(word, (current,))
            pieces = [(current if kept else _first_with(word, chain) or chain[0], word)]
        elif (path := _first_with(word, whole_words)) is not None:
            pieces = [(path, word)]
        else:  # a character that no font has: the others still get theirs
            pieces = [(_first_with(c, chain) or _first_with(c[0], chain) or chain[0], c) for c in _clusters(word)]
        for path, piece in pieces:
            if runs and runs[-1][0] == path:
                runs[-1][1] += piece
            else:
                runs.append([path, piece])
    return tuple((path, run) for path, run in runs)


@functools.lru_cache(maxsize=64)
def _font(path: str, size: int):
    from PIL import ImageFont

    if path == BUNDLED:
        return ImageFont.load_default(size=size)  # Pillow's bundled font (FreeType when available)
    return ImageFont.truetype(path, size)


def _line_pitch(size: int, font: str) -> int:
    """Pixels from one baseline to the next in a multi-line label: the first font's ascent + descent."""
    ascent, descent = _font(font_chain(font)[0], size).getmetrics()
    return ascent + descent


def _layout(text: str, size: int, font: str) -> tuple[list[tuple], tuple[int, int, int, int]]:
    """Pieces (Pillow font, run, pen x, baseline y) of the lines of `text` (split at newlines) and their
    ink bounds (left, top, right, bottom) relative to the start of the first baseline."""
    pieces, bounds = [], []
    pitch = _line_pitch(size, font) if "\n" in text else 0
    for row, line in enumerate(text.split("\n")):
        pen, baseline = 0, row * pitch
        for path, run in _runs(line, font):
            face = _font(path, size)
            left, top, right, bottom = face.getbbox(run, anchor="ls")
            pieces.append((face, run, pen, baseline))
            bounds.append((pen + left, baseline + top, pen + right, baseline + bottom))
            pen += round(face.getlength(run))  # whole pixels: every run drawn as it was measured
    edges = np.array(bounds or [(0, 0, 0, 0)])
    return pieces, (int(edges[:, 0].min()), int(edges[:, 1].min()), int(edges[:, 2].max()), int(edges[:, 3].max()))


def _ink_width(words: list[str], size: int, font: str) -> int:
    left, _, right, _ = _layout(" ".join(words), size, font)[1]
    return right - left


def wrap(text: str, size: int, font: str, max_width: int, max_lines: int | None = None) -> str:
    """`text` with newlines in place of the spaces where its lines would grow wider than `max_width`
    pixels of ink: each line takes as many words as fit (a word wider than that alone keeps a line of its
    own), found by doubling then halving the count, so that a long text costs a few layouts a line. At
    most `max_lines` lines (the rest of the text is left out: more would not fit the frame anyway).
    max_width <= 0: `text` as it is."""
    if max_width <= 0:
        return text

    def fit(words: list[str], start: int, count: int) -> bool:  # words[start:start + count] exist and fit a line
        return start + count <= len(words) and _ink_width(words[start : start + count], size, font) <= max_width

    lines: list[str] = []
    for paragraph in text.split("\n"):
        words = paragraph.split(" ")
        start = 0
        while start < len(words) and (max_lines is None or len(lines) < max_lines):
            fits, step = 1, 1  # the first word always; then counts that fit, doubling, then halving the step
            while fit(words, start, fits + step):
                fits += step
                step *= 2
            while step > 1:
                step //= 2
                if fit(words, start, fits + step):
                    fits += step
            lines.append(" ".join(words[start : start + fits]))
            start += fits
    return "\n".join(lines[:max_lines])


def text_atlas(strings: list[str], size: int, font: str = DEFAULT_FONT) -> tuple[torch.Tensor, torch.Tensor]:
    """Render distinct strings once, in font `font` (one of `font_names()`) with per-character fallback;
    a newline starts a new line (left aligned, one line pitch below). Returns atlas float [Ha,Wa]
    (coverage 0..1) and rects int64 [S,4] (x, y, width, height of each string inside the atlas),
    strings stacked vertically."""
    atlas, rects = atlas_arrays(strings, size, font)
    return torch.from_numpy(atlas), torch.from_numpy(rects)


def atlas_arrays(strings: list[str], size: int, font: str = DEFAULT_FONT) -> tuple[np.ndarray, np.ndarray]:
    """text_atlas as numpy arrays (float32 [Ha,Wa], int64 [S,4]), for callers that pack the rects with
    other host data before one upload."""
    from PIL import Image, ImageDraw

    layouts = [_layout(s, size, font) for s in strings]
    sizes = [(max(1, r - left), max(1, b - t)) for _, (left, t, r, b) in layouts]
    width = max((w for w, _ in sizes), default=1)
    height = max(1, sum(h for _, h in sizes))
    check_memory(
        width * height * ATLAS_BYTES_PER_PIXEL,
        f"labels ({len(strings):,} distinct texts at size {size}, an atlas of {width:,} x {height:,} pixels)",
        torch.device("cpu"),
    )
    canvas = Image.new("L", (width, height), 0)
    draw = ImageDraw.Draw(canvas)
    rects, y = [], 0
    for (pieces, (left, top, _r, _b)), (w, h) in zip(layouts, sizes, strict=False):
        for face, run, pen, baseline in pieces:
            draw.text((pen - left, y + baseline - top), run, fill=255, font=face, anchor="ls")
        rects.append((0, y, w, h))
        y += h
    return np.asarray(canvas, dtype=np.float32) / 255.0, np.array(rects, dtype=np.int64).reshape(-1, 4)


def _anchored(
    box: torch.Tensor, label_w: torch.Tensor, label_h: torch.Tensor, anchor: str, height: int, width: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left and top (float [N], whole pixels) of labels of label_w x label_h at `anchor` of their boxes
    [N,4]: top_* above the box (inside its top where there is no room above), bottom_* below it (inside
    its bottom where there is no room below), center_* centred on it vertically; *_left at the box's left
    edge, *_center centred, *_right at its right edge; then moved to lie inside the frame."""
    vertical, horizontal = ("center", "center") if anchor == "center" else anchor.split("_")
    x1, y1, x2, y2 = box.unbind(1)
    left = {"left": x1, "center": (x1 + x2 - label_w) / 2, "right": x2 - label_w}[horizontal]
    if vertical == "top":
        top = torch.where(y1 - label_h >= 0, y1 - label_h, y1)
    elif vertical == "bottom":
        top = torch.where(y2 + label_h <= height, y2, y2 - label_h)
    else:
        top = (y1 + y2 - label_h) / 2
    top = top.clamp_min(0).minimum((height - label_h).clamp_min(0))
    left = left.clamp_min(0).minimum((width - label_w).clamp_min(0))
    return left.floor(), top.floor()


def _avoid_overlaps(frame: torch.Tensor, rects: torch.Tensor, priority: torch.Tensor, height: int) -> torch.Tensor:
    """Tops float [N] of labels rects [N,4] (left, top, width, height) moved so that labels of one frame
    overlap less: in order of priority (highest first) each label keeps its place if it is free, else moves
    just below the placed label it overlaps most (just above it where there is no room below), at most
    AVOID_STEPS times, and takes the place of least overlap it tried. Host-side layout of a few labels,
    not pixels, bounded: beyond the AVOID_MAX_LABELS highest priorities of a frame, labels stay put."""
    x0, y0, w, h = rects.numpy().T.copy()  # whole pixels: exact in float32
    tops = y0.copy()
    frames = frame.numpy()
    for f in np.unique(frames):
        members = np.flatnonzero(frames == f)
        if len(members) < 2:
            continue
        order = members[np.argsort(-priority.numpy()[members], kind="stable")][:AVOID_MAX_LABELS]
        placed: list[int] = []
        for i in order:
            tried = []
            top = tops[i]
            for _ in range(AVOID_STEPS + 1):
                others = np.array(placed, dtype=np.int64)
                across = np.minimum(x0[i] + w[i], x0[others] + w[others]) - np.maximum(x0[i], x0[others])
                down = np.minimum(top + h[i], tops[others] + h[others]) - np.maximum(top, tops[others])
                overlap = np.clip(across, 0, None) * np.clip(down, 0, None)
                tried.append((overlap.sum(), len(tried), top))
                if not overlap.any():
                    break
                hit = others[np.argmax(overlap)]
                below, above = tops[hit] + h[hit], tops[hit] - h[i]
                top = below if below + h[i] <= height else above
                if top < 0:
                    break
            tops[i] = min(tried)[2]
            placed.append(i)
    return torch.from_numpy(tops)


def check_labels(texts: list[str], input_name: str = "labels") -> None:
    """ValueError naming the input and the label when a label is longer than text_limit("label")."""
    limit = text_limit("label")
    for i, text in enumerate(texts):
        if len(text) > limit:
            raise ValueError(
                f"{input_name}: label {i} has {len(text):,} characters ({short(text, 40)}); at most {limit:,} are drawn"
            )


def label_primitives(
    frame: torch.Tensor,
    xyxy: torch.Tensor,
    texts: list[str],
    colors: torch.Tensor,
    height: int,
    width: int,
    size: int,
    font: str = DEFAULT_FONT,
    anchor: str = "top_left",
    padding: int = PADDING,
    text_color: tuple | None = None,
    max_width: int = 0,
    priority: torch.Tensor | None = None,
) -> tuple[R.Primitives, torch.Tensor | None]:
    """Labels for N boxes, each its background then its text, at `anchor` of each box (one of ANCHORS, see
    `_anchored`) and shifted to stay inside the frame.

    frame int64 [N], xyxy float [N,4], texts N strings ("" = no label), colors float [N,4]
    (background), font one of `font_names()`, padding pixels around the text, text_color RGBA (None:
    black or white, whichever contrasts more with the background), max_width > 0: lines of text wrap
    at spaces to stay within that many pixels. priority float [N] (e.g. scores): labels of one frame
    that overlap move, the lower priorities first (None: labels stay where their anchor puts them).
    Returns the primitives and the atlas they index (None when there is no label).
    """
    check_labels(texts)
    keep = torch.tensor([bool(t) for t in texts], dtype=torch.bool)
    if not bool(keep.any()):
        return R.empty(), None
    kept = [t for t in texts if t]
    distinct = sorted(set(kept))
    rows = height // _line_pitch(size, font) + 1  # lines beyond these would lie below the frame
    lines = [t if max_width > 0 else "\n".join(t.split("\n", rows)[:rows]) for t in distinct]
    atlas, rects = text_atlas([wrap(t, size, font, max_width, rows) for t in lines], size, font)
    rect = rects[torch.tensor([distinct.index(t) for t in kept])]
    box, colour, frame = xyxy[keep], colors[keep], frame[keep]
    label_w = rect[:, 2].float() + 2 * padding
    label_h = rect[:, 3].float() + 2 * padding
    left, top = _anchored(box, label_w, label_h, anchor, height, width)
    if priority is not None:
        top = _avoid_overlaps(frame, torch.stack([left, top, label_w, label_h], 1), priority[keep], height)
    background = R.rounded_boxes(
        frame,
        torch.stack([left, top, left + label_w, top + label_h], 1),
        stroke_width=0,
        radius=padding,
        stroke_color=(0, 0, 0, 0),
        fill_color=colour,
    )
    if text_color is None:
        luminance = colour[:, :3] @ torch.tensor([0.299, 0.587, 0.114])
        ink = torch.where(
            luminance[:, None] > 0.55, torch.tensor([0.0, 0.0, 0.0, 1.0]), torch.tensor([1.0, 1.0, 1.0, 1.0])
        )
    else:
        ink = torch.tensor(text_color, dtype=torch.float32).expand(len(kept), 4)
    ink = ink * torch.cat([torch.ones(len(kept), 3), colour[:, 3:4]], 1)
    text = R.sprites(frame, torch.stack([left + padding, top + padding], 1), rect, ink)
    # each label whole (its tab's fill and stroke, then its text) before the next: a later label over an
    # earlier one hides it rather than mixing the two texts on its tab
    n = len(kept)
    order = torch.cat([torch.arange(2 * n).view(n, 2), torch.arange(2 * n, 3 * n)[:, None]], 1).flatten()
    return R.concat(background, text).select(order), atlas
