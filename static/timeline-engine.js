// The launch page's engine charts (acceptance length and rate, throughput, requests, per-position acceptance)
// on the timeline's time axis: built by timeline.js with what they share with it.
"use strict";

window.swTimelineEngine = function (ctx) {
  const { state, SYNC, xRange, onSelect, setRange } = ctx;
  const { css, $, el, utc, withGaps } = window.swTimelineKit;

  function engineChart(id, series, cols, yRange) {
    const box = $(id);
    if (!box) return;
    const hasData = cols.some((c) => c.some((v) => v != null));
    let chart = state.charts[id];
    if (!hasData) {
      if (chart) { chart.destroy(); delete state.charts[id]; }
      box.replaceChildren(el("div", "nodata", "no data in this range"));
      return;
    }
    const data = cols;
    if (!chart) {
      box.replaceChildren();
      box.classList.toggle("banded", series.length === 3 && !!series[1].band);
      chart = new uPlot({
        width: box.clientWidth || 400, height: 150, tzDate: utc,
        cursor: { sync: { key: SYNC.key, setSeries: false }, drag: { x: true, y: false, setScale: false } },
        scales: { x: { time: true, range: () => xRange() }, y: yRange ? { range: yRange } : {} },
        axes: [{ stroke: css("--muted"), grid: { stroke: css("--line") }, ticks: { stroke: css("--line") } },
          { stroke: css("--muted"), grid: { stroke: css("--line") }, ticks: { stroke: css("--line") }, size: 50 }],
        series: [{}, ...series.map((s) => ({ points: { show: false }, ...s }))],
        bands: series.length === 3 && series[1].band ? [{ series: [2, 0], fill: series[0].fill }, { series: [0, 1], fill: series[0].fill }] : [],
        hooks: { setSelect: [onSelect] },
      }, data, box);
      chart.over.addEventListener("dblclick", (e) => { e.stopPropagation(); setRange("all"); });
      state.charts[id] = chart;
    } else {
      chart.setData(data);
    }
  }

  function renderEngine(data) {
    const e = data.engine, bucket = data.range.bucket_s;
    const band = (key, color, label, digits, yRange) => {
      const s = e[key];
      const cols = withGaps(s.ts, [s.mean, s.min, s.max], bucket);
      const src = $("src-" + key);
      if (src) src.textContent = s.source ? "· " + s.source : "";
      engineChart("chart-" + key, [
        { label, stroke: color, width: 1.5, fill: color + "22", value: (u, v) => v == null ? "—" : v.toFixed(digits) },
        { label: "min", stroke: "transparent", band: true, points: { show: false } },
        { label: "max", stroke: "transparent", band: true, points: { show: false } },
      ], cols, yRange);
    };
    // acceptance on fixed scales: 1.0 must look like the floor it is, not like noise around a flat line
    band("accept_len", css("--ok"), "accept length", 2, (u, lo, hi) => [0, Math.max(4, Math.ceil(hi || 0))]);
    band("accept_rate", css("--accent"), "accept rate", 2, [0, 1]);
    band("gen_throughput", css("--pow"), "token/s", 0);
    const run = e.running, que = e.queued;
    const ts = Array.from(new Set([...run.ts, ...que.ts])).sort((a, b) => a - b);
    const pick = (s) => { const m = new Map(s.ts.map((t, i) => [t, s.mean[i]])); return ts.map((t) => m.has(t) ? m.get(t) : null); };
    engineChart("chart-requests", [
      { label: "running", stroke: css("--util"), width: 1.5, spanGaps: true },
      { label: "queued", stroke: css("--bad"), width: 1.5, spanGaps: true },
    ], withGaps(ts, [pick(run), pick(que)], bucket));
    const pp = $("per-position");
    if (pp) {
      pp.hidden = !e.per_position;
      if (e.per_position) {
        const bars = $("per-position-bars");
        bars.replaceChildren(...e.per_position.rates.map((r, i) => {
          const row = el("div", "pp-bar");
          const bar = el("span", "bar"), fill = el("i");
          fill.style.width = (100 * r).toFixed(1) + "%";
          bar.append(fill);
          row.append(el("span", null, "position " + i), bar, el("span", null, (100 * r).toFixed(0) + "%"));
          return row;
        }));
      }
    }
  }

  return { renderEngine };
};
