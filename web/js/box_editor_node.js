// The editor of RasterKit_BoxEditor: boxes and points drawn on the reference image (the first frame of the
// `image` input's last run; without an image, a blank frame of the node's width x height). Boxes as in the
// Bounding Box Renderer's editor (box_editing.js): drag to draw, drag to move, lower-right corner to resize,
// double-click or Delete to remove. Points: shift-click adds a point, shift+alt-click a negative one (or
// choose what a click adds with the `click adds` switch); drag a point to move it, double-click it or press
// Delete to remove it. Corners and points snap to the `snap` grid (drawn when it is 6 px or more on screen);
// the mouse's position in image pixels (snapped) shows at the bottom left. Every edit writes the JSON back into
// `boxes`, `points` or `negative_points`, as [{"x": .., "y": ..}] lists (KJNodes' Points Editor's form).
import { app } from "../../scripts/app.js";
import { BoxEditing, boxShape } from "./box_editing.js";
import { POINT_HANDLE, registerFrameEditor } from "./frame_canvas.js";

const CLICK_ADDS = ["boxes", "points", "negative points"]; // the switch's choices
const POINT_LISTS = { points: "points", "negative points": "negative_points" }; // a choice's widget
const COLOURS = { box: "#00D8FF", selected: "#FFCC00", points: "#2ECC40", negative_points: "#FF4136" };
const POINT_RADIUS = 5; // px on screen
const GRID_MIN_SPACING = 6; // px on screen: a finer snap grid is not drawn
const GRID_COLOUR = "rgba(255, 255, 255, 0.15)";
const BOX_FILL_OPACITY = 0.15;

const pointXY = (p) => (Array.isArray(p) ? [Number(p[0]), Number(p[1])] : [Number(p?.x), Number(p?.y)]);
const round = (v) => Math.round(v * 10) / 10;

class BoxAndPointEditor extends BoxEditing {
  constructor(node) {
    super(node, "box_and_point_editor");
    this.pointDrag = null;
    this.selectedPoint = null; // {list: "points" | "negative_points", index}
    this.hover = null; // [x, y] in image px while the mouse is over the frame
    this.listen({ pointerleave: () => { this.hover = null; this.draw(); } });
    this.clickAdds = node.addWidget("combo", "click adds", CLICK_ADDS[0], () => this.draw(), { values: CLICK_ADDS });
    this.clickAdds.serialize = false; // the editor's own switch, not an input of the node
  }

  imageConnected() {
    return this.node.inputs?.find((input) => input.name === "image")?.link != null;
  }

  // The image's size after a run with it; otherwise the node's width x height.
  frameSize() {
    if (this.imageConnected() && this.frame) return this.frame;
    return { width: Number(this.value("width")) || 1, height: Number(this.value("height")) || 1 };
  }

  backdrop() {
    return this.imageConnected() ? this.image : null;
  }

  // The points of `list` (a widget's name) as [[x, y]], or null when its JSON is not a list of points.
  points(list) {
    try {
      const data = JSON.parse(this.value(list) || "[]");
      const xy = Array.isArray(data) ? data.map(pointXY) : null;
      return xy?.every((p) => p.every(Number.isFinite)) ? xy : null;
    } catch {
      return null;
    }
  }

  writePoints(list, xy) {
    this.setValue(list, JSON.stringify(xy.map(([x, y]) => ({ x: round(x), y: round(y) }))));
  }

  hitPoint(x, y) {
    const handle = POINT_HANDLE / this.fit().scale;
    for (const list of Object.values(POINT_LISTS)) {
      const xy = this.points(list) ?? [];
      for (let i = xy.length - 1; i >= 0; i--) {
        if (Math.hypot(xy[i][0] - x, xy[i][1] - y) < handle) return { list, index: i };
      }
    }
    return null;
  }

  // The widget a click adds a point to, or null when it draws a box.
  pointList(event) {
    if (event.shiftKey) return event.altKey ? POINT_LISTS["negative points"] : POINT_LISTS.points;
    return POINT_LISTS[this.clickAdds.value] ?? null;
  }

  down(event) {
    if (event.button !== 0) return;
    const [x, y] = this.toImage(event);
    const hit = this.hitPoint(x, y);
    const list = hit?.list ?? this.pointList(event);
    if (!list) {
      this.selectedPoint = null;
      super.down(event);
      return;
    }
    const xy = this.points(list);
    if (!xy) return; // JSON the editor does not edit: the text stays as it is
    event.stopPropagation();
    this.canvas.setPointerCapture(event.pointerId);
    let index = hit?.index;
    if (index === undefined) {
      xy.push([this.snap(x), this.snap(y)]);
      index = xy.length - 1;
      this.writePoints(list, xy);
    }
    this.selected = -1;
    this.selectedPoint = { list, index };
    this.pointDrag = { list, index };
  }

