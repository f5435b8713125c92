// Points editor for RasterKit_LineLinkRenderer: shows the first input frame of the last run with
// the frame-0 points of `tracks_json`, the links the node would draw between them (k nearest
// with the node's caps, straight, Bezier, spiral or wave, width, opacity, colour) and their ids or labels, so
// style edits show without running the workflow. Click on empty space to add a point, drag a point to move it (a track
// over many frames moves as a whole), double-click a point (or select it and press Delete) to
// remove its track. Every edit writes the JSON back into `tracks_json`, in the form it was in:
// a list of tracks, or a flat list of points, which is ONE track over frames as for the node
// (KJNodes' coordinates); a flat list that gains a second track becomes a list of tracks.
import { app } from "../../scripts/app.js";
import { FrameCanvas, POINT_HANDLE, groupAdvanced, registerFrameEditor } from "./frame_canvas.js";

// Settings behind the node's "advanced settings" toggle: the graph's finer caps, dash, glow and trail styles,
// marker and label styles, the output choices, the plexus's finer controls (falloff target, groups, edge list),
// the electric links' jitter and seed.
const ADVANCED = new Set(["delta_y_cap", "degree_cap", "mutual", "hysteresis", "curvature", "layer_alpha", "line_style",
  "dash_length", "gap_length", "dash_phase", "dash_speed", "end_color", "glow", "glow_scale", "width_by_length",
  "point_style", "marker_glow", "trail_frames", "trail_smooth", "text_size", "text_color", "outputs", "falloff_on",
  "groups", "edges", "jitter", "seed"]);
// the node's "distance" colouring: near links bright, far links dark
const DISTANCE_STOPS = [[0.94, 0.98, 0.13], [0.97, 0.58, 0.25], [0.80, 0.28, 0.47], [0.49, 0.01, 0.66]];

function isPoint(p) {
  if (Array.isArray(p)) return p.length >= 2 && typeof p[0] === "number" && typeof p[1] === "number";
  return p !== null && typeof p === "object" && "x" in p && "y" in p;
}

const pointXY = (p) => (Array.isArray(p) ? [p[0], p[1]] : [Number(p.x), Number(p.y)]);

// A track's label at frame 0, as the node reads it: a point's "label" names its track from its frame on,
// and before it when it is the first; null: none (the node shows the id).
const firstLabel = (track) => track.find((p) => p && !Array.isArray(p) && typeof p.label === "string")?.label ?? null;

function withXY(p, x, y) {
  const [rx, ry] = [Math.round(x * 10) / 10, Math.round(y * 10) / 10];
  return Array.isArray(p) ? [rx, ry, ...p.slice(2)] : { ...p, x: rx, y: ry };
}

// The node's spirals and waves (utils/gpu_curves.py), from a to b, bent by `bend` (curvature times the
// alternating sign), as 64 points: a spiral winds out of a by 2.5 x bend turns; elastic and fourier swing
// across the link by at most bend x its length.
const WAVE_PEAK = { elastic: 0.87859163, fourier: 1.5828524 };
function wavePoints([ax, ay], [bx, by], curve, bend) {
  const [dx, dy] = [bx - ax, by - ay];
  return Array.from({ length: 65 }, (_, n) => {
    const u = n / 64;
    if (curve === "spiral") {
      const angle = (u - 1) * 2 * Math.PI * 2.5 * bend;
      const [c, s] = [Math.cos(angle), Math.sin(angle)];
      return [ax + u * (c * dx - s * dy), ay + u * (s * dx + c * dy)];
    }
    let across = 0;
    if (curve === "elastic") across = Math.sin(4 * Math.PI * u) * (1 - u);
    else for (let h = 1; h <= 5; h++) across += Math.sin(2 * Math.PI * h * u) / h;
    across *= bend / WAVE_PEAK[curve];
    return [ax + u * dx - across * dy, ay + u * dy + across * dx];
  });
}

function distanceColour(t) {
  const position = Math.min(Math.max(t, 0), 1) * (DISTANCE_STOPS.length - 1);
  const low = Math.min(Math.floor(position), DISTANCE_STOPS.length - 2);
  const frac = position - low;
  const rgb = DISTANCE_STOPS[low].map((c, i) => Math.round(255 * (c * (1 - frac) + DISTANCE_STOPS[low + 1][i] * frac)));
  return `rgb(${rgb.join(",")})`;
}

