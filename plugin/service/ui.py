"""``GET /ui``: a page to look at searches and experiments, server-rendered, no build step.

The page itself holds no data (it is served without a token); a little JavaScript calls the
API with the bearer token typed into it (kept in the tab's ``sessionStorage`` only): the fused
list beside each path's own top results (a one-path search per path), and every experiment's
report with its chart. Each result shows its title, heading path, resource and lines and a
snippet, with its explanation (on hover and on click) worded as ``hybridsag search`` words
it: the page searches through ``POST /v1/ui/search`` (:func:`build_router`), which takes
``POST /v1/search``'s body, runs that search, and answers each result as the CLI renders it
(:func:`display_result`, with :mod:`hybridsag.output.render`'s heading line, snippet and
explanation), so the page formats nothing itself. All
text from the API is written with ``textContent``, never parsed as HTML.

The page is sent with a Content-Security-Policy (:data:`PAGE_CSP`) that runs only its own
inline script and style (by their SHA-256), talks to its own origin only, and may not be framed;
every answer of the service also carries ``X-Frame-Options: DENY`` and ``nosniff``
(:mod:`hybridsag.service.edge`).
"""

from __future__ import annotations

import base64
import hashlib
import html
import json

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from hybridsag import __version__
from hybridsag.output.focus import terms_pattern
from hybridsag.output.render import explain_lines, headings_below, snippet
from hybridsag.paths import PATHS, path_names
from hybridsag.results import SearchResult
from hybridsag.service.auth import Principal
from hybridsag.service.models import SearchRequest

__all__ = ["PAGE_CSP", "build_router", "display_result", "render_page"]

