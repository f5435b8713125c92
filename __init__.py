"""RasterKit: fast vector overlays, primitive approximations and mesh rasterization for ComfyUI."""
from .nodes import NODE_CLASSES
from .nodes._schema import v1_mappings, v3_extension

WEB_DIRECTORY = "./web/js"

try:
    from comfy_api.latest import ComfyExtension, io
except ImportError:  # ComfyUI before the V3 API, or no ComfyUI at all
    NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = v1_mappings(NODE_CLASSES)
    __all__ = ["NODE_CLASS_MAPPINGS", "NODE_DISPLAY_NAME_MAPPINGS", "WEB_DIRECTORY"]
else:
    # ComfyUI prefers NODE_CLASS_MAPPINGS when a module has both, so only the entrypoint is defined.
    async def comfy_entrypoint():
        return v3_extension(NODE_CLASSES, ComfyExtension, io)

    __all__ = ["comfy_entrypoint", "WEB_DIRECTORY"]
