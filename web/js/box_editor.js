// Box editor for RasterKit_BoundingBoxRenderer: shows the first input frame of the last run (or an
// empty canvas of the last frame size) with the boxes of the `boxes` input, styled like the node
// will draw them (oriented boxes turned). Drag on empty space to draw a box, drag a box to move it, drag
// its lower-right corner (in its own frame) to resize it, double-click a box (or select it and press
// Delete) to remove it. Every edit writes the JSON back into `boxes`, whose text area grows with its text.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import { BoxEditing, boxShape } from "./box_editing.js";
import { groupAdvanced, registerFrameEditor } from "./frame_canvas.js";

const TEXT_MAX_HEIGHT = 240; // px the boxes text area grows to; longer text scrolls
// Settings behind the node's "advanced settings" toggle: finer label and marker settings, the output choices,
// score bars, traces and the edits inside and outside the boxes.
const ADVANCED = new Set(["corner_length", "layer_alpha", "font", "palette_colors", "label_anchor", "text_color",
  "label_padding", "label_max_width", "label_avoid_overlap", "marker_size", "outputs", "bar", "bar_height", "inside",
  "inside_size", "dim_outside", "trace_frames"]);
let palettes = null; // {name: [hex, ...]} from the server, the node's own palettes
let palettesLoading = null;

function loadPalettes() {
  palettesLoading ??= api.fetchApi("/rasterkit/palettes").then((r) => r.json()).catch(() => ({}))
    .then((table) => { palettes = table; });
  return palettesLoading;
}

// zlib's crc32, as the node uses it to give a class label its palette slot
const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(text) {
  let c = 0xffffffff;
  for (const byte of new TextEncoder().encode(text)) c = CRC_TABLE[(c ^ byte) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

// A label's text as the node writes it (nodes/boxes.py _label_text): label, #id, score per `labels`.
function labelText(item, mode) {
  if (Array.isArray(item) || !item) return "";
  const parts = [];
  if (["label", "label+score", "label+id", "all"].includes(mode) && item.label != null) parts.push(String(item.label));
  if (["id", "label+id", "all"].includes(mode) && item.id != null) parts.push(`#${item.id}`);
  if (["label+score", "all"].includes(mode) && item.score != null) parts.push(Number(item.score).toFixed(2));
  return parts.join(" ");
}

// Black or white, whichever contrasts more with a hex background (as the node picks the text colour).
function contrastInk(hex) {
  const [r, g, b] = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16) / 255)
    .map((c) => (c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4));
  return 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.179 ? "#000" : "#fff";
}

// Height in px of a text area that shows all its text at `width` px (long JSON lines wrap). The width is
// the node's: an element out of view measures 0.
function textHeight(element, width) {
  const style = getComputedStyle(element);
  const line = parseFloat(style.lineHeight) || 1.25 * parseFloat(style.fontSize) || 16;
  const padding = parseFloat(style.paddingTop) + parseFloat(style.paddingBottom) || 8;
  width = Math.max(40, width - (parseFloat(style.paddingLeft) + parseFloat(style.paddingRight) || 8));
  textHeight.ctx ??= document.createElement("canvas").getContext("2d");
  textHeight.ctx.font = style.font || "12px monospace";
  const rows = element.value.split("\n")
    .reduce((n, text) => n + Math.max(1, Math.ceil(textHeight.ctx.measureText(text).width / width)), 0);
  return (rows + 1) * line + padding + 4; // a spare row: wrapping at spaces fits fewer characters than the estimate
}

class BoxEditor extends BoxEditing {
  constructor(node) {
    groupAdvanced(node, ADVANCED);
    super(node, "box_editor");
    loadPalettes().then(() => this.draw());
    this.text = node.widgets?.find((w) => w.name === "boxes");
    if (this.text?.inputEl) {
      // as tall as its text (up to TEXT_MAX_HEIGHT): the node's spare height goes to the editor
      this.text.options.getMinHeight = this.text.options.getMaxHeight =
        () => Math.min(TEXT_MAX_HEIGHT, Math.max(50, textHeight(this.text.inputEl, node.size[0] - 20)));
      this.text.inputEl.addEventListener("input", () => this.fitText());
      setTimeout(() => this.fitText(), 0); // a loaded workflow's text is set after the node is made
    }
  }

  // Grow the node (never shrink it) so that the boxes text area shows its text: LiteGraph gives DOM widgets
  // what height the node has, less than they ask for when it is short; the layout of the next frame says.
  fitText() {
    this.node.setDirtyCanvas?.(true, true);
    requestAnimationFrame(() => {
      const missing = this.text.computeLayoutSize(this.node).minHeight - (this.text.computedHeight ?? 0);
      if (missing > 0) this.node.setSize([this.node.size[0], this.node.size[1] + missing]);
      this.node.setDirtyCanvas?.(true, true);
    });
  }

  write(items) {
    super.write(items);
    this.fitText();
  }

