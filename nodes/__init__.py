"""One module per node family; NODE_CLASSES lists every node the pack registers."""
from . import bake, boxes, links, mesh, primitives, series

NODE_CLASSES = [
    *bake.NODES,
    *boxes.NODES,
    *links.NODES,
    *mesh.NODES,
    *primitives.NODES,
    *series.NODES,
]
