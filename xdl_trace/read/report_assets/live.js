// The live page's polling (xdl-trace serve): asks /update for a newer model twice a second, redraws and fetches the changed cards; report_html.py inlines this file, less this first line, before report.js.
window.xdlLive = function (D, page) {
  var version = document.body.getAttribute('data-version');
  var note = document.getElementById('live-note');
  var shownAlerts = null;  // The alerts table's HTML last put on the page.
  function keysOf(model) {
    return model.cards.map(function (c) { return c.key; }).join('\n');
  }
  // Each drawn chart of a section gets the new model's spec at the same place (its n-th);
  // the model's cards come without their charts: a drawn card whose charts changed since it
  // fetched them (card_versions) fetches them again; the others fetch when drawn. Charts the
  // model gained are added.
  function apply(update) {
    var model = update.model;
    if (keysOf(model) !== keysOf(D) || model.runs.length !== D.runs.length) {
      location.reload();  // New keys or runs: the page's structure changed.
      return;
    }
    var fresh = {steps: model.steps, gpu: model.gpu_charts || []};
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
    D.runs = model.runs; D.alerts = model.alerts;
    document.getElementById('runs-table').innerHTML = update.runs_html;
    var alerts = document.getElementById('alerts-table');
    if (update.alerts_html !== shownAlerts) {
      // Replaced only when it changed; what the user typed in its search box is kept.
      var typed = alerts.querySelector('.table-search');
      var query = typed ? typed.value : '';
      alerts.innerHTML = update.alerts_html;
      shownAlerts = update.alerts_html;
      page.enhanceTables(alerts);
      var box = alerts.querySelector('.table-search');
      if (box && query) {
        box.value = query;
        box.dispatchEvent(new Event('input'));
      }
    }
    document.getElementById('n-alerts').textContent = String(update.n_alerts);
    page.extend();
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
