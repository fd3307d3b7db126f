"""What ``mlxe status`` shows of a run, from its directory's ``status.json`` or from its run service.

Every run (local or on Ray) rewrites ``status.json`` while it trains (:class:`mlxe.runtime.ray.stats.RunStats`
for Ray runs). :func:`status_summary` turns it into the run service's ``/api/status`` shape, which is
what :func:`status_tables` prints: ``mlxe status RUN_DIR`` reads the file, ``mlxe status URL`` asks a
run's service (:func:`fetch_status`), and both print through the same tables. A key that a run does
not write (a local run has no weight versions, dropped or rejected results, nor a Learner actor)
is shown as ``-``.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from mlxe.runtime.status import STATUS_FILE

# Counters that only some runs write (Ray runs: weight versions, data thrown away, restarts, best adopted)
OPTIONAL_COUNTERS = ("weights_version", "dropped", "rejected", "restarts", "adopted")


class ServiceError(RuntimeError):
    """A run service that cannot be reached, refuses the token or answers with an error."""


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, inf) replaced by None, recursively: strict JSON has none."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value


def read_status(run_dir: str | Path) -> dict:
    """The ``status.json`` of a run directory, as written."""
    path = Path(run_dir) / STATUS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"no {STATUS_FILE} in {run_dir} (a run writes it once it has started training)")
    return json.loads(path.read_text())


def status_summary(status: dict) -> dict:
    """The run service's ``/api/status`` of a ``status.json`` dict (non-finite numbers as None).

    ``global_episode`` is the episode count of all Executors, ``best_score`` the best episode's
    return, ``moving_average`` the means over the last ``window`` episodes, ``workers`` the Executors
    (index, name, state, node, ip, pid, episodes, restarts, last_heard in unix seconds, error).
    """
    summary = {
        "name": status["name"],
        "state": status["state"],
        "backend": status["backend"],
        "mode": status["mode"],
        "address": status["address"],
        "stop_reason": status["stop_reason"],
        "updated": status["updated"],  # unix seconds
        "iteration": status["iteration"],
        "global_episode": status["episodes"],
        "env_steps": status["env_steps"],
        "updates": status["updates"],
        "best_score": status["best_return"],
        "best_length": status["best_length"],
        "moving_average": {"return": status["ma_return"], "length": status["ma_length"], "window": status["window"]},
        "last_eval": status.get("last_eval"),
        "steps_per_s": status["steps_per_s"],
        "updates_per_s": status["updates_per_s"],
        "elapsed_s": status["elapsed_s"],
        **{key: status.get(key) for key in OPTIONAL_COUNTERS},
        "workers": status["executors"],
        "learner": status.get("learner"),
    }
    return json_safe(summary)


def fetch_status(url: str, token: str, timeout_s: float = 10.0) -> dict:
    """``GET {url}/api/status`` of a run service with ``token``: the :func:`status_summary` shape."""
    url = urllib.parse.urldefrag(url).url  # the page's address may come with its #TOKEN
    request = urllib.request.Request(
        url.rstrip("/") + "/api/status", headers={"Authorization": f"Bearer {token}", "Accept": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            body = response.read()
        return json.loads(body)
    except json.JSONDecodeError:
        raise ServiceError(f"{url} answered, but not with a run's status: is it a run service?") from None
    except urllib.error.HTTPError as e:
        if e.code == 401:
            raise ServiceError(
                f"{url} refused the token; the run's token is in its run directory's service.json"
            ) from None
        try:
            reason = json.loads(e.read())["error"]
        except (ValueError, KeyError, TypeError):
            reason = e.reason
        raise ServiceError(f"{url}: HTTP {e.code}: {reason}") from None
    except (urllib.error.URLError, OSError) as e:
        reason = getattr(e, "reason", e)
        raise ServiceError(f"cannot reach the run service at {url} ({reason}); is the run still training?") from None


def _ago(t: float, now: float) -> str:
    return "-" if not t else f"{max(0.0, now - t):.1f} s ago"


def _number(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def status_tables(summary: dict, now: float | None = None):
    """(run table, executors table) of a :func:`status_summary` as ``rich`` tables."""
    from rich.table import Table

    now = time.time() if now is None else now
    s = summary
    state = s["state"]
    if state == "running" and now - s["updated"] > 60:
        state = "running? (no update for over a minute)"
    where = "on this machine" if s["backend"] == "local" else "on Ray"
    run = Table(title=f"MLxE {s['name']} ({s['mode']} {where})", title_justify="left", show_header=False, box=None)
    run.add_column(style="bold")
    run.add_column()
    ma = s["moving_average"]
    rows = [
        ("state", state if s["stop_reason"] is None else f"{state} ({s['stop_reason']})"),
        ("updated", _ago(s["updated"], now)),
        ("cluster", s["address"]),
        ("iteration", _number(s["iteration"])),
        ("episodes (all executors)", _number(s["global_episode"])),
        ("env steps", _number(s["env_steps"])),
        ("updates", _number(s["updates"])),
        ("weights version", _number(s["weights_version"])),
        ("best length / return", f"{_number(s['best_length'])} / {_number(s['best_score'], 1)}"),
        (f"moving average of the last {ma['window']}", f"{_number(ma['length'], 1)} steps, return {_number(ma['return'], 1)}"),
        ("last evaluation (return)", _number(s["last_eval"], 1)),
        ("env steps/s", _number(s["steps_per_s"], 1)),
        ("dropped (stale) / rejected (lag)", f"{_number(s['dropped'])} / {_number(s['rejected'])}"),
        ("restarts / best adopted", f"{_number(s['restarts'])} / {_number(s['adopted'])}"),
        ("elapsed", f"{_number(s['elapsed_s'], 1)} s"),
    ]
    learner = s["learner"]
    if learner:
        at = f"actor {learner['name']}" if learner["actor"] else "driver"
        gpus = ", ".join(map(str, learner["gpu_ids"])) or "none"
        rows.insert(3, ("learner", f"{at} on node {learner['node'][:12]} ({learner['ip']}, pid {learner['pid']}), "
                                   f"device {learner['device']}, Ray GPUs {gpus}"))
    for key, value in rows:
        run.add_row(key, value)
    executors = Table(title="Executors", title_justify="left")
    for header in ("#", "state", "node", "ip", "pid", "episodes", "restarts", "last heard", "error"):
        executors.add_column(header, justify="right" if header in ("#", "pid", "episodes", "restarts") else "left")
    for e in s["workers"]:
        executors.add_row(
            str(e["index"]), e["state"], e["node"][:12] or "-", e["ip"] or "-", str(e["pid"] or "-"),
            f"{e['episodes']:,}", str(e["restarts"]), _ago(e["last_heard"], now), e["error"][:60],
        )
    return run, executors


def print_status(source: str | Path, console=None, token: str | None = None) -> int:
    """Print the status of a run as tables: ``source`` is its directory, or its service's URL
    (``http://...``, asked with ``token``). Returns a process exit code."""
    from rich.console import Console

    if is_url(source):
        if token is None:
            raise ValueError("a run service's URL needs its token")
        summary = fetch_status(str(source), token)
    else:
        summary = status_summary(read_status(source))
    run, executors = status_tables(summary)
    console = console or Console()
    console.print(run)
    console.print(executors)
    return 0


def is_url(source: str | Path) -> bool:
    """Is ``source`` a run service's URL (rather than a run directory)?"""
    return isinstance(source, str) and source.startswith(("http://", "https://"))
