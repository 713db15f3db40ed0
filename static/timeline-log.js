// The launch page's log panel: lines of a rank (or all) around a time or tailing, from
// /api/v1/launches/{id}/logs. Built by timeline.js, which owns the shared state (selected rank, the URL).
"use strict";

window.swTimelineLog = function (ctx) {
  const { cfg, state, pushUrl } = ctx;
  const { $, el, nobidi, fmtTime } = window.swTimelineKit;
  const log = { box: $("log"), lastId: null, anchor: null, populateRanks, loadLog, openLogAt };

  function populateRanks(data) {
    const sel = $("log-rank");
    if (!sel) return;
    const have = Array.from(sel.options).map((o) => o.value).join(",");
    const want = ["", ...data.ranks.map((r) => r.label)].join(",");
    if (have === want) return;
    sel.replaceChildren(el("option", null, "all ranks"));
    sel.options[0].value = "";
    for (const r of data.ranks) {
      const o = el("option", null, r.label + (r.host ? " (" + r.host + ")" : ""));
      o.value = r.label;
      sel.append(o);
    }
    sel.value = state.rank;
  }

  function logLine(l) {
    const row = el("div", "log-line sev-" + l.severity);
    row.dataset.id = l.id;
    row.dataset.ts = l.ts;
    row.append(el("span", "t", fmtTime(l.ts) + "." + String(Math.floor((l.ts % 1) * 1000)).padStart(3, "0")),
      el("span", "r", l.rank || "—"), el("span", "s", l.severity), el("span", "m", l.message));
    row.title = l.kind + (l.source ? " · " + l.source : "");
    return row;
  }

  async function loadLog(opts) {
    if (!log.box) return;
    const q = new URLSearchParams({ severity: $("log-severity").value, limit: "300" });
    if (state.rank) q.set("rank", state.rank);
    const text = $("log-q").value.trim();
    if (text) q.set("q", text);
    if (opts && opts.around != null) q.set("around", opts.around.toFixed(3));
    if (opts && opts.after) q.set("after_id", String(log.lastId));
    const resp = await fetch(`/api/v1/launches/${cfg.launch_id}/logs?${q}`);
    if (!resp.ok) { $("log-status").textContent = "log unavailable: " + resp.statusText; return; }
    const body = nobidi(await resp.json());
    const atBottom = log.box.scrollTop + log.box.clientHeight >= log.box.scrollHeight - 20;
    if (opts && opts.after) {
      body.lines.forEach((l) => log.box.append(logLine(l)));
      while (log.box.childElementCount > 2000) log.box.firstElementChild.remove();
    } else {
      log.box.replaceChildren(...body.lines.map(logLine));
      if (!body.lines.length) log.box.append(el("div", "empty", "no log line matches"));
    }
    if (body.lines.length) log.lastId = Math.max(log.lastId || 0, ...body.lines.map((l) => l.id));
    $("log-status").textContent = (state.rank || "all ranks") + (opts && opts.around != null ? " around " + fmtTime(opts.around) + " UTC" : "");
    if (body.anchor_id != null) {
      const a = log.box.querySelector(`[data-id="${body.anchor_id}"]`);
      if (a) { a.classList.add("anchor"); a.scrollIntoView({ block: "center" }); }
    } else if (!opts || !opts.around) {
      if (atBottom || !(opts && opts.after)) log.box.scrollTop = log.box.scrollHeight;
    }
  }

  function openLogAt(rank, ts) {
    state.rank = rank;
    const sel = $("log-rank");
    if (sel) sel.value = rank;
    const tail = $("log-follow");
    if (tail) tail.checked = false;
    state.rows.forEach((e, label) => e.row.classList.toggle("selected", label === rank));
    pushUrl();
    loadLog({ around: ts });
  }

  if (log.box) {
    $("log-rank").addEventListener("change", (e) => { state.rank = e.target.value; pushUrl(); loadLog(); state.rows.forEach((r, l) => r.row.classList.toggle("selected", l === state.rank)); });
    $("log-severity").addEventListener("change", () => loadLog());
    let t = null;
    $("log-q").addEventListener("input", () => { clearTimeout(t); t = setTimeout(() => loadLog(), 300); });
    $("log-follow").addEventListener("change", (e) => { if (e.target.checked) loadLog(); });
  }

  return log;
};
