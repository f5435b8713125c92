// Box editing shared by the editors that edit a `boxes` JSON list (the Bounding Box Renderer's, the Box
// Editor's): the box forms the node reads, hit tests, and the mouse: drag on empty space to draw a box, drag
// a box to move it, drag its lower-right corner (in its own frame) to resize it, double-click a box (or
// select it and press Delete) to remove it. Corners snap to the node's `snap` grid where it has one.
import { FrameCanvas } from "./frame_canvas.js";

export const BOX_HANDLE = 10; // px on screen
const MIN_BOX = 2; // image px: a drag shorter than this is a click, not a box

// `value` at the nearest multiple of `step` (halves up, as the node's utils/inputs/drawn.snapped); 0: as it is.
export function snapTo(value, step) {
  return step > 0 ? Math.floor(value / step + 0.5) * step : value;
}

// The box before it turns about its centre, [x1, y1, x2, y2], and its angle (radians, clockwise on screen),
// as the node reads them: x1,y1,x2,y2 or x,y,w,h with an angle in degrees, ultralytics' xywhr (radians),
// or 4 corner points in order around the box (the first side sets the width and the angle).
export function boxShape(item) {
  if (Array.isArray(item)) return { coords: item.slice(0, 4).map(Number), angle: 0 };
  if (Array.isArray(item.xywhr)) {
    const [cx, cy, w, h, r] = item.xywhr.map(Number);
    const [hw, hh] = [Math.abs(w) / 2, Math.abs(h) / 2];
    return { coords: [cx - hw, cy - hh, cx + hw, cy + hh], angle: r };
  }
  if (Array.isArray(item.points)) {
    const p = item.points.flat().map(Number);
    const [cx, cy] = [(p[0] + p[2] + p[4] + p[6]) / 4, (p[1] + p[3] + p[5] + p[7]) / 4];
    const hw = (Math.hypot(p[2] - p[0], p[3] - p[1]) + Math.hypot(p[4] - p[6], p[5] - p[7])) / 4;
    const hh = (Math.hypot(p[6] - p[0], p[7] - p[1]) + Math.hypot(p[4] - p[2], p[5] - p[3])) / 4;
    return { coords: [cx - hw, cy - hh, cx + hw, cy + hh], angle: Math.atan2(p[3] - p[1], p[2] - p[0]) };
  }
  const coords = "x1" in item ? [item.x1, item.y1, item.x2, item.y2] : [item.x, item.y, item.x + item.w, item.y + item.h];
  return { coords: coords.map(Number), angle: ((Number(item.angle) || 0) * Math.PI) / 180 };
}

export function boxCoords(item) {
  return boxShape(item).coords;
}

// A point [x, y] in the frame of a box turned by `angle` about the centre of coords (the box's own axes).
function intoBox([x, y], coords, angle) {
  const [cx, cy] = [(coords[0] + coords[2]) / 2, (coords[1] + coords[3]) / 2];
  const [dx, dy] = [x - cx, y - cy];
  return [cx + dx * Math.cos(angle) + dy * Math.sin(angle), cy - dx * Math.sin(angle) + dy * Math.cos(angle)];
}

function withCoords(item, [x1, y1, x2, y2]) {
  const round = (v) => Math.round(v * 10) / 10;
  const c = [Math.min(x1, x2), Math.min(y1, y2), Math.max(x1, x2), Math.max(y1, y2)].map(round);
  if (Array.isArray(item)) return c;
  const { angle } = boxShape(item);
  const { x, y, w, h, xywhr, points, ...rest } = item;
  const turned = xywhr || points ? { angle: round((angle * 180) / Math.PI) } : {}; // the node's other form
  return { ...rest, x1: c[0], y1: c[1], x2: c[2], y2: c[3], ...turned };
}

export class BoxEditing extends FrameCanvas {
  constructor(node, name) {
    super(node, name);
    this.selected = -1;
    this.drag = null;
    this.listen({ pointerdown: this.down, pointermove: this.move, pointerup: this.up, dblclick: this.remove,
                  keydown: this.key });
  }

