"""BoundingBoxRenderer (work in progress)."""
NODES = []
