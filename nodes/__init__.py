"""One module per node family; NODE_CLASSES lists every node the pack registers."""

from . import bake, boxes, links, masks, mesh, primitives, series, tracks

NODE_CLASSES = [
    *bake.NODES,
    *boxes.NODES,
    *links.NODES,
    *masks.NODES,
    *mesh.NODES,
    *primitives.NODES,
    *series.NODES,
    *tracks.NODES,
]