  colour(item, index) {
    if (item && !Array.isArray(item) && item.color) return item.color.slice(0, 7);
    const fixed = (this.value("color") || "").trim();
    if (fixed) return fixed.startsWith("#") ? fixed.slice(0, 7) : `#${fixed.slice(0, 6)}`;
    // palette_colors, when given, replaces the named palette (hex colours separated as the node reads them)
    const listed = (this.value("palette_colors") || "").split(/[\s,;]+/).filter(Boolean)
      .map((c) => (c.startsWith("#") ? c.slice(0, 7) : `#${c.slice(0, 6)}`));
    const colours = listed.length ? listed : palettes?.[this.value("palette")] ?? ["#E6194B"];
    const by = this.value("color_by");
    const key = Array.isArray(item) ? null : by === "label" ? item.label : by === "id" ? item.id : index;
    if (key === null || key === undefined) return colours[index % colours.length];
    return colours[(typeof key === "number" ? key : crc32(String(key))) % colours.length];
  }

  draw() {
    const { ctx, s } = this.begin();
    const { items, editable } = this.boxes();
    const stroke = Number(this.value("stroke_width") ?? 3);
    const radius = Number(this.value("corner_radius") ?? 0);
    items.forEach((item, index) => {
      const { coords, angle } = boxShape(item);
      let [x1, y1, x2, y2] = coords;
      [x1, x2] = [Math.min(x1, x2), Math.max(x1, x2)];
      [y1, y2] = [Math.min(y1, y2), Math.max(y1, y2)];
      const r = Math.max(0, Math.min(radius, (x2 - x1) / 2, (y2 - y1) / 2)) * s;
      ctx.save(); // a turned box turns about its centre
      ctx.translate(((x1 + x2) / 2) * s, ((y1 + y2) / 2) * s);
      ctx.rotate(angle || 0);
      ctx.beginPath();
      ctx.roundRect(((x1 - x2) / 2) * s, ((y1 - y2) / 2) * s, (x2 - x1) * s, (y2 - y1) * s, r);
      ctx.restore();
      ctx.fillStyle = ctx.strokeStyle = this.colour(item, index);
      ctx.globalAlpha = Number(this.value("fill_opacity") ?? 0);
      ctx.fill();
      ctx.globalAlpha = Number(this.value("stroke_opacity") ?? 1);
      ctx.lineWidth = Math.max(stroke * s, index === this.selected ? 2 : 0);
      if (stroke > 0 || index === this.selected) ctx.stroke();
    });
    items.forEach((item, index) => this.drawTab(ctx, s, item, index)); // labels above all boxes, as the node draws them
    if (!editable) this.note(ctx, "per-frame boxes: frame 0 shown, edit the JSON");
  }

  // The label tab of a box, as the node places it: label_anchor on the box's upright bounds (top: above
  // it, inside its top when there is no room; bottom likewise), kept inside the frame.
  drawTab(ctx, s, item, index) {
    const text = labelText(item, this.value("labels") ?? "label");
    if (!text) return;
    const { coords, angle } = boxShape(item);
    const [cx, cy] = [(coords[0] + coords[2]) / 2, (coords[1] + coords[3]) / 2];
    const [hw, hh] = [Math.abs(coords[2] - coords[0]) / 2, Math.abs(coords[3] - coords[1]) / 2];
    const [ex, ey] = [hw * Math.abs(Math.cos(angle)) + hh * Math.abs(Math.sin(angle)),
                      hw * Math.abs(Math.sin(angle)) + hh * Math.abs(Math.cos(angle))];
    const [x1, y1, x2, y2] = [cx - ex, cy - ey, cx + ex, cy + ey];
    const size = Number(this.value("label_size") ?? 16);
    const pad = Number(this.value("label_padding") ?? 3);
    ctx.font = `${size * s}px sans-serif`;
    const [w, h] = [ctx.measureText(text).width / s + 2 * pad, size + 2 * pad];
    const frame = this.size();
    const [vertical, horizontal = "center"] = (this.value("label_anchor") ?? "top_left").split("_");
    let x = horizontal === "left" ? x1 : horizontal === "right" ? x2 - w : (x1 + x2 - w) / 2;
    let y = vertical === "top" ? (y1 - h >= 0 ? y1 - h : y1)
      : vertical === "bottom" ? (y2 + h <= frame.height ? y2 : y2 - h) : (y1 + y2 - h) / 2;
    x = Math.max(0, Math.min(x, frame.width - w));
    y = Math.max(0, Math.min(y, frame.height - h));
    const colour = this.colour(item, index);
    const ink = (this.value("text_color") ?? "").trim();
    ctx.globalAlpha = 1;
    ctx.fillStyle = colour;
    ctx.fillRect(x * s, y * s, w * s, h * s);
    ctx.fillStyle = ink ? (ink.startsWith("#") ? ink.slice(0, 7) : `#${ink.slice(0, 6)}`) : contrastInk(colour);
    ctx.textBaseline = "top";
    ctx.fillText(text, (x + pad) * s, (y + pad) * s);
  }
}

app.registerExtension(registerFrameEditor("RasterKit.BoxEditor", "RasterKit_BoundingBoxRenderer", "rasterkitBoxEditor",
                                            BoxEditor));
