"""The status page as HTML (``/`` on the metrics port): :func:`render` of a
:meth:`kquota.status.StatusPage.snapshot`, server-rendered, every value escaped.

It reads without JavaScript: a ``<noscript>`` ``<meta refresh>`` reloads it every
``refresh_seconds``. With JavaScript, :data:`SCRIPT` (a few lines, no framework) fetches the page
again at that interval and swaps in its ``<main>``, so the scroll position stays and a failed fetch
says the page is stale instead of blanking it. The page loads nothing else: its CSS and script are
inline and allowed by hash in :func:`content_security_policy`, so even a name that escaped the
escaping could run nothing.
"""

from __future__ import annotations

import base64
import hashlib
import html
import math
import time
from typing import Any, Callable, Optional

#: The page's whole CSS.
CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0 auto;max-width:1200px;padding:0 16px;color:#1b1b1f;background:#fafafc}
h1{font-size:20px;margin:16px 0 4px}h2{font-size:16px;margin:20px 0 6px;border-bottom:1px solid #ccd}
table{border-collapse:collapse;width:100%}th,td{padding:3px 8px;text-align:left;border-bottom:1px solid #e4e4ec}
th{background:#eef;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.name{font-family:ui-monospace,monospace;overflow-wrap:anywhere;min-width:10em;max-width:380px}
tr.throttled td{background:#fde8e8}
.badge{background:#c62828;color:#fff;border-radius:3px;padding:0 5px;font-size:12px;white-space:nowrap}
.muted{color:#667}.more{color:#667;font-style:italic}meter{width:90px}dl{display:grid;grid-template-columns:max-content auto;
gap:2px 14px;margin:0}dt{color:#556}dd{margin:0}.err{color:#b71c1c}#live.stale{color:#b71c1c;font-weight:600}
""".strip()

#: The live refresh: fetch the page again, swap its ``<main>`` in, count the swaps on ``<body>``.
SCRIPT = """
(function(){var b=document.body,ms=1000*Number(b.dataset.refresh||5),live=document.getElementById("live");
function tick(){fetch(location.pathname,{cache:"no-store"}).then(function(r){if(!r.ok)throw new Error("HTTP "+r.status);
return r.text();}).then(function(t){var m=new DOMParser().parseFromString(t,"text/html").querySelector("main");
if(!m)throw new Error("no main");document.querySelector("main").replaceWith(m);
b.dataset.refreshes=String(Number(b.dataset.refreshes||0)+1);live.className="";live.textContent="live";
}).catch(function(e){live.className="stale";live.textContent="stale: "+e.message;}).finally(function(){setTimeout(tick,ms);});}
setTimeout(tick,ms);})();
""".strip()

#: Rate units per quota type (Kafka's metric group).
UNITS = {"Produce": "B/s", "Fetch": "B/s", "Request": "% of a thread", "ControllerMutation": "mutations/s"}


def _hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


def content_security_policy() -> str:
    """The page's ``Content-Security-Policy``: its own inline CSS and script (by hash), fetches
    to itself, nothing else."""
    return (f"default-src 'none'; style-src {_hash(CSS)}; script-src {_hash(SCRIPT)}; connect-src 'self'; "
            "img-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


def e(value: object) -> str:
    """``value`` escaped for HTML text and attribute values."""
    return html.escape(str(value), quote=True)


def _utc(seconds: Optional[float]) -> str:
    if seconds is None:
        return "never"
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(seconds))


def _ago(seconds: Optional[float]) -> str:
    if seconds is None:
        return "—"
    return f"{seconds:.0f} s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def rate(value: Optional[float], quota_type: str) -> str:
    """A rate or quota in its type's unit (bytes with binary prefixes); ``unlimited`` for None."""
    if value is None:
        return "unlimited"
    unit = UNITS.get(quota_type, "")
    if unit == "B/s":
        for prefix in ("", "Ki", "Mi", "Gi", "Ti"):
            if abs(value) < 1024 or prefix == "Ti":
                return f"{value:.0f} B/s" if not prefix else f"{value:.1f} {prefix}B/s"
            value /= 1024
    return f"{value:.2f} {unit}".strip()


def _util(value: Optional[float]) -> str:
    if value is None:
        return '<td class="n muted">—</td>'
    shown = min(max(value, 0.0), 1e6)
    return (f'<td class="n">{value:.1f}% <meter min="0" max="100" low="80" high="100" optimum="0" '
            f'value="{min(shown, 100.0):.1f}"></meter></td>')


def _table(head: list[str], rows: list[str]) -> str:
    return ("<table><thead><tr>" + "".join(f"<th>{e(h)}</th>" for h in head) + "</tr></thead><tbody>"
            + "".join(rows) + "</tbody></table>")


def _more(n: int, what: str) -> str:
    return f'<p class="more">and {n} more {e(what)} not shown</p>' if n > 0 else ""


def _entity_rows(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for r in rows:
        mark = '<span class="badge">throttled</span>' if r["throttled"] else ""
        out.append(f'<tr{" class=throttled" if r["throttled"] else ""}><td>{e(r["quota_type"])}</td>'
                   f'<td class="name">{e(r["user"])}</td><td class="name">{e(r["client_id"])}</td>'
                   f'<td class="n">{e(rate(r["rate"], r["quota_type"]))}</td>'
                   f'<td class="n">{e(rate(r["quota"], r["quota_type"]))}</td>{_util(r["utilization"])}'
                   f'<td class="muted">{e(r["level"] or "no quota")}</td><td>{mark}</td></tr>')
    return out


_ENTITY_HEAD = ["Quota type", "User", "Client id", "Rate", "Effective quota", "Utilization", "Level", ""]


def _entities(snap: dict[str, Any]) -> str:
    part = snap["entities"]
    if not part["rows"] and not part["more"]:
        return "<p class=muted>No entity has a quota sensor yet (no traffic since the start).</p>"
    return _table(_ENTITY_HEAD, _entity_rows(part["rows"])) + _more(part["more"], "entities (the top "
                                                                     f"{snap['max_rows']} by utilization are shown)")


def _throttled(snap: dict[str, Any]) -> str:
    part = snap["throttled"]
    if not part["rows"]:
        return "<p class=muted>No entity is throttled now.</p>"
    return _table(_ENTITY_HEAD, _entity_rows(part["rows"])) + _more(part["more"], "throttled entities")


def _error(part: Any) -> Optional[str]:
    if isinstance(part, dict) and "error" in part:
        return f'<p class="err">Cannot read this section: {e(part["error"])}</p>'
    return None


def _shadow(part: Any) -> str:
    if part is None:
        return "<p class=muted>No shadow configuration.</p>"
    err = _error(part)
    if err:
        return err
    rows = []
    for r in part["rows"]:
        mark = '<span class="badge">would throttle</span>' if r["would_throttle"] else ""
        rows.append(f'<tr{" class=throttled" if r["would_throttle"] else ""}><td>{e(r["quota_type"])}</td>'
                    f'<td class="name">{e(r["user"])}</td><td class="name">{e(r["client_id"])}</td>'
                    f'<td class="n">{e(rate(r["rate"], r["quota_type"]))}</td>'
                    f'<td class="n">{e(rate(r["quota"], r["quota_type"]))}</td>'
                    f'<td class="n">{e(rate(r["shadow_quota"], r["quota_type"]))}</td>'
                    f'{_util(r["shadow_utilization"])}'
                    f'<td class="n">{e(_duration(r.get("throttle_time_ms", 0)))}</td>'
                    f'<td class="n">{e(_bytes(r.get("delayed_bytes", 0), r["quota_type"]))}</td><td>{mark}</td></tr>')
    head = (f'<p>From {e(part["label"])}: evaluated on this proxy\'s traffic, never enforced; would-be '
            "throttle time and delayed bytes since the proxy started.</p>")
    if not rows:
        return head + "<p class=muted>No prediction yet.</p>" + _more(part["more"], "predictions")
    return head + _table(["Quota type", "User", "Client id", "Rate", "Quota now", "Shadow quota",
                          "Shadow utilization", "Would-be throttle", "Would-be delayed", ""],
                         rows) + _more(part["more"], "predictions")


def _duration(ms: int) -> str:
    """A would-be throttle time total: ``0``, ``850 ms``, ``12.4 s``, ``3.2 min``."""
    if ms <= 0:
        return "0"
    if ms < 1000:
        return f"{ms} ms"
    return f"{ms / 1000:.1f} s" if ms < 120_000 else f"{ms / 60_000:.1f} min"


def _bytes(n: int, quota_type: str) -> str:
    """Would-be delayed bytes with binary prefixes; ``—`` for a type without bytes (Request)."""
    if UNITS.get(quota_type) != "B/s":
        return "—"
    return rate(float(n), quota_type).removesuffix("/s")


def _fleet(part: Any) -> str:
    if part is None:
        return "<p class=muted>Not in a fleet: each quota holds for this proxy alone (--quota-scope proxy).</p>"
    err = _error(part)
    if err:
        return err
    state = "fallback to the static share (usage path silent)" if part["fallback"] else "sharing by usage"
    out = (f"<dl><dt>This member</dt><dd>{e(part['member'])}</dd><dt>Fleet size</dt><dd>{e(part['size'])}</dd>"
           f"<dt>State</dt><dd>{e(state)}</dd><dt>Default share</dt><dd>{part['default_share']:.3f}</dd>"
           f"<dt>Usage topic</dt><dd>{e(part['usage_topic'])}</dd></dl><h3>Members</h3>")
    members = [f'<tr><td class="name">{e(m["member"])}{" (this proxy)" if m["self"] else ""}</td>'
               f'<td>{"live" if m["live"] else "silent"}</td><td class="n">{e(_ago(m["age_seconds"]))}</td>'
               f'<td class="n">{e(m["entities"])}</td></tr>' for m in part["members"]]
    out += _table(["Member", "State", "Last usage", "Entities reported"], members) + _more(part["members_more"], "members")
    out += "<h3>This proxy's shares</h3>"
    if not part["shares"]:
        return out + "<p class=muted>No active quota is shared: every limit is split by the default share.</p>"
    # A client quota's row names its user and client id, a topic quota's row its topic.
    shares = [f'<tr><td>{e(s["quota_type"])}</td><td class="name">{e(s.get("user", ""))}</td>'
              f'<td class="name">{e(s.get("client_id", ""))}</td><td class="name">{e(s.get("topic", ""))}</td>'
              f'<td class="n">{s["share"] * 100:.1f}%</td></tr>' for s in part["shares"]]
    return out + _table(["Quota type", "User", "Client id", "Topic", "Share"], shares) + _more(part["shares_more"], "shares")


def _store(part: Any) -> str:
    if part is None:
        return "<p class=muted>No quota store is followed.</p>"
    err = _error(part)
    if err:
        return err
    touched = part["last_change_entities"]
    what = f"{touched} entit{'y' if touched == 1 else 'ies'}"
    changed = "never" if part["last_change"] is None else f"{_utc(part['last_change'])} ({what})"
    out = (f"<dl><dt>Store</dt><dd>{e(part['url'])}</dd><dt>Last changed</dt><dd>{e(changed)}</dd>"
           f"<dt>Changes applied</dt><dd>{e(part['changes'])}</dd>"
           f"<dt>Last sync</dt><dd>{e(_ago(part['sync_age_seconds']))}</dd>"
           f"<dt>Read errors</dt><dd>{e(part['errors_total'])}"
           f"{' (a retry is pending)' if part['retry_pending'] else ''}</dd></dl>")
    if part["recent_errors"]:
        out += "<h3>Recent problems</h3><ul>" + "".join(f'<li class="err">{e(m)}</li>' for m in part["recent_errors"]) + "</ul>"
    return out


_SECTIONS: list[tuple[str, str, Callable[[dict[str, Any]], str]]] = [
    ("throttled", "Throttled now", _throttled),
    ("utilization", "Entities by utilization", _entities),
    ("shadow", "Shadow predictions", lambda s: _shadow(s["shadow"])),
    ("fleet", "Fleet", lambda s: _fleet(s["fleet"])),
    ("store", "Quota store", lambda s: _store(s["store"])),
]


def _count(n: float) -> str:
    return str(int(n)) if math.isfinite(n) else "—"


def render(snap: dict[str, Any]) -> str:
    """The whole page of a :meth:`~kquota.status.StatusPage.snapshot`."""
    refresh = int(snap["refresh_seconds"])
    summary = (f'<p id="summary">At {e(_utc(snap["generated_at"]))}: <b>{_count(snap["throttled"]["total"])}</b> '
               f'throttled, <b>{_count(snap["entities"]["total"])}</b> entities with a quota sensor.</p>')
    sections = "".join(f'<section id="{sid}"><h2>{e(title)}</h2>{body(snap)}</section>' for sid, title, body in _SECTIONS)
    return (
        "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f'<noscript><meta http-equiv="refresh" content="{refresh}"></noscript>'
        f"<title>kquota status</title><style>{CSS}</style></head>"
        f'<body data-refresh="{refresh}"><header><h1>kquota status</h1><p class=muted>'
        f'<span id="live">refreshed every {refresh} s</span> · <a href="/metrics">/metrics</a> · '
        f'<a href="/status.json">/status.json</a></p></header>'
        f"<main>{summary}{sections}</main><script>{SCRIPT}</script></body></html>\n"
    )
