// Build-up player for RasterKit_PrimitiveMesh: after a run, the node plays the image being built
// shape by shape (the node's preview sends the build-up frames as `rasterkit_animation`), with
// play/pause and a slider to step through the frames. While the node runs, ComfyUI's live preview
// shows the search instead (the player is hidden); when the frames come, the player takes its place,
// so that the node shows one picture at a time.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";
import { collapseWhenHidden, viewURL } from "./frame_canvas.js";

const FRAME_MS = 100;
const ICON_PX = 14;
const LIVE_PREVIEW_WIDGET = "$$canvas-image-preview"; // the frontend's widget for a running node's previews

// Play and pause drawn as paths: their font glyphs (U+25B6, U+23F8) are missing from many fonts and
// show as an empty box (Chromium on Linux).
function drawIcon(canvas, playing) {
  const ratio = window.devicePixelRatio || 1;
  canvas.width = canvas.height = Math.round(ICON_PX * ratio);
  const ctx = canvas.getContext("2d");
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.fillStyle = "#ddd";
  if (playing) { // pause: two bars
    ctx.fillRect(3, 2, 3, 10);
    ctx.fillRect(8, 2, 3, 10);
  } else { // play: a triangle pointing right
    ctx.beginPath();
    ctx.moveTo(3, 2);
    ctx.lineTo(12, 7);
    ctx.lineTo(3, 12);
    ctx.closePath();
    ctx.fill();
  }
}

// Drops the live preview the frontend keeps on a node after its run (its blob URLs, its widget).
function dropLivePreview(node) {
  const key = String(node.id);
  for (const url of app.nodePreviewImages?.[key] ?? []) URL.revokeObjectURL(url);
  delete app.nodePreviewImages?.[key];
  node.imgs = undefined;
  node.preview = undefined;
  const index = node.widgets?.findIndex((w) => w.name === LIVE_PREVIEW_WIDGET) ?? -1;
  if (index >= 0) {
    node.widgets[index].onRemove?.();
    node.widgets.splice(index, 1);
  }
}

class BuildUpPlayer {
  constructor(node) {
    this.node = node;
    this.frames = []; // preloaded Image objects
    this.index = 0;
    this.timer = null;
    this.root = document.createElement("div");
    this.root.className = "rasterkit-buildup-player";
    this.root.style.cssText = "display: flex; flex-direction: column; width: 100%; height: 100%; gap: 4px";
    this.picture = document.createElement("img");
    this.picture.style.cssText = "flex: 1; min-height: 0; width: 100%; object-fit: contain; background: #222";
    const controls = document.createElement("div");
    controls.style.cssText = "display: flex; align-items: center; gap: 6px; font: 12px sans-serif; color: #ddd";
    this.button = document.createElement("button");
    this.button.style.cssText = "display: flex; padding: 3px 6px; background: #444; border: 1px solid #666; border-radius: 4px";
    this.icon = document.createElement("canvas");
    this.icon.style.cssText = `width: ${ICON_PX}px; height: ${ICON_PX}px`;
    this.button.append(this.icon);
    this.button.addEventListener("click", () => (this.timer ? this.pause() : this.play()));
    this.slider = document.createElement("input");
    this.slider.type = "range";
    this.slider.min = 0;
    this.slider.max = 0;
    this.slider.style.flex = "1";
    this.slider.addEventListener("input", () => { this.pause(); this.show(Number(this.slider.value)); });
    this.label = document.createElement("span");
    controls.append(this.button, this.slider, this.label);
    this.root.append(this.picture, controls);
    this.widget = node.addDOMWidget("buildup_player", "rasterkit_buildup_player", this.root,
                                    { serialize: false, getMinHeight: () => 220 });
    this.widget.serialize = false; // what LiteGraph reads: no null after the node's values in a saved workflow
    collapseWhenHidden(node, this.widget);
    this.setIcon(false);
    this.hide(); // no empty box before the first run's frames
  }

  setIcon(playing) {
    drawIcon(this.icon, playing);
    this.button.title = this.button.ariaLabel = playing ? "pause" : "play";
  }

  hide() {
    this.pause();
    this.widget.hidden = true;
    this.node.setDirtyCanvas?.(true, true);
  }

  setFrames(entries) {
    this.pause();
    this.frames = entries.map((entry) => Object.assign(new Image(), { src: viewURL(entry) }));
    this.slider.max = Math.max(0, this.frames.length - 1);
    dropLivePreview(this.node); // the player shows the result: the last live preview would be a second picture
    this.widget.hidden = false;
    const [width, height] = this.node.size;
    this.node.setSize([width, Math.max(height, this.node.computeSize()[1])]);
    this.node.setDirtyCanvas?.(true, true);
    this.show(0);
    if (this.frames.length > 1) this.play();
  }

  show(index) {
    if (!this.frames.length) return;
    this.index = index;
    this.picture.src = this.frames[index].src;
    this.slider.value = index;
    this.label.textContent = `${index + 1}/${this.frames.length}`;
  }

  play() {
    this.pause();
    this.setIcon(true);
    this.timer = setInterval(() => this.show((this.index + 1) % this.frames.length), FRAME_MS);
  }

  pause() {
    clearInterval(this.timer);
    this.timer = null;
    this.setIcon(false);
  }
}

app.registerExtension({
  name: "RasterKit.BuildUpPlayer",
  setup() {
    // a node that starts running shows ComfyUI's live preview in the player's place
    api.addEventListener("executing", ({ detail }) => {
      const id = typeof detail === "object" && detail !== null ? detail.node : detail;
      const node = id == null ? null : app.graph?.getNodeById(id);
      node?.rasterkitPlayer?.hide();
    });
  },
  async beforeRegisterNodeDef(nodeType, nodeData) {
    if (nodeData.name !== "RasterKit_PrimitiveMesh") return;
    const onNodeCreated = nodeType.prototype.onNodeCreated;
    nodeType.prototype.onNodeCreated = function () {
      const result = onNodeCreated?.apply(this, arguments);
      this.rasterkitPlayer = new BuildUpPlayer(this);
      return result;
    };
    const onExecuted = nodeType.prototype.onExecuted;
    nodeType.prototype.onExecuted = function (message) {
      onExecuted?.apply(this, arguments);
      if (message?.rasterkit_animation?.length) this.rasterkitPlayer?.setFrames(message.rasterkit_animation);
    };
    const onRemoved = nodeType.prototype.onRemoved;
    nodeType.prototype.onRemoved = function () {
      this.rasterkitPlayer?.pause();
      return onRemoved?.apply(this, arguments);
    };
  },
});