// The node's knn or radius graph on one frame: each point's k nearest (radius: every point; |dy|
// within the cap, ties to the lower index), within max_distance, mutual or not, then the degree cap
// keeps each point's shortest. points: [[x, y] | null] -> [[i, j, length]], i < j.
export function previewEdges(points, { k, maxDistance, dyCap, degreeCap, mutual, graph = "knn" }) {
  const radius = graph === "radius";
  if (radius && !(maxDistance > 0)) return [];
  const ids = points.flatMap((p, i) => (p ? [i] : []));
  const found = new Map();
  for (const i of ids) {
    const near = ids.filter((j) => j !== i && !(dyCap > 0 && Math.abs(points[j][1] - points[i][1]) > dyCap))
      .map((j) => [Math.hypot(points[j][0] - points[i][0], points[j][1] - points[i][1]), j])
      .sort((a, b) => a[0] - b[0] || a[1] - b[1]).slice(0, radius ? undefined : k);
    for (const [length, j] of near) {
      if (maxDistance > 0 && length > maxDistance) continue;
      const key = `${Math.min(i, j)},${Math.max(i, j)}`;
      found.set(key, { i: Math.min(i, j), j: Math.max(i, j), length, count: (found.get(key)?.count ?? 0) + 1 });
    }
  }
  let edges = [...found.values()].filter((e) => radius || !mutual || e.count === 2);
  if (degreeCap > 0) {
    edges.sort((a, b) => a.length - b.length || a.i - b.i || a.j - b.j);
    const kept = new Map();
    for (const e of edges) for (const end of [e.i, e.j]) kept.set(end, [...(kept.get(end) ?? []), e]);
    edges = edges.filter((e) => kept.get(e.i).indexOf(e) < degreeCap && kept.get(e.j).indexOf(e) < degreeCap);
  }
  return edges.map((e) => [e.i, e.j, e.length]).sort((a, b) => a[0] - b[0] || a[1] - b[1]);
}

class TracksEditor extends FrameCanvas {
  constructor(node) {
    groupAdvanced(node, ADVANCED);
    super(node, "tracks_editor");
    this.selected = -1;
    this.drag = null;
    this.listen({ pointerdown: this.down, pointermove: this.move, pointerup: this.up, dblclick: this.remove,
                  keydown: this.key });
  }

  // What tracks_json holds: `tracks`, a list of tracks (each a list of per-frame points), written
  // back as it came (`flat`: one track as a flat list of points); `points` are the frame-0
  // positions, null where hidden.
  tracks() {
    const connected = this.node.inputs?.find((input) => ["tracks", "ys_tracks"].includes(input.name) && input.link != null);
    if (connected) {
      return { tracks: [], points: [], editable: false, note: `points come from the ${connected.name} input` };
    }
    const text = (this.value("tracks_json") ?? "").trim();
    let data;
    try {
      data = text ? JSON.parse(text) : [];
    } catch {
      try {
        data = JSON.parse(text.replaceAll("'", '"')); // the node tolerates single quotes too
      } catch {
        return { tracks: [], points: [], editable: false, note: "tracks_json is not valid JSON" };
      }
    }
    const visible = (p) => (p && isPoint(p) && pointXY(p).every((v) => v >= 0) ? pointXY(p) : null);
    const flat = Array.isArray(data) && data.length > 0 && data.every(isPoint);
    const tracks = flat ? [data] : data;
    if (Array.isArray(tracks) && tracks.every((track) => Array.isArray(track) && track.every(isPoint))) {
      return { tracks, flat, points: tracks.map((track) => visible(track[0])), editable: true };
    }
    return { tracks: [], points: [], editable: false, note: "tracks in a form the editor does not edit: edit the JSON" };
  }

  write(state) {
    const data = state.flat && state.tracks.length === 1 ? state.tracks[0] : state.tracks;
    this.setValue("tracks_json", JSON.stringify(data));
  }

  hit(x, y, points) {
    const handle = POINT_HANDLE / this.fit().scale;
    for (let i = points.length - 1; i >= 0; i--) {
      if (points[i] && Math.hypot(points[i][0] - x, points[i][1] - y) < handle) return i;
    }
    return -1;
  }

  down(event) {
    const state = this.tracks();
    if (!state.editable || event.button !== 0) return;
    event.stopPropagation();
    this.canvas.setPointerCapture(event.pointerId);
    const [x, y] = this.toImage(event);
    let index = this.hit(x, y, state.points);
    if (index < 0) { // a new track of one point, in the style of the others
      const first = state.tracks.flat()[0];
      state.tracks.push([withXY(first === undefined || !Array.isArray(first) ? { x: 0, y: 0 } : [0, 0], x, y)]);
      index = state.tracks.length - 1;
      this.write(state);
    }
    this.selected = index;
    this.drag = { index, start: [x, y], original: structuredClone(state.tracks[index]) };
  }

  move(event) {
    if (!this.drag) return;
    event.stopPropagation();
    const state = this.tracks();
    const [x, y] = this.toImage(event);
    const [dx, dy] = [x - this.drag.start[0], y - this.drag.start[1]];
    const shift = (p) => {
      const [px, py] = pointXY(p);
      return px < 0 || py < 0 ? p : withXY(p, px + dx, py + dy); // hidden points stay hidden
    };
    state.tracks[this.drag.index] = this.drag.original.map(shift);
    this.write(state);
  }

  up() {
    this.drag = null;
  }