  snap(value) {
    return snapTo(value, Number(this.value("snap")) || 0);
  }

  // The editable list: a list of boxes for every frame. A per-frame list shows frame 0, read-only.
  boxes() {
    try {
      const data = JSON.parse(this.value("boxes") || "[]");
      if (!Array.isArray(data)) return { items: [], editable: false };
      const perFrame = data.length > 0 && data.every((d) => Array.isArray(d) && d.every((b) => typeof b === "object"));
      return perFrame ? { items: data[0], editable: false } : { items: data, editable: true };
    } catch {
      return { items: [], editable: false };
    }
  }

  write(items) {
    this.setValue("boxes", JSON.stringify(items));
  }

  hit(x, y, items) {
    const handle = BOX_HANDLE / this.fit().scale;
    for (let i = items.length - 1; i >= 0; i--) {
      const { coords, angle } = boxShape(items[i]);
      const [x1, y1, x2, y2] = coords;
      const [u, v] = intoBox([x, y], coords, angle); // a turned box is hit in its own frame
      if (Math.abs(u - x2) < handle && Math.abs(v - y2) < handle) return { index: i, mode: "resize" };
      if (u >= x1 && u <= x2 && v >= y1 && v <= y2) return { index: i, mode: "move" };
    }
    return null;
  }

  down(event) {
    const { items, editable } = this.boxes();
    if (!editable || event.button !== 0) return;
    event.stopPropagation();
    this.canvas.setPointerCapture(event.pointerId);
    const [x, y] = this.toImage(event);
    const hit = this.hit(x, y, items);
    if (hit) {
      this.selected = hit.index;
      this.drag = { ...hit, start: [x, y], original: boxCoords(items[hit.index]) };
    } else {
      const [sx, sy] = [this.snap(x), this.snap(y)];
      items.push([sx, sy, sx, sy]);
      this.selected = items.length - 1;
      this.drag = { index: this.selected, mode: "resize", start: [sx, sy], original: [sx, sy, sx, sy], fresh: true };
      this.write(items);
    }
  }

  move(event) {
    if (!this.drag) return;
    event.stopPropagation();
    const { items } = this.boxes();
    const [x, y] = this.toImage(event);
    let [dx, dy] = [x - this.drag.start[0], y - this.drag.start[1]];
    const [x1, y1, x2, y2] = this.drag.original;
    if (this.drag.mode === "resize") { // along the box's own axes
      const { angle } = boxShape(items[this.drag.index]);
      [dx, dy] = [dx * Math.cos(angle) + dy * Math.sin(angle), -dx * Math.sin(angle) + dy * Math.cos(angle)];
    }
    let coords;
    if (this.drag.mode === "move") { // the top-left corner snaps, the size stays
      const [mx, my] = [this.snap(x1 + dx), this.snap(y1 + dy)];
      coords = [mx, my, mx + x2 - x1, my + y2 - y1];
    } else {
      coords = [x1, y1, this.snap(x2 + dx), this.snap(y2 + dy)];
    }
    items[this.drag.index] = withCoords(items[this.drag.index], coords);
    this.write(items);
  }

  up() {
    if (!this.drag) return;
    const { items } = this.boxes();
    const [x1, y1, x2, y2] = boxCoords(items[this.drag.index]);
    if (this.drag.fresh && (x2 - x1 < MIN_BOX || y2 - y1 < MIN_BOX)) { // a click, not a box
      items.splice(this.drag.index, 1);
      this.selected = -1;
      this.write(items);
    }
    this.drag = null;
  }

  remove(event) {
    const { items, editable } = this.boxes();
    if (!editable) return;
    const hit = this.hit(...this.toImage(event), items);
    if (hit) {
      items.splice(hit.index, 1);
      this.selected = -1;
      this.write(items);
    }
  }

  key(event) {
    if ((event.key === "Delete" || event.key === "Backspace") && this.selected >= 0) {
      const { items, editable } = this.boxes();
      if (!editable || this.selected >= items.length) return;
      items.splice(this.selected, 1);
      this.selected = -1;
      this.write(items);
      event.preventDefault();
      event.stopPropagation();
    }
  }
}
