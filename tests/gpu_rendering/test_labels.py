"""Labels in any script: the font chain, per-character fallback across real fonts, the font input.

Cyrillic and accented Latin need a font beyond Pillow's bundled one (Latin only): DejaVu Sans, which
requirements-dev.txt guarantees through matplotlib. Scripts that need fonts a machine may lack (CJK,
emoji) are skipped, with the reason, where no font found has them."""

import logging
import os
import sys

import numpy as np
import pytest
import torch

from rasterkit.nodes.boxes import BoundingBoxRenderer as Node
from rasterkit.utils.gpu_rendering import labels as L

NO_FONT_HAS = "\U0010fffd"  # private use: no font has it but a last-resort one


def bitmaps(strings, size=24, font=L.DEFAULT_FONT):
    atlas, rects = L.text_atlas(strings, size, font)
    return [atlas[y : y + h, x : x + w] for x, y, w, h in rects.tolist()]


def font_with(text):
    """The font of the default chain with every character of `text`, last-resort fonts aside."""
    regular = tuple(path for path in L.font_chain(L.DEFAULT_FONT) if not L._is_last_resort(path))
    return L._first_with(text, regular)


def test_accented_and_cyrillic_labels_get_glyphs_of_their_own():
    """Before the font chain, all four were the bundled font's missing-glyph box."""
    assert font_with("éèжщ") is not None, "no font with Cyrillic: install requirements-dev.txt (matplotlib: DejaVu)"
    drawn = bitmaps(["é", "è", "ж", "щ"])
    assert all(b.sum() > 5 for b in drawn)
    for i in range(4):
        for j in range(i):
            assert drawn[i].shape != drawn[j].shape or not torch.equal(drawn[i], drawn[j]), (i, j)


def test_cyrillic_labels_on_the_node_differ():
    boxes = '[{"x1": 4, "y1": 30, "x2": 60, "y2": 44, "label": "%s"}]'
    images = torch.zeros(1, 48, 64, 3)
    cat, dog = (
        Node.run(images, boxes=boxes % word, fill_opacity=0.0, stroke_width=0.0, label_size=12)[1]
        for word in ("кот", "пёс")
    )
    assert cat.sum() > 0 and not torch.equal(cat, dog)


def test_a_label_mixing_scripts_draws_each_run_in_a_font_that_has_it():
    """Latin from Pillow's font, Cyrillic from another real font, on one baseline: the mixed label's ink
    is the ink of its two runs drawn alone."""
    cyrillic = font_with("жук")
    assert cyrillic is not None and cyrillic != L.BUNDLED
    assert L._runs("dog жук", L.DEFAULT_FONT) == ((L.BUNDLED, "dog "), (cyrillic, "жук"))
    latin, russian, mixed = bitmaps(["dog ", "жук", "dog жук"])
    assert mixed.sum().item() == pytest.approx(latin.sum().item() + russian.sum().item(), rel=1e-6)
    assert mixed.shape[1] >= latin.shape[1] + russian.shape[1]


def test_latin_labels_are_drawn_as_before():
    """Pillow's bundled font has every ASCII character: such labels are one run in it, pixel for pixel
    what the atlas drew before the font chain."""
    from PIL import Image, ImageDraw, ImageFont

    text = "person #12 0.93"
    assert L._runs(text, L.DEFAULT_FONT) == ((L.BUNDLED, text),)
    font = ImageFont.load_default(size=16)
    left, top, right, bottom = font.getbbox(text)
    canvas = Image.new("L", (right - left, bottom - top), 0)
    ImageDraw.Draw(canvas).text((-left, -top), text, fill=255, font=font)
    expected = torch.from_numpy(np.asarray(canvas, dtype=np.float32) / 255)
    assert torch.equal(bitmaps([text], size=16)[0], expected)


def test_words_keep_one_font_and_spaces_keep_the_run_they_are_in():
    cyrillic = font_with("жук")
    # "é" is not in Pillow's font: the whole word goes to a font with all of it, not letter by letter
    assert L._runs("café", L.DEFAULT_FONT) == ((font_with("café"), "café"),)
    assert L._runs("жук жук", L.DEFAULT_FONT) == ((cyrillic, "жук жук"),)
    assert L._runs("a\nb\tc", L.DEFAULT_FONT) == ((L.BUNDLED, "a b c"),)  # one line


def test_a_chosen_font_comes_first_and_the_chain_still_backs_it():
    name = "DejaVuSans.ttf"
    assert name in L.font_names(), "install requirements-dev.txt (matplotlib: DejaVu)"
    chain = L.font_chain(name)
    assert chain[0] == L.font_files()[name] and chain[1] == L.BUNDLED and len(set(chain)) == len(chain)
    assert not torch.equal(bitmaps(["dog"], font=name)[0], bitmaps(["dog"])[0])
    runs = L._runs("dog " + NO_FONT_HAS, name)
    assert runs[0] == (chain[0], "dog ") and runs[-1][1] == NO_FONT_HAS