  move(event) {
    const [x, y] = this.toImage(event);
    const { width, height } = this.size();
    this.hover = x >= 0 && y >= 0 && x <= width && y <= height ? [x, y] : null;
    if (!this.pointDrag) {
      if (this.drag) super.move(event); // which redraws
      else this.draw(); // the mouse's position
      return;
    }
    event.stopPropagation();
    const { list, index } = this.pointDrag;
    const xy = this.points(list);
    if (!xy || index >= xy.length) return;
    xy[index] = [Math.min(Math.max(this.snap(x), 0), width), Math.min(Math.max(this.snap(y), 0), height)];
    this.writePoints(list, xy);
  }

  up(event) {
    this.pointDrag = null;
    super.up(event);
  }

  removePoint({ list, index }) {
    const xy = this.points(list);
    if (!xy || index >= xy.length) return;
    xy.splice(index, 1);
    this.selectedPoint = null;
    this.writePoints(list, xy);
  }

  remove(event) {
    const hit = this.hitPoint(...this.toImage(event));
    if (hit) this.removePoint(hit);
    else super.remove(event);
  }

  key(event) {
    if ((event.key === "Delete" || event.key === "Backspace") && this.selectedPoint) {
      this.removePoint(this.selectedPoint);
      event.preventDefault();
      event.stopPropagation();
      return;
    }
    super.key(event);
  }

  drawGrid(ctx, s) {
    const step = Number(this.value("snap")) || 0;
    if (step * s < GRID_MIN_SPACING) return;
    const { width, height } = this.size();
    ctx.globalAlpha = 1;
    ctx.strokeStyle = GRID_COLOUR;
    ctx.lineWidth = 1;
    ctx.beginPath();
    for (let x = step; x < width; x += step) { ctx.moveTo(x * s, 0); ctx.lineTo(x * s, height * s); }
    for (let y = step; y < height; y += step) { ctx.moveTo(0, y * s); ctx.lineTo(width * s, y * s); }
    ctx.stroke();
  }

  draw() {
    const { ctx, s } = this.begin();
    this.drawGrid(ctx, s);
    const { items, editable } = this.boxes();
    items.forEach((item, index) => {
      const [x1, y1, x2, y2] = boxShape(item).coords;
      const colour = index === this.selected ? COLOURS.selected : COLOURS.box;
      ctx.fillStyle = ctx.strokeStyle = colour;
      ctx.globalAlpha = BOX_FILL_OPACITY;
      ctx.fillRect(Math.min(x1, x2) * s, Math.min(y1, y2) * s, Math.abs(x2 - x1) * s, Math.abs(y2 - y1) * s);
      ctx.globalAlpha = 1;
      ctx.lineWidth = 2;
      ctx.strokeRect(Math.min(x1, x2) * s, Math.min(y1, y2) * s, Math.abs(x2 - x1) * s, Math.abs(y2 - y1) * s);
      ctx.fillRect(Math.max(x1, x2) * s - 3, Math.max(y1, y2) * s - 3, 6, 6); // the corner that resizes
    });
    const unreadable = [];
    for (const list of Object.values(POINT_LISTS)) {
      const xy = this.points(list);
      if (!xy) unreadable.push(list);
      (xy ?? []).forEach(([x, y], index) => {
        const selected = this.selectedPoint?.list === list && this.selectedPoint.index === index;
        ctx.globalAlpha = 1;
        ctx.beginPath();
        ctx.arc(x * s, y * s, POINT_RADIUS, 0, 2 * Math.PI);
        ctx.fillStyle = COLOURS[list];
        ctx.fill();
        ctx.lineWidth = 2;
        ctx.strokeStyle = selected ? COLOURS.selected : "#fff";
        ctx.stroke();
      });
    }
    if (!editable) this.note(ctx, "boxes is not one list of boxes: edit the JSON");
    else if (unreadable.length) this.note(ctx, `${unreadable.join(" and ")}: not a list of points, edit the JSON`);
    if (this.hover) this.note(ctx, `${this.hover.map((v) => round(this.snap(v))).join(", ")} px`, true);
  }
}

app.registerExtension(registerFrameEditor("RasterKit.BoxAndPointEditor", "RasterKit_BoxEditor",
                                            "rasterkitBoxAndPointEditor", BoxAndPointEditor));
