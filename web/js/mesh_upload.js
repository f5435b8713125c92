// Upload button for RasterKit_LoadMesh: sends a mesh file to ComfyUI's input folder (subfolder 3d,
// where core Load3D keeps its models too) and selects it in the mesh_file list. The accepted file
// types come from the server, so that the list the node reads and the picker agree.
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const SUBFOLDER = "3d";
let extensions = null;

async function meshExtensions() {
  extensions ??= api.fetchApi("/rasterkit/mesh_extensions").then((r) => r.json()).catch(() => []);
  return extensions;
}

async function upload(node, file) {
  const body = new FormData();
  body.append("image", file);  // the field name of ComfyUI's upload route, whatever the file type
  body.append("type", "input");
  body.append("subfolder", SUBFOLDER);
  const response = await api.fetchApi("/upload/image", { method: "POST", body });
  if (response.status !== 200) throw new Error(`${response.status} ${response.statusText}`);
  const { name, subfolder } = await response.json();
  const value = subfolder ? `${subfolder}/${name}` : name;
  const widget = node.widgets.find((w) => w.name === "mesh_file");
  if (!widget.options.values.includes(value)) widget.options.values.push(value);
  widget.value = value;
  widget.callback?.(value);
}

app.registerExtension({
  name: "RasterKit.MeshUpload",
  nodeCreated(node) {
    if (node.comfyClass !== "RasterKit_LoadMesh") return;
    const picker = Object.assign(document.createElement("input"), { type: "file", style: "display: none" });
    meshExtensions().then((list) => { picker.accept = list.join(","); });
    picker.addEventListener("change", async () => {
      const file = picker.files[0];
      picker.value = "";
      if (!file) return;
      try {
        await upload(node, file);
      } catch (error) {
        alert(`RasterKit Load Mesh: upload of ${file.name} failed: ${error.message}`);
      }
    });
    document.body.append(picker);
    node.addWidget("button", "upload mesh", null, () => picker.click(), { serialize: false });
    const onRemoved = node.onRemoved;
    node.onRemoved = function () { picker.remove(); return onRemoved?.apply(this, arguments); };
  },
});
