// specwatch launch timeline: one uPlot row per rank (phase bands, GPU util / memory / power, log markers)
// and the engine charts on the same time axis, fed by /api/v1/launches/{id}/timeline. Live: refetches its
// window when the server's stream says new data arrived. All text from the server goes in via textContent.
"use strict";

(function () {
  const cfgEl = document.getElementById("launch-config");
  if (!cfgEl || !window.uPlot) return;
  const cfg = JSON.parse(cfgEl.textContent);
  const META_W = 230, ROW_H = 46, SYNC = uPlot.sync("sw-launch");
  // the server's list (app/rankstate/phases.py PHASES, in base.html), in the order the legend shows them
  const PHASES = JSON.parse(document.getElementById("phases").textContent);
  const { css, $, el, nobidi, utc, fmtTime, fmtDur, withGaps } = window.swTimelineKit;
  // quiet longer than this and the row says "no progress for", the definition the incident banner uses
  const QUIET_S = 10;
  const MOVING = new Set(["ready", "serving", "exited", "crashed"]);

  // --- state -------------------------------------------------------------------------------------------
  const DBLCLICK_MS = 250;
  const state = {
    from: cfg.from, to: cfg.to,                   // null: the launch's start / now
    span: null,                                   // seconds shown when following a fixed span
    follow: cfg.follow !== false && cfg.to == null,
    rank: cfg.rank || "",
    data: null, rows: new Map(), charts: {}, loading: false, again: false,
  };
  const followBox = $("follow");
  if (followBox) followBox.checked = state.follow;

  // --- data --------------------------------------------------------------------------------------------
  function plotWidth() {
    const tl = $("timeline");
    return Math.max(200, (tl ? tl.clientWidth : 1000) - META_W - 12);
  }

  async function load() {
    if (state.loading) { state.again = true; return; }
    state.loading = true;
    try {
      const q = new URLSearchParams({ points: String(Math.round(plotWidth())) });
      let from = state.from, to = state.follow ? null : state.to;
      if (state.follow && state.span) from = Date.now() / 1000 - state.span;
      if (from != null) q.set("from", from.toFixed(3));
      if (to != null) q.set("to", to.toFixed(3));
      const resp = await fetch(`/api/v1/launches/${cfg.launch_id}/timeline?${q}`);
      if (!resp.ok) throw new Error((await resp.json()).detail || resp.statusText);
      state.data = nobidi(await resp.json());
      render(state.data);
    } catch (e) {
      const empty = $("timeline-empty");
      if (empty) empty.textContent = "Could not load the timeline: " + e.message;
    } finally {
      state.loading = false;
      if (state.again) { state.again = false; load(); }
    }
  }

  // --- rank rows ---------------------------------------------------------------------------------------
  function drawBands(u, rank) {
    const { ctx } = u, top = u.bbox.top, h = u.bbox.height, r = state.data.range;
    const until = Math.min(r.to, state.data.now || r.to);  // an open phase ends at "now", never in the future
    for (const p of rank.phases) {
      const x0 = u.valToPos(Math.max(p.start, r.from), "x", true);
      const x1 = u.valToPos(Math.min(p.end == null ? until : p.end, until), "x", true);
      if (x1 <= x0) continue;
      ctx.fillStyle = css("--ph-" + p.phase) || css("--ph-starting");
      ctx.globalAlpha = 0.55;
      ctx.fillRect(x0, top, x1 - x0, h);
      if (p.subject === "draft" && x1 - x0 > 24) {
        // the draft model's own load / capture: named on the band, not a second "loading weights"
        ctx.globalAlpha = 1;
        ctx.fillStyle = css("--fg") || "#000";
        ctx.font = `${Math.round(9 * (devicePixelRatio || 1))}px sans-serif`;
        ctx.fillText("draft", x0 + 2, top + h - 2, x1 - x0 - 4);
      }
    }
    ctx.globalAlpha = 1;
  }

  function drawMarkers(u, rank) {
    const { ctx } = u, top = u.bbox.top, h = u.bbox.height, dpr = devicePixelRatio || 1;
    for (const m of state.data.markers) {
      if (m.rank !== null && m.rank !== rank.label) continue;
      const x = u.valToPos(m.ts, "x", true);
      const bad = m.severity === "error" || m.severity === "critical";
      ctx.fillStyle = bad ? css("--bad") : m.severity === "warning" ? css("--warn") : css("--muted");
      ctx.fillRect(x - dpr / 2, top, dpr * (bad ? 2 : 1), bad ? h : h * 0.35);
    }
    for (const inc of state.data.incidents) {
      const x = u.valToPos(inc.opened_at, "x", true);
      ctx.fillStyle = css("--bad");
      ctx.setLineDash([4 * dpr, 3 * dpr]);
      ctx.strokeStyle = css("--bad");
      ctx.lineWidth = dpr * (inc.culprit === rank.label ? 2 : 1);
      ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + h); ctx.stroke();
      ctx.setLineDash([]);
    }
    for (const t of cfg.marks || []) {
      const x = u.valToPos(t, "x", true);
      ctx.fillStyle = css("--accent");
      ctx.fillRect(x - dpr, top, 2 * dpr, h);
    }
  }

  function rowData(rank) {
    const g = rank.gpu, bucket = state.data.range.row_bucket_s;
    if (!g) return [[], [], [], []];
    const memTotal = rank.mem_total_bytes ? rank.mem_total_bytes / 2 ** 30 : null;
    const memPct = g.mem_gib.map((v) => v == null || !memTotal ? null : 100 * v / memTotal);
    const powPct = g.power_w.map((v) => v == null || !rank.power_limit_w ? null : 100 * v / rank.power_limit_w);
    return withGaps(g.ts, [g.util, memPct, powPct], bucket);
  }

  function readout(rank, idx, u) {
    const sub = state.rows.get(rank.label).hover2;
    if (idx == null || !rank.gpu) { sub.textContent = rowState(rank); return; }
    const ts = u.data[0][idx], g = rank.gpu, i = g.ts.indexOf(ts);
    if (i < 0) { sub.textContent = rowState(rank); return; }
    const v = (a, d) => a[i] == null ? "—" : a[i].toFixed(d);
    sub.textContent = `${fmtTime(ts)} util ${v(g.util, 0)}% · ${v(g.mem_gib, 1)} GiB · ${v(g.power_w, 0)} W`;
  }

  // two short lines, so nothing is cut in the label column: where the rank is, then how it is doing
  function rowSubtitle(rank) {
    const parts = [];
    if (rank.gpu_index != null) parts.push("GPU " + rank.gpu_index);
    if (rank.pid) parts.push("pid " + rank.pid);
    return parts.join(" · ");
  }

  function rowState(rank) {
    const parts = [];
    const prog = progressText(rank.progress);
    if (prog) parts.push(prog);
    parts.push(stalledText(rank) || (rank.phase_since ? "for " + fmtDur(state.data.now - rank.phase_since) : ""));
    return parts.filter(Boolean).join(" · ");
  }

  // "no progress for": the server's clock minus the rank's last progress, as the incident banner says it
  function stalledText(rank) {
    if (!rank.last_progress_at || MOVING.has(rank.phase)) return "";
    const quiet = state.data.now - rank.last_progress_at;
    return quiet > QUIET_S || rank.phase === "stalled" ? "no progress for " + fmtDur(quiet) : "";
  }

  function progressText(p) {
    const out = [];
    if (p && p.shards && p.shards.total) out.push(shardText(p.shards));
    if (p && p.capture && p.capture.total) out.push(`capture ${p.capture.done}/${p.capture.total}`);
    return out.join(" · ");
  }

  // the engines print the shard bar on rank 0 only: the launch's count says whose bar it is and how many
  // ranks logged their weights loaded, so "64/64" on TP0 does not hide a TP6 still in its read
  function shardText(sh) {
    let text = `shards ${sh.done}/${sh.total}` + (sh.rank && sh.ranks ? ` on ${sh.rank}` : "");
    if (sh.ranks) {
      text += ` · weights loaded on ${sh.loaded}/${sh.ranks} ranks`;
      if (sh.loading && sh.loading.length && sh.loaded) text += ` (${sh.loading.join(", ")} still loading)`;
    }
    return text;
  }

  function xRange() {
    const r = state.data.range;
    return [r.from, r.to];
  }

  function makeRow(rank) {
    const row = el("div", "rank-row");
    row.dataset.rank = rank.label;
    const meta = el("div", "rank-meta");
    const head = el("div", "rank-head");
    const suspect = el("span", "suspect", "");
    head.append(el("span", "rank-label", rank.label), el("span", "phase"), suspect);
    const hover = el("div", "sub"), hover2 = el("div", "sub sub-state");
    meta.append(head, hover, hover2);
    const plotEl = el("div", "rank-plot");
    row.append(meta, plotEl);
    const entry = { row, head, suspect, hover, hover2, rank };
    const opts = {
      width: plotWidth(), height: ROW_H, legend: { show: false }, tzDate: utc,
      cursor: { sync: { key: SYNC.key, setSeries: false }, drag: { x: true, y: false, setScale: false }, points: { show: false } },
      scales: { x: { time: true, range: () => xRange() }, y: { range: [0, 105] } },
      axes: [{ show: false }, { show: false }],
      series: [{}, { stroke: css("--util"), width: 1.25, points: { show: false } },
        { stroke: css("--mem"), width: 1.5, dash: [5, 3], points: { show: false } }, { stroke: css("--pow"), width: 1, points: { show: false } }],
      hooks: {
        drawClear: [(u) => drawBands(u, entry.rank)],
        draw: [(u) => drawMarkers(u, entry.rank)],
        setCursor: [(u) => readout(entry.rank, u.cursor.idx, u)],
        setSelect: [onSelect],
      },
    };
    entry.plot = new uPlot(opts, rowData(rank), plotEl);
    // a click opens the log at that moment; a double-click only resets the zoom: wait out the second click
    entry.plot.over.addEventListener("click", (e) => {
      const u = entry.plot;
      clearTimeout(state.clickTimer);
      if (e.detail > 1 || u.select.width > 2 || u.cursor.left == null || u.cursor.left < 0) return;
      const ts = u.posToVal(u.cursor.left, "x");
      state.clickTimer = setTimeout(() => openLogAt(entry.rank.label, ts), DBLCLICK_MS);
    });
    entry.plot.over.addEventListener("dblclick", (e) => { e.stopPropagation(); clearTimeout(state.clickTimer); setRange("all"); });
    return entry;
  }

  function updateRow(entry, rank) {
    entry.rank = rank;
    const phase = entry.head.querySelector(".phase");
    phase.textContent = rank.phase_label || rank.phase.replace(/_/g, " ");
    phase.style.background = css("--ph-" + rank.phase);
    entry.row.classList.toggle("is-culprit", !!rank.culprit);
    entry.row.classList.toggle("selected", state.rank === rank.label);
    entry.suspect.textContent = rank.culprit ? "culprit" : "";
    entry.suspect.title = rank.culprit ? "suspected culprit of an open incident" : "";
    entry.hover.textContent = rowSubtitle(rank);
    entry.hover2.textContent = rowState(rank);
    entry.meta_title = [rank.label, rank.host, rowSubtitle(rank), rowState(rank)].filter(Boolean).join(" · ");
    entry.row.title = entry.meta_title + (rank.last_log ? "\nlast log: " + rank.last_log : "");
    entry.plot.setData(rowData(rank));
  }

  // At 16+ ranks, rows group as the engine lays them out: by the outer parallel dimensions (PP, DP, ...)
  // of the label ("PP1 TP3" -> "PP1"), within each host
  const GROUP_AT = 16, OUTER = /^(?:PP|DP|ATTN_CP|MOE_DP)\d+$/;
  function groupKey(rank, byTopology) {
    const host = rank.host || "unknown host";
    if (!byTopology) return host;
    const outer = rank.label.split(" ").filter((t) => OUTER.test(t));
    return outer.length ? host + " · " + outer.join(" ") : host;
  }

  function renderRows(data) {
    const tl = $("timeline");
    const key = data.ranks.map((r) => (r.host || "") + "/" + r.label).join(",");
    if (key !== state.rowKey) {
      state.rows.forEach((e) => e.plot.destroy());
      state.rows.clear();
      tl.replaceChildren();
      if (!data.ranks.length) {
        tl.append(el("p", "empty", "No engine rank seen for this launch yet: rows appear when the agent reports its processes."));
      }
      let group = null, key = null;
      const byTopology = data.ranks.length >= GROUP_AT;
      for (const rank of data.ranks) {
        const k = groupKey(rank, byTopology);
        if (!group || k !== key) {
          key = k;
          group = el("div", "host-group");
          group.dataset.group = k;
          group.append(el("div", "host-label", k));
          tl.append(group);
        }
        const entry = makeRow(rank);
        state.rows.set(rank.label, entry);
        group.append(entry.row);
      }
      state.rowKey = key;
    }
    for (const rank of data.ranks) updateRow(state.rows.get(rank.label), rank);
  }

  // --- header, incidents, legend -----------------------------------------------------------------------
  function renderHeader(data) {
    const st = $("launch-status");
    if (st) { st.textContent = data.launch.status; st.className = "status status-" + data.launch.status; }
    const prog = $("launch-progress");
    if (prog) {
      const counts = {};
      data.ranks.forEach((r) => { const p = r.phase_label || r.phase.replace(/_/g, " "); counts[p] = (counts[p] || 0) + 1; });
      const phases = Object.entries(counts).map(([p, n]) => `${n} ${p}`).join(", ");
      const parts = [data.ranks.length + " ranks" + (phases ? ": " + phases : "")];
      const lp = progressText(data.progress);
      if (lp) parts.push(lp);
      prog.textContent = parts.join(" · ");
    }
    const strip = $("launch-incidents");
    if (strip) {
      strip.replaceChildren(...data.incidents.map((i) => {
        const a = el("a", i.status === "open" ? "" : "resolved");
        a.href = "/incidents/" + i.id;
        a.append(el("b", null, i.kind + (i.culprit ? " — " + i.culprit : "") + ": "), document.createTextNode(i.summary));
        const culprit = i.culprit && data.ranks.find((r) => r.label === i.culprit);
        const quiet = culprit && i.status === "open" ? stalledText(culprit) : "";
        if (quiet) a.append(el("span", "stalled-for", " · " + culprit.label + ": " + quiet));
        return a;
      }));
    }
    const label = $("range-label");
    if (label) label.textContent = `${fmtTime(data.range.from)} – ${fmtTime(data.range.to)} UTC (${fmtDur(data.range.to - data.range.from)}` + (data.range.bucket_s > 1.01 ? `, ${data.range.bucket_s.toFixed(1)} s per point)` : ")");
    updateShare();
    const legend = $("phase-legend");
    if (legend && !legend.childElementCount) {
      for (const p of PHASES) {
        const item = el("span");
        const sw = el("i");
        sw.style.background = css("--ph-" + p);
        item.append(sw, document.createTextNode(p.replace(/_/g, " ")));
        legend.append(item);
      }
    }
  }

  function render(data) {
    renderHeader(data);
    renderRows(data);
    renderEngine(data);
    populateRanks(data);
    document.body.dataset.timelineRendered = String(Date.now());
  }

  // --- range -------------------------------------------------------------------------------------------
  function onSelect(u) {
    if (u.select.width < 3) return;
    const a = u.posToVal(u.select.left, "x"), b = u.posToVal(u.select.left + u.select.width, "x");
    u.setSelect({ left: 0, width: 0, top: 0, height: 0 }, false);
    state.from = a; state.to = b; state.span = null; state.follow = false;
    if (followBox) followBox.checked = false;
    pushUrl();
    load();
  }

  function setRange(r) {
    state.to = null;
    if (r === "all") { state.from = cfg.from_default ?? null; state.span = null; }
    else { state.span = Number(r); state.from = null; }
    state.follow = true;
    if (followBox) followBox.checked = true;
    pushUrl();
    load();
  }

  function updateShare() {
    const share = $("share-link"), r = state.data && state.data.range;
    if (!share || !r) return;
    share.href = `/launches/${cfg.launch_id}?from=${Math.floor(r.from)}&to=${Math.ceil(r.to)}` + (state.rank ? "&rank=" + encodeURIComponent(state.rank) : "");
  }

  function pushUrl() {
    updateShare();
    const q = new URLSearchParams();
    if (!state.follow && state.from != null) q.set("from", Math.floor(state.from));
    if (!state.follow && state.to != null) q.set("to", Math.ceil(state.to));
    if (state.rank) q.set("rank", state.rank);
    if (document.body.dataset.page === "launches") history.replaceState(null, "", location.pathname + (q.toString() ? "?" + q : ""));
  }

  document.querySelectorAll("[data-range]").forEach((b) => b.addEventListener("click", () => setRange(b.dataset.range)));
  if (followBox) followBox.addEventListener("change", () => {
    state.follow = followBox.checked;
    if (state.follow) { state.to = null; load(); }
    pushUrl();
  });

  // the window, or the acceptance panel arriving beside the timeline, changes the plots' width
  const resize = () => {
    clearTimeout(state.resizeTimer);
    state.resizeTimer = setTimeout(() => {
      state.rows.forEach((e) => e.plot.setSize({ width: plotWidth(), height: ROW_H }));
      Object.entries(state.charts).forEach(([id, c]) => c.setSize({ width: $(id).clientWidth, height: 150 }));
    }, 100);
  };
  window.addEventListener("resize", resize);
  if (window.ResizeObserver && $("timeline")) {
    let width = null;
    new ResizeObserver((entries) => {
      const w = Math.round(entries[0].contentRect.width);
      if (width !== null && w !== width) resize();
      width = w;
    }).observe($("timeline"));
  }

  // --- engine charts and log panel (timeline-engine.js, timeline-log.js) ------------------------------
  const { renderEngine } = window.swTimelineEngine({ state, SYNC, xRange, onSelect, setRange });
  const log = window.swTimelineLog({ cfg, state, pushUrl });
  const { populateRanks, loadLog, openLogAt } = log;

  // --- live --------------------------------------------------------------------------------------------
  let pending = null;
  document.body.addEventListener("sw-tick", () => {
    if (!state.follow || pending) return;
    // coalesce bursts of ticks (two agents' batches land together) into one refetch
    pending = setTimeout(() => {
      pending = null;
      load();
      const tail = $("log-follow");
      if (log.box && tail && tail.checked) loadLog(log.lastId != null ? { after: true } : undefined);
    }, 150);
  });

  load();
  if (log.box) {
    if (cfg.rank && cfg.from != null) loadLog({ around: cfg.from + (cfg.to - cfg.from) / 2 });
    else loadLog();
  }
})();