  removeTrack(index) {
    const state = this.tracks();
    if (!state.editable || index < 0 || index >= state.tracks.length) return;
    state.tracks.splice(index, 1);
    this.selected = -1;
    this.write(state);
  }

  remove(event) {
    this.removeTrack(this.hit(...this.toImage(event), this.tracks().points));
  }

  key(event) {
    if ((event.key === "Delete" || event.key === "Backspace") && this.selected >= 0) {
      this.removeTrack(this.selected);
      event.preventDefault();
      event.stopPropagation();
    }
  }

  draw() {
    const { ctx, s } = this.begin();
    const state = this.tracks();
    const number = (name, fallback) => Number(this.value(name) ?? fallback);
    const graph = this.value("graph") ?? "knn";
    const previewed = graph === "knn" || graph === "radius"; // delaunay and mst: drawn by the run only
    const edges = previewed ? previewEdges(state.points, {
      k: number("k", 3), maxDistance: number("max_distance", 0), dyCap: number("delta_y_cap", 0),
      degreeCap: number("degree_cap", 0), mutual: Boolean(this.value("mutual")), graph,
    }) : [];
    const colour = (this.value("color") ?? "#FFFFFF").trim();
    const byDistance = colour.toLowerCase() === "distance";
    const hex = byDistance ? "#FFFFFF" : colour.startsWith("#") ? colour.slice(0, 7) : `#${colour.slice(0, 6)}`;
    const longest = number("max_distance", 0) || Math.max(1e-6, ...edges.map((e) => e[2]));
    const curve = this.value("curve") ?? "straight";
    const curvature = curve === "straight" ? 0 : number("curvature", 0.2);
    ctx.globalAlpha = number("opacity", 0.8);
    ctx.lineWidth = number("width", 1.5) * s;
    ctx.lineCap = "round";
    for (const [i, j, length] of edges) {
      const [[ax, ay], [bx, by]] = [state.points[i], state.points[j]];
      const bend = curvature * (1 - 2 * ((i + j) % 2)); // the node's alternating sign
      ctx.beginPath();
      ctx.moveTo(ax * s, ay * s);
      if (curve === "cubic") { // an S-curve: bent left at a third, right at two thirds
        const [nx, ny] = [-(by - ay) * bend, (bx - ax) * bend];
        ctx.bezierCurveTo((ax + (bx - ax) / 3 + nx) * s, (ay + (by - ay) / 3 + ny) * s,
                          (ax + 2 * (bx - ax) / 3 - nx) * s, (ay + 2 * (by - ay) / 3 - ny) * s, bx * s, by * s);
      } else if (curve in WAVE_PEAK || curve === "spiral") {
        for (const [x, y] of wavePoints([ax, ay], [bx, by], curve, bend)) ctx.lineTo(x * s, y * s);
      } else {
        ctx.quadraticCurveTo(((ax + bx) / 2 - (by - ay) * bend) * s, ((ay + by) / 2 + (bx - ax) * bend) * s, bx * s, by * s);
      }
      ctx.strokeStyle = byDistance ? distanceColour(length / longest) : hex;
      ctx.stroke();
    }
    const radius = number("point_radius", 3);
    state.points.forEach((p, index) => {
      if (!p) return;
      ctx.beginPath();
      ctx.arc(p[0] * s, p[1] * s, Math.max(radius * s, 2), 0, 2 * Math.PI);
      ctx.fillStyle = hex;
      if (radius > 0) ctx.fill();
      if (index === this.selected) {
        ctx.globalAlpha = 1;
        ctx.lineWidth = 2;
        ctx.strokeStyle = "#ffcc00";
        ctx.stroke();
        ctx.globalAlpha = number("opacity", 0.8);
      }
    });
    const mode = this.value("point_labels") ?? "none";
    if (mode !== "none") { // the node's text: ink from point_radius + 2 px right of and above each point
      const offset = radius + 2;
      const ink = (this.value("text_color") ?? "").trim();
      ctx.globalAlpha = number("opacity", 0.8);
      ctx.fillStyle = ink ? (ink.startsWith("#") ? ink.slice(0, 7) : `#${ink.slice(0, 6)}`) : hex;
      ctx.font = `${number("text_size", 12) * s}px sans-serif`;
      ctx.textBaseline = "bottom";
      state.points.forEach((p, index) => {
        const text = mode === "label" ? firstLabel(state.tracks[index]) ?? String(index) : String(index);
        if (p && text) ctx.fillText(text, (p[0] + offset) * s, (p[1] - offset) * s);
      });
    }
    const note = state.note ?? (previewed ? null : `${graph} ${graph === "voronoi" ? "walls" : "links"} are drawn when the workflow runs`);
    if (note) this.note(ctx, note);
  }
}

app.registerExtension(registerFrameEditor("RasterKit.TracksEditor", "RasterKit_LineLinkRenderer", "rasterkitTracksEditor",
                                            TracksEditor));
