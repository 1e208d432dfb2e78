"use strict";
// The report viewer: a virtualised tree (only the rows in view exist in the DOM), an error plot
// drawn to a canvas, the first-divergence card and a detail panel. Data: the JSON block above.
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const S = D.S;
  const ROW_H = 20;
  // Item fields: [label, kind, depth, end, call, worst, nUnmatched, nPass, nWarn, nErr, goldenLink]
  const IT = D.items, CA = D.calls;
  const N = IT.length;
  const parent = new Int32Array(N).fill(-1);
  (function () {
    const st = [];
    for (let i = 0; i < N; i++) {
      while (st.length && IT[st[st.length - 1]][3] <= i) st.pop();
      if (st.length) parent[i] = st[st.length - 1];
      st.push(i);
    }
  })();
  const expanded = new Uint8Array(N);
  // Small subtrees start open: top-level ones, and every level of a kernel-scope tree (whose
  // scopes nest deeper than a model's modules).
  const openDepth = D.tree === "scope" ? 8 : 0;
  for (let i = 0; i < N; i++) if (IT[i][2] <= openDepth && IT[i][3] - i < 400) expanded[i] = 1;
  const producer = D.div.producer;
  const prodItem = producer == null ? -1 : CA[producer][9];
  let sel = -1, query = "", errorsOnly = false, vis = [];

  const $ = (id) => document.getElementById(id);
  const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" })[c]);
  const vclass = (v) => v === 2 ? "v-2" : v === 1 ? "v-1" : v === 0 ? "v0" : v === -1 ? "v-unm" : "v-none";
  const vname = (v) => v === 2 ? "error" : v === 1 ? "warning" : v === 0 ? "pass" : v === -1 ? "unmatched" : "not compared";
  const cell = (c) => Array.isArray(c) ? S[c[0]] : c === null ? "None" : c;

  // Header
  $("sides").textContent = "target " + D.target + "  vs  golden " + D.golden;
  $("sides").title = $("sides").textContent;
  // APIs per verdict (an API without any golden partner is unmatched, whatever its rows say).
  const per = { "-1": 0, "0": 0, "1": 0, "2": 0 };
  for (const c of CA) if (c[2] != null) per[c[2]]++;
  $("counts").innerHTML = '<span class="v-2">' + per[2] + " error</span>" + '<span class="v-1">' + per[1] +
    " warning</span>" + '<span class="v0">' + per[0] + " pass</span>" + '<span class="v-unm">' + per[-1] +
    " unmatched</span>" + '<span class="muted">' + D.summary.rows + " rows, " + CA.length + " APIs</span>";
  $("treeHead").textContent = D.tree === "construct"
    ? "module hierarchy (construct.json), coloured by worst verdict; counts error/warning/pass/unmatched"
    : D.tree === "scope"
      ? "kernels grouped by their scope, coloured by worst verdict; counts error/warning/pass/unmatched"
      : "APIs grouped by the call sites their stack names (L1), coloured by worst verdict";
  if (D.up) {
    const a = document.createElement("a");
    a.id = "up"; a.href = D.up[1]; a.textContent = D.up[0];
    $("sides").before(a);
  }

  // ---------- tree ----------
  function matches(i) { return IT[i][0].toLowerCase().indexOf(query) >= 0; }
  function rebuild() {
    vis = [];
    if (query) {
      for (let i = 0; i < N; i++) if (matches(i) && (!errorsOnly || IT[i][9] > 0)) vis.push(i);
    } else {
      let i = 0;
      while (i < N) {
        if (errorsOnly && IT[i][9] === 0) { i = IT[i][3]; continue; }
        vis.push(i);
        i = expanded[i] ? i + 1 : IT[i][3];
      }
    }
    $("treeSpacer").style.height = (vis.length * ROW_H) + "px";
    renderTree();
  }
  let renderQueued = false;
  function renderTree() {
    renderQueued = false;
    const tree = $("tree");
    const top = tree.scrollTop, h = tree.clientHeight || 600;
    const from = Math.max(0, Math.floor(top / ROW_H) - 5);
    const to = Math.min(vis.length, Math.ceil((top + h) / ROW_H) + 5);
    const parts = [];
    for (let k = from; k < to; k++) {
      const i = vis[k], it = IT[i];
      const leaf = it[3] === i + 1;
      const depth = query ? 0 : it[2];
      const tw = leaf ? "" : (expanded[i] || query ? "▾" : "▸");
      const ct = leaf ? "" : it[9] + "/" + it[8] + "/" + it[7] + "/" + it[6];
      const cls = "row kind" + it[1] + (i === sel ? " sel" : "") + (i === prodItem ? " prod" : "");
      parts.push('<div class="' + cls + '" data-i="' + i + '" style="top:' + (k * ROW_H) + "px;padding-left:" +
        (4 + depth * 14) + 'px"><span class="tw">' + tw + '</span><span class="sw ' + vclass(it[5]) + '"></span><span class="lb" title="' +
        esc(it[0]) + '">' + esc(it[0]) + "</span>" + (ct ? '<span class="ct">' + ct + "</span>" : "") + "</div>");
    }
    $("treeRows").innerHTML = parts.join("");
  }
  $("tree").addEventListener("scroll", () => { if (!renderQueued) { renderQueued = true; requestAnimationFrame(renderTree); } });
  $("tree").addEventListener("click", (e) => {
    const r = e.target.closest(".row");
    if (!r) return;
    const i = +r.dataset.i;
    if (e.target.classList.contains("tw") && IT[i][3] > i + 1) { toggle(i); return; }
    select(i, false);
  });
  function toggle(i) { expanded[i] = expanded[i] ? 0 : 1; rebuild(); }
  function reveal(i) {
    for (let p = parent[i]; p >= 0; p = parent[p]) expanded[p] = 1;
    if (errorsOnly && IT[i][9] === 0) { errorsOnly = false; $("errorsOnly").checked = false; }
    if (query) { query = ""; $("search").value = ""; }
    rebuild();
    const k = vis.indexOf(i);
    if (k >= 0) {
      const tree = $("tree");
      if (k * ROW_H < tree.scrollTop || (k + 1) * ROW_H > tree.scrollTop + tree.clientHeight) {
        tree.scrollTop = Math.max(0, k * ROW_H - tree.clientHeight / 3);
      }
    }
    renderTree();
  }
  function select(i, doReveal) {
    sel = i;
    if (doReveal) reveal(i); else renderTree();
    showDetail(i);
    drawPlot();
  }
  function selectCall(c) { select(CA[c][9], true); }
  $("search").addEventListener("input", (e) => { query = e.target.value.trim().toLowerCase(); $("tree").scrollTop = 0; rebuild(); });
  $("errorsOnly").addEventListener("change", (e) => { errorsOnly = e.target.checked; rebuild(); });

  // ---------- keyboard ----------
  function nextError(dir) {
    const cur = sel >= 0 && IT[sel][4] >= 0 ? IT[sel][4] : (dir > 0 ? -1 : CA.length);
    for (let c = cur + dir; c >= 0 && c < CA.length; c += dir) if (CA[c][2] === 2) { selectCall(c); return; }
  }
  document.addEventListener("keydown", (e) => {
    if (e.target.tagName === "INPUT") { if (e.key === "Escape") e.target.blur(); return; }
    const k = vis.indexOf(sel);
    if (e.key === "n") nextError(1);
    else if (e.key === "p" || e.key === "N") nextError(-1);
    else if (e.key === "f" && producer != null) selectCall(producer);
    else if (e.key === "/") { e.preventDefault(); $("search").focus(); }
    else if (e.key === "ArrowDown" && vis.length) { e.preventDefault(); select(vis[Math.min(vis.length - 1, k + 1)], true); }
    else if (e.key === "ArrowUp" && vis.length) { e.preventDefault(); select(vis[Math.max(0, k - 1)], true); }
    else if (e.key === "ArrowRight" && sel >= 0) { e.preventDefault(); if (!expanded[sel]) toggle(sel); }
    else if (e.key === "ArrowLeft" && sel >= 0) { e.preventDefault(); if (expanded[sel] && IT[sel][3] > sel + 1) toggle(sel); else if (parent[sel] >= 0) select(parent[sel], true); }
    else if (e.key === "Enter" && sel >= 0) toggle(sel);
  });

  // ---------- first divergence ----------
  function callLink(c) { return '<a class="jump" data-call="' + c + '">' + esc(CA[c][0]) + "</a>"; }
  function list(title, arr) {
    const shown = arr.slice(0, 200).map((c) => "<li>" + callLink(c) + "</li>").join("");
    return "<div><b>" + title + "</b> (" + arr.length + ")<ol>" + shown + "</ol>" + (arr.length > 200 ? '<div class="muted">…</div>' : "") + "</div>";
  }
  (function () {
    const el = $("divergence");
    if (producer == null) {
      el.innerHTML = "<h3>First divergence</h3><div class=\"muted\">None: every compared API's outputs agree (or nothing could be compared).</div>";
    } else {
      el.innerHTML = "<h3>First divergence</h3><div class=\"first\" id=\"firstDiv\">" + callLink(producer) +
        ' <span class="badge ' + vclass(CA[producer][2]) + '">' + vname(CA[producer][2]) + "</span><div>" + esc(D.div.reason) +
        "</div><div class=\"muted\">" + D.div.figures.map(esc).join("<br>") + "</div></div><div class=\"lists\">" +
        list("start differences of their own", D.div.others) + list("only propagate them", D.div.propagators) + "</div>";
    }
    el.addEventListener("click", (e) => { const a = e.target.closest("[data-call]"); if (a) selectCall(+a.dataset.call); });
    $("detail").addEventListener("click", (e) => { const a = e.target.closest("[data-call]"); if (a) selectCall(+a.dataset.call); });
  })();

  // ---------- plot ----------
  const canvas = $("plot");
  const plotColor = ["#999", "#d9c89a", "#e0a800", "#e8461e"];
  let pts = null;
  $("plotTitle").textContent = D.mode === "md5" ? "verdict along execution order (md5 mode has no error figure)"
    : "error per API along execution order (log scale): ● " + D.thr.y1 + ", ○ " + D.thr.y2;
  $("plotLegend").innerHTML = D.thr.lines.map((l) => '<span style="color:' + (l[1] === 2 ? "#e8461e" : "#c79500") + '">— ' + esc(l[2]) + "</span>").join(" ") +
    ' <span class="muted">shaded: backward</span>';
  function drawPlot() {
    const dpr = window.devicePixelRatio || 1;
    const W = canvas.clientWidth || 600, H = 220;
    if (canvas.width !== Math.round(W * dpr)) { canvas.width = Math.round(W * dpr); canvas.height = Math.round(H * dpr); }
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, W, H);
    const L = 46, R = 8, T = 8, B = 22, n = Math.max(1, CA.length);
    const x = (c) => L + (W - L - R) * (c + 0.5) / n;
    let lo = -8, hi = 1;
    for (const c of CA) for (const v of [c[6], c[7]]) if (v > 0) { const l = Math.log10(v); if (l > hi) hi = Math.ceil(l); }
    const md5 = D.mode === "md5";
    const y = (v) => {
      if (md5) return T + (H - T - B) * (1 - (v + 1) / 3);
      const l = v > 0 ? Math.max(lo, Math.log10(v)) : lo;
      return T + (H - T - B) * (hi - l) / (hi - lo);
    };
    // backward shading
    g.fillStyle = "#eef2fb";
    let start = -1;
    for (let c = 0; c <= CA.length; c++) {
      const b = c < CA.length && CA[c][1] >= 1; // backward and parameter gradients
      if (b && start < 0) start = c;
      if (!b && start >= 0) { g.fillRect(x(start) - 0.5 * (W - L - R) / n, T, (c - start) * (W - L - R) / n, H - T - B); start = -1; }
    }
    g.strokeStyle = "#ccc"; g.fillStyle = "#666"; g.font = "10px sans-serif"; g.lineWidth = 1;
    if (!md5) {
      for (let e = lo; e <= hi; e += 2) { const yy = y(Math.pow(10, e)); g.beginPath(); g.moveTo(L, yy); g.lineTo(W - R, yy); g.stroke(); g.fillText("1e" + e, 4, yy + 3); }
      for (const l of D.thr.lines) {
        g.strokeStyle = l[1] === 2 ? "#e8461e" : "#c79500"; g.setLineDash([5, 4]);
        const yy = y(l[0]); g.beginPath(); g.moveTo(L, yy); g.lineTo(W - R, yy); g.stroke(); g.setLineDash([]);
      }
    }
    g.fillStyle = "#666"; g.fillText("execution order →  (" + CA.length + " APIs)", L, H - 6);
    pts = [];
    for (let c = 0; c < CA.length; c++) {
      const v = CA[c][2];
      const col = plotColor[v == null ? 0 : v + 1];
      const xx = x(c);
      if (md5) {
        if (v == null) continue;
        g.fillStyle = col; const yy = y(v); g.fillRect(xx - 2, yy - 2, 4, 4); pts.push([xx, yy, c]); continue;
      }
      if (CA[c][7] != null) { const yy = y(CA[c][7]); g.strokeStyle = col; g.strokeRect(xx - 2, yy - 2, 4, 4); pts.push([xx, yy, c]); }
      if (CA[c][6] != null) { const yy = y(CA[c][6]); g.fillStyle = col; g.fillRect(xx - 2, yy - 2, 4, 4); pts.push([xx, yy, c]); }
    }
    const mark = (c, color, r) => {
      const v = CA[c][6] != null ? CA[c][6] : CA[c][7];
      const yy = md5 ? y(CA[c][2] || 0) : y(v == null ? 0 : v);
      g.strokeStyle = color; g.lineWidth = 2; g.beginPath(); g.arc(x(c), yy, r, 0, 7); g.stroke(); g.lineWidth = 1;
    };
    if (producer != null) mark(producer, "#c00", 7);
    if (sel >= 0 && IT[sel][4] >= 0) mark(IT[sel][4], "#2f6fde", 5);
  }
  canvas.addEventListener("click", (e) => {
    if (!pts) return;
    const r = canvas.getBoundingClientRect(), mx = e.clientX - r.left, my = e.clientY - r.top;
    let best = -1, bd = 100;
    for (const p of pts) { const d = (p[0] - mx) * (p[0] - mx) + (p[1] - my) * (p[1] - my); if (d < bd) { bd = d; best = p[2]; } }
    if (best >= 0) selectCall(best);
  });
  window.addEventListener("resize", () => { drawPlot(); renderTree(); });

  // ---------- detail ----------
  const colIx = {};
  D.cols.forEach((c, i) => { colIx[c] = i + 2; });
  const PAIRS = [["dtype", "NPU Dtype", "Bench Dtype"], ["shape", "NPU Tensor Shape", "Bench Tensor Shape"],
    ["requires_grad", "NPU Requires_grad", "Bench Requires_grad"], ["max", "NPU max", "Bench max"], ["min", "NPU min", "Bench min"],
    ["mean", "NPU mean", "Bench mean"], ["norm", "NPU l2norm", "Bench l2norm"], ["md5", "NPU MD5", "BENCH MD5"]];
  const paired = new Set(["Result", "Err_message"]);
  PAIRS.forEach((p) => { paired.add(p[1]); paired.add(p[2]); });
  const metricCols = D.cols.filter((c) => !paired.has(c));
  function rowCard(call, row) {
    const name = row[0].charAt(0) === "." ? call[0] + row[0] : row[0];
    const bench = row[1] === 0 ? name : row[1];
    const lvl = row[row.length - 1];
    const get = (c) => colIx[c] === undefined ? undefined : cell(row[colIx[c]]);
    let t = '<table class="kv"><tr><th></th><th>target</th><th>golden</th></tr>';
    for (const p of PAIRS) { const a = get(p[1]), b = get(p[2]); if (a !== undefined) t += "<tr><th>" + p[0] + "</th><td>" + esc(a) + "</td><td>" + esc(b) + "</td></tr>"; }
    t += "</table>";
    let m = "";
    if (metricCols.length) m = '<table class="kv"><tr>' + metricCols.map((c) => "<th>" + esc(c) + "</th>").join("") + "</tr><tr>" +
      metricCols.map((c) => "<td>" + esc(get(c)) + "</td>").join("") + "</tr></table>";
    const msg = get("Err_message");
    return '<div class="rowcard l' + lvl + '"><b>' + esc(name) + "</b>" + (bench !== name ? ' ↔ <span class="muted">' + esc(bench) + "</span>" : "") +
      ' <span class="badge ' + vclass(lvl) + '">' + esc(get("Result") || ["pass", "warning", "error"][lvl]) + "</span>" +
      '<div style="display:flex;gap:10px;flex-wrap:wrap">' + t + m + "</div>" + (msg && msg !== "None" ? '<div class="msg">' + esc(msg) + "</div>" : "") + "</div>";
  }
  function showDetail(i) {
    const it = IT[i];
    let h = "<h3>" + esc(it[0]) + ' <span class="badge ' + vclass(it[5]) + '">' + vname(it[5]) + "</span></h3>";
    if (it[3] > i + 1) h += '<div class="muted">' + (it[3] - i - 1) + " nodes below: " + it[9] + " error, " + it[8] + " warning, " + it[7] + " pass, " + it[6] + " unmatched APIs</div>";
    const link = it[10];
    if (link) h += "<div>matched golden node: <b>" + esc(link[link.length - 1]) + '</b> <span class="muted">' + esc(link.join(" › ")) + "</span></div>";
    else h += '<div class="muted">no matched golden node</div>';
    if (it[4] >= 0) {
      const c = CA[it[4]];
      if (it[4] === producer) h += '<div class="first"><b>first divergence</b>: ' + esc(D.div.reason) + "</div>";
      else if (D.div.others.indexOf(it[4]) >= 0) h += '<div class="first">starts a difference of its own</div>';
      else if (D.div.propagators.indexOf(it[4]) >= 0) h += '<div class="muted">propagates a difference from earlier APIs</div>';
      if (c[6] != null || c[7] != null) h += '<div class="muted">' + esc(D.thr.y1) + ": " + c[6] + "; " + esc(D.thr.y2) + ": " + c[7] + "</div>";
      const groups = [["inputs", []], ["outputs", []], ["parameters", []]];
      for (let r = c[3]; r < c[3] + c[4]; r++) {
        const row = D.rows[r], nm = row[0];
        const g = nm.indexOf(".output.") >= 0 ? 1 : nm.indexOf("parameters") >= 0 ? 2 : 0;
        groups[g][1].push(rowCard(c, row));
      }
      for (const g of groups) if (g[1].length) h += "<h3>" + g[0] + "</h3>" + g[1].join("");
      if (!c[4]) h += '<div class="muted">no rows in the result table (not compared)</div>';
      if (c[5] >= 0) h += "<h3>stack</h3><pre class=\"stack\">" + esc(D.stacks[c[5]].map((f) => S[f]).join("\n")) + "</pre>";
    }
    $("detail").innerHTML = h;
  }

  rebuild();
  drawPlot();
  if (prodItem >= 0) reveal(prodItem);
  // Links into the page: `#first` opens the first divergence, `#api=NAME` an API.
  const hash = decodeURIComponent(location.hash.slice(1));
  if (hash === "first" && producer != null) selectCall(producer);
  else if (hash.startsWith("api=")) { const c = CA.findIndex((x) => x[0] === hash.slice(4)); if (c >= 0) selectCall(c); }
  window.__readyAt = performance.now();
  document.body.dataset.ready = "1";
})();
