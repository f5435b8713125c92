"""One module per node family; NODE_CLASSES lists every node the pack registers."""
from . import boxes, links, series

NODE_CLASSES = [
    *boxes.NODES,
    *links.NODES,
    *series.NODES,
]
