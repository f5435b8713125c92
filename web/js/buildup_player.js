// Build-up player for RasterKit_PrimitiveMesh: after a run, the node plays the image being built
// shape by shape (the node's preview sends the build-up frames as `rasterkit_animation`), with
// play/pause and a slider to step through the frames.
import { app } from "../../scripts/app.js";
import { viewURL } from "./frame_canvas.js";

const FRAME_MS = 100;

class BuildUpPlayer {
  constructor(node) {
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
    this.button.textContent = "▶";
    this.button.addEventListener("click", () => (this.timer ? this.pause() : this.play()));
    this.slider = document.createElement("input");
    this.slider.type = "range";
    this.slider.min = 0;
    this.slider.max = 0;
    this.slider.style.flex = "1";
    this.slider.addEventListener("input", () => { this.pause(); this.show(Number(this.slider.value)); });
    this.label = document.createElement("span");
    this.label.textContent = "run the node to see the build-up";
    controls.append(this.button, this.slider, this.label);
    this.root.append(this.picture, controls);
    node.addDOMWidget("buildup_player", "rasterkit_buildup_player", this.root, { serialize: false, getMinHeight: () => 220 });
  }

  setFrames(entries) {
    this.pause();
    this.frames = entries.map((entry) => Object.assign(new Image(), { src: viewURL(entry) }));
    this.slider.max = Math.max(0, this.frames.length - 1);
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
    this.button.textContent = "⏸";
    this.timer = setInterval(() => this.show((this.index + 1) % this.frames.length), FRAME_MS);
  }

  pause() {
    clearInterval(this.timer);
    this.timer = null;
    this.button.textContent = "▶";
  }
}

app.registerExtension({
  name: "RasterKit.BuildUpPlayer",
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
