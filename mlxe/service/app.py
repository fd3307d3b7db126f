"""The run service's ASGI app: a read-only JSON API over a run directory, and a live page.

Every ``/api/...`` route needs ``Authorization: Bearer <token>`` (401 otherwise) and only reads what
the run writes: ``status.json``, ``metrics.csv``, ``episodes.csv`` and ``checkpoints/best.pt`` (loaded
with ``weights_only``: nothing is unpickled). The CSVs are followed, not re-read: each request parses
only the rows appended since the previous one. ``/`` is the live page: it holds no data, reads the
token from its URL's fragment (``#TOKEN``, which browsers never send to a server) and polls the API.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import os
import threading
from array import array
from collections.abc import Callable
from pathlib import Path

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from mlxe.runtime.checkpoints import CheckpointError, check_finite_weights, load_checkpoint
from mlxe.runtime.status import STATUS_FILE
from mlxe.service.status import status_summary
from mlxe.service.tokens import refusal

EPISODES_MAX = 10_000  # most episodes one /api/episodes answer holds (and episodes kept in memory)
METRICS_DEFAULT = ("iteration", "env_steps", "ma_return", "eval_return")
NO_STORE = {"Cache-Control": "no-store"}  # the answers change every second, and are the run's data


class CsvFollower:
    """A CSV that a :class:`~mlxe.telemetry.metrics.MetricsWriter` appends to, read incrementally.

    Each :meth:`tail` reads only the bytes appended since the last one (whole lines: the writer may
    be mid-row) and keeps every column as float64 values (NaN: empty or not a number), the newest
    ``keep`` rows at most. A file replaced (a new column widens the header) or truncated is read anew.
    Thread-safe: Starlette runs the routes in a thread pool.
    """

    def __init__(self, path: Path, keep: int | None = None) -> None:
        self.path, self.keep = path, keep
        self._lock = threading.Lock()
        self._reset(None)

    def _reset(self, identity: tuple[int, int] | None) -> None:
        self._identity = identity  # (device, inode) of the file read so far
        self._offset = 0  # bytes parsed
        self.header: list[str] = []
        self._columns: list[array] = []

    def _refresh(self) -> None:
        try:
            f = open(self.path, "rb")
        except FileNotFoundError:
            self._reset(None)
            return
        with f:
            st = os.fstat(f.fileno())
            if (st.st_dev, st.st_ino) != self._identity or st.st_size < self._offset:
                self._reset((st.st_dev, st.st_ino))
            f.seek(self._offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        if not end:
            return
        self._offset += end
        records = csv.reader(data[:end].decode("utf-8", "replace").splitlines())
        if not self.header:
            self.header = next(records, [])
            self._columns = [array("d") for _ in self.header]
        for record in records:
            if not record:
                continue
            for i, column in enumerate(self._columns):
                column.append(_to_float(record[i]) if i < len(record) else math.nan)
        if self.keep is not None and self._columns and len(self._columns[0]) > 2 * self.keep:
            for column in self._columns:  # trimmed in batches: deleting a head is O(rows)
                del column[: len(column) - self.keep]

    def tail(self, columns: list[str] | None, last: int | None) -> dict[str, list[float]] | None:
        """The ``last`` newest values (None: all kept) of ``columns`` (None: all), or None while the
        file has no header yet. Raises KeyError naming the first unknown column."""
        with self._lock:
            self._refresh()
            if not self.header:
                return None
            names = self.header if columns is None else columns
            for name in names:
                if name not in self.header:
                    raise KeyError(name)
            start = 0 if last is None else max(0, len(self._columns[0]) - last)
            return {name: self._columns[self.header.index(name)][start:].tolist() for name in names}


def _to_float(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return math.nan


def _number(value: float) -> int | float | None:
    """A CSV value for JSON: an int where integral (counters), None where NaN or infinite."""
    if not math.isfinite(value):
        return None
    return int(value) if value.is_integer() else value


def _error(status_code: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status_code, headers=NO_STORE)


class _BadParameter(ValueError):
    """A query value out of range; the message names the parameter."""


def _int_param(request: Request, name: str, default: int | None, low: int, high: int | None) -> int | None:
    text = request.query_params.get(name)
    if text is None:
        return default
    allowed = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
    try:
        value = int(text)
    except ValueError:
        raise _BadParameter(f"{name}: expected {allowed}, got {text!r}") from None
    if value < low or (high is not None and value > high):
        raise _BadParameter(f"{name}: expected {allowed}, got {value}")
    return value


def make_app(run_dir: Path, token: str, expect: dict | None = None) -> Starlette:
    """The run service of ``run_dir``; its API answers requests that carry ``token``.

    ``expect``: the run's identity (:func:`mlxe.runtime.checkpoints.run_identity`); a ``best.pt`` of
    another algorithm or network size, or with non-finite weights, is then an error, never served.
    """
    run_dir = Path(run_dir)
    expected = token.encode()
    metrics = CsvFollower(run_dir / "metrics.csv")
    episodes = CsvFollower(run_dir / "episodes.csv", keep=EPISODES_MAX)
    best = run_dir / "checkpoints" / "best.pt"
    weights_cache: dict[tuple[int, int, int], bytes] = {}  # best.pt's (inode, size, mtime) -> its .npy
    weights_lock = threading.Lock()

    def api(endpoint: Callable[[Request], Response]) -> Callable[[Request], Response]:
        """``endpoint`` behind the token; a bad query value is a 400 naming the parameter."""

        @functools.wraps(endpoint)
        def guarded(request: Request) -> Response:
            refused = refusal(request, expected, "service.json", **NO_STORE)
            if refused is not None:
                return refused
            try:
                return endpoint(request)
            except _BadParameter as e:
                return _error(400, str(e))

        return guarded

    def summary() -> dict | None:
        """status.json as the API's status, or None while there is none."""
        try:
            text = (run_dir / STATUS_FILE).read_text()
        except FileNotFoundError:
            return None
        return status_summary(json.loads(text))

    def no_status() -> JSONResponse:
        return _error(503, f"no {STATUS_FILE} in the run directory yet: the run has not started training")

    @api
    def status(request: Request) -> Response:
        s = summary()
        return no_status() if s is None else JSONResponse(s, headers=NO_STORE)

    @api
    def workers(request: Request) -> Response:
        s = summary()
        return no_status() if s is None else JSONResponse(s["workers"], headers=NO_STORE)

    @api
    def episode_list(request: Request) -> Response:
        last = _int_param(request, "last", 100, 1, EPISODES_MAX)
        columns = episodes.tail(None, last) or {}
        rows = [dict(zip(columns, map(_number, values))) for values in zip(*columns.values())]
        return JSONResponse(rows, headers=NO_STORE)

    @api
    def metric_columns(request: Request) -> Response:
        text = request.query_params.get("columns")
        names = list(METRICS_DEFAULT) if text is None else [name.strip() for name in text.split(",")]
        if not all(names):
            raise _BadParameter(f"columns: expected comma-separated metrics.csv column names, got {text!r}")
        last = _int_param(request, "last", None, 1, None)
        try:
            columns = metrics.tail(names, last)
        except KeyError as e:
            raise _BadParameter(
                f"columns: unknown column {e.args[0]!r}; metrics.csv has {', '.join(metrics.header)}"
            ) from None
        if columns is None:
            return _error(503, "no metrics.csv in the run directory yet: the run has not finished an iteration")
        return JSONResponse({k: [_number(v) for v in values] for k, values in columns.items()}, headers=NO_STORE)

    @api
    def best_weights(request: Request) -> Response:
        try:
            st = best.stat()
        except FileNotFoundError:
            return _error(404, "no checkpoints/best.pt yet: the run has not saved a best model")
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        with weights_lock:  # one load at a time: a checkpoint can be large
            if key not in weights_cache:
                try:
                    state = load_checkpoint(best, expect=expect)
                    check_finite_weights(best, state)
                    weights = state["weights"]
                except CheckpointError as e:
                    return _error(500, f"checkpoints/best.pt has no usable weights: {e}")
                buffer = io.BytesIO()
                np.save(buffer, weights.numpy().astype(np.float32, copy=False), allow_pickle=False)
                weights_cache.clear()
                weights_cache[key] = buffer.getvalue()
            body = weights_cache[key]
        return Response(body, media_type="application/octet-stream",
                        headers={**NO_STORE, "Content-Disposition": 'attachment; filename="best.npy"'})

    def page(request: Request) -> Response:
        return HTMLResponse(PAGE, headers={**NO_STORE, "Content-Security-Policy": PAGE_POLICY})

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return _error(exc.status_code, exc.detail)

    routes = [
        Route("/", page, methods=["GET"]),
        Route("/api/status", status, methods=["GET"]),
        Route("/api/workers", workers, methods=["GET"]),
        Route("/api/episodes", episode_list, methods=["GET"]),
        Route("/api/metrics", metric_columns, methods=["GET"]),
        Route("/api/weights/best.npy", best_weights, methods=["GET"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})


# The page may run only its own inline script and style, and talk only to this service.
PAGE_POLICY = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'"

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>MLxE run</title>
<style>
body { font: 14px system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
h2 { font-size: 1.1em; margin: 1.2em 0 .3em; }
#message { color: #b00020; min-height: 1.2em; margin: 0 0 .8em; }
.top { display: flex; gap: 2em; flex-wrap: wrap; align-items: flex-start; }
dl { display: grid; grid-template-columns: max-content auto; gap: .25em 1em; margin: 0; }
dt { font-weight: 600; }
dd { margin: 0; font-variant-numeric: tabular-nums; }
figure { margin: 0; }
canvas { border: 1px solid #ccc; max-width: 100%; }
figcaption span { margin-right: 1.2em; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; }
th, td { padding: .2em .7em; border-bottom: 1px solid #ddd; text-align: left; }
td.n, th.n { text-align: right; }
</style>
</head>
<body>
<h1>MLxE <span id="name">run</span> <small id="where"></small></h1>
<p id="message">connecting&hellip;</p>
<div class="top">
<dl>
<dt>state</dt><dd id="state">-</dd>
<dt>updated</dt><dd id="updated">-</dd>
<dt>iteration</dt><dd id="iteration">-</dd>
<dt>global episode</dt><dd id="global-episode">-</dd>
<dt>env steps</dt><dd id="env-steps">-</dd>
<dt>updates</dt><dd id="updates">-</dd>
<dt>best score (return)</dt><dd id="best-score">-</dd>
<dt>best episode length</dt><dd id="best-length">-</dd>
<dt id="ma-label">moving average return</dt><dd id="ma-return">-</dd>
<dt>moving average length</dt><dd id="ma-length">-</dd>
<dt>last evaluation (return)</dt><dd id="last-eval">-</dd>
<dt>env steps/s</dt><dd id="steps-per-s">-</dd>
<dt>elapsed</dt><dd id="elapsed">-</dd>
</dl>
<figure>
<canvas id="curve" width="720" height="340" data-points="0" data-evals="0"></canvas>
<figcaption><span style="color:#1f77b4">&#9473; moving-average return</span>
<span style="color:#d62728">&#9679; greedy evaluation</span> against env steps</figcaption>
</figure>
</div>
<h2>Executors</h2>
<table>
<thead><tr><th class="n">#</th><th>state</th><th>node</th><th>ip</th><th class="n">pid</th><th class="n">episodes</th>
<th class="n">restarts</th><th>last heard</th><th>error</th></tr></thead>
<tbody id="workers"></tbody>
</table>
<script>
"use strict";
const POLL_MS = 2000;
const $ = (id) => document.getElementById(id);
const now = () => Date.now() / 1000;

function fmt(value, digits = 0) {
  if (value === null || value === undefined) return "-";
  return value.toLocaleString("en-US", {minimumFractionDigits: digits, maximumFractionDigits: digits});
}

function ago(t) {
  return t ? `${Math.max(0, now() - t).toFixed(1)} s ago` : "-";
}

async function get(path) {
  const token = decodeURIComponent(location.hash.slice(1));
  if (!token) throw new Error("add #TOKEN to this page's URL: the token is in the run directory's service.json");
  const response = await fetch(path, {headers: {Authorization: `Bearer ${token}`}, cache: "no-store"});
  const body = await response.json().catch(() => ({}));
  if (response.status === 401) throw new Error("the token was refused: take it from the run directory's service.json");
  if (!response.ok) throw new Error(body.error || `${response.status} ${response.statusText}`);
  return body;
}

function showStatus(s) {
  let state = s.state;
  if (state === "running" && now() - s.updated > 60) state = "running? (no update for over a minute)";
  $("name").textContent = s.name;
  $("where").textContent = `(${s.mode} ${s.backend === "local" ? "on this machine" : "on Ray"})`;
  document.title = `MLxE ${s.name}: ${s.state}`;
  $("state").textContent = s.stop_reason === null ? state : `${state} (${s.stop_reason})`;
  $("updated").textContent = ago(s.updated);
  $("iteration").textContent = fmt(s.iteration);
  $("global-episode").textContent = fmt(s.global_episode);
  $("env-steps").textContent = fmt(s.env_steps);
  $("updates").textContent = fmt(s.updates);
  $("best-score").textContent = fmt(s.best_score, 1);
  $("best-length").textContent = fmt(s.best_length);
  $("ma-label").textContent = `moving average return (last ${s.moving_average.window})`;
  $("ma-return").textContent = fmt(s.moving_average.return, 1);
  $("ma-length").textContent = fmt(s.moving_average.length, 1);
  $("last-eval").textContent = fmt(s.last_eval, 1);
  $("steps-per-s").textContent = fmt(s.steps_per_s, 1);
  $("elapsed").textContent = `${fmt(s.elapsed_s, 1)} s`;
  $("workers").replaceChildren(...s.workers.map((w) => {
    const row = document.createElement("tr");
    const cells = [[w.index, true], [w.state], [w.node.slice(0, 12) || "-"], [w.ip || "-"], [w.pid || "-", true],
                   [fmt(w.episodes), true], [w.restarts, true], [ago(w.last_heard)], [w.error.slice(0, 60)]];
    for (const [text, numeric] of cells) {
      const cell = document.createElement("td");
      cell.textContent = String(text);  // text, never HTML: an error message may hold anything
      if (numeric) cell.className = "n";
      row.append(cell);
    }
    return row;
  }));
}

function ticks(low, high, count) {
  const rough = (high - low) / count;
  const magnitude = 10 ** Math.floor(Math.log10(rough));
  const step = [1, 2, 5, 10].map((k) => k * magnitude).find((s) => s >= rough);
  const values = [];
  for (let k = Math.ceil(low / step); k * step <= high + step * 1e-9; k++) values.push(k * step || 0);  // no -0
  return values;
}

function range(values) {
  let low = Infinity, high = -Infinity;
  for (const v of values) { low = Math.min(low, v); high = Math.max(high, v); }
  return low < high ? [low, high] : [low - 1, high + 1];
}

function drawCurve(m) {
  const canvas = $("curve"), g = canvas.getContext("2d"), W = canvas.width, H = canvas.height;
  const left = 64, right = 36, top = 14, bottom = 40;
  const pairs = (ys) => m.env_steps.map((x, i) => [x, ys[i]]).filter(([x, y]) => x !== null && y !== null);
  const line = pairs(m.ma_return), evals = pairs(m.eval_return);
  g.clearRect(0, 0, W, H);
  g.font = "12px system-ui, sans-serif";
  g.fillStyle = "#666";
  canvas.dataset.points = line.length;
  canvas.dataset.evals = evals.length;
  if (!line.length && !evals.length) {
    g.fillText("no iteration yet", W / 2 - 40, H / 2);
    return;
  }
  const all = line.concat(evals);
  const [x0, x1] = range([0, ...all.map((p) => p[0])]);
  const [low, high] = range(all.map((p) => p[1]));
  const y0 = low - (high - low) * 0.05, y1 = high + (high - low) * 0.05;  // no point on the frame
  const px = (x) => left + (x - x0) / (x1 - x0) * (W - left - right);
  const py = (y) => H - bottom - (y - y0) / (y1 - y0) * (H - top - bottom);
  g.strokeStyle = "#e4e4e4";
  g.lineWidth = 1;
  g.textAlign = "right";
  g.textBaseline = "middle";
  for (const y of ticks(y0, y1, 5)) {
    g.beginPath(); g.moveTo(left, py(y)); g.lineTo(W - right, py(y)); g.stroke();
    g.fillText(fmt(y, Math.abs(y1 - y0) < 5 ? 2 : 0), left - 6, py(y));
  }
  g.textAlign = "center";
  g.textBaseline = "top";
  for (const x of ticks(x0, x1, 6)) g.fillText(fmt(x), px(x), H - bottom + 6);
  g.fillText("env steps", left + (W - left - right) / 2, H - 16);
  g.strokeStyle = "#1f77b4";
  g.lineWidth = 2;
  g.beginPath();
  line.forEach(([x, y], i) => (i ? g.lineTo(px(x), py(y)) : g.moveTo(px(x), py(y))));
  g.stroke();
  g.fillStyle = "#d62728";
  for (const [x, y] of evals) { g.beginPath(); g.arc(px(x), py(y), 3.5, 0, 2 * Math.PI); g.fill(); }
}

async function poll() {
  const [status, metrics] = await Promise.allSettled([
    get("api/status"), get("api/metrics?columns=env_steps,ma_return,eval_return"),
  ]);
  if (status.status === "fulfilled") showStatus(status.value);
  if (metrics.status === "fulfilled") drawCurve(metrics.value);
  const failed = [status, metrics].find((r) => r.status === "rejected");
  $("message").textContent = failed ? failed.reason.message : "";
  setTimeout(poll, POLL_MS);
}

poll();
</script>
</body>
</html>
"""