#: Columns of a snippet on the page (a path's column is narrow).
SNIPPET_WIDTH = 72

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.2em;color:#222}
h1{font-size:1.3em;margin:0 0 .5em} h2{font-size:1.1em;margin:1.2em 0 .4em}
form{display:flex;gap:.5em;flex-wrap:wrap;align-items:center}
input[type=text],input[type=password]{padding:.35em;border:1px solid #aaa;border-radius:4px}
#q{flex:1;min-width:18em} button{padding:.35em .9em}
#columns{display:grid;grid-template-columns:repeat(auto-fit,minmax(15em,1fr));gap:.8em;margin-top:1em}
.col{border:1px solid #ddd;border-radius:6px;padding:.5em;background:#fafafa}
.col h3{margin:.1em 0 .4em;font-size:1em}
.col ol{margin:0;padding-left:1.6em} .col li{margin:.25em 0;cursor:pointer}
.title{font-weight:600} .where{color:#666;font-size:.8em}
.snip{color:#555;font-size:.9em;white-space:pre-wrap}
.why{display:none;white-space:pre-wrap;font-size:.8em;background:#fff;border:1px solid #ccc;padding:.3em}
li.open .why{display:block}
.exp{border:1px solid #ddd;border-radius:6px;padding:.6em;margin:.6em 0}
.exp table{border-collapse:collapse;margin:.4em 0} .exp td,.exp th{border:1px solid #ccc;padding:.2em .5em}
.summary{font-weight:600} .status{color:#a00} img.chart{max-width:100%;border:1px solid #eee}
"""

_SCRIPT = """
const PATHS = JSON.parse(document.getElementById('paths').textContent);
const tokenBox = document.getElementById('token');
tokenBox.value = sessionStorage.getItem('hybridsag-token') || '';
function headers() {
  sessionStorage.setItem('hybridsag-token', tokenBox.value);
  return {'Content-Type': 'application/json', 'Authorization': 'Bearer ' + tokenBox.value};
}
function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
}
function status(msg) { document.getElementById('status').textContent = msg; }
async function call(method, url, body) {
  const r = await fetch(url, {method, headers: headers(), body: body && JSON.stringify(body)});
  if (!r.ok) {
    let msg = r.status + '';
    try { msg += ': ' + (await r.json()).detail.map(d => d.msg).join('; '); } catch (e) {}
    throw new Error(url + ' ' + msg);
  }
  return r;
}
function column(name, resp) {
  const col = el('div', 'col');
  col.dataset.path = name;
  const weak = resp.no_good_match ? ', no good match: confidence ' + resp.confidence.toFixed(2) : '';
  col.appendChild(el('h3', '', name + ' (' + resp.results.length + weak + ')'));
  const ol = el('ol');
  for (const r of resp.results) {
    const li = el('li');
    li.dataset.resource = r.resource_id;
    li.title = r.why.join('\\n');
    li.appendChild(el('div', 'title', r.heading));
    li.appendChild(el('div', 'where', r.where));
    li.appendChild(el('div', 'snip', r.snippet.join('\\n')));
    li.appendChild(el('div', 'why', r.why.join('\\n')));
    li.addEventListener('click', () => li.classList.toggle('open'));
    ol.appendChild(li);
  }
  col.appendChild(ol);
  return col;
}
async function search(ev) {
  ev.preventDefault();
  const query = document.getElementById('q').value;
  const k = parseInt(document.getElementById('k').value) || 5;
  const cols = document.getElementById('columns');
  cols.textContent = '';
  status('searching...');
  try {
    const runs = [['fused', null], ...PATHS.map(p => [p, [p]])];
    const answers = await Promise.all(runs.map(([name, paths]) =>
      call('POST', '/v1/ui/search', paths ? {query, top_k: k, paths} : {query, top_k: k})
        .then(r => r.json()).then(resp => [name, resp])));
    for (const [name, resp] of answers) cols.appendChild(column(name, resp));
    status('');
  } catch (e) { status(e.message); }
}
function fmt(v, ci) {
  if (v === null || v === undefined) return '-';
  return v.toFixed(3) + (ci ? ' [' + ci[0].toFixed(3) + ', ' + ci[1].toFixed(3) + ']' : '');
}
async function experiments() {
  const box = document.getElementById('experiments');
  box.textContent = '';
  try {
    const list = await (await call('GET', '/v1/experiments')).json();
    if (!list.length) box.appendChild(el('p', '', 'no experiments defined'));
    for (const exp of list) {
      const div = el('div', 'exp');
      div.dataset.experiment = exp.name;
      div.appendChild(el('h3', '', exp.name + ' (' + exp.mode + ', ' +
        (exp.active ? 'running' : 'stopped') + ')'));
      box.appendChild(div);
      const rep = await (await call('GET', '/v1/experiments/' + encodeURIComponent(exp.name) + '/report')).json();
      div.appendChild(el('p', 'summary', rep.summary));
      const table = el('table');
      const head = el('tr');
      for (const h of ['arm', 'queries', 'clicks', 'CTR (95% CI)', 'MRR of clicks (95% CI)'])
        head.appendChild(el('th', '', h));
      table.appendChild(head);
      for (const [arm, s] of Object.entries(rep.per_arm)) {
        const tr = el('tr');
        for (const v of [arm, s.queries, s.clicks, fmt(s.ctr.share, s.ctr.ci95), fmt(s.mrr.mean, s.mrr.ci95)])
          tr.appendChild(el('td', '', String(v)));
        table.appendChild(tr);
      }
      div.appendChild(table);
      if (rep.chart) {
        const png = await (await call('GET', '/v1/experiments/' + encodeURIComponent(exp.name) + '/chart')).blob();
        const img = el('img', 'chart');
        img.alt = 'chart of ' + exp.name;
        img.src = URL.createObjectURL(png);
        div.appendChild(img);
      }
    }
  } catch (e) { box.appendChild(el('p', 'status', e.message)); }
}
document.getElementById('search').addEventListener('submit', search);
document.getElementById('load').addEventListener('click', experiments);
"""


def _sha256(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


#: The page's policy: its one inline script and style (by hash), API calls to its own origin,
#: report charts as blob: images, nothing else; no framing, no <base>, forms post nowhere.
PAGE_CSP = (
    f"default-src 'none'; script-src {_sha256(_SCRIPT)}; style-src {_sha256(_STYLE)}; "
    "connect-src 'self'; img-src 'self' blob:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'"
)


def render_page(paths: list[str]) -> str:
    """The page, for these path columns beside the fused one."""
    names = json.dumps(paths).replace("</", "<\\/")
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>hybridsag {html.escape(__version__)}</title>
<style>{_STYLE}</style></head>
<body>
<h1>hybridsag {html.escape(__version__)}</h1>
<form id="search">
  <input type="password" id="token" placeholder="bearer token" autocomplete="off">
  <input type="text" id="q" placeholder="search" required>
  <input type="text" id="k" value="5" size="3" aria-label="results per list">
  <button type="submit">search</button>
  <span class="status" id="status"></span>
</form>
<p>The fused list beside each path's own top results ({html.escape(", ".join(paths))});
hover a result for its explanation, click it to keep it open.</p>
<div id="columns"></div>
<h2>Experiments <button type="button" id="load">load reports</button></h2>
<div id="experiments"></div>
<script type="application/json" id="paths">{names}</script>
<script>{_SCRIPT}</script>
</body></html>
"""


def display_result(result: Mapping[str, Any], terms: Sequence[str] = ()) -> dict[str, Any]:
    """One result (``SearchResult.as_dict()``) as the page shows it, in the CLI's words:
    ``heading`` (the title, then the headings below it, as ``hybridsag search``'s heading
    line), ``where`` (resource and lines), ``snippet`` (its lines, centred on ``terms``) and
    ``why`` (:func:`~hybridsag.output.render.explain_lines`), beside the rank and ids."""
    r = SearchResult.from_dict(result)
    name = r.title or r.resource_id
    return {
        "rank": r.rank,
        "chunk_id": r.chunk_id,
        "resource_id": r.resource_id,
        "heading": " › ".join([name, *headings_below(name, r.heading_path)]),
        "where": f"{r.resource_id} · lines {r.start_line}-{r.end_line}",
        "snippet": snippet(r.text, terms_pattern(terms), width=SNIPPET_WIDTH),
        "why": explain_lines(r),
    }


def build_router(
    *, prefix: str, reader: Any, search: Callable[..., Awaitable[Any]]
) -> APIRouter:
    """``GET /ui`` and the page's own search, ``POST {prefix}/ui/search`` (left out of the
    schema): ``search`` is the service's ``POST /v1/search`` handler, run with the same body
    and caller (``reader``: the role dependency that guards it), whose results come back as
    :func:`display_result` gives them."""
    router = APIRouter(include_in_schema=False)

    @router.get("/ui", response_class=HTMLResponse)
    def ui(request: Request) -> HTMLResponse:
        """The page (no data in it: the API calls it makes carry the token typed in)."""
        settings = request.app.state.service.settings
        paths = [
            p for p in path_names()
            if settings.embedding.model != "none" or not PATHS[p].needs_dense
        ]
        return HTMLResponse(render_page(paths), headers={"Content-Security-Policy": PAGE_CSP})

    @router.post(f"{prefix}/ui/search")
    async def ui_search(
        body: SearchRequest, request: Request, caller: Principal = reader
    ) -> dict[str, Any]:
        """``POST /v1/search`` (JSON): its query and paths, the query ``terms`` the snippets
        centre on, its ``confidence`` and ``no_good_match`` (the column heading says "no good
        match"), and each result as :func:`display_result` words it."""
        out = await search(body.model_copy(update={"format": "json"}), request, caller)
        terms = request.app.state.service.ops().query_terms(body.query)
        return {
            "query": out["query"],
            "paths": out["paths"],
            "terms": terms,
            "confidence": out.get("confidence"),
            "no_good_match": out.get("no_good_match", False),
            "results": [display_result(r, terms) for r in out["results"]],
        }

    return router
