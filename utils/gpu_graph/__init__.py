"""gpu_graph: the design card's graphs over tracked points, for all frames at once. neighbours.py finds
the k nearest and the pairs within a radius; triangulation.py the Delaunay triangulation, minimum
spanning forest and Voronoi walls; graph.py turns them into edges per frame with caps and hysteresis
(and gives fixed edge lists, skeletons, and links between groups);
tracking.py follows corner features through a batch (Lucas-Kanade). Used by nodes/links.py:
RasterKit_LineLinkRenderer (the graphs) and RasterKit_PointTracker (the tracking)."""

from .graph import (
    GRAPHS,
    SKELETONS,
    GraphOptions,
    delaunay_graph,
    edge_list_graph,
    knn_graph,
    parse_edges,
    parse_groups,
    radius_graph,
    spanning_tree_graph,
    voronoi_graph,
)
from .neighbours import nearest_neighbours, radius_neighbour_keys
from .tracking import track_points, tracking_memory, tracks_json
from .triangulation import delaunay_neighbour_keys, voronoi_segments

__all__ = [
    "GRAPHS",
    "SKELETONS",
    "GraphOptions",
    "delaunay_graph",
    "delaunay_neighbour_keys",
    "edge_list_graph",
    "knn_graph",
    "nearest_neighbours",
    "parse_edges",
    "parse_groups",
    "radius_graph",
    "radius_neighbour_keys",
    "spanning_tree_graph",
    "track_points",
    "tracking_memory",
    "tracks_json",
    "voronoi_graph",
    "voronoi_segments",
]
