"""One module per node family; NODE_CLASSES lists every node the pack registers."""
from . import boxes, links, mesh, series

NODE_CLASSES = [
    *boxes.NODES,
    *links.NODES,
    *mesh.NODES,
    *series.NODES,
]
