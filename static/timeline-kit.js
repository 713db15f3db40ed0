// Helpers the launch page's scripts share (timeline.js, timeline-engine.js, timeline-log.js): DOM, text that
// came from the server (bidi controls made harmless), time formats. Loaded first; no state of its own.
"use strict";

window.swTimelineKit = (function () {
  const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  const $ = (id) => document.getElementById(id);
  const el = (tag, cls, text) => {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = text;
    return e;
  };
  // Bidi controls (U+202A-E, U+2066-9) in a label or log line must not reorder the text around it: every
  // string the server sends is cleaned once, as it arrives (the server-rendered pages do the same).
  const BIDI = /[\u202A-\u202E\u2066-\u2069]/g;
  const nobidi = (v) => typeof v === "string" ? v.replace(BIDI, "\uFFFD")
    : Array.isArray(v) ? v.map(nobidi)
    : v && typeof v === "object" ? Object.fromEntries(Object.entries(v).map(([k, x]) => [k, nobidi(x)]))
    : v;
  const utc = (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC");
  const fmtTime = (ts) => new Date(ts * 1000).toISOString().slice(11, 19);
  // the same rounding as the server's `duration` filter (whole seconds, floored): one number on one screen
  const fmtDur = (x) => {
    const s = Math.max(0, Math.floor(x));
    return s < 60 ? s + "s" : s < 3600 ? Math.floor(s / 60) + "m " + String(s % 60).padStart(2, "0") + "s" : Math.floor(s / 3600) + "h " + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
  };

  // Buckets with no sample must show as gaps, not as a line drawn across a silent agent.
  function withGaps(ts, cols, bucket) {
    const outT = [], outC = cols.map(() => []);
    for (let i = 0; i < ts.length; i++) {
      if (i > 0 && ts[i] - ts[i - 1] > Math.max(3 * bucket, 5)) {
        outT.push((ts[i] + ts[i - 1]) / 2);
        outC.forEach((c) => c.push(null));
      }
      outT.push(ts[i]);
      cols.forEach((c, j) => outC[j].push(c[i]));
    }
    return [outT, ...outC];
  }

  return { css, $, el, nobidi, utc, fmtTime, fmtDur, withGaps };
})();
