"""kNN graphs against scipy's cKDTree, caps, determinism and hysteresis; radius, Delaunay and minimum
spanning tree graphs against brute-force references in numpy; Voronoi walls against scipy's Voronoi."""

import math

import numpy as np
import pytest
import torch
from scipy.spatial import cKDTree

from rasterkit.utils.gpu_graph import (
    GRAPHS,
    GraphOptions,
    delaunay_graph,
    knn_graph,
    nearest_neighbours,
    neighbours,
    radius_graph,
    spanning_tree_graph,
    voronoi_graph,
)
from rasterkit.utils.gpu_graph import graph as gpu_graph


def edge_sets(edges):
    return [set(map(tuple, edges.values[t, :n].tolist())) for t, n in enumerate(edges.lengths.tolist())]


def reference_edges(points, k, mutual=False):
    _, index = cKDTree(points).query(points, k=k + 1)
    directed = {(a, int(b)) for a in range(len(points)) for b in index[a, 1:]}
    if mutual:
        return {(min(a, b), max(a, b)) for a, b in directed if (b, a) in directed}
    return {(min(a, b), max(a, b)) for a, b in directed}


@pytest.mark.parametrize("k,mutual", [(1, False), (3, False), (5, True)])
def test_knn_equals_ckdtree(k, mutual):
    torch.manual_seed(k)
    xy = torch.rand(5, 200, 2) * 500
    edges = knn_graph(xy, torch.ones(5, 200, dtype=torch.bool), GraphOptions(k=k, mutual=mutual))
    for t, found in enumerate(edge_sets(edges)):
        assert found == reference_edges(xy[t].double().numpy(), k, mutual)


def test_ties_are_broken_by_index():
    xy = torch.tensor([[[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -1.0]]])
    distance, index = nearest_neighbours(xy, torch.ones(1, 5, dtype=torch.bool), 2)
    assert index[0, 0].tolist() == [1, 2]  # four points at distance 1 from point 0: the lowest indices


def test_invisible_points_get_no_edges():
    xy = torch.rand(2, 30, 2) * 100
    visible = torch.ones(2, 30, dtype=torch.bool)
    visible[:, :10] = False
    for found in edge_sets(knn_graph(xy, visible, GraphOptions(k=4))):
        assert found and all(i >= 10 and j >= 10 for i, j in found)


def test_caps_hold_in_every_frame():
    torch.manual_seed(1)
    xy = torch.rand(6, 150, 2) * 400
    options = GraphOptions(k=6, max_distance=60.0, delta_y_cap=25.0, degree_cap=3)
    edges = knn_graph(xy, torch.ones(6, 150, dtype=torch.bool), options)
    for t, found in enumerate(edge_sets(edges)):
        assert found
        degree = torch.zeros(150, dtype=torch.long)
        for i, j in found:
            delta = xy[t, j] - xy[t, i]
            assert delta.norm() <= 60.0 + 1e-4 and abs(delta[1]) <= 25.0 + 1e-4
            degree[i] += 1
            degree[j] += 1
        assert degree.max() <= 3


def test_degree_cap_keeps_the_shortest_edges():
    # a star: point 0 in the middle, four others at distances 1, 2, 3, 4
    xy = torch.tensor([[[0.0, 0.0], [1.0, 0.0], [0.0, 2.0], [-3.0, 0.0], [0.0, -4.0]]])
    edges = knn_graph(xy, torch.ones(1, 5, dtype=torch.bool), GraphOptions(k=1, degree_cap=2))
    assert edge_sets(edges)[0] == {(0, 1), (0, 2)}


