// RasterKit frontend: flags malformed JSON in the pack's JSON text inputs as you type, before a
// prompt is queued (the server would reject it with the same input named); gives a new node's seed
// `control after generate = fixed` (the frontend's default, randomize, would rerun the node on every
// queue); lists the pack's templates in the order of their names (the server lists them unordered).
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

// the folder ComfyUI serves this script from, /extensions/<pack>/: the key of the pack's templates
const PACK = decodeURIComponent(new URL(import.meta.url).pathname.split("/extensions/")[1]?.split("/")[0] ?? "");

const JSON_INPUTS = new Set(["boxes", "points", "negative_points", "tracks_json", "series"]);
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

const listTemplates = api.getWorkflowTemplates.bind(api);
api.getWorkflowTemplates = async () => {
  const templates = await listTemplates();
  templates?.[PACK]?.sort((a, b) => a.localeCompare(b, undefined, { numeric: true }));
  return templates;
};

app.registerExtension({
  name: "RasterKit.JsonInputs",
  nodeCreated(node) {
    if (!node.comfyClass?.startsWith("RasterKit_")) return;
    // ComfyUI 0.3.64's frontend gives every seed widget a control that starts at "randomize" (the schema's
    // control_after_generate only says whether there is one); a saved workflow's value replaces this one
    const control = node.widgets?.find((w) => w.name === "seed")?.linkedWidgets?.[0];
    if (control) control.value = "fixed";
    for (const widget of node.widgets ?? []) {
      if (!JSON_INPUTS.has(widget.name) || !widget.inputEl) continue;
      widget.inputEl.addEventListener("input", () => checkJson(widget));
      setTimeout(() => checkJson(widget), 0);
    }
  },
});
