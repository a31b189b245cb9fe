// The live page's polling (xdl-trace serve): asks /update for a newer model twice a second, redraws and fetches the changed cards; report_html.py inlines this file, less this first line, before report.js.
window.xdlLive = function (D, page) {
  var version = document.body.getAttribute('data-version');
  var note = document.getElementById('live-note');
  var shown = {};  // Element id -> the HTML last put in it.
  function keysOf(model) {
    return model.cards.map(function (c) { return c.key; }).join('\n');
  }
  // Each drawn chart of a section gets the new model's spec at the same place (its n-th);
  // the model's cards come without their charts: a drawn card whose charts changed since it
  // fetched them (card_versions) fetches them again; the others fetch when drawn. Charts the
  // model gained are added.
  function apply(update) {
    var model = update.model;
    var sweepless = model.sweep.charts.length && !document.getElementById('sweep-charts');
    if (keysOf(model) !== keysOf(D) || model.runs.length !== D.runs.length || sweepless) {
      location.reload();  // New keys, runs or a sweep's charts: the page's structure changed.
      return;
    }
    var fresh = {steps: model.steps, gpu: model.gpu_charts || [], sweep: model.sweep.charts};
    page.plots.forEach(function (p) {
      var list = fresh[p.where.group];
      if (list && list[p.where.i]) page.update(p, list[p.where.i]);
    });
    page.cards.forEach(function (c, n) {
      var charts = c.drawn ? c.card.charts : null;
      c.card = model.cards[n];
      c.card.charts = charts;
      // Its heading's line ("float32 [8] · stats · 389 records") counts the records too.
      var meta = c.el && c.el.querySelector('h3 .meta');
      if (meta && meta.textContent !== c.card.meta) meta.textContent = c.card.meta;
      if (c.drawn && c.version !== model.card_versions[n]) page.fetchCard(c, n);
    });
    D.steps = model.steps; D.gpu_charts = model.gpu_charts; D.cards = model.cards;
    D.runs = model.runs; D.alerts = model.alerts; D.sweep = model.sweep;
    replace('runs-table', update.runs_html);
    replace('alerts-table', update.alerts_html);
    // The headline, the host-time tables and the GPU tables follow the run as the alerts do.
    Object.keys(update.sections_html).forEach(function (id) {
      replace(id, update.sections_html[id]);
    });
    document.getElementById('n-alerts').textContent = String(update.n_alerts);
    page.extend();
  }
  // A table's element gets its new HTML only when it changed; the order the user sorted a
  // table in and what they typed in its search box are kept (the n-th table of the element
  // gets the n-th table's).
  function replace(id, html) {
    var el = document.getElementById(id);
    if (!el || shown[id] === html) return;
    var sorted = Array.prototype.map.call(el.querySelectorAll('table'), function (t) {
      var head = t.querySelector('th[aria-sort]');
      return head && {column: head.cellIndex, order: head.getAttribute('aria-sort')};
    });
    var typed = Array.prototype.map.call(el.querySelectorAll('.table-search'), function (b) {
      return b.value;
    });
    el.innerHTML = html;
    shown[id] = html;
    page.enhanceTables(el);
    el.querySelectorAll('table').forEach(function (t, i) {
      if (!sorted[i] || !t.tHead) return;
      var head = t.tHead.rows[t.tHead.rows.length - 1].cells[sorted[i].column];
      if (!head) return;
      head.click();  // Sorts (report.js sortBy); a second click turns the order round.
      if (head.getAttribute('aria-sort') !== sorted[i].order) head.click();
    });
    el.querySelectorAll('.table-search').forEach(function (box, i) {
      if (typed[i]) {
        box.value = typed[i];
        box.dispatchEvent(new Event('input'));
      }
    });
  }
  function poll() {
    fetch('update?since=' + version, {cache: 'no-store'}).then(function (r) {
      if (r.status === 204) return null;
      return r.json();
    }).then(function (update) {
      if (update) {
        version = String(update.version);
        document.body.setAttribute('data-version', version);
        apply(update);
        note.textContent = update.state + ' · ' + update.records + ' records · updated ' +
          new Date().toLocaleTimeString();
        document.body.setAttribute('data-records', String(update.records));
      }
    }).catch(function (e) {
      note.textContent = 'server unreachable (' + e.message + '): retrying';
    }).then(function () { setTimeout(poll, 500); });
  }
  setTimeout(poll, 500);
};
