"""One module per node family; NODE_CLASSES lists every node the pack registers."""
from . import boxes

NODE_CLASSES = [
    *boxes.NODES,
]