def test_a_character_no_font_has_is_a_box_as_a_last_resort():
    assert bitmaps([NO_FONT_HAS])[0].sum() > 5  # Pillow's missing-glyph box, or a last-resort font's


@pytest.mark.parametrize(
    "script,pair,package",
    [
        ("CJK", ("字", "中"), "fonts-noto-cjk"),
        ("emoji", ("🙂", "🚗"), "fonts-noto-extra or fonts-symbola"),
        ("Arabic", ("ب", "ج"), "fonts-noto-core"),
        ("Greek", ("Ω", "λ"), "fonts-dejavu-core"),
    ],
)
def test_other_scripts_where_a_font_has_them(script, pair, package):
    if font_with("".join(pair)) is None:
        pytest.skip(f"no font on this machine has {script} ({package} would bring one)")
    first, second = bitmaps(list(pair))
    assert first.sum() > 5 and second.sum() > 5
    assert first.shape != second.shape or not torch.equal(first, second)


def test_font_choices_are_the_fonts_found():
    names = L.font_names()
    assert names[0] == L.DEFAULT_FONT and len(names) == len(set(names))
    assert all(n.lower().endswith(L.FONT_EXTENSIONS) for n in names[1:])
    assert all(os.path.isfile(path) for path in L.font_files().values())
    assert L.font_files() is L.font_files()  # asked once
    spec = next(s for s in Node.INPUTS if s.name == "font")
    assert spec.default == L.DEFAULT_FONT and Node.INPUT_TYPES()["required"]["font"][0] == names


@pytest.mark.parametrize(
    "name",
    ["bogus", "../../etc/passwd.obj", "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf", "", 5, None, ["default"]],
)
def test_a_font_not_in_the_list_is_a_named_error(name):
    """Only names from the list: no path, even of a real font, reaches the file system."""
    images = torch.zeros(1, 16, 16, 3)
    for labels in ("label", "none"):
        with pytest.raises(ValueError, match="^font: "):
            Node.execute(
                images=images, boxes='[{"x1": 1, "y1": 1, "x2": 9, "y2": 9, "label": "a"}]', labels=labels, font=name
            )


def built_font(path, cmap, colour_bitmaps=False):
    """A TrueType font at `path` with glyphs ".notdef", "a" and "b" (squares) and the character map `cmap`
    (code point -> glyph name); an (empty) sbix table of colour bitmaps beside them if asked."""
    from fontTools.fontBuilder import FontBuilder
    from fontTools.pens.ttGlyphPen import TTGlyphPen
    from fontTools.ttLib import newTable

    pen = TTGlyphPen(None)
    pen.moveTo((100, 0))
    pen.lineTo((100, 500))
    pen.lineTo((400, 500))
    pen.lineTo((400, 0))
    pen.closePath()
    names = [".notdef", "a", "b"]
    builder = FontBuilder(1000, isTTF=True)
    builder.setupGlyphOrder(names)
    builder.setupCharacterMap(cmap)
    builder.setupGlyf({name: pen.glyph() for name in names})
    builder.setupHorizontalMetrics({name: (500, 100) for name in names})
    builder.setupHorizontalHeader(ascent=800, descent=-200)
    builder.setupNameTable({"familyName": "Built", "styleName": "Regular"})
    builder.setupOS2()
    builder.setupPost()
    if colour_bitmaps:
        builder.font["sbix"] = newTable("sbix")
    builder.save(str(path))
    return str(path)


def test_a_font_has_the_characters_its_map_gives_a_glyph(tmp_path):
    """Basic Multilingual Plane (format 4) and beyond (format 12); a code mapped to glyph 0 (the missing
    glyph) is not had."""
    path = built_font(tmp_path / "built.ttf", {ord("a"): "a", 0x1F600: "b", ord("c"): ".notdef"})
    assert L._has_outlines(path)
    assert L._has(path, ord("a")) and L._has(path, 0x1F600)
    assert not L._has(path, ord("c")) and not L._has(path, ord("b")) and not L._has(path, 0x1F601)


def test_a_collection_is_read_as_its_first_font(tmp_path):
    """As Pillow draws a .ttc/.otc."""
    from fontTools.ttLib import TTCollection, TTFont

    collection = TTCollection()
    collection.fonts = [TTFont(built_font(tmp_path / f"{c}.ttf", {ord(c): "a"})) for c in "xy"]
    collection.save(str(tmp_path / "both.ttc"))
    path = str(tmp_path / "both.ttc")
    assert L._has_outlines(path) and L._has(path, ord("x")) and not L._has(path, ord("y"))


