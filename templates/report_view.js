/* report.html's script: the device-by-time heatmap, the node power band and the phases,
   drawn on canvases from the JSON in #rtk-data (no library, nothing fetched); the table
   filters. window.rtkReport lets a test (or a curious reader) drive it. */
(function () {
  "use strict";

  function filters() {
    document.querySelectorAll("input.filter").forEach(function (input) {
      input.addEventListener("input", function () {
        var query = input.value.trim().toLowerCase();
        var table = document.getElementById(input.dataset.table);
        if (!table) return;
        Array.prototype.forEach.call(table.rows, function (row) {
          if (!row.querySelector("td")) return;
          row.hidden = query !== "" && row.textContent.toLowerCase().indexOf(query) < 0;
        });
      });
    });
  }
  filters();

  var heat = document.getElementById("heatmap");
  var D = JSON.parse(document.getElementById("rtk-data").textContent);
  if (!heat || !D.layers.length || !D.buckets) return;

  var RAMPS = {
    viridis: ["#440154", "#482878", "#3e4989", "#31688e", "#26828e", "#1f9e89", "#35b779",
      "#6ece58", "#b5de2b", "#fde725"],
    cividis: ["#00224e", "#123570", "#3b496c", "#575d6d", "#707173", "#8a8678", "#a59c74",
      "#c3b369", "#e1cc55", "#fee838"],
    inferno: ["#000004", "#1b0c41", "#4a0c6b", "#781c6d", "#a52c60", "#cf4446", "#ed6925",
      "#fb9b06", "#f7d13d", "#fcffa4"],
    reds: ["#fff5f0", "#fee0d2", "#fcbba1", "#fc9272", "#fb6a4a", "#ef3b2c", "#cb181d",
      "#a50f15", "#67000d"],
    blues: ["#f7fbff", "#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5",
      "#08519c", "#08306b"]
  };
  var LAYER_RAMP = {
    power_w: "viridis", sm_clock_mhz: "cividis", temperature_c: "inferno",
    throttled: "reds", gpu_util_pct: "blues", cpu_util_pct: "blues"
  };
  var UNIT = {
    power_w: " W", sm_clock_mhz: " MHz", temperature_c: " \u00b0C", gpu_util_pct: " %",
    cpu_util_pct: " %"
  };
  var ROWS = D.devices.length, COLS = D.buckets, BUCKET_S = D.bucket_s;
  var M = { left: 70, right: 12, top: 6, bottom: 26 };
  var state = { layer: 0, b0: 0, b1: COLS, row: -1, node: -1, drag: null, draws: 0 };
  var decoded = {}, images = {}, luts = {};
  var box = document.getElementById("heatmap-box");
  var tip = document.getElementById("hover");
  var nodeCanvas = document.getElementById("nodepower");
  var phaseCanvas = document.getElementById("phasechart");
  var select = document.getElementById("layer");

  function lut(name) {
    if (luts[name]) return luts[name];
    var stops = RAMPS[LAYER_RAMP[name] || "viridis"].map(function (hex) {
      return [1, 3, 5].map(function (i) { return parseInt(hex.substr(i, 2), 16); });
    });
    var out = new Uint8Array(256 * 3);
    for (var k = 0; k < 256; k++) {
      var at = k / 255 * (stops.length - 1), i = Math.min(Math.floor(at), stops.length - 2);
      var f = at - i;
      for (var c = 0; c < 3; c++) out[k * 3 + c] = Math.round(stops[i][c] * (1 - f) + stops[i + 1][c] * f);
    }
    luts[name] = out;
    return out;
  }

  function decode(packed) {
    var bin = atob(packed.data), width = packed.bytes, n = bin.length / width;
    var top = width === 2 ? 65535 : 255, span = packed.hi > packed.lo ? packed.hi - packed.lo : 1;
    var out = new Float32Array(n);
    for (var i = 0; i < n; i++) {
      var v = width === 2 ? bin.charCodeAt(2 * i) | (bin.charCodeAt(2 * i + 1) << 8) : bin.charCodeAt(i);
      out[i] = v === top ? NaN : packed.lo + v / (top - 1) * span;
    }
    return out;
  }

  function values(index) {
    if (!decoded[index]) decoded[index] = decode(D.layers[index]);
    return decoded[index];
  }

  function image(index) {
    if (images[index]) return images[index];
    var layer = D.layers[index], data = values(index), colours = lut(layer.name);
    var span = layer.hi > layer.lo ? layer.hi - layer.lo : 1;
    var canvas = document.createElement("canvas");
    canvas.width = COLS;
    canvas.height = ROWS;
    var g = canvas.getContext("2d"), img = g.createImageData(COLS, ROWS), px = img.data;
    for (var i = 0; i < data.length; i++) {
      var v = data[i], o = 4 * i;
      if (v !== v) {
        px[o] = px[o + 1] = px[o + 2] = 224;
      } else {
        var k = Math.max(0, Math.min(255, Math.round((v - layer.lo) / span * 255))) * 3;
        px[o] = colours[k]; px[o + 1] = colours[k + 1]; px[o + 2] = colours[k + 2];
      }
      px[o + 3] = 255;
    }
    g.putImageData(img, 0, 0);
    images[index] = canvas;
    return canvas;
  }

  function fit(canvas, cssHeight) {
    var ratio = window.devicePixelRatio || 1, width = box.clientWidth;
    canvas.style.height = cssHeight + "px";
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(cssHeight * ratio);
    var g = canvas.getContext("2d");
    g.setTransform(ratio, 0, 0, ratio, 0, 0);
    return { g: g, w: width, h: cssHeight };
  }

  function plotHeight() { return Math.max(200, Math.min(ROWS * 4, Math.max(ROWS, 640))); }
  function plotWidth(w) { return Math.max(w - M.left - M.right, 10); }
  function t0() { return state.b0 * BUCKET_S; }
  function t1() { return state.b1 * BUCKET_S; }
  function xOf(t, w) { return M.left + (t - t0()) / (t1() - t0()) * plotWidth(w); }

  function niceStep(range, count) {
    var raw = range / Math.max(count, 1), p = Math.pow(10, Math.floor(Math.log10(raw)));
    var steps = [1, 2, 5, 10];
    for (var i = 0; i < steps.length; i++) if (steps[i] * p >= raw) return steps[i] * p;
    return 10 * p;
  }

  function fmt(v, name) {
    if (v !== v) return "no samples";
    if (name === "throttled") return (v * 100).toFixed(0) + "% of samples throttled";
    if (name === "power_w" || name === "node_power_w") return watts(v);
    return v.toFixed(name === "sm_clock_mhz" ? 0 : 1) + (UNIT[name] || "");
  }

  function watts(v) {
    if (v !== v) return "-";
    return Math.abs(v) >= 1e4 ? (v / 1e3).toFixed(2) + " kW" : v.toFixed(1) + " W";
  }

  function timeAxis(g, w, y) {
    var step = niceStep(t1() - t0(), Math.max(2, Math.floor(plotWidth(w) / 90)));
    g.fillStyle = "#333"; g.strokeStyle = "#666"; g.textAlign = "center"; g.textBaseline = "top";
    g.font = "11px system-ui, sans-serif";
    for (var t = Math.ceil(t0() / step) * step; t <= t1() + 1e-9; t += step) {
      var x = xOf(t, w);
      g.beginPath(); g.moveTo(x, y); g.lineTo(x, y + 4); g.stroke();
      g.fillText(+t.toFixed(6) + " s", x, y + 6);
    }
  }

  function barriers(g, w, top, height) {
    g.save();
    g.strokeStyle = D.barriers.length > 50 ? "rgba(60,60,60,0.35)" : "rgba(60,60,60,0.7)";
    g.setLineDash([4, 3]);
    g.lineWidth = 1;
    D.barriers.forEach(function (t) {
      if (t < t0() || t > t1()) return;
      var x = Math.round(xOf(t, w)) + 0.5;
      g.beginPath(); g.moveTo(x, top); g.lineTo(x, top + height); g.stroke();
    });
    g.restore();
  }

  function drawHeat() {
    var H = plotHeight(), c = fit(heat, M.top + H + M.bottom), g = c.g, W = plotWidth(c.w);
    g.clearRect(0, 0, c.w, c.h);
    g.imageSmoothingEnabled = false;
    g.drawImage(image(state.layer), state.b0, 0, state.b1 - state.b0, ROWS, M.left, M.top, W, H);
    g.font = "11px system-ui, sans-serif"; g.textAlign = "right"; g.textBaseline = "middle";
    g.fillStyle = "#333"; g.strokeStyle = "rgba(255,255,255,0.9)"; g.lineWidth = 1;
    var lastLine = -1e9, lastLabel = -1e9;
    D.node_rows.forEach(function (span, i) {
      var y = M.top + span[0] / ROWS * H, mid = M.top + (span[0] + span[1] / 2) / ROWS * H;
      if (i > 0 && y - lastLine >= 3) {
        g.beginPath(); g.moveTo(M.left, Math.round(y) + 0.5); g.lineTo(M.left + W, Math.round(y) + 0.5);
        g.stroke(); lastLine = y;
      }
      if (mid - lastLabel >= 12) { g.fillText(D.nodes[i].substr(0, 11), M.left - 4, mid); lastLabel = mid; }
    });
    barriers(g, c.w, M.top, H);
    if (state.row >= 0) {
      g.strokeStyle = "#e00"; g.lineWidth = 1.5;
      g.strokeRect(M.left, M.top + state.row / ROWS * H, W, Math.max(H / ROWS, 1.5));
    }
    if (state.drag) {
      g.fillStyle = "rgba(30,90,200,0.2)";
      var a = Math.min(state.drag.x0, state.drag.x1), b = Math.max(state.drag.x0, state.drag.x1);
      g.fillRect(a, M.top, b - a, H);
    }
    timeAxis(g, c.w, M.top + H);
    heat.dataset.drawn = String(++state.draws);
  }

  var nodeBand = null;
  function nodeData() {
    if (nodeBand || !D.node_power) return nodeBand;
    var all = decode(D.node_power), n = D.node_power.nodes.length;
    var lo = new Float32Array(COLS), mid = new Float32Array(COLS), hi = new Float32Array(COLS);
    for (var col = 0; col < COLS; col++) {
      var column = [];
      for (var r = 0; r < n; r++) { var v = all[r * COLS + col]; if (v === v) column.push(v); }
      column.sort(function (a, b) { return a - b; });
      var k = column.length;
      lo[col] = k ? column[0] : NaN; hi[col] = k ? column[k - 1] : NaN;
      mid[col] = !k ? NaN : k % 2 ? column[(k - 1) / 2] : (column[k / 2 - 1] + column[k / 2]) / 2;
    }
    nodeBand = { all: all, lo: lo, mid: mid, hi: hi, nodes: D.node_power.nodes };
    return nodeBand;
  }

  function line(g, w, data, offset, yOf) {
    var W = plotWidth(w), n = state.b1 - state.b0, open = false;
    g.beginPath();
    for (var col = state.b0; col < state.b1; col++) {
      var v = data[offset + col];
      if (v !== v) { open = false; continue; }
      var x = M.left + (col - state.b0 + 0.5) / n * W;
      if (open) g.lineTo(x, yOf(v)); else g.moveTo(x, yOf(v));
      open = true;
    }
    g.stroke();
  }

  function drawNodes() {
    var band = nodeData();
    if (!nodeCanvas || !band) return;
    var c = fit(nodeCanvas, 160), g = c.g, W = plotWidth(c.w), top = 18, H = 160 - top - 24;
    var ymin = Infinity, ymax = -Infinity, n = state.b1 - state.b0;
    for (var col = state.b0; col < state.b1; col++) {
      if (band.lo[col] === band.lo[col]) { ymin = Math.min(ymin, band.lo[col]); ymax = Math.max(ymax, band.hi[col]); }
    }
    if (!(ymax >= ymin)) { ymin = 0; ymax = 1; }
    var pad = (ymax - ymin) * 0.05 || 1; ymin -= pad; ymax += pad;
    var yOf = function (v) { return top + (1 - (v - ymin) / (ymax - ymin)) * H; };
    g.clearRect(0, 0, c.w, c.h);
    g.fillStyle = "rgba(31,119,180,0.25)";
    for (col = state.b0; col < state.b1; col++) {
      if (band.lo[col] !== band.lo[col]) continue;
      var x = M.left + (col - state.b0) / n * W;
      g.fillRect(x, yOf(band.hi[col]), Math.max(W / n, 1), Math.max(yOf(band.lo[col]) - yOf(band.hi[col]), 1));
    }
    g.strokeStyle = "#111"; g.lineWidth = 1.2;
    line(g, c.w, band.mid, 0, yOf);
    var name = state.node >= 0 ? D.nodes[state.node] : null, row = band.nodes.indexOf(name);
    if (row >= 0) { g.strokeStyle = "#e00"; g.lineWidth = 1.5; line(g, c.w, band.all, row * COLS, yOf); }
    barriers(g, c.w, top, H);
    g.fillStyle = "#333"; g.font = "11px system-ui, sans-serif"; g.textAlign = "right"; g.textBaseline = "middle";
    g.fillText(watts(ymax - pad), M.left - 4, yOf(ymax - pad));
    g.fillText(watts(ymin + pad), M.left - 4, yOf(ymin + pad));
    g.textAlign = "left"; g.textBaseline = "top";
    g.fillText("power per node: band min to max, line median" + (name ? ", red: " + name : ""), M.left, 2);
    timeAxis(g, c.w, top + H);
  }

  function drawPhases() {
    if (!phaseCanvas || !D.phases.length) { if (phaseCanvas) phaseCanvas.style.display = "none"; return; }
    var c = fit(phaseCanvas, 90), g = c.g, top = 14, H = 90 - top - 4;
    var most = Math.max.apply(null, D.phases.map(function (p) { return p[2] || 0; })) || 1;
    g.clearRect(0, 0, c.w, c.h);
    D.phases.forEach(function (p) {
      if (p[0] === null || p[1] === null || p[0] + p[1] < t0() || p[0] > t1()) return;
      var a = Math.max(xOf(p[0], c.w), M.left), b = Math.min(xOf(p[0] + p[1], c.w), M.left + plotWidth(c.w));
      var h = (p[2] || 0) / most * H;
      g.fillStyle = p[5] ? "rgba(31,119,180,0.7)" : "rgba(255,160,60,0.7)";
      g.fillRect(a, top + H - h, Math.max(b - a - 1, 1), h);
    });
    g.fillStyle = "#333"; g.font = "11px system-ui, sans-serif"; g.textAlign = "left"; g.textBaseline = "top";
    g.fillText("phases between barriers: average power (orange: touched by a gap)", M.left + 4, 0);
  }

  function draw() {
    drawHeat();
    drawNodes();
    drawPhases();
    document.getElementById("range").textContent =
      "showing " + t0().toFixed(2) + "-" + t1().toFixed(2) + " s of " + D.duration_s.toFixed(2) +
      " s (" + (state.b1 - state.b0) + " of " + COLS + " buckets of " + BUCKET_S.toPrecision(3) + " s)";
  }

  function legend() {
    var layer = D.layers[state.layer], colours = lut(layer.name);
    var canvas = document.getElementById("legend"), g = canvas.getContext("2d");
    for (var x = 0; x < canvas.width; x++) {
      var k = Math.round(x / (canvas.width - 1) * 255) * 3;
      g.fillStyle = "rgb(" + colours[k] + "," + colours[k + 1] + "," + colours[k + 2] + ")";
      g.fillRect(x, 0, 1, canvas.height);
    }
    document.getElementById("legend-text").textContent = layer.name === "throttled"
      ? "0% to 100% of samples throttled"
      : fmt(layer.lo, layer.name) + " to " + fmt(layer.hi, layer.name);
  }

  function cellAt(clientX, clientY) {
    var rect = heat.getBoundingClientRect(), x = clientX - rect.left, y = clientY - rect.top;
    var W = plotWidth(rect.width), H = plotHeight();
    if (x < M.left || x >= M.left + W || y < M.top || y >= M.top + H) return null;
    var row = Math.min(ROWS - 1, Math.floor((y - M.top) / H * ROWS));
    var col = Math.min(state.b1 - 1, state.b0 + Math.floor((x - M.left) / W * (state.b1 - state.b0)));
    return { row: row, col: col, x: x };
  }

  function describe(cell) {
    var layer = D.layers[state.layer], v = values(state.layer)[cell.row * COLS + cell.col];
    var node = D.nodes[D.row_node[cell.row]];
    return node + " / " + D.devices[cell.row] + " \u00b7 " + (cell.col * BUCKET_S).toFixed(2) + "-" +
      ((cell.col + 1) * BUCKET_S).toFixed(2) + " s \u00b7 " + layer.label.split(" (")[0] + ": " +
      fmt(v, layer.name);
  }

  function showTip(text, clientX, clientY) {
    var rect = box.getBoundingClientRect();
    tip.textContent = text;
    tip.style.display = "block";
    var left = clientX - rect.left + 14, top = clientY - rect.top + 14;
    if (left + tip.offsetWidth > rect.width) left = Math.max(0, clientX - rect.left - tip.offsetWidth - 14);
    tip.style.left = left + "px";
    tip.style.top = top + "px";
  }

  function hover(clientX, clientY) {
    var cell = cellAt(clientX, clientY);
    if (!cell) { leave(); return null; }
    var text = describe(cell);
    showTip(text, clientX, clientY);
    if (cell.row !== state.row) {
      state.row = cell.row; state.node = D.row_node[cell.row];
      drawHeat(); drawNodes();
    }
    return text;
  }

  function leave() {
    tip.style.display = "none";
    if (state.row >= 0) { state.row = -1; state.node = -1; drawHeat(); drawNodes(); }
  }

  function zoomBuckets(b0, b1) {
    b0 = Math.max(0, Math.min(COLS - 1, b0));
    b1 = Math.max(b0 + 1, Math.min(COLS, b1));
    if (b1 - b0 < 2 && COLS >= 2) { if (b1 < COLS) b1 += 1; else b0 -= 1; }
    state.b0 = b0; state.b1 = b1;
    draw();
  }

  function zoom(startS, endS) {
    zoomBuckets(Math.floor(Math.min(startS, endS) / BUCKET_S), Math.ceil(Math.max(startS, endS) / BUCKET_S));
  }

  function reset() { zoomBuckets(0, COLS); }

  D.layers.forEach(function (layer, i) {
    var option = document.createElement("option");
    option.value = String(i); option.textContent = layer.label;
    select.appendChild(option);
  });
  select.addEventListener("change", function () { state.layer = +select.value; legend(); draw(); });
  document.getElementById("reset").addEventListener("click", reset);

  heat.addEventListener("mousedown", function (e) {
    var cell = cellAt(e.clientX, e.clientY);
    if (cell) { state.drag = { x0: cell.x, x1: cell.x }; e.preventDefault(); }
  });
  window.addEventListener("mousemove", function (e) {
    if (state.drag) {
      var rect = heat.getBoundingClientRect();
      state.drag.x1 = Math.max(M.left, Math.min(e.clientX - rect.left, M.left + plotWidth(rect.width)));
      drawHeat();
    }
  });
  heat.addEventListener("mousemove", function (e) { hover(e.clientX, e.clientY); });
  heat.addEventListener("mouseleave", function () { if (!state.drag) leave(); });
  window.addEventListener("mouseup", function () {
    var drag = state.drag;
    if (!drag) return;
    state.drag = null;
    var rect = heat.getBoundingClientRect(), W = plotWidth(rect.width), n = state.b1 - state.b0;
    var a = Math.min(drag.x0, drag.x1), b = Math.max(drag.x0, drag.x1);
    if (b - a < 4) { drawHeat(); return; }
    zoomBuckets(state.b0 + Math.floor((a - M.left) / W * n), state.b0 + Math.ceil((b - M.left) / W * n));
  });
  heat.addEventListener("dblclick", reset);
  var pending = false;
  window.addEventListener("resize", function () {
    if (pending) return;
    pending = true;
    window.requestAnimationFrame(function () { pending = false; draw(); });
  });

  window.rtkReport = {
    devices: ROWS,
    nodes: D.nodes.length,
    buckets: COLS,
    layers: D.layers.map(function (layer) { return layer.name; }),
    zoom: zoom,
    reset: reset,
    hover: hover,
    at: function (row, col) {
      var rect = heat.getBoundingClientRect(), W = plotWidth(rect.width), H = plotHeight();
      return {
        x: M.left + (col - state.b0 + 0.5) / (state.b1 - state.b0) * W,
        y: M.top + (row + 0.5) / ROWS * H,
        width: rect.width,
        height: rect.height
      };
    },
    view: function () {
      return { t0_s: t0(), t1_s: t1(), b0: state.b0, b1: state.b1, layer: D.layers[state.layer].name };
    },
    setLayer: function (name) {
      var i = D.layers.findIndex(function (layer) { return layer.name === name; });
      if (i >= 0) { select.value = String(i); state.layer = i; legend(); draw(); }
      return i >= 0;
    }
  };
  legend();
  draw();
})();
