"use strict";
// relaunch's pictures: plain SVG drawn by hand, no build step, nothing loaded from elsewhere.
// Data: /v1/jobs/{cluster}/{job}/progress and /v1/fleet (docs/api.md). Every text from the ledger is
// untrusted (log lines): it only ever becomes a text node (<title>, <text>, textContent), never HTML.
// Styles are presentation attributes and classes (the page's CSP allows no inline style).
window.RelaunchCharts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const ATTEMPT_COLOURS = ["#2453a6", "#1f7a4d", "#7a3fb0", "#a86400", "#0f766e", "#9f1239"];
  const MARKER_COLOURS = { anomaly: "#b42318", advice: "#a86400", reconcile: "#1f7a4d", restart: "#2453a6" };

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(NS, tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value !== undefined && value !== null) node.setAttribute(key, String(value));
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }
  const title = (text) => svg("title", {}, text);
  const hhmmss = (t) => new Date(t * 1000).toISOString().slice(11, 19);

  function niceTicks(lo, hi, count) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / Math.max(1, count);
    const mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 5, 10].map((m) => m * mag).find((s) => s >= raw) || raw;
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + 1e-9; v += step) out.push(Number(v.toFixed(6)));
    return out;
  }

  // One panel: y over the shared time axis, one polyline (and hoverable points) per attempt.
  function panel(g, box, x, data, field, label, guides) {
    const values = data.attempts.flatMap((a) => a.points.map((p) => p[field])).filter((v) => v !== null && v !== undefined);
    const extra = guides.flatMap((gd) => [gd.baseline, gd.threshold]).filter((v) => typeof v === "number");
    const all = values.concat(extra);
    const lo = all.length ? Math.min(0, ...all) : 0;
    const hi = all.length ? Math.max(...all) * 1.08 || 1 : 1;
    const y = (v) => box.top + box.height - ((v - lo) / (hi - lo)) * box.height;
    g.append(svg("rect", { x: box.left, y: box.top, width: box.width, height: box.height, class: "plot-bg" }));
    for (const v of niceTicks(lo, hi, 4)) {
      g.append(svg("line", { x1: box.left, x2: box.left + box.width, y1: y(v), y2: y(v), class: "grid" }));
      g.append(svg("text", { x: box.left - 6, y: y(v) + 4, "text-anchor": "end", class: "tick" }, Number(v.toPrecision(4))));
    }
    g.append(svg("text", { x: box.left, y: box.top - 6, class: "axis-label" }, label));
    for (const gd of guides) {
      if (typeof gd.baseline === "number") {
        g.append(svg("line", { x1: box.left, x2: box.left + box.width, y1: y(gd.baseline), y2: y(gd.baseline),
                               class: "guide baseline", "data-guide": "straggler-baseline" }, title(gd.label)));
      }
      if (typeof gd.threshold === "number") {
        g.append(svg("line", { x1: box.left, x2: box.left + box.width, y1: y(gd.threshold), y2: y(gd.threshold),
                               class: "guide threshold", "data-guide": "straggler-threshold" },
                     title(`straggler threshold: ${gd.label}`)));
      }
    }
    if (!values.length) {
      g.append(svg("text", { x: box.left + box.width / 2, y: box.top + box.height / 2, "text-anchor": "middle",
                             class: "empty" }, `no ${label} reported`));
      return;
    }
    data.attempts.forEach((attempt) => {
      const colour = ATTEMPT_COLOURS[attempt.index % ATTEMPT_COLOURS.length];
      const pts = attempt.points.filter((p) => p[field] !== null && p[field] !== undefined);
      if (!pts.length) return;
      g.append(svg("polyline", { points: pts.map((p) => `${x(p.t).toFixed(1)},${y(p[field]).toFixed(1)}`).join(" "),
                                 fill: "none", stroke: colour, "stroke-width": 2, class: "series",
                                 "data-attempt": attempt.index, "data-field": field }));
      for (const p of pts) {
        g.append(svg("circle", { cx: x(p.t), cy: y(p[field]), r: 3.2, fill: colour, class: "point",
                                 "data-attempt": attempt.index, "data-field": field, "data-t": p.t },
          title(`attempt ${attempt.index} at ${hhmmss(p.t)} UTC: ${label} ${p[field]} (step ${p.step}, ` +
                `${p.reports} report${p.reports === 1 ? "" : "s"} in this ${data.resolution_s} s bucket)`)));
      }
    });
  }

  // The job's progress: step (top) and throughput or step time (bottom) over time, per attempt,
  // with the ledger's events as vertical markers across both.
  function drawProgress(host, data, onHover) {
    host.replaceChildren();
    const width = Math.max(640, host.clientWidth || 900);
    const height = 410;
    const margin = { left: 64, right: 16, top: 60, bottom: 34 };
    const times = data.attempts.flatMap((a) => a.points.flatMap((p) => [p.t, p.t_first]))
      .concat(data.markers.map((m) => m.t), data.attempts.map((a) => a.first_seen))
      .concat(data.guides.flatMap((gd) => [gd.from, gd.to])).filter((t) => typeof t === "number");
    if (!times.length) {
      host.append(document.createTextNode("Nothing to draw yet: no progress reported and no event recorded."));
      return null;
    }
    let t0 = Math.min(...times), t1 = Math.max(...times);
    const pad = Math.max(1, (t1 - t0) * 0.03);
    t0 -= pad; t1 += pad;
    const plotW = width - margin.left - margin.right;
    const x = (t) => margin.left + ((t - t0) / (t1 - t0)) * plotW;
    const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "progress-chart",
                              role: "img", "aria-label": "progress of the job over time, with its events" });
    const inner = height - margin.top - margin.bottom;
    const stepBox = { left: margin.left, top: margin.top, width: plotW, height: inner * 0.52 };
    const rateBox = { left: margin.left, top: margin.top + inner * 0.52 + 26, width: plotW, height: inner * 0.48 - 26 };
    const hasThroughput = data.attempts.some((a) => a.points.some((p) => p.throughput !== null));
    const straggler = data.guides.filter((gd) => gd.kind === "straggler_baseline");
    panel(root, stepBox, x, data, "step", "step", []);
    panel(root, rateBox, x, data, hasThroughput ? "throughput" : "step_time_s",
          hasThroughput ? "throughput" : "step time (s)", hasThroughput ? straggler : []);
    // Over the panels (translucent): the silence is the picture of a hang.
    for (const gd of data.guides.filter((gd) => gd.kind === "hang_silence")) {
      const sx = x(gd.from), ex = x(gd.to);
      root.append(svg("g", { "data-guide": "hang" },
        svg("rect", { x: sx, y: margin.top, width: Math.max(2, ex - sx), height: inner, class: "hang-silence" }),
        svg("text", { x: (sx + ex) / 2, y: stepBox.top + 14, "text-anchor": "middle", class: "guide-label" },
            "no progress: hang"), title(gd.label)));
    }
    for (const t of niceTicks(t0, t1, 6)) {
      root.append(svg("text", { x: x(t), y: height - 10, "text-anchor": "middle", class: "tick" }, hhmmss(t)));
    }
    // Markers closer than a head's width (an anomaly, its Advice and the first reconcile steps often
    // come within a second) stack their heads upwards, so that each one can be pointed at.
    let previous = null;
    data.markers.forEach((m, i) => {
      const colour = MARKER_COLOURS[m.kind] || "#555";
      const mx = x(m.t);
      const level = previous && mx - previous.x < 12 ? Math.min(previous.level + 1, 3) : 0;
      previous = { x: mx, level };
      const head = margin.top - 4 - level * 12;
      const group = svg("g", { class: `marker marker-${m.kind}`, "data-kind": m.kind, "data-t": m.t, "data-index": i,
                               tabindex: 0 },
        svg("line", { x1: mx, x2: mx, y1: head, y2: margin.top + inner, stroke: colour, "stroke-width": 1.5,
                      "stroke-dasharray": m.kind === "reconcile" ? "2 3" : m.kind === "restart" ? "6 3" : null }),
        svg("g", { class: "marker-head" },
          svg("path", { d: `M${mx - 5},${head - 9} L${mx + 5},${head - 9} L${mx},${head} Z`, fill: colour }),
          svg("rect", { x: mx - 6, y: head - 11, width: 12, height: 12, fill: "transparent" })),
        title([`${hhmmss(m.t)} UTC ${m.label}`, ...(m.evidence || [])].join("\n")));
      if (onHover) {
        group.addEventListener("mouseenter", () => onHover(m));
        group.addEventListener("focus", () => onHover(m));
      }
      root.append(group);
    });
    const legend = svg("g", { class: "legend" });
    let lx = margin.left + 40;
    data.attempts.forEach((a) => {
      legend.append(svg("rect", { x: lx, y: 6, width: 10, height: 10, fill: ATTEMPT_COLOURS[a.index % ATTEMPT_COLOURS.length] }));
      legend.append(svg("text", { x: lx + 14, y: 15, class: "tick" }, `attempt ${a.index}`));
      lx += 80;
    });
    for (const [kind, colour] of Object.entries(MARKER_COLOURS)) {
      legend.append(svg("line", { x1: lx, x2: lx, y1: 4, y2: 17, stroke: colour, "stroke-width": 2 }));
      legend.append(svg("text", { x: lx + 5, y: 15, class: "tick" }, kind));
      lx += 78;
    }
    root.append(legend);
    host.append(root);
    return root;
  }

  // Stacked bars per day (failures by class), with restarts and stops as dots.
  function drawDays(host, days, key) {
    host.replaceChildren();
    const width = Math.max(520, host.clientWidth || 700), height = 220;
    const m = { left: 40, right: 10, top: 14, bottom: 40 };
    const classes = [...new Set(days.flatMap((d) => Object.keys(d[key])))].sort();
    const palette = ["#b42318", "#a86400", "#2453a6", "#7a3fb0", "#0f766e", "#6b7385", "#1f7a4d"];
    const totals = days.map((d) => Object.values(d[key]).reduce((a, b) => a + b, 0));
    const hi = Math.max(1, ...totals, ...days.map((d) => Math.max(d.restarts, d.stops)));
    const bw = (width - m.left - m.right) / days.length;
    const y = (v) => m.top + (height - m.top - m.bottom) * (1 - v / hi);
    const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "fleet-chart" });
    for (const v of niceTicks(0, hi, 4).filter(Number.isInteger)) {  // counts: whole numbers only
      root.append(svg("line", { x1: m.left, x2: width - m.right, y1: y(v), y2: y(v), class: "grid" }));
      root.append(svg("text", { x: m.left - 5, y: y(v) + 4, "text-anchor": "end", class: "tick" }, v));
    }
    const every = Math.ceil(days.length / 7);
    days.forEach((d, i) => {
      let base = 0;
      const bx = m.left + i * bw + bw * 0.15;
      classes.forEach((c, ci) => {
        const n = d[key][c] || 0;
        if (!n) return;
        root.append(svg("rect", { x: bx, y: y(base + n), width: bw * 0.7, height: y(base) - y(base + n),
                                  fill: palette[ci % palette.length], class: "bar", "data-day": d.day, "data-class": c,
                                  "data-count": n }, title(`${d.day}: ${n} ${c}`)));
        base += n;
      });
      if (d.restarts) root.append(svg("circle", { cx: bx + bw * 0.2, cy: y(d.restarts), r: 3.5, fill: "#1f7a4d",
                                                  class: "restarts" }, title(`${d.day}: ${d.restarts} restarts`)));
      if (d.stops) root.append(svg("circle", { cx: bx + bw * 0.5, cy: y(d.stops), r: 3.5, fill: "#1d2330",
                                               class: "stops" }, title(`${d.day}: ${d.stops} stops`)));
      if ((days.length - 1 - i) % every === 0) {  // today always labelled
        root.append(svg("text", { x: bx + bw * 0.35, y: height - m.bottom + 14, "text-anchor": "middle", class: "tick" },
                        d.day.slice(5)));
      }
    });
    const prefix = key === "by_action" ? "asked to " : "";
    const legend = [...classes.map((c, ci) => [`${prefix}${c}`, palette[ci % palette.length]]),
                    ["restarts (Advice)", "#1f7a4d"], ["stops", "#1d2330"]];
    const gap = Math.min(130, (width - m.left - m.right) / legend.length);  // every entry fits the width
    legend.forEach(([c, colour], i) => {
      root.append(svg("rect", { x: m.left + i * gap, y: height - 16, width: 10, height: 10, fill: colour }));
      root.append(svg("text", { x: m.left + i * gap + 14, y: height - 7, class: "tick" }, c));
    });
    host.append(root);
  }

  // Time lost per failure (failure line -> running again), one bar each.
  function drawLost(host, recoveries) {
    host.replaceChildren();
    if (!recoveries.length) { host.append(document.createTextNode("No recovery yet.")); return; }
    const width = Math.max(520, host.clientWidth || 700), height = 180;
    const m = { left: 44, right: 10, top: 12, bottom: 24 };
    const hi = Math.max(1, ...recoveries.map((r) => r.lost_s));
    const bw = Math.min(48, (width - m.left - m.right) / recoveries.length);  // one failure is not a wall
    const y = (v) => m.top + (height - m.top - m.bottom) * (1 - v / hi);
    const root = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "fleet-chart" });
    for (const v of niceTicks(0, hi, 4)) {
      root.append(svg("line", { x1: m.left, x2: width - m.right, y1: y(v), y2: y(v), class: "grid" }));
      root.append(svg("text", { x: m.left - 5, y: y(v) + 4, "text-anchor": "end", class: "tick" }, `${v}s`));
    }
    recoveries.forEach((r, i) => {
      root.append(svg("rect", { x: m.left + i * bw + bw * 0.1, y: y(r.lost_s), width: Math.max(1, bw * 0.8),
                                height: y(0) - y(r.lost_s), fill: "#2453a6", class: "lost", "data-job": r.job_id },
        title(`job ${r.job_id} attempt ${r.attempt} (${r.class}): ${r.lost_s} s from the failure to running again`)));
      if (bw >= 30) {
        root.append(svg("text", { x: m.left + i * bw + bw / 2, y: height - 8, "text-anchor": "middle", class: "tick" },
                        `job ${r.job_id}`));
      }
    });
    host.append(root);
  }

  return { drawProgress, drawDays, drawLost };
})();
