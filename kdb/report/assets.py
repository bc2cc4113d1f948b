"""The static parts of the `kdb report` page: its style sheet and its script (table sort and filter, drill-down,
the plots' click handlers). Plain text kdb/report/html.py writes into the page as it is."""

STYLE = """
body{font:14px system-ui,sans-serif;margin:20px;color:#222}h1{font-size:20px}h2{font-size:16px;margin-top:28px}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(560px,1fr));gap:12px}
.plot{border:1px solid #ddd;border-radius:4px;min-height:360px;min-width:0}.plot.wide{grid-column:1/-1}
table{border-collapse:collapse;font:12px ui-monospace,monospace}th,td{padding:2px 6px;text-align:left;
border-bottom:1px solid #eee;white-space:nowrap}th{cursor:pointer;background:#f4f4f4;position:sticky;top:0}
tbody tr:hover{background:#eef}tr.sel{background:#dde}#tablebox,.tablebox{max-height:70vh;overflow:auto;border:1px solid #ddd}
#kernels{width:100%}td .nm{display:inline-block;max-width:36ch;overflow:hidden;text-overflow:ellipsis;
vertical-align:bottom}td.reason{white-space:normal;min-width:28ch;overflow-wrap:anywhere}
#autotune-table{width:100%}#autotune-table td{white-space:normal;overflow-wrap:anywhere}
.regressed{color:#d62728}.improved{color:#2ca02c}.mixed{color:#ff7f0e}
.neutral{color:#7f7f7f}#drill{margin-top:12px;border:1px solid #ccc;padding:8px;display:none}
#drill pre{max-height:360px;overflow:auto;background:#f8f8f8;padding:6px}.ins{color:#2ca02c}.del{color:#d62728}
.hunk{color:#6f42c1}.side{display:inline-block;vertical-align:top;margin-right:24px}
"""

APP = """
const D = JSON.parse(document.getElementById('kdb-data').textContent);
for (const [id, fig] of Object.entries(D.figures)) {
  Plotly.newPlot(id, fig.data, fig.layout, {displaylogo: false, responsive: true, displayModeBar: 'hover',
    modeBarButtonsToRemove: ['select2d', 'lasso2d', 'autoScale2d', 'toggleSpikelines', 'hoverClosestCartesian',
      'hoverCompareCartesian', 'zoomIn2d', 'zoomOut2d']});
}
const esc = s => String(s ?? '').replace(/[&<>"]/g, c => ({'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;'}[c]));
let sortCol = 0, sortDir = 1;
function cmp(a, b) {
  const x = a.sort[sortCol], y = b.sort[sortCol];
  if (x === y) return a.id - b.id;
  if (x === null || x === undefined) return 1;
  if (y === null || y === undefined) return -1;
  return (x < y ? -1 : 1) * sortDir;
}
function draw() {
  const q = document.getElementById('filter').value.toLowerCase();
  const st = document.getElementById('status').value;
  const rows = D.rows.filter(r => (!st || r.status === st) && r.cells.join(' ').toLowerCase().includes(q));
  rows.sort(cmp);
  document.getElementById('count').textContent = rows.length + ' of ' + D.rows.length + ' kernels';
  document.querySelector('#kernels tbody').innerHTML = rows.map(r =>
    '<tr data-id="' + r.id + '">' + r.cells.map((c, i) =>
      '<td class="' + (i === 0 ? esc(r.status) : (i === r.cells.length - 1 && D.kind === 'diff' ? 'reason' : '')) +
        '">' + (i === D.name_col ? '<span class="nm" title="' + esc(c) + '">' + esc(c) + '</span>' : esc(c)) + '</td>'
    ).join('') + '</tr>').join('');
}
document.querySelectorAll('#kernels th').forEach((th, i) => th.addEventListener('click', () => {
  sortDir = sortCol === i ? -sortDir : 1; sortCol = i; draw();
}));
document.getElementById('filter').addEventListener('input', draw);
document.getElementById('status').addEventListener('change', draw);
function table(head, rows) {
  return '<table><tr>' + head.map(h => '<th>' + esc(h) + '</th>').join('') + '</tr>' +
    rows.map(r => '<tr>' + r.map(c => '<td>' + esc(c) + '</td>').join('') + '</tr>').join('') + '</table>';
}
function isa(text) {
  return text.split('\\n').map(l => '<span class="' + (l.startsWith('@@') ? 'hunk' : l.startsWith('+') ? 'ins' :
    l.startsWith('-') ? 'del' : '') + '">' + esc(l) + '</span>').join('\\n');
}
function drill(id) {
  const k = D.drill[id]; if (!k) return;
  document.querySelectorAll('#kernels tr.sel').forEach(tr => tr.classList.remove('sel'));
  const tr = document.querySelector('#kernels tr[data-id="' + id + '"]'); if (tr) tr.classList.add('sel');
  let h = '<h2 id="drill-title">' + esc(k.name) + ' ' + esc(k.a_key || '-') + ' → ' + esc(k.b_key || '-') +
    ' <span class="' + esc(k.status) + '">' + esc(k.status) + '</span></h2>';
  if (k.reason) h += '<p><b>reason:</b> ' + esc(k.reason) + '</p>';
  h += '<div class="side"><h3>facts</h3>' + table(D.fact_head, k.facts) + '</div>';
  if (k.mix && k.mix.length) h += '<div class="side"><h3>instruction mix by group</h3>' +
    table(D.mix_head, k.mix) + '</div>';
  if (k.loops && k.loops.length) {
    h += '<div id="loop-mix"><h3>instruction mix by loop depth (0: outside every loop)</h3>';
    for (const depth of [...new Set(k.loops.map(r => r[0]))]) {
      h += '<div class="side"><h4>loop depth ' + esc(depth) + '</h4>' + table(['group', 'A', 'B', 'delta'],
        k.loops.filter(r => r[0] === depth).map(r => r.slice(1))) + '</div>';
    }
    h += '</div>';
  } else if (k.loop_known && !(k.loop_known[0] && k.loop_known[1])) {
    h += '<p>loop depths unknown in ' + ['A', 'B'].filter((s, i) => !k.loop_known[i]).join(' and ') + '</p>';
  }
  for (const side of ['a', 'b']) {
    const hot = k['hot_' + side] || [];
    if (hot.length) h += '<div class="side"><h3>hot source lines (' + side.toUpperCase() + ')</h3>' +
      table(['file', 'line', 'instructions', 'groups'], hot.map(x => [x.file, x.line, x.count, x.groups])) + '</div>';
  }
  if (k.metadata && k.metadata.length) h += '<h3>metadata differences</h3><pre>' + esc(k.metadata.join('\\n')) + '</pre>';
  if (k.isa) h += '<h3>normalised ISA hunks</h3><pre id="isa">' + isa(k.isa) + '</pre>';
  else if (k.isa === '') h += '<p>normalised ISA identical</p>';
  const box = document.getElementById('drill'); box.innerHTML = h; box.style.display = 'block';
}
document.querySelector('#kernels tbody').addEventListener('click', e => {
  const tr = e.target.closest('tr'); if (tr) drill(tr.dataset.id);
});
for (const id of D.clickable) {
  document.getElementById(id).on('plotly_click', ev => {
    const p = ev.points[0]; if (p && p.customdata !== undefined) drill(String(p.customdata));
  });
}
draw();
"""
