// The report page's script (key tree, search, charts with uPlot, live updates under serve): xdl_trace/read/report_html.py inlines this file, less this first line.
(function () {
  var D = JSON.parse(document.getElementById('xdl-report-data').textContent);
  // Under `xdl-trace serve` the page polls its server; a static report is complete as it is.
  var LIVE = document.body.getAttribute('data-live') === '1';
  function fmt(v) {
    if (v === null) return '';
    if (v == null || !isFinite(v)) return '–';
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(2);
    return String(+v.toPrecision(4));
  }
  function esc(s) {
    return String(s).replace(/[&<>"]/g, function (c) {
      return {'&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;'}[c];
    });
  }
  function isDecade(v) {
    var e = Math.log10(Math.abs(v));
    return Math.abs(e - Math.round(e)) < 1e-9;
  }
  // On a log axis, labels, ticks and grid lines at powers of ten only (when there are two or
  // more), and at every k-th power where all of them would crowd the axis (16 px a label).
  function decades(u, splits) {
    var n = splits.filter(function (v) { return v != null && isDecade(v); }).length;
    if (n < 2) return splits;
    var every = Math.max(1, Math.ceil(n * 16 / (u.bbox.height / uPlot.pxRatio)));
    return splits.map(function (v) {
      return v != null && isDecade(v) && Math.round(Math.log10(Math.abs(v))) % every == 0 ? v : null;
    });
  }

  // A y axis's tick steps: 1, 2, 2.5 and 5 x 10^e for every e a double holds. uPlot's own stop
  // at 5e31, so a diverging run's last finite values (a loss of 2e35 before its first Inf) got
  // an axis without a single label, linear or log.
  var TICK_INCRS = (function () {
    var out = [];
    for (var e = -32; e <= 307; e++) {
      [1, 2, 2.5, 5].forEach(function (m) { out.push(+(m + 'e' + e)); });
    }
    return out;
  })();
  // The x axis counts gsteps: whole ticks only (no 0.25 between steps 0 and 2).
  var STEP_INCRS = TICK_INCRS.filter(function (v) { return v >= 1 && v % 1 === 0; });

  // A log axis's splits, 1..9 x 10^e between the scale's ends: uPlot's own come from repeated
  // adds, which drift past 1e22 (5.999e22, then 1.0999e23, ...) and never meet a power of ten
  // again, so a diverging loss's axis lost its labels above 1e21.
  function logSplits(u, axisIdx, min, max) {
    var out = [];
    if (!(min > 0) || !(max > min)) return out;
    for (var e = Math.floor(Math.log10(min)); e <= Math.ceil(Math.log10(max)); e++) {
      for (var m = 1; m <= 9; m++) {
        var v = +(m + 'e' + e);
        if (v >= min && v <= max) out.push(v);
      }
    }
    return out;
  }

  // A y axis's width in px: its longest label at the 11 px font (~6.6 px a character), the
  // ticks and the gap to the title.
  function axisWidth(u, values) {
    var longest = 0;
    (values || []).forEach(function (v) { if (v) longest = Math.max(longest, v.length); });
    return Math.max(40, Math.ceil(longest * 6.6) + 26);
  }

  // The view's settings, the same for every chart: smoothing (TensorBoard's debiased EMA
  // weight, 0: none), the y scale ('auto': the chart's own choice, 'linear', 'log') and the
  // runs shown (TensorBoard's run filter: a RegExp tested on each run's label; null: all).
  var view = {smooth: 0, yscale: 'auto', runs: null};

  // The run a series draws, as the filter sees it: the longest run label (D.runs) its label is
  // or starts with (then a space: ' mean', ' · rank 1', ' hi'), an evaluation's the label of
  // the run it evaluates (it follows that run); null for a series of no run.
  var runLabels = [], labelled = null;  // Longest first, of the D.runs they were made of.
  var EVAL = ' · eval';
  function filterLabel(r) {
    return r.evaluation && r.label.slice(-EVAL.length) === EVAL ? r.label.slice(0, -EVAL.length) :
        r.label;
  }
  function runOf(s) {
    if (labelled !== D.runs) {  // Under serve, an update's runs.
      labelled = D.runs;
      runLabels = (D.runs || []).slice().sort(function (a, b) {
        return b.label.length - a.label.length;
      });
    }
    if (s._run === undefined) {  // Kept on the series: a spec's series are looked up once.
      s._run = null;
      for (var i = 0; i < runLabels.length; i++) {
        var r = runLabels[i].label;
        if (s.label === r || s.label.lastIndexOf(r + ' ', 0) === 0) {
          s._run = filterLabel(runLabels[i]);
          break;
        }
      }
    }
    return s._run;
  }
  function shownSeries(s) {
    var run = view.runs && runOf(s);
    return !run || view.runs.test(run);
  }

  // A line's smoothed values: the EMA of its finite values (a gap restarts nothing: it is
  // carried over), debiased as TensorBoard's scalar dashboard does.
  function ema(values, weight) {
    var out = new Array(values.length), last = 0, n = 0;
    for (var i = 0; i < values.length; i++) {
      var y = values[i];
      if (y == null || !isFinite(y)) { out[i] = y; continue; }
      last = last * weight + (1 - weight) * y; n++;
      out[i] = last / (1 - Math.pow(weight, n));
    }
    return out;
  }
  // Whether a series is a line to smooth: a drawn line with a tooltip (not a band edge, not a
  // distribution's percentile, not a tooltip-only part of a stack).
  function smoothable(spec, s) {
    return spec.kind !== 'distribution' && s.tip && s.width > 0 && s.draw !== false && !s.dash;
  }
  function isLog(spec) {
    return view.yscale === 'log' || (view.yscale === 'auto' && spec.log);
  }

  // The gstep ranges where some line of the chart holds NaN/Inf: [first x, last x] of each run
  // of gap indices, extended to the next point (the value is unknown up to there).
  function nonFinite(spec) {
    var bad = new Uint8Array(spec.x.length), any = false;
    spec.series.forEach(function (s) {
      (s.gaps || []).forEach(function (i) { bad[i] = 1; any = true; });
    });
    var ranges = [];
    if (!any) return ranges;
    for (var i = 0; i < bad.length; i++) {
      if (!bad[i]) continue;
      var j = i;
      while (j + 1 < bad.length && bad[j + 1]) j++;
      ranges.push([spec.x[i], spec.x[Math.min(j + 1, bad.length - 1)]]);
      i = j;
    }
    return ranges;
  }
  function shade(ranges) {
    return {hooks: {drawClear: function (u) {
      if (!ranges.length) return;
      var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
      ctx.save(); ctx.fillStyle = 'rgba(214,39,40,0.10)';
      ranges.forEach(function (r) {
        var a = u.valToPos(r[0], 'x', true), b = u.valToPos(r[1], 'x', true);
        ctx.fillRect(a, top, Math.max(b - a, 2 * uPlot.pxRatio), h);
      });
      ctx.restore();
    }}};
  }
  // Dashed vertical lines at spec.marks (gsteps): the evaluations on the step-time chart.
  function marks(spec) {
    return {hooks: {draw: function (u) {
      if (!spec.marks || !spec.marks.length) return;
      var ctx = u.ctx, top = u.bbox.top, h = u.bbox.height;
      ctx.save(); ctx.strokeStyle = 'rgba(90,90,90,0.55)'; ctx.lineWidth = uPlot.pxRatio;
      ctx.setLineDash([3 * uPlot.pxRatio, 3 * uPlot.pxRatio]);
      spec.marks.forEach(function (g) {
        var x = Math.round(u.valToPos(g, 'x', true)) + 0.5;
        ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, top + h); ctx.stroke();
      });
      ctx.restore();
    }}};
  }
  // An x of a sweep's chart in words: a category's name ("adam"), else the number.
  function xText(spec, x) {
    return spec.xnames ? (spec.xnames[x] === undefined ? '' : spec.xnames[x]) : fmt(x);
  }
  function tooltip(spec, bad) {
    var tip;
    return {hooks: {
      init: function (u) {
        tip = document.createElement('div'); tip.className = 'tip'; u.over.appendChild(tip);
      },
      setCursor: function (u) {
        var i = u.cursor.idx;
        if (i == null) { tip.style.display = 'none'; return; }
        var x = u.data[0][i];
        var h = '<b>' + (spec.xvalues ? esc(spec.xlabel) + ' ' + esc(xText(spec, x)) : 'gstep ' + x) +
            '</b>';
        bad.forEach(function (r) {
          if (x >= r[0] && x <= r[1]) h += '<div class=tip-bad>NaN/Inf from gstep ' + r[0] + '</div>';
        });
        spec.series.forEach(function (s, k) {
          var v = u.data[k + 1][i];
          if (!s.tip || v === undefined || !shownSeries(s)) return;
          h += '<div><i style="background:' + s.color + '"></i>' + esc(s.label) + ': ' +
               (v === null ? 'NaN/Inf' : fmt(v)) + '</div>';
        });
        tip.innerHTML = h; tip.style.display = 'block';
        var left = u.cursor.left, w = tip.offsetWidth;
        tip.style.left = (left + 14 + w > u.over.clientWidth ? left - w - 14 : left + 14) + 'px';
        tip.style.top = Math.max(0, u.cursor.top - 12) + 'px';
      }
    }};
  }
  // uPlot's data of a spec under the view's settings: the x, each series (null: a NaN/Inf
  // gap, which breaks the line; undefined: no point there, spanned), then the raw twins of the
  // smoothed lines, drawn faint.
  function chartData(spec, log) {
    var raw = [], twins = [];
    var data = [spec.x].concat(spec.series.map(function (s) {
      var v = s.values.map(function (y) {
        return y === null || (log && y <= 0) ? undefined : y;
      });
      (s.gaps || []).forEach(function (i) { v[i] = null; });
      if (view.smooth > 0 && smoothable(spec, s)) { twins.push(v); return ema(v, view.smooth); }
      return v;
    }));
    return data.concat(twins);
  }
  function chart(spec, el) {
    var width = Math.max(260, el.clientWidth);
    var log = isLog(spec);
    var series = [{label: spec.xlabel}];
    spec.series.forEach(function (s) {
      // A sweep's run is one point: filled, larger than a line's marks.
      var points = spec.xvalues ? {show: true, size: 7, fill: s.color} : {show: !!s.points};
      series.push({label: s.label, stroke: s.color, width: s.width, dash: s.dash || undefined,
                   spanGaps: false, points: points,
                   show: s.draw !== false && shownSeries(s)});
    });
    if (view.smooth > 0) {
      spec.series.forEach(function (s) {
        if (!smoothable(spec, s)) return;
        series.push({label: s.label + ' (raw)', stroke: s.color, width: 1, alpha: 0.25,
                     spanGaps: false, points: {show: false}, show: shownSeries(s)});
      });
    }
    // Axis titles: the quantity and its unit (spec.ylabel), and gstep.
    var labelFont = '11px system-ui, sans-serif';
    // As wide as its longest label (-1.00e+19 ran into the axis title in a fixed 64 px).
    var yAxis = {size: axisWidth, values: function (u, v) { return v.map(fmt); },
                 grid: {stroke: '#eef0f4'}, label: spec.ylabel || undefined, labelSize: 16,
                 labelFont: labelFont, incrs: TICK_INCRS};
    if (log) {
      // Powers of ten as 1e12, 1e-6 where fmt would write 1.00e+12.
      yAxis.values = function (u, v) {
        return v.map(function (x) {
          var a = Math.abs(x);
          return x != null && isDecade(x) && (a >= 1e5 || a < 1e-3) ?
              (x < 0 ? '-' : '') + '1e' + Math.round(Math.log10(a)) : fmt(x);
        });
      };
      yAxis.splits = logSplits;
      yAxis.filter = decades;
      yAxis.grid.filter = decades;
      yAxis.ticks = {filter: decades};
    }
    var y = log ? {distr: 3} : {};
    // Overlaid runs share one y range (the spec's), so their charts compare at a glance; runs
    // filtered, the range is the shown lines'. A flat line gets a band around it (uPlot puts a
    // line of zeros at the foot of 0..100).
    var yrange = view.runs ? null : spec.yrange;
    if (!log) {
      y.range = function (u, min, max) {
        if (yrange) { min = yrange[0]; max = yrange[1]; }
        if (min == null || max == null) return [null, null];
        if (min === max) {
          var pad = min === 0 ? 1 : Math.abs(min) / 10;
          return [min - pad, max + pad];
        }
        return yrange ? [min, max] : uPlot.rangeNum(min, max, 0.1, true);
      };
    } else if (yrange) {
      y.range = function () { return yrange; };
    }
    var bad = nonFinite(spec);
    // The x axis: whole gsteps, or (a sweep's chart) a hyperparameter's values, a learning
    // rate's on a log axis; its cursor is its own (gstep charts share theirs).
    // Whole steps for gsteps and whole values (a seed, a batch size), else any.
    var whole = !spec.xvalues || spec.x.every(function (v) { return Number.isInteger(v); });
    var xAxis = {size: 30, grid: {stroke: '#eef0f4'}, label: spec.xlabel, labelSize: 16,
                 labelFont: labelFont, incrs: spec.xnames ? [1] : whole ? STEP_INCRS : TICK_INCRS,
                 values: function (u, v) {
                   return v.map(function (x) { return x == null ? '' : xText(spec, x); });
                 }};
    var x = {time: false};
    if (spec.xvalues) {  // Room around the first and last points, which sit on the edges else.
      x.range = function (u, min, max) {
        if (spec.xlog) return [min / 1.3, max * 1.3];
        if (spec.xnames) return [-0.5, spec.xnames.length - 0.5];
        var pad = (max - min) * 0.06 || Math.abs(min) * 0.1 || 1;
        return [min - pad, max + pad];
      };
    }
    if (spec.xlog) {
      x.distr = 3;
      xAxis.splits = logSplits;
      xAxis.filter = decades;
      xAxis.grid.filter = decades;
      xAxis.ticks = {filter: decades};
    }
    var opts = {
      width: width, height: 210, series: series, legend: {show: false},
      bands: spec.bands.filter(function (b) { return shownSeries(spec.series[b.hi]); })
          .map(function (b) { return {series: [b.hi + 1, b.lo + 1], fill: b.fill}; }),
      cursor: {sync: {key: spec.xvalues ? 'x ' + spec.xlabel : 'gstep'}, drag: {x: true, y: false},
               points: {size: 5}},
      scales: {x: x, y: y},
      axes: [xAxis, yAxis],
      plugins: [shade(bad), marks(spec), tooltip(spec, bad)]
    };
    return new uPlot(opts, chartData(spec, log), el);
  }
  function legend(spec) {
    var seen = {}, out = '';
    spec.series.forEach(function (s) {
      if (s.legend === false || (!s.legend && (!s.tip || !s.width)) || !shownSeries(s)) return;
      var name = s.label.replace(/ (mean|min|max)$/, '');
      if (seen[name]) return;
      seen[name] = 1;
      out += '<span><i style="background:' + s.color + '"></i>' + esc(name) + '</span>';
    });
    return out;
  }

  // Every chart on the page: {spec, el (its plot box), plot}; redrawn when the view changes.
  var plots = [];
  function mount(spec, container, where) {
    var box = document.createElement('div'); box.className = 'chart';
    var bad = nonFinite(spec);
    if (bad.length) box.setAttribute('data-nonfinite', String(bad[0][0]));
    var note = (spec.note || '') + (bad.length ? (spec.note ? ' · ' : '') +
        'shaded: NaN/Inf from gstep ' + bad[0][0] : '');
    box.innerHTML = '<div class="ctitle">' + esc(spec.title) + '</div><div class="note">' +
      esc(note) + '</div><div class="plot"></div><div class="legend">' + legend(spec) + '</div>';
    container.appendChild(box);
    var entry = {spec: spec, el: box.querySelector('.plot'), box: box, where: where};
    entry.plot = chart(spec, entry.el);
    box.setAttribute('data-scale', isLog(spec) ? 'log' : 'linear');
    plots.push(entry);
  }
  function redraw() { plots.forEach(rebuild); }
  function rebuild(p) {
    // The zoom a user picked outlives the redraw (a new point, a settings change).
    var x = p.plot.scales.x, xs = p.plot.data[0];
    var zoomed = xs.length && (x.min > xs[0] || x.max < xs[xs.length - 1]) ? [x.min, x.max] : null;
    p.plot.destroy();
    p.plot = chart(p.spec, p.el);
    if (zoomed) p.plot.setScale('x', {min: zoomed[0], max: zoomed[1]});
    p.box.setAttribute('data-scale', isLog(p.spec) ? 'log' : 'linear');
    var bad = nonFinite(p.spec);
    if (bad.length) p.box.setAttribute('data-nonfinite', String(bad[0][0]));
    p.box.querySelector('.legend').innerHTML = legend(p.spec);
  }
  // Under serve: a chart whose spec changed gets its new data in place (the zoom a user picked
  // is kept); the note (a NaN region) and legend follow.
  function update(p, spec) {
    if (p.spec === spec) return;
    var same = spec.series.length === p.spec.series.length &&
        spec.bands.length === p.spec.bands.length &&
        String(spec.marks || '') === String(p.spec.marks || '');
    p.spec = spec;
    if (!same) { rebuild(p); return; }
    var x = p.plot.scales.x, xs = p.plot.data[0];
    var zoomed = xs.length && (x.min > xs[0] || x.max < xs[xs.length - 1]);
    p.plot.setData(chartData(spec, isLog(spec)), !zoomed);
    var bad = nonFinite(spec);
    if (bad.length) p.box.setAttribute('data-nonfinite', String(bad[0][0]));
  }
  function countCharts() {
    document.body.setAttribute('data-charts', String(plots.length));
  }

  // The Steps and GPU sections, then one card per key: a card keeps the height of its charts
  // before they are drawn (the page does not grow as it scrolls), and draws them when it
  // comes near the viewport.
  function section(id, group, specs) {
    var el = document.getElementById(id), have = 0;
    plots.forEach(function (p) { if (p.where.group === group) have++; });
    if (el) (specs || []).slice(have).forEach(function (spec, i) {
      mount(spec, el, {group: group, i: have + i});
    });
  }
  section('steps', 'steps', D.steps);
  section('gpu-charts', 'gpu', D.gpu_charts);
  section('differ-charts', 'differ', D.difference_charts);
  section('sweep-charts', 'sweep', D.sweep && D.sweep.charts);
  var CHART_HEIGHT = 282, CHART_WIDTH = 374;  // A chart box and the grid's gap, in px.
  var CARD_HEAD = 46;  // A card's title, its text line and padding, in px.
  var cards = D.cards.map(function (card, n) {
    return {card: card, el: document.getElementById('card-' + n), drawn: false};
  });
  function reserve() {
    var main = document.querySelector('main');
    var cols = Math.max(1, Math.floor((main.clientWidth - 28 + 14) / CHART_WIDTH));
    cards.forEach(function (c) {
      var rows = Math.ceil((c.card.charts ? c.card.charts.length : c.card.n_charts) / cols);
      if (!c.el) return;
      c.el.querySelector('.charts').style.minHeight = (rows * CHART_HEIGHT) + 'px';
      // A card off screen is not laid out (content-visibility: auto in report.css): it takes
      // this height until it has been drawn once, so the page keeps its length as it scrolls.
      c.el.style.containIntrinsicSize = 'auto ' + (rows * CHART_HEIGHT + CARD_HEAD) + 'px';
    });
  }
  // A card's charts: in the main data block, or in its own block after the scripts (a static
  // page's later cards), parsed when first drawn; null while the browser has not read it yet.
  function chartsOf(c, n) {
    if (!c.card.charts && LIVE) {
      fetchCard(c, n);
      return null;
    }
    if (!c.card.charts) {
      var block = document.getElementById('cd-' + n);
      if (!block || document.readyState === 'loading') return null;
      c.card.charts = JSON.parse(block.textContent);
    }
    return unpackCharts(c.card.charts);
  }
  // A card's charts as report_html.py packs them (pack_charts): each chart and series names
  // its description in the page's table of styles (D.styles, JSON strings); an even x is
  // {a, d, n}; values are {c, n} (all one value) or the base64 of their float32 bytes (NaN: no
  // value). Unpacked in place, once; a chart already unpacked (serve's updates) is left as is.
  var styles = (D.styles || []).map(function (s) { return JSON.parse(s); });
  function unpackValues(v) {
    if (Array.isArray(v)) return v;
    var out, i;
    if (typeof v !== 'string') {
      out = new Array(v.n);
      for (i = 0; i < v.n; i++) out[i] = v.c;
      return out;
    }
    var bin = atob(v), bytes = new Uint8Array(bin.length);
    for (i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    var f = new Float32Array(bytes.buffer);
    out = new Array(f.length);
    for (i = 0; i < f.length; i++) out[i] = f[i] !== f[i] ? null : f[i];
    return out;
  }
  function unpackCharts(charts, table) {
    table = table || styles;
    charts.forEach(function (packed, k) {
      if (packed.h === undefined) return;
      var spec = Object.assign({}, table[packed.h]), x = packed.x;
      if (!Array.isArray(x)) {
        spec.x = new Array(x.n);
        for (var i = 0; i < x.n; i++) spec.x[i] = x.a + i * x.d;
      } else {
        spec.x = x;
      }
      spec.series = packed.series.map(function (s) {
        return Object.assign({}, table[s.s], {values: unpackValues(s.v), gaps: s.g || []});
      });
      charts[k] = spec;
    });
    return charts;
  }
  // Under serve: a card's charts come from the server (/card?n=N, packed with their own
  // styles) when it is first drawn, and again when an update says they changed; a drawn card
  // gets the new data in its charts (the zoom kept) and the charts it gained.
  function fetchCard(c, n) {
    if (c.fetching) return;
    c.fetching = true;
    fetch('card?n=' + n, {cache: 'no-store'}).then(function (r) {
      if (!r.ok) throw new Error('card ' + n + ': HTTP ' + r.status);
      return r.json();
    }).then(function (d) {
      c.fetching = false;
      var table = d.charts.styles.map(function (s) { return JSON.parse(s); });
      c.card.charts = unpackCharts(d.charts.charts, table);
      c.version = d.version;
      if (!c.drawn) { draw(c); return; }
      plots.forEach(function (p) {
        if (p.where.group === 'card-' + n && c.card.charts[p.where.i]) {
          update(p, c.card.charts[p.where.i]);
        }
      });
      extend();
    }).catch(function (e) {
      c.fetching = false;
      var note = document.getElementById('live-note');
      if (note) note.textContent = 'server unreachable (' + e.message + '): retrying';
    });
  }
  function draw(c) {
    if (c.drawn || !c.el) return;
    var box = c.el.querySelector('.charts'), n = +c.el.getAttribute('data-n');
    if (!chartsOf(c, n)) return;
    c.drawn = true;
    c.card.charts.forEach(function (spec, i) { mount(spec, box, {group: 'card-' + n, i: i}); });
    c.mounted = c.card.charts.length;
    countCharts();
  }
  // Under serve: charts a model gained (a step time once two steps are in, a distribution)
  // are added to the sections and to the cards already drawn.
  function extend() {
    section('steps', 'steps', D.steps);
    section('gpu-charts', 'gpu', D.gpu_charts);
    section('sweep-charts', 'sweep', D.sweep && D.sweep.charts);
    cards.forEach(function (c, n) {
      if (!c.drawn || c.mounted >= c.card.charts.length) return;
      var box = c.el.querySelector('.charts');
      c.card.charts.slice(c.mounted).forEach(function (spec, i) {
        mount(spec, box, {group: 'card-' + n, i: c.mounted + i});
      });
      c.mounted = c.card.charts.length;
    });
    reserve();
    countCharts();
  }
  reserve();
  // Cards drawn at once, before they scroll into view: FIRST while the browser still reads the
  // page (the first charts show, the rest of a large page goes on loading), EAGER once it has.
  var FIRST = 2, EAGER = 24;
  var lazy = 'IntersectionObserver' in window ? new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (!e.isIntersecting) return;
      var c = cards[+e.target.getAttribute('data-n')];
      draw(c);
      if (c.drawn) lazy.unobserve(e.target);
    });
  }, {rootMargin: '800px'}) : null;
  function drawCards(eager) {
    cards.forEach(function (c, n) {
      if (!c.el || c.drawn) return;
      c.el.setAttribute('data-n', String(n));
      if (n < eager || !lazy) draw(c);
      if (!c.drawn && lazy) lazy.observe(c.el);
    });
  }
  drawCards(document.readyState === 'loading' ? FIRST : EAGER);
  // The later cards' data follows the scripts: once the page is read, draw and watch again.
  if (document.readyState === 'loading') {
    document.addEventListener('DOMContentLoaded', function () {
      if (lazy) cards.forEach(function (c) { if (c.el) lazy.unobserve(c.el); });
      drawCards(EAGER);
    });
  }

  // The key tree: keys grouped by their '/' prefixes (block05/layer03/...), each group
  // collapsible, each key a link to its card and an "only" button that shows that card alone.
  var tree = document.getElementById('key-tree');
  function buildTree() {
    var root = {children: {}, keys: []};
    cards.forEach(function (c, n) {
      var parts = c.card.key.split('/'), node = root;
      for (var i = 0; i < parts.length - 1; i++) {
        node = node.children[parts[i]] || (node.children[parts[i]] = {children: {}, keys: []});
      }
      node.keys.push({name: parts[parts.length - 1], n: n});
    });
    function count(node) {
      var k = node.keys.length;
      for (var name in node.children) k += count(node.children[name]);
      return k;
    }
    function leaf(name, n) {
      return '<div class=leaf data-n=' + n + '><a href="#card-' + n + '">' + esc(name) +
        '</a><button class=only data-n=' + n + ' title="show only this key">only</button></div>';
    }
    function html(node) {
      var out = '';
      Object.keys(node.children).forEach(function (name) {
        var child = node.children[name];
        // A group of one key and no subgroup is that key's leaf ("layer03/w"), not a group.
        if (!Object.keys(child.children).length && child.keys.length === 1) {
          out += leaf(name + '/' + child.keys[0].name, child.keys[0].n);
          return;
        }
        out += '<details open class=group><summary>' + esc(name) + '/ <span class=count>' +
          count(child) + '</span></summary>' + html(child) + '</details>';
      });
      node.keys.forEach(function (k) { out += leaf(k.name, k.n); });
      return out;
    }
    tree.innerHTML = html(root);
    var found = tree.querySelectorAll('.leaf');
    for (var i = 0; i < found.length; i++) leaves[+found[i].getAttribute('data-n')] = found[i];
  }
  // The tables of rows (kernels, CUDA calls, modules, copies, ranks, alerts, differences): a
  // click on a column's head sorts by it (numbers as numbers, largest first, '–' and other
  // blanks last; a second click the other way), and a table of more than SEARCH_ROWS rows gets
  // a search box that keeps the rows holding what is typed. Long tables scroll in a box.
  var SEARCH_ROWS = 8, SCROLL_ROWS = 25;
  function cellValue(cell) {
    var text = cell ? cell.textContent.trim() : '';
    // A cell whose text has a unit ("5.4 KB", "2 ms") carries the number to sort by.
    var by = cell && cell.getAttribute('data-sort');
    var num = by !== null && by !== undefined && by !== '' ? parseFloat(by)
      : /^[-+]?(\d|\.\d)/.test(text) ? parseFloat(text.replace(/,/g, '')) : NaN;
    return {text: text.toLowerCase(), num: isFinite(num) ? num : null};
  }
  function sortBy(table, column, head) {
    var body = table.tBodies[0];
    var rows = Array.prototype.map.call(body.rows, function (r, i) {
      return {row: r, value: cellValue(r.cells[column]), i: i};
    });
    var numeric = rows.some(function (r) { return r.value.num !== null; });
    var was = head.getAttribute('aria-sort');
    var ascending = was ? was !== 'ascending' : !numeric;
    rows.sort(function (a, b) {
      var x = a.value, y = b.value, c;
      if (numeric) {
        if (x.num === null || y.num === null) {
          return (x.num === null) - (y.num === null) || a.i - b.i;  // Blanks last either way.
        }
        c = x.num - y.num;
      } else {
        c = x.text < y.text ? -1 : x.text > y.text ? 1 : 0;
      }
      return (ascending ? c : -c) || a.i - b.i;
    });
    var heads = head.parentNode.cells;
    for (var h = 0; h < heads.length; h++) heads[h].removeAttribute('aria-sort');
    head.setAttribute('aria-sort', ascending ? 'ascending' : 'descending');
    rows.forEach(function (r) { body.appendChild(r.row); });
  }
  function searchable(table) {
    var body = table.tBodies[0];
    var box = document.createElement('input');
    box.type = 'search';
    box.className = 'table-search';
    box.placeholder = 'search ' + body.rows.length + ' rows';
    box.addEventListener('input', function () {
      var q = box.value.toLowerCase(), shown = 0;
      for (var i = 0; i < body.rows.length; i++) {
        var keep = body.rows[i].textContent.toLowerCase().indexOf(q) >= 0;
        body.rows[i].style.display = keep ? '' : 'none';
        if (keep) shown++;
      }
      table.setAttribute('data-shown-rows', String(shown));
    });
    table.parentNode.insertBefore(box, table);
  }
  function enhanceTables(root) {
    var tables = root.querySelectorAll('table.device, table.alerts, table.runs');
    for (var t = 0; t < tables.length; t++) {
      var table = tables[t];
      if (table.hasAttribute('data-sortable') || !table.tHead || !table.tBodies.length) continue;
      if (table.querySelector('#alerts-more')) continue;  // Enhanced once whole (fillAlerts).
      table.setAttribute('data-sortable', '1');
      var heads = table.tHead.rows[table.tHead.rows.length - 1].cells;
      for (var h = 0; h < heads.length; h++) {
        heads[h].classList.add('sortable');
        heads[h].title = 'sort by ' + heads[h].textContent;
        heads[h].addEventListener('click', sortBy.bind(null, table, h, heads[h]));
      }
      var n = table.tBodies[0].rows.length;
      if (n > SEARCH_ROWS) searchable(table);
      if (n > SCROLL_ROWS) {
        var box = document.createElement('div');
        box.className = 'table-scroll';
        table.parentNode.insertBefore(box, table);
        box.appendChild(table);
      }
    }
  }
  var leaves = [];  // The tree's leaf of each card.
  var filter = document.getElementById('filter');
  var shown = document.getElementById('shown');
  var only = null;  // The card shown alone ("only"), else null.
  function applyFilter() {
    var q = filter ? filter.value.toLowerCase() : '';
    var visible = 0;
    cards.forEach(function (c, n) {
      var show = only === null ? c.card.key.toLowerCase().indexOf(q) >= 0 : n === only;
      if (c.el) c.el.style.display = show ? '' : 'none';
      var leaf = leaves[n];
      if (leaf) leaf.style.display = show ? '' : 'none';
      if (show) visible++;
    });
    if (tree) {
      // A group with no key left is hidden; a search opens the groups it matches in.
      var groups = tree.querySelectorAll('details.group');
      for (var i = groups.length - 1; i >= 0; i--) {
        var any = groups[i].querySelector('.leaf:not([style*="none"])');
        groups[i].style.display = any ? '' : 'none';
        if ((q || only !== null) && any) groups[i].open = true;
      }
    }
    if (shown) {
      shown.textContent = visible === cards.length ? cards.length + ' keys' :
        visible + ' of ' + cards.length + ' keys';
    }
    document.body.setAttribute('data-visible-cards', String(visible));
  }
  if (tree) {
    buildTree();
    tree.addEventListener('click', function (e) {
      var t = e.target;
      if (t.classList && t.classList.contains('only')) {
        only = +t.getAttribute('data-n');
        applyFilter();
        document.getElementById('card-' + only).scrollIntoView();
        e.preventDefault();
      }
    });
  }
  var all = document.getElementById('show-all');
  if (all) all.addEventListener('click', function () {
    only = null; if (filter) filter.value = ''; applyFilter();
  });
  var expand = document.getElementById('expand-all');
  if (expand) expand.addEventListener('click', function () {
    var groups = tree.querySelectorAll('details.group'), open = expand.textContent === 'expand all';
    for (var i = 0; i < groups.length; i++) groups[i].open = open;
    expand.textContent = open ? 'collapse all' : 'expand all';
  });
  if (filter) filter.addEventListener('input', function () { only = null; applyFilter(); });
  applyFilter();

  var smooth = document.getElementById('smooth');
  if (smooth) smooth.addEventListener('input', function () {
    view.smooth = +smooth.value;
    document.getElementById('smooth-value').textContent = view.smooth.toFixed(2);
    redraw();
  });
  var yscale = document.getElementById('yscale');
  if (yscale) yscale.addEventListener('change', function () {
    view.yscale = yscale.value; redraw();
  });
  // The run filter, offered where the page draws more than one run: a regular expression
  // (case-insensitive; text that is none is matched as typed) on the runs' labels, as
  // TensorBoard's "Filter runs"; charts, legends and tooltips show the runs it matches.
  // Under serve the page reloads when a run joins: what was typed is kept for the tab.
  var runFilter = document.getElementById('run-filter');
  function trainedRuns() { return (D.runs || []).filter(function (r) { return !r.evaluation; }); }
  if (runFilter && trainedRuns().length > 1) {
    document.getElementById('run-filter-row').hidden = false;
    var runsShown = document.getElementById('runs-shown'), typing = null;
    var filterRuns = function () {
      var q = runFilter.value.trim(), trained = trainedRuns();
      try {
        view.runs = q ? new RegExp(q, 'i') : null;
      } catch (e) {
        view.runs = new RegExp(q.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'), 'i');
      }
      var n = trained.filter(function (r) { return !view.runs || view.runs.test(r.label); }).length;
      runsShown.textContent = view.runs ? n + ' of ' + trained.length + ' runs' : '';
      document.body.setAttribute('data-shown-runs', String(n));
      if (LIVE) try { sessionStorage.setItem('xdl-run-filter', q); } catch (e) { /* none */ }
      redraw();
    };
    runFilter.addEventListener('input', function () {
      clearTimeout(typing);
      typing = setTimeout(filterRuns, 150);  // One redraw a pause in typing, not a key.
    });
    var kept = null;
    if (LIVE) try { kept = sessionStorage.getItem('xdl-run-filter'); } catch (e) { /* none */ }
    if (kept) { runFilter.value = kept; filterRuns(); }
  }
  countCharts();
  // A report's alerts table holds its first rows (report_html.ALERT_ROWS); the others, in a
  // template after the charts' data, move in once the page is read, then it gets its sorting
  // and search box.
  function fillAlerts() {
    var more = document.getElementById('alerts-more');
    var rest = document.getElementById('alerts-rest');
    if (!more || !rest) return;
    var body = more.parentNode;
    body.removeChild(more);
    var rows = rest.content.querySelector('tbody');
    while (rows.firstChild) body.appendChild(rows.firstChild);
    rest.parentNode.removeChild(rest);
    enhanceTables(document.getElementById('alerts-table'));
  }
  if (document.getElementById('alerts-more')) {
    document.addEventListener('DOMContentLoaded', fillAlerts);
  }
  enhanceTables(document);
  // For tests and the console: the charts and the settings.
  window.xdlReport = {plots: plots, view: view, redraw: redraw, data: D};
  if (LIVE && window.xdlLive) {
    window.xdlLive(D, {cards: cards, plots: plots, update: update, extend: extend,
                       fetchCard: fetchCard, enhanceTables: enhanceTables});
  }
})();
