"use strict";
// The relaunch dashboard: plain DOM, no build step, nothing loaded from elsewhere.
// Everything shown comes from the ledger or the bus and is untrusted text (log lines, job names,
// comments): it only ever goes into textContent, never into HTML.
//
// Freshness: /v1/events/stream (server-sent events) refreshes at once on anomalies, advice,
// reconcile steps and audit entries; scheduler states travel on SIGNALS, not EVENTS, so the job
// list is also polled (every ?poll=N seconds, 5 by default). When the stream is unavailable the
// page says "polling" and tries the stream again later.
(() => {
  const params = new URLSearchParams(location.search);
  const POLL_MS = 1000 * Math.max(1, Number(params.get("poll")) || 5);
  const STREAM_RETRY_MS = 30000;
  const PAGE = 50;
  const TICKER_MAX = 50;
  const KIND_ORDER = { attempt: 0, anomaly: 1, hang: 2, advice: 3, reconcile: 4, override: 5, audit: 6 };
  const state = { offset: 0, total: 0, filters: {}, selected: null, refreshTimer: null };

  const $ = (selector) => document.querySelector(selector);

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === undefined || value === null) continue;
      if (key === "class") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value);
    }
    for (const child of children.flat()) {
      if (child === undefined || child === null || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function utc(iso) {
    if (!iso) return "";
    const t = Date.parse(iso);
    return Number.isNaN(t) ? String(iso) : new Date(t).toISOString().replace("T", " ").slice(0, 19);
  }

  const millis = (iso) => { const t = Date.parse(iso || ""); return Number.isNaN(t) ? 0 : t; };
  const badge = (text) => el("span", { class: `badge v-${text}` }, text);
  const jobKey = (cluster, jobId) => `${cluster}/${jobId}`;

  function showProblem(message) {
    const box = $("#problem");
    box.textContent = message || "";
    box.hidden = !message;
  }

  // The API's bearer token, when the person gave it (the "API token" button): where the API has a
  // token configured, a job's log excerpts (evidence) come only with it. Kept for this tab only.
  const TOKEN_KEY = "relaunch-api-token";

  async function getJSON(path) {
    const headers = { Accept: "application/json" };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    const response = await fetch(path, { headers });
    const body = await response.json().catch(() => ({}));
    if (!response.ok) {
      throw new Error(body.detail ? `${body.detail}${body.hint ? ` (${body.hint})` : ""}` : `HTTP ${response.status}`);
    }
    return body;
  }

  async function guarded(work) {
    try {
      await work();
      showProblem("");
      $("#refreshed").textContent = `updated ${utc(new Date().toISOString()).slice(11)} UTC`;
    } catch (error) {
      showProblem(String(error.message || error));
    }
  }

  // ---- jobs ---------------------------------------------------------------------------------
  async function loadJobs() {
    const query = new URLSearchParams({ limit: PAGE, offset: state.offset });
    for (const [key, value] of Object.entries(state.filters)) if (value) query.set(key, value);
    const data = await getJSON(`/v1/jobs?${query}`);
    state.total = data.total;
    const body = $("#jobs tbody");
    body.replaceChildren(...data.jobs.map(jobRow));
    $("#jobs-empty").hidden = data.jobs.length > 0;
    const first = data.total ? data.offset + 1 : 0;
    $("#jobs-count").textContent = `${first}–${data.offset + data.jobs.length} of ${data.total}`;
    $("#jobs-prev").disabled = state.offset === 0;
    $("#jobs-next").disabled = data.offset + data.jobs.length >= data.total;
    if (!state.selected && data.jobs.length) select(data.jobs[0].cluster, data.jobs[0].job_id, false);
  }

  function jobRow(job) {
    const key = jobKey(job.cluster, job.job_id);
    const mode = job.mode_override ? `${job.mode_override} (override)` : job.mode;
    return el("tr", { dataset: { key }, class: key === state.selected ? "selected" : "",
                      onclick: () => select(job.cluster, job.job_id, true) },
      el("td", {}, job.cluster), el("td", {}, job.job_id), el("td", {}, job.name),
      el("td", { class: "state" }, badge(job.state || "?")), el("td", {}, String(job.attempt_count)),
      el("td", { class: "verdict" }, badge(job.verdict)), el("td", { class: "mode" }, mode),
      // The outcome in words (relaunch.common.outcome_words, as `relaunch jobs` says it); the verdict's
      // whole reason on hover, never cut mid-sentence in the cell.
      el("td", { class: "why", title: job.verdict_reason || "" }, job.outcome || job.verdict_reason || ""),
      el("td", {}, utc(job.updated_at)));
  }

  function select(cluster, jobId, remember) {
    state.selected = jobKey(cluster, jobId);
    if (remember) history.replaceState(null, "", `#job=${encodeURIComponent(state.selected)}`);
    for (const row of document.querySelectorAll("#jobs tbody tr")) {
      row.classList.toggle("selected", row.dataset.key === state.selected);
    }
    guarded(loadJob);
  }

  // ---- one job's timeline ---------------------------------------------------------------------
  async function loadJob() {
    if (!state.selected) return;
    const [cluster, jobId] = state.selected.split("/");
    const data = await getJSON(`/v1/jobs/${encodeURIComponent(cluster)}/${encodeURIComponent(jobId)}`);
    if (state.selected !== jobKey(cluster, jobId)) return; // another job was picked meanwhile
    renderSummary(data.job);
    renderGoodput(data.goodput);
    const entries = timelineEntries(data);
    entries.sort((a, b) => millis(a.at) - millis(b.at) || KIND_ORDER[a.kind] - KIND_ORDER[b.kind]);
    $("#timeline").replaceChildren(...entries.map((entry) => el("li", { dataset: { kind: entry.kind } },
      el("span", { class: "when" }, utc(entry.at)), el("span", { class: "kind" }, entry.kind),
      el("span", { class: "title" }, entry.title), entry.body)));
    $("#timeline-section").hidden = false;
    await loadProgress(cluster, jobId);
  }

  // ---- pictures (charts.js) ------------------------------------------------------------------
  async function loadProgress(cluster, jobId) {
    const data = await getJSON(`/v1/jobs/${encodeURIComponent(cluster)}/${encodeURIComponent(jobId)}/progress`);
    if (state.selected !== jobKey(cluster, jobId)) return;
    window.RelaunchCharts.drawProgress($("#progress-chart"), data, showMarker);
    $("#progress-note").textContent = data.note || "";
    $("#progress-note").hidden = !data.note;
  }

  function showMarker(marker) {
    $("#marker-detail").replaceChildren(
      el("p", { class: "detail" }, el("span", { class: "when" }, utc(new Date(marker.t * 1000).toISOString())),
         el("span", { class: "kind" }, marker.kind), marker.label),
      ...(marker.evidence || []).filter(Boolean).map((line) => el("pre", { class: "evidence" }, line)));
  }

  async function loadFleet() {
    const data = await getJSON("/v1/fleet?days=14");
    const mttr = data.mttr_s === null ? "-" : `${data.mttr_s} s`;
    $("#fleet-summary").replaceChildren(...[
      ["failures", data.failures], ["restarts", data.restarts], ["stops", data.stops],
      ["mean time to recover", mttr], ["time lost", `${data.lost_s_total} s`], ["not recovered", data.unrecovered],
    ].map(([label, value]) => el("div", { class: "figure", dataset: { figure: label } },
      el("span", { class: "figure-value" }, String(value)), el("span", { class: "muted" }, label))));
    renderFleetGoodput(data.goodput);
    window.RelaunchCharts.drawDays($("#fleet-by-class"), data.days, "by_class");
    window.RelaunchCharts.drawDays($("#fleet-by-action"), data.days, "by_action");
    window.RelaunchCharts.drawLost($("#fleet-lost"), data.recoveries);
    const health = data.health || {};
    $("#fleet-health").replaceChildren(health.error ? el("p", { class: "problem" }, health.error) : el("div", {},
      el("p", { class: "detail" }, `leader (actuator lease): ${health.leader || "none"}; DLQ: ${health.dlq_messages} message${health.dlq_messages === 1 ? "" : "s"}`),
      el("table", { class: "lag" }, el("thead", {}, el("tr", {}, el("th", {}, "consumer"), el("th", {}, "pending"),
                                                       el("th", {}, "unacked"))),
        el("tbody", {}, (health.consumers || []).map((c) => el("tr", { dataset: { durable: c.durable } },
          el("td", {}, c.durable), el("td", {}, c.pending === null ? "not created" : String(c.pending)),
          el("td", {}, c.ack_pending === null ? "-" : String(c.ack_pending))))))));
    $("#fleet-nodes tbody").replaceChildren(...data.nodes.map((n) => el("tr", { dataset: { node: n.node } },
      el("td", {}, `${n.node} (${n.cluster})`), el("td", {}, `${n.times}x`),
      el("td", {}, n.jobs.map((j) => el("a", { href: `#job=${encodeURIComponent(jobKey(n.cluster, j))}`,
        onclick: (event) => { event.preventDefault(); select(n.cluster, j, true); } }, `job ${j} `))),
      el("td", {}, el("ul", { class: "reasons" }, n.reasons.map((r) => el("li", {}, r)))))));
  }

  // The fleet's goodput (docs/goodput.md): ETTR, MTTR, failures per 1,000 node-hours, and one bar of the
  // time lost by part per fault class, in proportion to the class that lost most.
  function renderFleetGoodput(g) {
    const box = $("#fleet-goodput");
    if (!g) { box.replaceChildren(); return; }
    const pct = g.ettr === null || g.ettr === undefined ? "-" : `${(100 * g.ettr).toFixed(1)}%`;
    const rate = g.failures_per_1000_node_hours === null ? "-" : String(g.failures_per_1000_node_hours);
    const classes = Object.entries(g.lost_by_class_s || {});
    const total = (parts) => PARTS.reduce((sum, [key]) => sum + (parts[key] || 0), 0);
    const longest = Math.max(1, ...classes.map(([, parts]) => total(parts)));
    box.replaceChildren(
      el("div", { class: "fleet-summary" }, [["ETTR", pct], ["MTTR (detection + recovery + start-up)", duration(g.mttr_s)],
        ["failures per 1,000 node-hours", rate], ["time lost in all", duration(total(g.lost_by_part_s || {}))]]
        .map(([label, value]) => el("div", { class: "figure", dataset: { figure: label } },
          el("span", { class: "figure-value" }, value), el("span", { class: "muted" }, label)))),
      ...classes.map(([klass, parts]) => el("div", { class: "lost-failure", dataset: { class: klass } },
        el("p", { class: "detail" }, `${klass}: lost ${duration(total(parts))} — `,
           PARTS.map(([key, label]) => `${label} ${duration(parts[key] || 0)}`).join(", ")),
        el("div", { class: "lost-bar", role: "img", "aria-label": `${klass} time lost by part` },
          PARTS.filter(([key]) => parts[key]).map(([key, label]) => {
            const span = el("span", { class: `lost-part part-${key}`, dataset: { part: key },
                                      title: `${label}: ${duration(parts[key])}` });
            span.style.width = `${(100 * parts[key] / longest).toFixed(2)}%`;
            return span;
          })))));
  }

  function renderSummary(job) {
    const mode = job.mode_override ? `${job.mode_override} (operator override; opt-in says ${job.mode})` : job.mode;
    $("#timeline-title").textContent = `Timeline of job ${job.job_id} on ${job.cluster}${job.name ? ` (${job.name})` : ""}`;
    // The page leads with the sentence `relaunch jobs` prints (relaunch.common.outcome_words, via the API).
    $("#job-summary").replaceChildren(...(job.outcome ? [el("p", { class: "outcome" }, job.outcome)] : []),
      el("p", { class: "detail" },
      "state ", badge(job.state || "?"), " verdict ", badge(job.verdict), ` mode ${mode}, restarts ${job.restarts}`,
      job.verdict_reason ? ` — ${job.verdict_reason}` : "",
      job.comment ? el("span", { class: "muted" }, ` comment: ${job.comment}`) : null));
  }

  // What the job's failures cost (the API's `goodput`, docs/goodput.md): ETTR, the checkpoints seen, and per
  // failure a bar of its lost time by part, the parts' widths in proportion to the longest failure's total.
  const PARTS = [["recomputation", "recomputation"], ["detection", "detection"], ["recovery", "recovery"],
                 ["startup", "start-up"], ["warmup", "warm-up"]];

  function duration(s) {
    if (s === null || s === undefined) return "?";
    if (s < 10) return `${s.toFixed(1)} s`;
    const whole = Math.round(s), h = Math.floor(whole / 3600), m = Math.floor((whole % 3600) / 60), sec = whole % 60;
    return h ? `${h} h ${m} min` : m ? `${m} min ${sec} s` : `${sec} s`;
  }

  function renderGoodput(g) {
    const box = $("#job-goodput");
    if (!g) { box.replaceChildren(); return; }
    const failures = g.failures || [];
    const ettr = g.ettr === null || g.ettr === undefined ? "ETTR not known (no step seen)"
      : `ETTR ${(100 * g.ettr).toFixed(1)}% (productive ${duration(g.productive_s)} of ${duration(g.wall_s)})`;
    const saves = g.checkpoints || [];
    const longest = Math.max(1, ...failures.map((f) => f.lost_s || 0));
    box.replaceChildren(
      el("p", { class: "detail goodput-head" }, `${ettr}; lost ${duration(g.lost_s || 0)} in ${failures.length} failure${failures.length === 1 ? "" : "s"}`),
      el("p", { class: "detail muted checkpoints" }, saves.length
        ? `checkpoints saved: ${saves.slice(-5).map((c) => `step ${c.step} (attempt ${c.attempt})`).join(", ")}${saves.length > 5 ? ` and ${saves.length - 5} earlier` : ""}`
        : "checkpoints saved: none seen"),
      ...failures.map((f) => {
        const parts = f.parts_s || {};
        const words = PARTS.map(([key, label]) => `${label} ${duration(parts[key])}`).join(", ");
        let resumed = "";
        if (f.expected_resume_step !== null && f.expected_resume_step !== undefined) {
          resumed = f.resumed_as_expected === true ? `; resumed from the checkpoint at step ${f.resumed_step}, as expected`
            : f.resumed_as_expected === false ? `; expected to resume from step ${f.expected_resume_step}, began at step ${f.resumed_step}`
            : `; expected to resume from step ${f.expected_resume_step}`;
        }
        return el("div", { class: "lost-failure", dataset: { attempt: String(f.attempt) } },
          el("p", { class: "detail" }, `failure of attempt ${f.attempt} (${f.fault_class}): lost ${duration(f.lost_s)}`,
             f.checkpoint_step !== null && f.checkpoint_step !== undefined ? ` since the checkpoint at step ${f.checkpoint_step}` : "",
             f.failed_step !== null && f.failed_step !== undefined ? ` (failed at step ${f.failed_step})` : "", resumed),
          el("div", { class: "lost-bar", role: "img", "aria-label": words },
            PARTS.filter(([key]) => parts[key]).map(([key, label]) => {
              const span = el("span", { class: `lost-part part-${key}`, dataset: { part: key },
                                        title: `${label}: ${duration(parts[key])}` });
              span.style.width = `${(100 * parts[key] / longest).toFixed(2)}%`; // (CSSOM: the CSP allows no style attribute)
              return span;
            })),
          el("p", { class: "detail muted lost-legend" }, words));
      }));
  }

  function timelineEntries(data) {
    const entries = [];
    for (const a of data.attempts) {
      const exit = a.exit_code === null || a.exit_code === undefined ? "" : `, exit ${a.exit_code}`;
      entries.push({ kind: "attempt", at: a.first_seen,
                     title: `attempt ${a.index}: ${a.state} on ${(a.nodes || []).join(", ") || "-"}${exit}` });
    }
    for (const an of data.anomalies) {
      entries.push({ kind: "anomaly", at: an.detected_at,
        title: `${an.kind} in attempt ${an.attempt}: ${an.category} (${an.fault_domain} fault, action ${an.action})`,
        body: [el("p", { class: "detail" }, an.summary, (an.nodes || []).length ? ` — nodes ${an.nodes.join(", ")}` : ""),
               an.evidence_withheld ? el("p", { class: "detail muted withheld" },
                 `log excerpts withheld: ${an.evidence_withheld} (the API token button)`) : null,
               ...(an.evidence || []).map((line) => el("pre", { class: "evidence" },
                 `${line.path}@${line.offset}: ${line.text}`))] });
    }
    for (const h of data.hang_evidence || []) {
      const nodes = (h.suspect_nodes || []).length ? `suspect node${h.suspect_nodes.length > 1 ? "s" : ""} ${h.suspect_nodes.join(", ")}`
        : "no node blamed";
      entries.push({ kind: "hang", at: h.collected_at,
        title: `hang evidence for attempt ${h.attempt}: ${h.status}, blame ${h.blame}, ${nodes} (read in ${h.elapsed_s} s)`,
        body: hangBody(h, data.evidence_withheld) });
    }
    for (const ad of data.advice) {
      // What was really left out, in words (the API reads the actuator's steps: a required node is kept).
      const excluding = ad.exclusion_words ? ad.exclusion_words.slice(ad.operation.length)
        : (ad.exclude_nodes || []).length ? ` excluding ${ad.exclude_nodes.join(", ")}` : "";
      const suspects = (ad.evidence && ad.evidence.suspects) || [];
      entries.push({ kind: "advice", at: ad.issued_at,
        title: `generation ${ad.generation} for attempt ${ad.attempt}: ${ad.operation}${excluding} → ${ad.status}`,
        body: [el("p", { class: "detail reason" }, ad.reason),
               suspects.length ? el("ul", { class: "reasons" }, suspects.map((s) => el("li", {},
                 `${s.node} (confidence ${s.confidence}): ${(s.reasons || []).join("; ")}`))) : null,
               ad.status_reason ? el("p", { class: "detail muted" }, ad.status_reason) : null] });
      for (const step of ad.reconcile || []) {
        entries.push({ kind: "reconcile", at: step.at,
          title: `generation ${step.generation}: ${step.status}${step.step ? ` — ${step.step}` : ""}`,
          body: el("p", { class: "detail" }, step.reason, step.detail ? el("span", { class: "muted" }, ` (${step.detail})`) : null) });
      }
    }
    for (const o of data.overrides || []) {
      entries.push({ kind: "override", at: o.at, title: `operator set mode ${o.mode}${o.actor ? ` (${o.actor})` : ""}`,
                     body: o.reason ? el("p", { class: "detail" }, o.reason) : null });
    }
    for (const au of data.audit) {
      entries.push({ kind: "audit", at: au.at, title: `${au.service}: ${au.action}`,
                     body: au.detail ? el("p", { class: "detail muted" }, au.detail) : null });
    }
    return entries;
  }

  // What the actuator read of a hung job's ranks (HangEvidence, docs/architecture.md "Hang evidence"):
  // the reason in words, the suspect rank's stack beside a victim's, every rank's part. The frames are
  // the job's own text: where the API withholds log lines it sends none, and the page says so.
  function hangBody(h, withheld) {
    const ranks = h.ranks || [];
    const suspect = ranks.find((r) => r.role === "suspect");
    const victim = ranks.find((r) => r.role === "victim") || ranks.find((r) => r !== suspect);
    const shown = [suspect, victim].filter(Boolean);
    const framesWithheld = withheld && !ranks.some((r) => (r.frames || []).length);
    const stack = (r) => el("figure", { class: "stack", dataset: { rank: r.rank, role: r.role } },
      el("figcaption", {}, `rank ${r.rank} on ${r.node}: ${r.role}, ${r.collective || r.call || r.where}`,
         r.place ? ` at ${r.place}` : "", ` (state ${r.state || "?"}${r.cpu_ticks === null || r.cpu_ticks === undefined ? "" : `, ${r.cpu_ticks} CPU ticks`})`),
      (r.frames || []).length ? el("pre", { class: "frames" }, r.frames.join("\n"))
        : el("p", { class: "muted" }, framesWithheld ? "frames withheld" : (r.error || "no frames read")));
    return [
      el("p", { class: "detail reason" }, h.reason || h.detail || "no reason recorded"),
      h.reason && h.detail ? el("p", { class: "detail muted" }, h.detail) : null,
      el("p", { class: "detail suspect-nodes" }, (h.suspect_nodes || []).length
        ? `suspect node${h.suspect_nodes.length > 1 ? "s" : ""}: ${h.suspect_nodes.join(", ")}`
        : `no node blamed (${h.blame})`),
      framesWithheld ? el("p", { class: "detail muted withheld" },
        `stack frames withheld: ${withheld} (the API token button)`) : null,
      shown.length ? el("div", { class: "stacks" }, shown.map(stack)) : null,
      ranks.length ? el("details", { class: "ranks" }, el("summary", {}, `every rank (${ranks.length})`),
        el("ul", { class: "reasons" }, ranks.map((r) => el("li", { dataset: { rank: r.rank } },
          `rank ${r.rank} on ${r.node} (pid ${r.pid}): ${r.role}, ${r.collective || r.call || r.where}`,
          r.place ? ` at ${r.place}` : "", ` (state ${r.state || "?"})`, r.error ? ` — ${r.error}` : "")))) : null,
    ];
  }

  // ---- nodes ----------------------------------------------------------------------------------
  async function loadNodes() {
    const data = await getJSON("/v1/nodes");
    $("#nodes tbody").replaceChildren(...data.nodes.map((n) => el("tr", { dataset: { node: `${n.cluster}/${n.node}` } },
      el("td", {}, n.cluster), el("td", {}, n.node), el("td", { class: "health" }, badge(n.verdict)),
      el("td", {}, (n.reasons || []).join("; ")), el("td", {}, utc(n.at)),
      el("td", { class: "history" }, n.history.length ? el("details", {},
        el("summary", {}, `${n.history_total} reading${n.history_total === 1 ? "" : "s"}`),
        el("ul", { class: "reasons" }, n.history.map((h) => el("li", {},
          `${utc(h.at)} ${h.verdict}: ${(h.reasons || []).join("; ")}`)))) : "none"),
      el("td", { class: "excluded" }, n.excluded_by.map((x) => el("div", {},
        el("a", { href: `#job=${encodeURIComponent(jobKey(n.cluster, x.job_id))}`,
                  onclick: (event) => { event.preventDefault(); select(n.cluster, x.job_id, true); } },
          `job ${x.job_id}`), ` gen ${x.generation} (${x.status})`))))));
    $("#nodes-empty").hidden = data.nodes.length > 0;
  }

  // ---- live events ----------------------------------------------------------------------------
  function setMode(mode, why) {
    const live = $("#live");
    live.dataset.mode = mode;
    live.textContent = mode === "live" ? "live" : `polling every ${POLL_MS / 1000} s`;
    live.title = why || "";
  }

  function connectEvents() {
    if (!window.EventSource) { setMode("polling", "this browser has no EventSource"); return; }
    const source = new EventSource("/v1/events/stream");
    source.onopen = () => setMode("live", "events arrive as they happen");
    source.onmessage = (message) => {
      let event;
      try { event = JSON.parse(message.data); } catch { return; }
      addToTicker(event);
      scheduleRefresh(event);
    };
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        // Refused (e.g. 503: NATS down): EventSource gives up by itself, so we try again later.
        setMode("polling", "the event stream is unavailable; trying again in 30 s");
        setTimeout(connectEvents, STREAM_RETRY_MS);
      } else {
        setMode("polling", "the event stream dropped; reconnecting");
      }
    };
  }

  function addToTicker(event) {
    const m = event.message || {};
    const what = m.summary || m.reason || m.action || m.status || "";
    const list = $("#events");
    list.prepend(el("li", { dataset: { subject: event.subject } },
      `${utc(event.at).slice(11)} ${event.subject} ${event.schema || ""} ${String(what).slice(0, 160)}`));
    while (list.children.length > TICKER_MAX) list.lastChild.remove();
  }

  function scheduleRefresh(event) {
    const m = event.message || {};
    const touchesSelected = state.selected && m.cluster && m.job_id && jobKey(m.cluster, m.job_id) === state.selected;
    clearTimeout(state.refreshTimer);
    // A short pause folds a burst (a reconcile run publishes several steps) into one refresh, and
    // gives the decider time to record the event in the ledger the page reads.
    state.refreshTimer = setTimeout(() => guarded(async () => {
      await loadJobs();
      if (touchesSelected) await loadJob();
      if (event.schema && event.schema.startsWith("relaunch.reconcile")) await loadNodes();
    }), 300);
  }

  // ---- wiring ---------------------------------------------------------------------------------
  function start() {
    const fromHash = decodeURIComponent((location.hash.match(/^#job=(.+)$/) || [])[1] || "");
    if (fromHash.includes("/")) state.selected = fromHash;
    $("#job-filters").addEventListener("submit", (event) => {
      event.preventDefault();
      const form = new FormData(event.target);
      state.filters = { cluster: form.get("cluster").trim(), state: form.get("state").trim(),
                        verdict: form.get("verdict") };
      state.offset = 0;
      guarded(loadJobs);
    });
    $("#jobs-prev").addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE); guarded(loadJobs); });
    $("#jobs-next").addEventListener("click", () => { state.offset += PAGE; guarded(loadJobs); });
    $("#token").addEventListener("click", () => {
      const given = prompt("The API's bearer token (shows log excerpts; kept for this tab only). Empty forgets it.");
      if (given === null) return;
      if (given.trim()) sessionStorage.setItem(TOKEN_KEY, given.trim()); else sessionStorage.removeItem(TOKEN_KEY);
      guarded(loadJob);
    });
    setMode("polling", "connecting to the event stream");
    guarded(async () => { await loadJobs(); await loadJob(); await loadNodes(); await loadFleet(); });
    setInterval(() => guarded(async () => { await loadJobs(); await loadJob(); }), POLL_MS);
    setInterval(() => guarded(loadNodes), POLL_MS * 3);
    setInterval(() => guarded(loadFleet), POLL_MS * 3);
    connectEvents();
  }

  document.addEventListener("DOMContentLoaded", start);
})();
