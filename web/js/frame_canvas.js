// The canvas the editors draw on: the first input frame of the node's last run (or an empty
// frame of the last size), fitted into a widget of the node. Editors work in image pixels and
// redraw whenever one of the node's widgets changes, so style edits show at once.
import { api } from "../../scripts/api.js";

const DEFAULT_SIZE = { width: 512, height: 512 };
const MIN_HEIGHT = 260; // px of the editor widget (its canvas: less the margins)
const MAX_HEIGHT = 800;
export const NOTE_BACKDROP = "rgba(0, 0, 0, 0.7)";
export const POINT_HANDLE = 8; // px on screen: how near a click must be to take a point
const NOTE_HEIGHT = 19; // px of a note's backdrop

export function viewURL(entry) {
  return api.apiURL(`/view?filename=${encodeURIComponent(entry.filename)}&subfolder=${encodeURIComponent(entry.subfolder)}&type=${entry.type}`);
}

// LiteGraph (ComfyUI frontend 1.27) leaves hidden and advanced widgets out when it sizes a node but still
// lays them out at their height, a gap in the node: such a widget takes no height while it is hidden.
export function collapseWhenHidden(node, widget) {
  if (widget.computeLayoutSize) { // a DOM widget
    const layout = widget.computeLayoutSize.bind(widget);
    widget.computeLayoutSize = (n) => (node.isWidgetVisible(widget) ? layout(n) : { minHeight: 0, maxHeight: 0, minWidth: 0 });
  } else {
    const size = widget.computeSize?.bind(widget);
    widget.computeSize = (width) => (node.isWidgetVisible(widget)
      ? size?.(width) ?? [width, window.LiteGraph.NODE_WIDGET_HEIGHT] : [0, -4]); // LiteGraph adds 4 px
  }
}

const TOGGLE = "advanced settings";

// Marks the widgets `names` advanced (LiteGraph hides them until the node shows its advanced widgets) and
// adds the button that shows or hides them, after the node's own widgets so that the saved widget values
// keep their places. The node's inputs, their order and values stay as they are.
export function groupAdvanced(node, names) {
  for (const widget of node.widgets ?? []) {
    if (!names.has(widget.name)) continue;
    widget.advanced = true;
    collapseWhenHidden(node, widget);
  }
  const toggle = node.addWidget("button", TOGGLE, null, () => {
    node.showAdvanced = !node.showAdvanced;
    node.setSize([node.size[0], node.computeSize()[1]]); // grows to show them, shrinks when they hide
    node.setDirtyCanvas(true, true);
  });
  toggle.serialize = false;
}

// The toggle's text: what it does, and how many hidden settings differ from their defaults.
function toggleLabel(node) {
  if (node.showAdvanced) return `hide ${TOGGLE}`;
  const spec = { ...node.constructor.nodeData?.input?.required, ...node.constructor.nodeData?.input?.optional };
  const changed = (node.widgets ?? []).filter((w) => w.advanced && spec[w.name] && w.value !== spec[w.name][1]?.default);
  return `show ${TOGGLE}` + (changed.length ? ` (${changed.length} changed)` : "");
}

export class FrameCanvas {
  constructor(node, name) {
    this.node = node;
    this.frame = null; // {width, height} of the frames the node last ran on
    this.image = null;
    this.canvas = document.createElement("canvas");
    this.canvas.className = `rasterkit-${name}`;
    this.canvas.tabIndex = 0;
    this.canvas.style.cssText = "width: 100%; height: 100%; outline: none; cursor: crosshair; background: #222";
    // the frame at the node's full width at least (a wider node, or a taller one, makes it larger)
    this.widget = node.addDOMWidget(name, `rasterkit_${name}`, this.canvas,
                                    { serialize: false, getMinHeight: () => this.minHeight() });
    this.widget.serialize = false; // what LiteGraph reads: no null after the node's values in a saved workflow
    new ResizeObserver(() => this.draw()).observe(this.canvas);
    for (const w of node.widgets ?? []) {
      const callback = w.callback;
      w.callback = (...args) => { const r = callback?.apply(w, args); this.draw(); return r; };
    }
  }

  listen(handlers) {
    for (const [event, handler] of Object.entries(handlers)) this.canvas.addEventListener(event, handler.bind(this));
  }

  value(name) {
    return this.node.widgets?.find((w) => w.name === name)?.value;
  }

