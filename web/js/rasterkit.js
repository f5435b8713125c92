// RasterKit frontend: flags malformed JSON in the pack's JSON text inputs as you type, before a
// prompt is queued (the server would reject it with the same input named).
import { app } from "../../scripts/app.js";

const JSON_INPUTS = new Set(["boxes", "tracks_json", "series"]);
const SINGLE_QUOTES_READ = new Set(["tracks_json"]);  // as utils/text_input.load_json(single_quotes=True)

function parse(name, text) {
  try {
    return JSON.parse(text);
  } catch (error) {
    if (SINGLE_QUOTES_READ.has(name) && text.includes("'") && !text.includes('"')) {
      try { return JSON.parse(text.replaceAll("'", '"')); } catch { /* the first error is the one to show */ }
    }
    throw error;
  }
}

function checkJson(widget) {
  const element = widget.inputEl;
  if (!element) return;
  const text = (widget.value ?? "").trim();
  let problem = "";
  if (text && !(widget.name === "series" && !/^[\[{]/.test(text))) {  // series may also be CSV
    try {
      parse(widget.name, text.replace(/\bNaN\b|-?\bInfinity\b/g, "0"));
    } catch (error) {
      problem = `${widget.name}: ${error.message}`;
    }
  }
  element.style.outline = problem ? "2px solid #e05050" : "";
  element.title = problem;
}

app.registerExtension({
  name: "RasterKit.JsonInputs",
  nodeCreated(node) {
    if (!node.comfyClass?.startsWith("RasterKit_")) return;
    for (const widget of node.widgets ?? []) {
      if (!JSON_INPUTS.has(widget.name) || !widget.inputEl) continue;
      widget.inputEl.addEventListener("input", () => checkJson(widget));
      setTimeout(() => checkJson(widget), 0);
    }
  },
});
