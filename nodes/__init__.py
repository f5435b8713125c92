"""One module per node family; NODE_CLASSES lists every node the pack registers."""
from . import boxes, series

NODE_CLASSES = [
    *boxes.NODES,
    *series.NODES,
]