  setValue(name, value) {
    const widget = this.node.widgets.find((w) => w.name === name);
    widget.value = value;
    widget.callback?.(widget.value);
    this.node.setDirtyCanvas?.(true, true);
    this.draw();
  }

  // The size of the frame edited, null until it is known (the first run sends it).
  frameSize() {
    return this.frame;
  }

  // The picture under the edits: the first frame of the last run, or null.
  backdrop() {
    return this.image;
  }

  size() {
    return this.frameSize() ?? DEFAULT_SIZE;
  }

  minHeight() {
    const frame = this.frameSize();
    if (!frame) return MIN_HEIGHT;
    const { width, height } = frame;
    return Math.round(Math.min(MAX_HEIGHT, Math.max(MIN_HEIGHT, (this.node.size[0] - 20) * (height / width))));
  }

  setFrame(entry) {
    this.frame = { width: entry.width, height: entry.height };
    const [width, height] = this.node.size; // room for the frame at its new aspect ratio
    this.node.setSize([width, Math.max(height, this.node.computeSize()[1])]);
    const image = new Image();
    image.onload = () => { this.image = image; this.draw(); };
    image.src = viewURL(entry);
  }

  // The frame is fitted into the widget, centred: image px -> screen px is scale * p + offset.
  fit() {
    const rect = this.canvas.getBoundingClientRect();
    const { width, height } = this.size();
    const scale = Math.min(rect.width / width, rect.height / height) || 1;
    return { rect, scale, x: (rect.width - width * scale) / 2, y: (rect.height - height * scale) / 2 };
  }

  toImage(event) {
    const { rect, scale, x, y } = this.fit();
    return [(event.clientX - rect.left - x) / scale, (event.clientY - rect.top - y) / scale];
  }

  toClient(px, py) {
    const { rect, scale, x, y } = this.fit();
    return [rect.left + x + px * scale, rect.top + y + py * scale];
  }

  // Clears the canvas and draws the frame; returns the context (in frame-fitted screen pixels)
  // and the scale from image pixels.
  begin() {
    const toggle = this.node.widgets.find((w) => w.name === TOGGLE);
    if (toggle) toggle.label = toggleLabel(this.node);
    const { width, height } = this.size();
    const fit = this.fit();
    const ratio = window.devicePixelRatio || 1;
    this.canvas.width = Math.max(1, Math.round(fit.rect.width * ratio));
    this.canvas.height = Math.max(1, Math.round(fit.rect.height * ratio));
    const ctx = this.canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.translate(fit.x, fit.y);
    ctx.fillStyle = "#333";
    ctx.fillRect(0, 0, width * fit.scale, height * fit.scale);
    const backdrop = this.backdrop();
    if (backdrop) ctx.drawImage(backdrop, 0, 0, width * fit.scale, height * fit.scale);
    return { ctx, s: fit.scale };
  }

  // A line of text at the top left of the frame (or its bottom left), white on a dark backdrop: readable
  // on any image.
  note(ctx, text, bottom = false) {
    const top = bottom ? this.size().height * this.fit().scale - NOTE_HEIGHT - 4 : 4;
    ctx.globalAlpha = 1;
    ctx.font = "12px sans-serif";
    ctx.fillStyle = NOTE_BACKDROP;
    ctx.beginPath();
    ctx.roundRect(4, top, ctx.measureText(text).width + 8, NOTE_HEIGHT, 3);
    ctx.fill();
    ctx.fillStyle = "#fff";
    ctx.textBaseline = "alphabetic";
    ctx.fillText(text, 8, top + 14);
  }

  draw() {}
}

// Registers an editor class on one node type: created with the node, given the first frame of
// each run (the node's preview sends it as `rasterkit_frame`).
export function registerFrameEditor(extensionName, nodeName, property, Editor) {
  return {
    name: extensionName,
    async beforeRegisterNodeDef(nodeType, nodeData) {
      if (nodeData.name !== nodeName) return;
      const onNodeCreated = nodeType.prototype.onNodeCreated;
      nodeType.prototype.onNodeCreated = function () {
        const result = onNodeCreated?.apply(this, arguments);
        this[property] = new Editor(this);
        return result;
      };
      const onExecuted = nodeType.prototype.onExecuted;
      nodeType.prototype.onExecuted = function (message) {
        onExecuted?.apply(this, arguments);
        const frame = message?.rasterkit_frame?.[0];
        if (frame) this[property]?.setFrame(frame);
      };
    },
  };
}