def jittered(frames=40, n=120, sigma=1.5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    base = torch.rand(1, n, 2, generator=generator) * 400
    return base + torch.randn(frames, n, 2, generator=generator) * sigma


def changes(sets):
    return sum(len(a ^ b) for a, b in zip(sets[:-1], sets[1:], strict=False))


def test_hysteresis_reduces_flicker_without_exceeding_its_slack():
    xy = jittered()
    visible = torch.ones(xy.shape[:2], dtype=torch.bool)
    plain = edge_sets(knn_graph(xy, visible, GraphOptions(k=3, max_distance=80.0)))
    slack = 1.5
    held = edge_sets(knn_graph(xy, visible, GraphOptions(k=3, max_distance=80.0, hysteresis=slack)))
    assert changes(held) < 0.5 * changes(plain)
    for t, found in enumerate(held):
        assert plain[t] <= found  # hysteresis only adds edges kept from the frame before
        distance, _ = nearest_neighbours(xy[t : t + 1], visible[t : t + 1], math.ceil(3 * slack))
        reach = distance[0, :, -1]
        for i, j in found - plain[t]:
            span = (xy[t, i] - xy[t, j]).norm()
            assert (i, j) in held[t - 1] and span <= 80.0 * slack
            assert span <= reach[i] or span <= reach[j]


def test_hysteresis_with_degree_cap_is_stable_and_capped():
    xy = jittered(seed=2)
    visible = torch.ones(xy.shape[:2], dtype=torch.bool)
    sets = edge_sets(knn_graph(xy, visible, GraphOptions(k=4, degree_cap=3, hysteresis=1.4)))
    plain = edge_sets(knn_graph(xy, visible, GraphOptions(k=4, degree_cap=3)))
    assert changes(sets) < changes(plain)
    for found in sets:
        degree = torch.bincount(torch.tensor(list(found)).reshape(-1), minlength=xy.shape[1])
        assert degree.max() <= 3


def test_chunks_do_not_change_the_result(monkeypatch):
    from rasterkit.utils.core import device

    xy = jittered(frames=9)
    visible = torch.ones(xy.shape[:2], dtype=torch.bool)
    whole = knn_graph(xy, visible, GraphOptions(k=3, hysteresis=1.3))
    monkeypatch.setattr(device, "free_memory_bytes", lambda d: 2 * 120 * 120 * 16 * 3)  # three frames a chunk
    chunked = knn_graph(xy, visible, GraphOptions(k=3, hysteresis=1.3))
    assert edge_sets(whole) == edge_sets(chunked)


def test_empty_and_single_point_frames():
    edges = knn_graph(torch.zeros(3, 0, 2), torch.zeros(3, 0, dtype=torch.bool), GraphOptions(k=3))
    assert edges.lengths.tolist() == [0, 0, 0]
    edges = knn_graph(torch.zeros(2, 1, 2), torch.ones(2, 1, dtype=torch.bool), GraphOptions(k=3))
    assert edges.lengths.tolist() == [0, 0]
    with pytest.raises(ValueError, match="k: expected 1 to 1024"):
        knn_graph(torch.zeros(1, 2, 2), torch.ones(1, 2, dtype=torch.bool), GraphOptions(k=0))


def grid_cases():
    """Point sets that exercise the grid search: uniform, clustered (crowded cells and empty ones,
    so wider rings and brute-force rows are needed), integer lattices (many equal distances) and
    partly invisible frames."""
    generator = torch.Generator().manual_seed(7)
    uniform = torch.rand(4, 1500, 2, generator=generator) * 1000
    centres = torch.rand(4, 6, 1, 2, generator=generator) * 1000
    clustered = (centres + torch.randn(4, 6, 250, 2, generator=generator) * 8).reshape(4, 1500, 2)
    clustered[:, :20] = torch.rand(4, 20, 2, generator=generator) * 1000  # a few far outliers
    lattice = torch.randint(0, 60, (4, 1500, 2), generator=generator).float()
    visible = torch.rand(4, 1500, generator=generator) > 0.2
    return [(uniform, torch.ones(4, 1500, dtype=torch.bool)), (clustered, visible), (lattice, visible)]


@pytest.mark.parametrize("case", range(3))
@pytest.mark.parametrize("k,delta_y_cap,within", [(3, math.inf, math.inf), (6, 20.0, math.inf), (4, math.inf, 15.0)])
def test_grid_search_equals_brute_force(monkeypatch, case, k, delta_y_cap, within):
    xy, visible = grid_cases()[case]
    grid = nearest_neighbours(xy, visible, k, delta_y_cap, within)
    monkeypatch.setattr(neighbours, "BRUTE_FORCE_POINTS", 10**9)
    brute = nearest_neighbours(xy, visible, k, delta_y_cap, within)
    assert torch.equal(grid[1], brute[1]) and torch.equal(grid[0], brute[0])


def test_grid_search_equals_ckdtree_on_large_frames():
    xy, visible = grid_cases()[0]
    distance, index = nearest_neighbours(xy, visible, 5)
    for t in range(xy.shape[0]):
        expected, _ = cKDTree(xy[t].double().numpy()).query(xy[t].double().numpy(), k=6)
        assert torch.allclose(distance[t], torch.from_numpy(expected[:, 1:]).float(), atol=1e-3)


@pytest.mark.parametrize("case", ["skinny", "coincident", "huge coordinates"])
def test_grid_search_equals_brute_force_on_awkward_frames(monkeypatch, case):
    """Extents far from square (the grid's cells per axis are bounded), many points at one spot
    (ties past the k + 1 nearest read: brute-force rows) and coordinates far from the origin."""
    generator = torch.Generator().manual_seed(3)
    xy = torch.rand(3, 800, 2, generator=generator)
    if case == "skinny":
        xy = xy * torch.tensor([5000.0, 3.0])
    elif case == "coincident":
        xy = xy * 300
        xy[:, ::3] = torch.tensor([150.0, 150.0])
    else:
        xy = xy * 500 + 1e5
    visible = torch.rand(3, 800, generator=generator) > 0.1
    grid = nearest_neighbours(xy, visible, 4)
    monkeypatch.setattr(neighbours, "BRUTE_FORCE_POINTS", 10**9)
    brute = nearest_neighbours(xy, visible, 4)
    assert torch.equal(grid[1], brute[1]) and torch.equal(grid[0], brute[0])


def held_and_capped(xy, visible, options):
    """The hysteresis recurrence with a degree cap, one frame and one node at a time."""
    frames, n = visible.shape
    slack = options.hysteresis
    distance, index = nearest_neighbours(
        xy, visible, math.ceil(options.k * slack), options.delta_y_cap, options.max_distance * slack
    )
    previous, result = set(), []
    for t in range(frames):
        new = {
            (min(a, int(b)), max(a, int(b)))
            for a in range(n)
            for b, d in zip(index[t, a, : options.k], distance[t, a, : options.k], strict=False)
            if b >= 0 and d <= options.max_distance
        }
        span = lambda e: float((xy[t, e[1]] - xy[t, e[0]]).norm())  # noqa: B023, E731
        held = {
            e
            for e in previous
            if visible[t, e[0]]
            and visible[t, e[1]]
            and span(e) <= options.max_distance * slack
            and (span(e) <= distance[t, e[0], -1] or span(e) <= distance[t, e[1], -1])
        }
        candidates = sorted(new | held)
        rank = {}
        for node in range(n):
            mine = sorted(
                (e for e in candidates if node in e), key=lambda e: (e not in held, span(e), candidates.index(e))
            )
            rank.update({(node, e): r for r, e in enumerate(mine)})
        previous = {e for e in candidates if rank[e[0], e] < options.degree_cap and rank[e[1], e] < options.degree_cap}
        result.append(previous)
    return result


def test_hysteresis_with_degree_cap_equals_the_recurrence():
    generator = torch.Generator().manual_seed(11)
    for _ in range(4):
        n = int(torch.randint(5, 60, (1,), generator=generator))
        xy = torch.rand(1, n, 2, generator=generator) * 200 + torch.randn(6, n, 2, generator=generator) * 4 + 1000
        visible = torch.rand(6, n, generator=generator) > 0.1
        options = GraphOptions(
            k=int(torch.randint(2, 6, (1,), generator=generator)),
            max_distance=60.0,
            degree_cap=int(torch.randint(1, 4, (1,), generator=generator)),
            hysteresis=1.6,
        )
        assert edge_sets(knn_graph(xy, visible, options)) == held_and_capped(xy, visible, options)


@pytest.mark.parametrize("degree_cap", [0, 2])
@pytest.mark.parametrize("graph", ["knn", "radius"])
def test_hysteresis_windows_give_the_whole_video_result(monkeypatch, graph, degree_cap):
    """Hysteresis runs in windows of frames so that its memory grows linearly with them (it was
    quadratic: every distinct edge of the video by every frame); windows of one frame, or of a few,
    give the edges of the whole video at once (the former closed form and recurrence)."""
    generator = torch.Generator().manual_seed(5)
    xy = torch.rand(1, 80, 2, generator=generator) * 300 + torch.randn(12, 80, 2, generator=generator) * 6
    visible = torch.rand(12, 80, generator=generator) > 0.1
    options = GraphOptions(k=3, max_distance=60.0, degree_cap=degree_cap, hysteresis=1.5)
    results = []
    for entries in (1 << 40, 1, 3000):
        monkeypatch.setattr(gpu_graph, "HYSTERESIS_ENTRIES", entries)
        results.append(edge_sets(GRAPHS[graph](xy, visible, options)))
    assert results[0] == results[1] == results[2] and any(results[0])


def test_hysteresis_memory_grows_linearly_with_frames():
    """The hysteresis state of 1000 points moving over 30 and 120 frames: 4x the frames cost at most
    ~4x the memory (peak of its largest temporaries, counted by size), where it was ~16x."""

    def window_entries(frames):
        torch.manual_seed(0)
        xy = torch.rand(1, 1000, 2) * 2000 + torch.randn(frames, 1000, 2).cumsum(0) * 3
        sizes = []
        original = gpu_graph._hysteresis_window

        def spy(*args, **kwargs):
            result = original(*args, **kwargs)
            sizes.append(result[0].numel())  # present [W,U]
            return result

        gpu_graph._hysteresis_window = spy
        try:
            knn_graph(xy, torch.ones(frames, 1000, dtype=torch.bool), GraphOptions(k=3, hysteresis=1.5))
        finally:
            gpu_graph._hysteresis_window = original
        return max(sizes)

    assert window_entries(120) <= 1.2 * window_entries(30) + 1


def test_op_budget(monkeypatch):
    """The GPU issue's budget, counted on the CPU: kNN (k = 3) of 1000 points in each of 60 frames.
    The edges add one host sync (packing), hysteresis one for its windows and one a window (distinct
    edges; two windows here, which bound its memory), never one a frame. Chunks as a GPU's (the CPU's
    are bounded by work too, for interrupt checks)."""
    from opcount import OpCount

    monkeypatch.setattr(neighbours, "SEARCH_CHUNK_POINTS", 1 << 40)
    torch.manual_seed(0)
    xy = torch.rand(60, 1000, 2) * torch.tensor([3840.0, 2160.0])
    visible = torch.ones(60, 1000, dtype=torch.bool)
    with OpCount() as count:
        distance, index = nearest_neighbours(xy, visible, 3)
    assert (index >= 0).all() and torch.isfinite(distance).all()
    assert count.launches <= 150 and count.syncs <= 2 and count.float64 == 0, count.summary()
    tracks = xy[:1] + torch.randn(60, 1000, 2)
    for options, syncs in ((GraphOptions(k=3, degree_cap=2), 3), (GraphOptions(k=3, degree_cap=2, hysteresis=1.5), 6)):
        with OpCount() as count:
            knn_graph(tracks, visible, options)
        assert count.syncs <= syncs and count.float64 == 0, count.summary()


# -- radius, Delaunay, minimum spanning tree --------------------------------------------------------


def scattered(frames=4, n=90, seed=0, hidden=0.15):
    """Random points in general position over several frames, some hidden."""
    generator = torch.Generator().manual_seed(seed)
    xy = torch.rand(frames, n, 2, generator=generator) * torch.tensor([400.0, 300.0]) + 20
    return xy, torch.rand(frames, n, generator=generator) > hidden


def distances(points):
    """float64 [n,n] brute-force distance matrix of points [n,2]."""
    points = np.asarray(points, np.float64)
    return np.linalg.norm(points[:, None] - points[None], axis=-1)


def pairs_within(xy, visible, r, delta_y_cap=math.inf):
    points, seen = xy.numpy().astype(np.float64), visible.numpy()
    near = (distances(points) <= r) & (np.abs(points[:, None, 1] - points[None, :, 1]) <= delta_y_cap)
    near &= seen[:, None] & seen[None]
    return {(int(i), int(j)) for i, j in zip(*np.nonzero(np.triu(near, 1)), strict=False)}


@pytest.mark.parametrize("r,delta_y_cap", [(4.0, math.inf), (35.0, math.inf), (60.0, 12.0), (1000.0, math.inf)])
def test_radius_graph_is_every_pair_within_r(r, delta_y_cap):
    xy, visible = scattered(n=150)
    edges = radius_graph(xy, visible, GraphOptions(max_distance=r, delta_y_cap=delta_y_cap))
    for t, found in enumerate(edge_sets(edges)):
        assert found == pairs_within(xy[t], visible[t], r, delta_y_cap)


def test_radius_graph_on_crowded_and_large_frames():
    """Clusters (many points a cell), far outliers (a grid with far more cells than points) and
    coincident points, in frames large enough for the grid's cells to matter."""
    generator = torch.Generator().manual_seed(4)
    centres = torch.rand(3, 5, 1, 2, generator=generator) * 3000
    xy = (centres + torch.randn(3, 5, 120, 2, generator=generator) * 6).reshape(3, 600, 2)
    xy[:, :4] = torch.rand(3, 4, 2, generator=generator) * 3000
    xy[:, 10:30] = xy[:, 10:11]
    visible = torch.rand(3, 600, generator=generator) > 0.1
    edges = radius_graph(xy, visible, GraphOptions(max_distance=9.0))
    for t, found in enumerate(edge_sets(edges)):
        assert found == pairs_within(xy[t], visible[t], 9.0)


def test_radius_graph_caps_and_hysteresis():
    xy = jittered(frames=20, n=100, sigma=1.5, seed=5)
    visible = torch.ones(xy.shape[:2], dtype=torch.bool)
    visible[7:9, :10] = False
    capped = edge_sets(radius_graph(xy, visible, GraphOptions(max_distance=45.0, degree_cap=2)))
    for found in capped:
        degree = np.bincount(np.array(list(found), np.int64).reshape(-1), minlength=100)
        assert found and degree.max() <= 2
    options = GraphOptions(max_distance=45.0, delta_y_cap=30.0, hysteresis=1.2)
    held = edge_sets(radius_graph(xy, visible, options))
    plain = edge_sets(radius_graph(xy, visible, GraphOptions(max_distance=45.0, delta_y_cap=30.0)))
    assert changes(held) < changes(plain)
    # the recurrence: new edges, and those of the frame before that stay within the slack
    expected = []
    for t in range(xy.shape[0]):
        kept = pairs_within(xy[t], visible[t], 45.0 * 1.2, 30.0 * 1.2) & (expected[-1] if expected else set())
        expected.append(plain[t] | kept)
    assert held == expected
    both = edge_sets(radius_graph(xy, visible, GraphOptions(max_distance=45.0, degree_cap=3, hysteresis=1.2)))
    assert changes(both) < changes(edge_sets(radius_graph(xy, visible, GraphOptions(max_distance=45.0, degree_cap=3))))
    for found in both:
        assert np.bincount(np.array(list(found), np.int64).reshape(-1), minlength=100).max() <= 3


def test_radius_chunks_do_not_change_the_result(monkeypatch):
    from rasterkit.utils.core import device

    xy = jittered(frames=9)
    visible = torch.ones(xy.shape[:2], dtype=torch.bool)
    options = GraphOptions(max_distance=40.0, hysteresis=1.3)
    whole = radius_graph(xy, visible, options)
    monkeypatch.setattr(
        device, "free_memory_bytes", lambda d: 3 * 120 * neighbours.RADIUS_BYTES_PER_POINT / device.MEMORY_FRACTION
    )  # 3 a chunk
    assert edge_sets(radius_graph(xy, visible, options)) == edge_sets(whole)


def convex_hull_size(points):
    """Points on the convex hull of points [n,2] in general position: Andrew's monotone chain."""
    points = sorted(map(tuple, np.asarray(points, np.float64)))

    def chain(sequence):
        hull = []
        for p in sequence:
            while (
                len(hull) >= 2
                and (
                    (hull[-1][0] - hull[-2][0]) * (p[1] - hull[-2][1])
                    - (hull[-1][1] - hull[-2][1]) * (p[0] - hull[-2][0])
                )
                <= 0
            ):
                hull.pop()
            hull.append(p)
        return hull[:-1]

    return len(chain(points) + chain(points[::-1]))


def has_empty_circle(points, i, j):
    """Whether some circle through points i and j has none of the other points strictly inside. Its
    centre is m + s * normal on the bisector; a point q lies outside when
    |q - m|^2 - |i - m|^2 >= 2 s normal.(q - m): bounds on s from every q, which must meet."""
    points = np.asarray(points, np.float64)
    middle = (points[i] + points[j]) / 2
    normal = np.array([points[i, 1] - points[j, 1], points[j, 0] - points[i, 0]])
    others = np.delete(points, [i, j], 0) - middle
    slack = (others**2).sum(1) - ((points[i] - middle) ** 2).sum()
    side = 2 * others @ normal
    scale = 1e-9 * (np.abs(slack).max(initial=1.0) + 1.0)
    if (slack[side == 0] < -scale).any():
        return False
    low = (slack[side < 0] / side[side < 0]).max(initial=-math.inf)
    high = (slack[side > 0] / side[side > 0]).min(initial=math.inf)
    return low <= high + scale


def test_delaunay_edges_have_empty_circles_and_the_triangulation_count():
    xy, visible = scattered(frames=5, n=70, seed=1)
    edges = edge_sets(delaunay_graph(xy, visible, GraphOptions()))
    for t, found in enumerate(edges):
        index = np.flatnonzero(visible[t].numpy())
        points, local = xy[t, index].numpy(), {int(i): at for at, i in enumerate(index)}
        assert all(i in local and j in local for i, j in found)
        assert all(has_empty_circle(points, local[i], local[j]) for i, j in found)
        assert len(found) == 3 * len(index) - 3 - convex_hull_size(points)


@pytest.mark.parametrize("case", ["skinny", "far from the origin", "lattice", "tiny"])
def test_delaunay_on_awkward_frames(case):
    """Hull triangles with huge circumcircles (skinny frames), coordinates far from 0 and tiny
    extents (Subdiv2D's fixed epsilon), and an integer lattice (collinear and cocircular points,
    where the triangulation is not unique, but its edge count and empty circles are)."""
    generator = torch.Generator().manual_seed(8)
    xy = torch.rand(3, 60, 2, generator=generator)
    if case == "skinny":
        xy = xy * torch.tensor([5000.0, 3.0])
    elif case == "far from the origin":
        xy = xy * 300 + 1e5
    elif case == "lattice":
        xy = torch.stack(torch.meshgrid(torch.arange(6.0), torch.arange(10.0), indexing="ij"), -1).reshape(1, 60, 2)
        xy = xy.expand(3, -1, -1) * 10
    else:
        xy = xy * 1e-3 + 5
    edges = edge_sets(delaunay_graph(xy, torch.ones(3, 60, dtype=torch.bool), GraphOptions()))
    for t, found in enumerate(edges):
        points = xy[t].numpy()
        assert all(has_empty_circle(points, i, j) for i, j in found)
        if case == "lattice":  # 5 x 9 squares, each cut by one diagonal
            assert len(found) == 6 * 9 + 10 * 5 + 5 * 9
        else:
            assert len(found) == 3 * 60 - 3 - convex_hull_size(points)


def spanning_forest_length(points, limit=math.inf):
    """Total length and edge count of the minimum spanning forest of points [n,2] over the pairs at
    most `limit` apart: Prim's algorithm on the full distance matrix, restarted in every part."""
    d = distances(points)
    d[d > limit] = math.inf
    n = len(points)
    reached = np.zeros(n, bool)
    total, count = 0.0, 0
    for start in range(n):
        if reached[start]:
            continue
        reached[start] = True
        best = d[start].copy()
        while True:
            best[reached] = math.inf
            nearest = int(best.argmin())
            if not math.isfinite(best[nearest]):
                break
            total, count = total + best[nearest], count + 1
            reached[nearest] = True
            best = np.minimum(best, d[nearest])
    return total, count


def tree_length(xy, found):
    return sum(float(np.linalg.norm(xy[j].double().numpy() - xy[i].double().numpy())) for i, j in found)


@pytest.mark.parametrize("limit", [math.inf, 30.0])
def test_spanning_tree_length_equals_prim(limit):
    xy, visible = scattered(frames=5, n=80, seed=2)
    edges = edge_sets(spanning_tree_graph(xy, visible, GraphOptions(max_distance=limit)))
    for t, found in enumerate(edges):
        index = np.flatnonzero(visible[t].numpy())
        total, count = spanning_forest_length(xy[t, index].numpy(), limit)
        assert len(found) == count and tree_length(xy[t], found) == pytest.approx(total, rel=1e-5)
        assert all(visible[t, i] and visible[t, j] for i, j in found)
    if limit == math.inf:
        assert all(len(found) == int(visible[t].sum()) - 1 for t, found in enumerate(edges))


def test_spanning_tree_on_a_lattice_with_ties():
    """Many equal lengths: still a tree of the least total length, the same on every run."""
    xy = torch.stack(torch.meshgrid(torch.arange(7.0), torch.arange(9.0), indexing="ij"), -1).reshape(1, 63, 2) * 5
    visible = torch.ones(1, 63, dtype=torch.bool)
    found = edge_sets(spanning_tree_graph(xy, visible, GraphOptions()))[0]
    assert len(found) == 62 and tree_length(xy[0], found) == pytest.approx(62 * 5.0)
    assert edge_sets(spanning_tree_graph(xy, visible, GraphOptions()))[0] == found


def test_delaunay_and_tree_caps():
    xy, visible = scattered(frames=3, n=100, seed=3)
    options = GraphOptions(max_distance=50.0, delta_y_cap=20.0, degree_cap=3)
    for graph in (delaunay_graph, spanning_tree_graph):
        unlimited = edge_sets(graph(xy, visible, GraphOptions()))
        for t, found in enumerate(edge_sets(graph(xy, visible, options))):
            degree = np.zeros(100, np.int64)
            for i, j in found:
                delta = xy[t, j] - xy[t, i]
                assert delta.norm() <= 50.0 + 1e-4 and abs(delta[1]) <= 20.0 + 1e-4
                degree[[i, j]] += 1
            assert found and degree.max() <= 3
            if graph is delaunay_graph:
                assert found <= unlimited[t]


def test_new_graphs_on_degenerate_frames():
    """Empty frames, one point, two, collinear points, coincident points (the lowest index stands
    for them; the others link to it alone), points with NaN or infinite coordinates (hidden)."""
    line = torch.tensor([[0.0, 0.0], [30.0, 30.0], [10.0, 10.0], [20.0, 20.0]])
    frames = [
        torch.full((4, 2), -1.0),  # nothing visible
        torch.tensor([[5.0, 5.0], [-1, -1], [-1, -1], [-1, -1]]),  # one point
        torch.tensor([[5.0, 5.0], [9.0, 8.0], [-1, -1], [-1, -1]]),  # two
        line,  # collinear
        torch.tensor([[7.0, 7.0]]).expand(4, 2),  # all at one spot
        torch.tensor([[0.0, 0.0], [8.0, 0.0], [0.0, 0.0], [0.0, 6.0]]),  # two at one spot
        torch.tensor([[0.0, 0.0], [math.nan, 1.0], [8.0, 0.0], [0.0, math.inf]]),
    ]
    xy = torch.stack(frames)
    visible = (xy >= 0).all(-1) | xy.isnan().any(-1) | xy.isinf().any(-1)
    chain, every = {(0, 2), (2, 3), (1, 3)}, {(i, j) for i in range(4) for j in range(i + 1, 4)}
    expected = {
        delaunay_graph: [
            set(),
            set(),
            {(0, 1)},
            chain,
            {(0, 1), (0, 2), (0, 3)},
            {(0, 1), (0, 2), (0, 3), (1, 3)},
            {(0, 2)},
        ],
        spanning_tree_graph: [
            set(),
            set(),
            {(0, 1)},
            chain,
            {(0, 1), (0, 2), (0, 3)},
            {(0, 2), (0, 3), (0, 1)},
            {(0, 2)},
        ],
        radius_graph: [set(), set(), {(0, 1)}, chain, every, every, {(0, 2)}],
    }
    for graph, sets in expected.items():
        assert (
            edge_sets(graph(xy, visible, GraphOptions(max_distance=15.0 if graph is radius_graph else math.inf)))
            == sets
        ), graph.__name__
        for n in (0, 1):
            assert graph(
                torch.zeros(3, n, 2), torch.ones(3, n, dtype=torch.bool), GraphOptions(max_distance=5.0)
            ).lengths.tolist() == [0, 0, 0]
        assert (
            graph(
                torch.zeros(0, 5, 2), torch.ones(0, 5, dtype=torch.bool), GraphOptions(max_distance=5.0)
            ).lengths.tolist()
            == []
        )


def test_points_closer_than_opencv_resolves_still_link():
    """A cluster 1e8 times smaller than the frame: Subdiv2D merges some of its points into others
    (its tolerances are absolute), and fails to place a point of the last frame at all; they link to
    the nearest point kept, so the tree spans them all."""
    generator = torch.Generator().manual_seed(0)
    cluster = torch.rand(4, 49, 2, generator=generator)
    cluster = torch.cat([cluster, torch.rand(1, 49, 2, generator=torch.Generator().manual_seed(266)) * 0.1])
    xy = torch.cat([cluster, torch.full((5, 1, 2), 1e8)], 1)
    visible = torch.ones(5, 50, dtype=torch.bool)
    for t, found in enumerate(edge_sets(spanning_tree_graph(xy, visible, GraphOptions()))):
        assert len(found) == 49 and tree_length(xy[t], found) == pytest.approx(spanning_forest_length(xy[t])[0])


def test_radius_needs_a_limit():
    for limit in (math.inf, 0.0, math.nan):
        with pytest.raises(ValueError, match="max_distance: the radius graph needs a limit above 0"):
            radius_graph(torch.zeros(1, 3, 2), torch.ones(1, 3, dtype=torch.bool), GraphOptions(max_distance=limit))


def test_new_graphs_op_budget(monkeypatch):
    """60 frames of 1000 points, as the kNN budget: radius is batched over frames with one host sync
    for the candidate count and one for the packing (with hysteresis, one for its windows and one a
    window: two here); Delaunay and the tree copy the points to the host once and pack once. Chunks
    as a GPU's."""
    from opcount import OpCount

    monkeypatch.setattr(neighbours, "SEARCH_CHUNK_POINTS", 1 << 40)
    torch.manual_seed(0)
    xy = torch.rand(1, 1000, 2) * torch.tensor([3840.0, 2160.0]) + torch.randn(60, 1000, 2)
    visible = torch.ones(60, 1000, dtype=torch.bool)
    cases = [
        (radius_graph, GraphOptions(max_distance=100.0, degree_cap=4), 2, 150),
        (radius_graph, GraphOptions(max_distance=100.0, hysteresis=1.3), 5, 250),
        (delaunay_graph, GraphOptions(max_distance=200.0), 2, 60),
        (spanning_tree_graph, GraphOptions(), 2, 500),
    ]
    for graph, options, syncs, launches in cases:
        with OpCount() as count:
            graph(xy, visible, options)
        assert count.syncs <= syncs and count.launches <= launches and count.float64 == 0, (graph, count.summary())


def clipped(start, direction, low, high, height, width):
    """The part s in [low, high] of the line start + s direction inside [0, width] x [0, height], as its
    two ends, or None."""
    for axis, extent in ((0, width), (1, height)):
        if direction[axis] == 0:
            if not 0 <= start[axis] <= extent:
                return None
            continue
        enter, leave = sorted(((0 - start[axis]) / direction[axis], (extent - start[axis]) / direction[axis]))
        low, high = max(low, enter), min(high, leave)
    return (start + low * direction, start + high * direction) if high > low else None


def voronoi_reference(points, height, width):
    """{(i, j): (a, b)}: the walls of the Voronoi cells of points [n,2] (general position) inside the
    frame, by scipy's Voronoi (Qhull, float64): finite ridges between their vertices, infinite ones from
    their vertex away from the points' centroid (scipy's voronoi_plot_2d), clipped."""
    from scipy.spatial import Voronoi

    points = np.asarray(points, np.float64)
    diagram = Voronoi(points)
    walls = {}
    for (i, j), ridge in zip(diagram.ridge_points.tolist(), diagram.ridge_vertices, strict=False):
        if -1 not in ridge:
            a, b = diagram.vertices[ridge]
            ends = clipped(a, b - a, 0.0, 1.0, height, width)
        else:
            tangent = points[j] - points[i]
            normal = np.array([-tangent[1], tangent[0]]) / np.linalg.norm(tangent)
            outward = np.sign(((points[i] + points[j]) / 2 - points.mean(0)) @ normal) * normal
            ends = clipped(diagram.vertices[max(ridge)], outward, 0.0, math.inf, height, width)
        if ends is not None:
            walls[(min(i, j), max(i, j))] = ends
    return walls


def walls_of(edges, segments):
    return [
        {
            tuple(pair): np.asarray(ends, np.float64)
            for pair, ends in zip(edges.values[t, :n].tolist(), segments.values[t, :n].tolist(), strict=False)
        }
        for t, n in enumerate(edges.lengths.tolist())
    ]


def same_segment(a, b, tolerance):
    return min(np.abs(a - b).max(), np.abs(a - b[::-1]).max()) <= tolerance


def test_voronoi_walls_equal_scipys():
    """Some points lie outside the frame: their walls are cut at its edges, or left out."""
    xy, visible = scattered(frames=4, n=70, seed=5)
    height, width = 280, 380
    edges, segments = voronoi_graph(xy, visible, GraphOptions(), (height, width))
    for t, found in enumerate(walls_of(edges, segments)):
        index = np.flatnonzero(visible[t].numpy())
        reference = {
            (int(index[i]), int(index[j])): ends
            for (i, j), ends in voronoi_reference(xy[t, index].numpy(), height, width).items()
        }
        tiny = {pair for pair, (a, b) in reference.items() if np.linalg.norm(b - a) < 0.05}  # either way
        assert set(found) - tiny == set(reference) - tiny
        assert all(same_segment(found[pair], reference[pair], 0.02) for pair in set(found) & set(reference))
        assert all(visible[t, i] and visible[t, j] for i, j in found)


def test_voronoi_walls_are_equidistant_and_nearest_on_awkward_frames():
    """Every point of a wall between i and j is as far from i as from j, and no other point is nearer
    (a lattice: cocircular points, whose walls of length 0 are left out; skinny and tiny frames)."""
    lattice = torch.stack(torch.meshgrid(torch.arange(6.0), torch.arange(5.0), indexing="ij"), -1).reshape(30, 2)
    generator = torch.Generator().manual_seed(3)
    frames = [
        lattice * 40 + 12,
        torch.rand(30, 2, generator=generator) * torch.tensor([300.0, 2.0]) + 100,
        torch.rand(30, 2, generator=generator) * 1e-2 + 50,
    ]
    xy = torch.stack(frames)
    edges, segments = voronoi_graph(xy, torch.ones(3, 30, dtype=torch.bool), GraphOptions(), (200, 240))
    for t, found in enumerate(walls_of(edges, segments)):
        points = xy[t].double().numpy()
        scale = 1e-3 + 1e-5 * np.abs(points).max()
        assert found
        for (i, j), (a, b) in found.items():
            for along in np.linspace(0, 1, 5):
                distance = np.linalg.norm(points - (a + along * (b - a)), axis=1)
                assert abs(distance[i] - distance[j]) <= scale * 10 and distance.min() >= distance[i] - scale * 10
            assert np.linalg.norm(b - a) > 1e-3 and (np.minimum(a, b) >= -1e-3).all()
            assert (np.maximum(a, b) <= np.array([240, 200]) + 1e-3).all()
    lattice_walls = walls_of(edges, segments)[0]
    assert len(lattice_walls) == 6 * 4 + 5 * 5  # the grid's edges; its diagonals meet at points only


def test_voronoi_on_degenerate_frames():
    """Empty frames, one point, two (their bisector across the frame), collinear points (parallel
    lines), coincident points (no wall between them), hidden and non-finite points, and points whose
    walls all lie outside the frame."""
    frames = [
        torch.full((4, 2), -1.0),
        torch.tensor([[5.0, 5.0], [-1, -1], [-1, -1], [-1, -1]]),
        torch.tensor([[10.0, 20.0], [30.0, 20.0], [-1, -1], [-1, -1]]),
        torch.tensor([[0.0, 0.0], [30.0, 30.0], [10.0, 10.0], [20.0, 20.0]]),
        torch.tensor([[10.0, 10.0], [10.0, 10.0], [30.0, 10.0], [-1, -1]]),
        torch.tensor([[10.0, 10.0], [math.nan, 1.0], [30.0, 10.0], [20.0, math.inf]]),
        torch.tensor([[500.0, 500.0], [540.0, 500.0], [520.0, 530.0], [-1, -1]]),
    ]
    xy = torch.stack(frames)
    visible = (xy >= 0).all(-1) | xy.isnan().any(-1) | xy.isinf().any(-1)
    edges, segments = voronoi_graph(xy, visible, GraphOptions(), (40, 60))
    walls = walls_of(edges, segments)
    assert [set(found) for found in walls] == [
        set(),
        set(),
        {(0, 1)},
        {(0, 2), (2, 3), (1, 3)},
        {(0, 2)},
        {(0, 2)},
        set(),
    ]
    assert same_segment(walls[2][(0, 1)], np.array([[20.0, 0.0], [20.0, 40.0]]), 1e-4)
    for pair, ends in walls[3].items():  # lines of slope -1 through the midpoints, from edge to edge
        middle = xy[3, list(pair)].double().numpy().mean(0)
        assert abs((ends[1] - ends[0])[0] + (ends[1] - ends[0])[1]) < 1e-3
        direction, offset = ends[1] - ends[0], middle - ends[0]
        assert abs(direction[0] * offset[1] - direction[1] * offset[0]) < 1e-2  # through the midpoint
    assert same_segment(walls[4][(0, 2)], np.array([[20.0, 0.0], [20.0, 40.0]]), 1e-4)
    for n in (0, 1):
        none, no_segments = voronoi_graph(
            torch.zeros(2, n, 2), torch.ones(2, n, dtype=torch.bool), GraphOptions(), (8, 8)
        )
        assert none.lengths.tolist() == [0, 0] and no_segments.values.shape == (2, 0, 2, 2)


def test_voronoi_limits_and_caps_select_pairs_as_delaunay():
    """The pairs of delaunay_graph (limits and caps on the links), less those whose wall misses the frame."""
    xy, visible = scattered(frames=3, n=80, seed=4)
    every = edge_sets(voronoi_graph(xy, visible, GraphOptions(), (300, 400))[0])
    options = GraphOptions(max_distance=60.0, delta_y_cap=40.0, degree_cap=3)
    selected = edge_sets(voronoi_graph(xy, visible, options, (300, 400))[0])
    assert selected == [
        pairs & walls for pairs, walls in zip(edge_sets(delaunay_graph(xy, visible, options)), every, strict=False)
    ]
    assert all(len(pairs) < len(walls) for pairs, walls in zip(selected, every, strict=False))


def test_voronoi_op_budget():
    """60 frames of 1000 points: the walls are batched over frames; the host syncs are Delaunay's."""
    from opcount import OpCount

    torch.manual_seed(0)
    xy = torch.rand(1, 1000, 2) * torch.tensor([3840.0, 2160.0]) + torch.randn(60, 1000, 2)
    with OpCount() as count:
        voronoi_graph(xy, torch.ones(60, 1000, dtype=torch.bool), GraphOptions(max_distance=200.0), (2160, 3840))
    assert count.syncs <= 2 and count.launches <= 200 and count.float64 == 0, count.summary()


# -- groups and fixed edge lists ---------------------------------------------------------------------


def cross_group_knn(points, visible, group, k):
    """Each visible point's k nearest visible points of another group (ties: the lower index), brute force."""
    found = set()
    for a in np.flatnonzero(visible & (group >= 0)):
        others = np.flatnonzero(visible & (group >= 0) & (group != group[a]))
        if not others.size:
            continue
        d = np.hypot(*(points[others] - points[a]).T)
        for b in others[np.lexsort((others, d))[:k]]:
            found.add((min(a, int(b)), max(a, int(b))))
    return found


@pytest.mark.parametrize("search", ["all pairs", "grid"])
@pytest.mark.parametrize("per_frame", [False, True])
def test_knn_between_groups_is_each_points_nearest_of_the_other_groups(monkeypatch, per_frame, search):
    """Small frames compare every pair; larger ones search each point's k + (own group and none) nearest."""
    if search == "grid":
        monkeypatch.setattr(gpu_graph, "GROUP_BRUTE_FORCE_POINTS", 0)
    xy, visible = scattered(frames=3, n=60)
    generator = torch.Generator().manual_seed(3)
    group = torch.randint(-1, 3, (3, 60) if per_frame else (60,), generator=generator)
    found = edge_sets(knn_graph(xy, visible, GraphOptions(k=3, groups=group)))
    for t in range(3):
        frame_group = (group[t] if per_frame else group).numpy()
        expected = cross_group_knn(xy[t].double().numpy(), visible[t].numpy(), frame_group, 3)
        assert found[t] == expected and all(frame_group[i] != frame_group[j] for i, j in found[t])


@pytest.mark.parametrize("graph", ["knn", "radius", "delaunay", "mst", "voronoi"])
def test_no_graph_links_within_a_group(graph):
    xy, visible = scattered(frames=3, n=60)
    group = gpu_graph.parse_groups("0-19 | 20-39", 60)  # 40-59: in no group, no links
    options = GraphOptions(k=4, max_distance=80.0 if graph == "radius" else math.inf, groups=group, hysteresis=1.3)
    if graph == "voronoi":
        edges = voronoi_graph(xy, visible, options, (300, 300))[0]
    else:
        edges = GRAPHS[graph](xy, visible, options)
    found = edge_sets(edges)
    assert all(found)
    for t, pairs in enumerate(found):
        assert all(i < 20 <= j < 40 for i, j in pairs), (t, pairs)
        if graph == "radius" and t == 0:  # every pair across the groups within the radius (none held yet)
            pair = pairs_within(xy[t], visible[t], 80.0)
            assert pairs == {(i, j) for i, j in pair if i < 20 <= j < 40}


def test_groups_parse_and_name_their_input():
    assert gpu_graph.parse_groups("0-2 | 3, 5", 6).tolist() == [0, 0, 0, 1, -1, 1]
    assert gpu_graph.parse_groups("  ", 6) is None
    for text, message in (
        ("0-3", "groups: expected two or more groups"),
        ("0-2 | 2-3", "groups: track 2 is in two groups"),
        ("0-9 | 10", r"groups: 0-9 is not a range of the tracks' ids \(0 to 5: 6 tracks\)"),
        ("a | 1", "groups: expected track ids or ranges like 0-9, got 'a'"),
    ):
        with pytest.raises(ValueError, match=message):
            gpu_graph.parse_groups(text, 6)


def test_edge_list_is_exactly_the_pairs_whose_points_show():
    xy, visible = scattered(frames=4, n=20)
    edges = gpu_graph.parse_edges("0-1, 1-2; 2-3 5-4 4-5 7-19")  # 5-4 and 4-5: one edge
    found = edge_sets(gpu_graph.edge_list_graph(xy, visible, GraphOptions(), edges))
    for t in range(4):
        shown = visible[t].tolist()
        expected = {(i, j) for i, j in ((0, 1), (1, 2), (2, 3), (4, 5), (7, 19)) if shown[i] and shown[j]}
        assert found[t] == expected
    assert not all(visible.flatten())  # some points hidden: their edges skipped
    assert gpu_graph.parse_edges("[[0, 1], [2, 1]]").tolist() == [[0, 1], [2, 1]]
    nan = xy.clone()
    nan[:, 0] = math.nan  # a point with no position is hidden
    assert all(
        (0, 1) not in pairs for pairs in edge_sets(gpu_graph.edge_list_graph(nan, visible, GraphOptions(), edges))
    )


def test_coco17_skeleton_on_pose_keypoints():
    """The COCO skeleton: 19 limbs over 17 keypoints, every keypoint on one; hidden keypoints drop theirs."""
    coco = gpu_graph.parse_edges("coco17")
    assert coco.shape == (19, 2) and set(coco.ravel().tolist()) == set(range(17))
    limbs = {tuple(sorted(pair)) for pair in coco.tolist()}
    assert {(5, 7), (7, 9), (6, 8), (8, 10), (11, 13), (13, 15), (12, 14), (14, 16), (5, 6), (11, 12)} <= limbs
    xy = torch.rand(2, 17, 2) * 100
    visible = torch.ones(2, 17, dtype=torch.bool)
    visible[1, 9] = False  # the left wrist
    found = edge_sets(gpu_graph.edge_list_graph(xy, visible, GraphOptions(), coco))
    assert found[0] == limbs and found[1] == limbs - {(7, 9)}


@pytest.mark.parametrize(
    "text,n,message",
    [
        ("0-1, 1-17", 17, r"edges: the pair 1-17 names a track past the 17 tracks \(ids 0 to 16\)"),
        ("coco17", 5, "edges: the pair 15-13 names a track past the 5 tracks"),
        ("0-0", 5, "edges: expected pairs of two different track ids like 0-1, 1-2"),
        ("0-x", 5, "edges: expected pairs .* got '0-x'"),
        ("[[0, -1]]", 5, r"edges: expected pairs .* got \[0, -1\]"),
        ('{"a": 1}', 5, "edges: expected pairs"),
    ],
)
def test_bad_edge_lists_name_the_input(text, n, message):
    with pytest.raises(ValueError, match=message):
        gpu_graph.edge_list_graph(
            torch.zeros(1, n, 2), torch.ones(1, n, dtype=torch.bool), GraphOptions(), gpu_graph.parse_edges(text)
        )


def test_edge_list_limits_caps_and_empty_lists():
    xy = torch.tensor([[[0.0, 0.0], [10.0, 0.0], [40.0, 0.0], [10.0, 30.0]]])
    visible = torch.ones(1, 4, dtype=torch.bool)
    edges = gpu_graph.parse_edges("0-1 1-2 1-3")
    run = lambda **kw: edge_sets(gpu_graph.edge_list_graph(xy, visible, GraphOptions(**kw), edges))[0]  # noqa: E731
    assert run() == {(0, 1), (1, 2), (1, 3)}
    assert run(max_distance=25.0) == {(0, 1)} and run(delta_y_cap=5.0) == {(0, 1), (1, 2)}
    assert run(degree_cap=1) == {(0, 1)}
    assert run(groups=gpu_graph.parse_groups("0 1 | 2 3", 4)) == {(1, 2), (1, 3)}
    assert edge_sets(gpu_graph.edge_list_graph(xy, visible, GraphOptions(), gpu_graph.parse_edges(""))) == [set()]


def test_knn_between_groups_with_hysteresis_is_the_same_both_ways(monkeypatch):
    xy = jittered(frames=12, n=80)
    visible = torch.ones(12, 80, dtype=torch.bool)
    options = GraphOptions(k=3, hysteresis=1.3, degree_cap=3, groups=torch.arange(80) % 3)
    pairs = edge_sets(knn_graph(xy, visible, options))
    monkeypatch.setattr(gpu_graph, "GROUP_BRUTE_FORCE_POINTS", 0)
    assert edge_sets(knn_graph(xy, visible, options)) == pairs and all(pairs)
    assert all((i - j) % 3 for frame in pairs for i, j in frame)
