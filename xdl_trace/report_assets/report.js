// The report page's script (draws the charts with uPlot): xdl_trace/report_html.py inlines this file, less this first line.
(function () {
  var D = JSON.parse(document.getElementById('xdl-report-data').textContent);
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
  function tooltip(spec) {
    var tip;
    return {hooks: {
      init: function (u) {
        tip = document.createElement('div'); tip.className = 'tip'; u.over.appendChild(tip);
      },
      setCursor: function (u) {
        var i = u.cursor.idx;
        if (i == null) { tip.style.display = 'none'; return; }
        var h = '<b>gstep ' + u.data[0][i] + '</b>';
        spec.series.forEach(function (s, k) {
          var v = u.data[k + 1][i];
          if (!s.tip || v === undefined) return;
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
  function chart(spec, el) {
    var width = Math.max(260, el.clientWidth);
    var series = [{label: spec.xlabel}];
    spec.series.forEach(function (s) {
      // A gap (a NaN/Inf value) breaks the line; a gstep the series has no point at is spanned.
      series.push({label: s.label, stroke: s.color, width: s.width, dash: s.dash || undefined,
                   spanGaps: false, points: {show: false}, show: s.draw !== false});
    });
    // Axis titles: the quantity and its unit (spec.ylabel), and gstep.
    var labelFont = '11px system-ui, sans-serif';
    var yAxis = {size: 64, values: function (u, v) { return v.map(fmt); },
                 grid: {stroke: '#eef0f4'}, label: spec.ylabel || undefined, labelSize: 16,
                 labelFont: labelFont};
    if (spec.log) {
      // Powers of ten as 1e12, 1e-6 where fmt would write 1.00e+12.
      yAxis.values = function (u, v) {
        return v.map(function (x) {
          var a = Math.abs(x);
          return x != null && isDecade(x) && (a >= 1e5 || a < 1e-3) ?
              (x < 0 ? '-' : '') + '1e' + Math.round(Math.log10(a)) : fmt(x);
        });
      };
      yAxis.filter = decades;
      yAxis.grid.filter = decades;
      yAxis.ticks = {filter: decades};
    }
    var opts = {
      width: width, height: 210, series: series, legend: {show: false},
      bands: spec.bands.map(function (b) { return {series: [b.hi + 1, b.lo + 1], fill: b.fill}; }),
      cursor: {sync: {key: 'gstep'}, drag: {x: true, y: false}, points: {size: 5}},
      scales: {x: {time: false}, y: spec.log ? {distr: 3} : {}},
      axes: [
        {size: 30, values: function (u, v) { return v.map(fmt); }, grid: {stroke: '#eef0f4'},
         label: spec.xlabel, labelSize: 16, labelFont: labelFont},
        yAxis
      ],
      plugins: [tooltip(spec)]
    };
    // uPlot breaks a line at null only: undefined marks a point to skip over.
    var data = [spec.x].concat(spec.series.map(function (s) {
      var v = s.values.map(function (y) { return y === null ? undefined : y; });
      (s.gaps || []).forEach(function (i) { v[i] = null; });
      return v;
    }));
    return new uPlot(opts, data, el);
  }
  function legend(spec) {
    var seen = {}, out = '';
    spec.series.forEach(function (s) {
      if (s.legend === false || (!s.legend && (!s.tip || !s.width))) return;
      var name = s.label.replace(/ (mean|min|max)$/, '');
      if (seen[name]) return;
      seen[name] = 1;
      out += '<span><i style="background:' + s.color + '"></i>' + esc(name) + '</span>';
    });
    return out;
  }
  var plots = [];
  function mount(spec, container) {
    var box = document.createElement('div'); box.className = 'chart';
    box.innerHTML = '<div class="ctitle">' + esc(spec.title) + (spec.log ? ' (log scale)' : '') +
      '</div><div class="note">' + esc(spec.note || '') + '</div><div class="plot"></div>' +
      '<div class="legend">' + legend(spec) + '</div>';
    container.appendChild(box);
    plots.push(chart(spec, box.querySelector('.plot')));
  }
  var steps = document.getElementById('steps');
  D.steps.forEach(function (spec) { mount(spec, steps); });
  var gpu = document.getElementById('gpu-charts');
  if (gpu) (D.gpu_charts || []).forEach(function (spec) { mount(spec, gpu); });
  // The first cards are drawn at once; the others when they come near the viewport, so a
  // report of hundreds of keys opens quickly.
  var EAGER = 24;
  var lazy = 'IntersectionObserver' in window ? new IntersectionObserver(function (entries) {
    entries.forEach(function (e) {
      if (!e.isIntersecting) return;
      lazy.unobserve(e.target);
      draw(+e.target.getAttribute('data-n'));
    });
  }, {rootMargin: '800px'}) : null;
  function draw(n) {
    var box = document.getElementById('card-' + n).querySelector('.charts');
    D.cards[n].charts.forEach(function (spec) { mount(spec, box); });
    document.body.setAttribute('data-charts', String(plots.length));
  }
  D.cards.forEach(function (card, n) {
    var el = document.getElementById('card-' + n);
    el.setAttribute('data-n', String(n));
    if (n < EAGER || !lazy) draw(n); else lazy.observe(el);
  });
  var filter = document.getElementById('filter');
  if (filter) {
    filter.addEventListener('input', function () {
      var q = filter.value.toLowerCase();
      document.querySelectorAll('.card').forEach(function (el) {
        el.style.display = el.getAttribute('data-key').toLowerCase().indexOf(q) >= 0 ? '' : 'none';
      });
    });
  }
  document.body.setAttribute('data-charts', String(plots.length));
})();
