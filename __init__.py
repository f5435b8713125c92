"""RasterKit: fast vector overlays, primitive approximations and mesh rasterization for ComfyUI."""

WEB_DIRECTORY = "./web/js"

# pytest imports the __init__.py of the folder that holds the tests, outside of any package when the
# folder's name is not a Python name; there is nothing to register then.
if __package__:
    from .nodes import NODE_CLASSES
    from .nodes._comfy import log_backend, register_routes, register_standins, warm_up_cpu_loops
    from .nodes._schema import v1_mappings, v3_extension

    register_routes()
    log_backend()
    register_standins()
    warm_up_cpu_loops(NODE_CLASSES)  # in the background: ComfyUI starts at once

    try:
        from comfy_api.latest import ComfyExtension, io
    except ImportError:  # ComfyUI before the V3 API, or no ComfyUI at all
        NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = v1_mappings(NODE_CLASSES)
    else:
        # ComfyUI prefers NODE_CLASS_MAPPINGS when a module has both, so only the entrypoint is defined.
        async def comfy_entrypoint():
            return v3_extension(NODE_CLASSES, ComfyExtension, io)
