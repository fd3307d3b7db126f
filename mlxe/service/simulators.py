"""The simulator service of a run with ``env.api: remote``: remote simulators connect, get actions, send steps.

The training counterpart of ``mlxe serve-policy`` (:mod:`mlxe.service.policy`), in its style:
HTTP/1.1 + JSON on a keep-alive connection, every route behind ``Authorization: Bearer <token>``
(the token and URL in ``run_dir/simulators.json``, mode 0600), errors ``{"error": "<field>: <what is
wrong>"}``, nothing unpickled. The rows are :class:`~mlxe.envs.remote.SimulatorHub`'s.

Routes (JSON in and out; k = the session's environments, ``*obs`` = ``env.remote.observation_shape``):

* ``GET /v1/spec``: the spaces (``observation_shape``, ``observation_dtype``, ``action``), the rows
  (``rows``, ``free_rows``, ``envs_per_executor``) and ``step_timeout``;
* ``POST /v1/connect`` ``{"envs": k}`` -> 201 ``{"session", "rows": k, "executor", "spec", "step_timeout"}``:
  k rows of one Executor (1 <= k <= envs_per_executor); 503 when no Executor has k free rows;
* ``POST /v1/step``: first ``{"session", "obs": [k, *obs]}`` (the first observations after resetting
  its k environments), then after every step ``{"session", "obs": [k, *obs], "reward": [k],
  "terminated": [k], "truncated": [k], "reset_obs": [m, *obs]}``, where ``obs`` is what each
  environment's step returned (an ended episode's final observation) and ``reset_obs`` the first
  observations of the next episodes of the m environments whose episode ended (terminated or
  truncated), in environment order (omitted or [] when none). Every observation and reward must be
  finite and within float32's range (magnitude at most 3.4e38), as the Executor stores them: a 400
  names the field, the value and the session otherwise. The answer, once the Executor acted
  (long-polled): ``{"actions": [k]}`` (ints) or ``[k, A]`` (floats within the bounds);
* ``DELETE /v1/sessions/{id}``: disconnect; the episodes in progress on its rows are dropped.

404: an unknown session (never connected, disconnected, or dropped after ``step_timeout`` seconds
without a step: connect again). 409: a step while the session's previous one waits. 410
``{"error": ..., "ended": true}``: the run ended, to every request, waiting ones included.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mlxe.envs.remote import Session, SimulatorHub, _Step
from mlxe.service.policy import (
    KEEP_ALIVE_S,
    REQUEST_TIMEOUT_S,
    _BadRequest,
    _error,
    _float32,
    _floats,
    _json_body,
    _shown,
)
from mlxe.service.server import HttpService
from mlxe.service.tokens import refusal

SIMULATORS_FILE = "simulators.json"


def make_simulator_app(hub: SimulatorHub, token: str) -> Starlette:
    """The routes of the module doc over ``hub``, answering requests that carry ``token``."""
    expected = token.encode()
    obs_shape = hub.obs_shape
    discrete = hub.spec["action"]["kind"] == "discrete"

    def ended() -> JSONResponse:
        return JSONResponse({"error": f"run: {hub.closed}", "ended": True}, status_code=410)

    def observations(body: dict, name: str, count: int, session: Session) -> np.ndarray:
        """body[name] as float32 [count, *obs]: finite, and finite still in float32, as the Executor stores them."""
        shape_text = ", ".join(map(str, [count, *obs_shape]))
        if name not in body:
            raise _BadRequest(f"{name}: missing; expected {count} observations, shape [{shape_text}]")
        obs = _floats(body[name], name, f"[{shape_text}]")
        if obs.shape != (count, *obs_shape):
            raise _BadRequest(f"{name}: expected shape [{shape_text}], got {list(obs.shape)}")
        return _float32(obs, name, f" (session {session.id})")

    def flags(body: dict, name: str, k: int) -> list[bool]:
        value = body.get(name)
        if not isinstance(value, list) or len(value) != k or any(type(v) is not bool for v in value):
            raise _BadRequest(f"{name}: expected a list of {k} booleans (one per environment), got {_shown(value)}")
        return value

    def rewards(body: dict, k: int, session: Session) -> list[float]:
        """body["reward"]: k numbers that stay finite as float32 (a reward of 1e300 would be inf there)."""
        value = body.get("reward")
        # JSON true is not a number
        if not isinstance(value, list) or len(value) != k or any(type(v) not in (int, float) for v in value):
            raise _BadRequest(f"reward: expected a list of {k} finite numbers (one per environment), got {_shown(value)}")
        values = _floats(value, "reward", f"[{k}]")
        _float32(values, "reward", f" (session {session.id})")  # refuses what the Executor's float32 makes inf
        return values.tolist()

    def session_of(session_id: object) -> Session:
        session = hub.sessions.get(session_id) if isinstance(session_id, str) else None
        if session is None:
            raise _BadRequest(
                f"session: no session {_shown(session_id)} (disconnected, dropped after env.remote.step_timeout "
                "seconds without a step, or never connected): POST /v1/connect", 404
            )
        return session

    def steps_of(body: dict, session: Session) -> list[_Step]:
        """The session's step in ``body``, one :class:`_Step` per row."""
        k = len(session.rows)
        obs = observations(body, "obs", k, session)
        if session.first:
            for name in ("reward", "terminated", "truncated", "reset_obs"):
                if name in body:
                    raise _BadRequest(f"{name}: the first step after /v1/connect sends only obs (the first observations)")
            return [_Step(o, first=True) for o in obs]
        reward = rewards(body, k, session)
        terminated, truncated = flags(body, "terminated", k), flags(body, "truncated", k)
        ended_rows = [i for i in range(k) if terminated[i] or truncated[i]]
        fresh = observations(body, "reset_obs", len(ended_rows), session) if ended_rows or body.get("reset_obs") else []
        steps = [_Step(obs[i], float(reward[i]), terminated[i], truncated[i]) for i in range(k)]
        for i, first in zip(ended_rows, fresh):
            steps[i].final_obs, steps[i].obs = steps[i].obs, first
        return steps

    def api(endpoint):
        """``endpoint`` behind the token; a refused request is a JSON error naming the field, 410 once the run ended."""

        async def guarded(request: Request) -> Response:
            refused = refusal(request, expected, SIMULATORS_FILE)
            if refused is not None:
                return refused
            if hub.closed:
                return ended()
            try:
                return await endpoint(request)
            except _BadRequest as e:
                return _error(e.status_code, str(e))

        return guarded

    @api
    async def spec(request: Request) -> Response:
        return JSONResponse({
            **hub.spec, "rows": len(hub.rows), "free_rows": hub.free_rows(), "envs_per_executor": hub.envs,
            "step_timeout": hub.remote.step_timeout,
        })

    @api
    async def connect(request: Request) -> Response:
        body = await _json_body(request)
        k = body.get("envs")
        if type(k) is not int or not 1 <= k <= hub.envs:
            raise _BadRequest(
                f"envs: expected an integer from 1 to {hub.envs} (a session's rows belong to one Executor, which "
                f"steps envs_per_executor = {hub.envs}), got {_shown(k)}"
            )
        session = hub.connect(k)
        if session is None:
            raise _BadRequest(
                f"rows: no Executor has {k} free rows ({hub.free_rows()} of the run's {len(hub.rows)} are free); "
                "connect fewer environments, or later", 503
            )
        return JSONResponse(
            {"session": session.id, "rows": k, "executor": session.executor, "spec": hub.spec,
             "step_timeout": hub.remote.step_timeout},
            status_code=201,
        )

    @api
    async def step(request: Request) -> Response:
        body = await _json_body(request)
        session = session_of(body.get("session"))
        if session.waiting is not None:
            raise _BadRequest("session: its previous step still waits for its actions; send one step at a time", 409)
        answer = await hub.submit(session, steps_of(body, session))
        if isinstance(answer, list):
            actions = [int(a) for a in answer] if discrete else answer
            return JSONResponse({"actions": actions})
        if hub.closed:
            return ended()
        return _error(404, f"session: {answer}; connect again (POST /v1/connect)")

    @api
    async def disconnect(request: Request) -> Response:
        session = session_of(request.path_params["session_id"])
        hub.disconnect(session)
        return JSONResponse({"ended": session.id})

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return _error(exc.status_code, exc.detail)

    routes = [
        Route("/v1/spec", spec, methods=["GET"]),
        Route("/v1/connect", connect, methods=["POST"]),
        Route("/v1/step", step, methods=["POST"]),
        Route("/v1/sessions/{session_id}", disconnect, methods=["DELETE"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: http_error})


class SimulatorService(HttpService):
    """Serves ``hub``'s rows to remote simulators on ``address`` (``env.remote.address``; port 0: any free
    port) from :meth:`start` to :meth:`stop`; the URL and token are in ``run_dir/simulators.json`` (0600)."""

    file_name = SIMULATORS_FILE
    key = "env.remote.address"
    keep_alive_s = KEEP_ALIVE_S  # a simulator's step may take longer than uvicorn's default 5 s
    request_timeout_s = REQUEST_TIMEOUT_S

    def __init__(self, run_dir: Path, address: str | int, hub: SimulatorHub) -> None:
        super().__init__(run_dir, address)
        self.hub = hub
        # a session per row at most, each on its own keep-alive connection, and room for /v1/spec callers
        self.max_connections = len(hub.rows) + 32

    def make_app(self, token: str) -> Starlette:
        return make_simulator_app(self.hub, token)
