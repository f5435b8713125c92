"""RasterKit: fast vector overlays, primitive approximations and mesh rasterization for ComfyUI."""

WEB_DIRECTORY = "./web/js"

# pytest imports the __init__.py of the folder that holds the tests, outside of any package when the
# folder's name is not a Python name; there is nothing to register then.
if __package__:
    from .nodes import NODE_CLASSES
    from .nodes._comfy import log_backend, register_routes, register_standins, warm_up_cpu_loops
    from .nodes._schema import to_v3, v1_mappings

    register_routes()
    log_backend()
    register_standins()
    warm_up_cpu_loops(NODE_CLASSES)  # in the background: ComfyUI starts at once

    try:
        from comfy_api.latest import ComfyExtension, io
    except ImportError:  # ComfyUI before the V3 API, or no ComfyUI at all
        NODE_CLASS_MAPPINGS, NODE_DISPLAY_NAME_MAPPINGS = v1_mappings(NODE_CLASSES)
    else:

        class RasterKitExtension(ComfyExtension):
            """The pack for ComfyUI's V3 API: every node of NODE_CLASSES in its V3 form."""

            async def get_node_list(self) -> list[type[io.ComfyNode]]:
                return [to_v3(node, io) for node in NODE_CLASSES]

        # ComfyUI prefers NODE_CLASS_MAPPINGS when a module has both, so only the entrypoint is defined.
        async def comfy_entrypoint() -> RasterKitExtension:
            return RasterKitExtension()