def test_colour_bitmap_fonts_are_left_out(tmp_path):
    path = built_font(tmp_path / "emoji.ttf", {ord("a"): "a"}, colour_bitmaps=True)
    assert not L._has_outlines(path) and L._coverage(path) is None and not L._has(path, ord("a"))


def test_coverage_of_known_fonts():
    assert all(L._has(L.BUNDLED, code) for code in range(0x20, 0x7F)) and not L._has(L.BUNDLED, ord("é"))
    dejavu = L.font_files().get("DejaVuSans.ttf")
    assert dejavu is not None, "install requirements-dev.txt (matplotlib: DejaVu)"
    assert all(L._has(dejavu, ord(c)) for c in "aé жΩ€")
    assert not any(L._has(dejavu, ord(c)) for c in "中" + NO_FONT_HAS)
    last_resort = L.font_files().get("LastResortHE-Regular.ttf")
    if last_resort is not None:  # matplotlib 3.6 and later
        assert L._has(last_resort, ord(NO_FONT_HAS)) and L._has(last_resort, 0)


@pytest.fixture
def without_fonttools(monkeypatch):
    """fontTools not importable, the font caches emptied before and after."""
    caches = (L.font_files, L._chain, L._coverage, L._runs)
    for cache in caches:
        cache.cache_clear()
    monkeypatch.setitem(sys.modules, "fontTools", None)
    monkeypatch.setitem(sys.modules, "fontTools.ttLib", None)
    yield
    monkeypatch.undo()
    for cache in caches:
        cache.cache_clear()


def test_without_fonttools_labels_are_drawn_in_pillows_font(without_fonttools, caplog):
    with caplog.at_level(logging.WARNING, logger="rasterkit"):
        assert L.font_names() == [L.DEFAULT_FONT] and L.font_names() == [L.DEFAULT_FONT]
    assert len(caplog.records) == 1 and "fontTools" in caplog.records[0].message  # once
    assert L._runs("café жук", L.DEFAULT_FONT) == ((L.BUNDLED, "café жук"),)
    assert bitmaps(["dog"])[0].sum() > 5


def test_wrap_breaks_greedily_at_spaces_within_the_width():
    text, limit = "a cat on a very long mat", 50
    lines = L.wrap(text, 16, L.DEFAULT_FONT, limit).split("\n")
    assert " ".join(lines) == text and len(lines) > 1
    widths = [bitmaps([line], size=16)[0].shape[1] for line in lines]
    assert all(w <= limit for w in widths)
    assert all(
        bitmaps([f"{line} {after.split()[0]}"], size=16)[0].shape[1] > limit  # each line as full as it can be
        for line, after in zip(lines, lines[1:], strict=False)
    )
    assert L.wrap("unbreakable", 16, L.DEFAULT_FONT, 5) == "unbreakable"  # a word alone keeps its line
    assert L.wrap(text, 16, L.DEFAULT_FONT, 0) == text


def test_a_newline_starts_a_line_one_pitch_below():
    """Two lines of the same ink extent: the label is the first line's height plus the pitch (the
    first font's ascent + descent) tall, and holds the ink of both."""
    first, second, both = bitmaps(["ab", "db", "ab\ndb"], size=16)
    pitch = sum(L._font(L.BUNDLED, 16).getmetrics())
    assert first.shape[0] == second.shape[0] and both.shape[0] == pitch + first.shape[0]
    assert both[:pitch].sum().item() == pytest.approx(first.sum().item(), rel=1e-6)
    assert both[pitch:].sum().item() == pytest.approx(second.sum().item(), rel=1e-6)


def test_wrapping_stops_at_the_lines_a_frame_can_show():
    text = " ".join(f"w{i}" for i in range(200))
    full = L.wrap(text, 16, L.DEFAULT_FONT, 60).split("\n")
    assert L.wrap(text, 16, L.DEFAULT_FONT, 60, max_lines=3).split("\n") == full[:3]
    # a caption of 200 words (labels are at most 1,000 characters) on a 120 px frame: the lines that fit
    boxes = '[{{"x1": 1, "y1": 1, "x2": 50, "y2": 50, "label": "{}"}}]'.format(" ".join(f"w{i}" for i in range(200)))
    _, alpha, _ = Node.execute(
        images=torch.zeros(1, 120, 160, 3), boxes=boxes, label_max_width=100, stroke_width=0.0, fill_opacity=0.0
    )
    assert alpha[0, -1].sum() > 0 and alpha[0, :, 110:].sum() == 0  # the label fills the frame's height only
