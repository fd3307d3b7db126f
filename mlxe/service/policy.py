"""``mlxe serve-policy``: a trained policy answering remote simulators' action requests over HTTP/JSON.

RELAAX made the environment a client of the agent over the network, so a simulator written in any
language could be driven by it. Here a run directory's trained policy is the server: a simulator
(``examples/remote_env``: Python and Node.js clients) sends its environments' observations and gets
their actions back, with the run's observation filter applied as ``mlxe eval`` applies it.

The protocol is HTTP/1.1 + JSON over a keep-alive connection. Every language has an HTTP client and
a JSON parser, so a client needs no generated code and can be tried with curl; gRPC would need
stubs generated for each language. One request carries a batch of B observations (B environments
stepped together), so the per-request cost (a few hundred microseconds of HTTP and JSON) is shared
by B env steps.

Routes (every one needs ``Authorization: Bearer <token>``; JSON in and out; errors are
``{"error": "<field>: <what is wrong>"}`` with 400, 401, 404, 413 or 429):

* ``GET /v1/spec``: observation shape and dtype, the action space, ``recurrent``, the run and checkpoint;
* ``POST /v1/act`` ``{"observations": [[...]] * B, "session"?: id, "episode_start"?: [bool] * B}``
  -> ``{"actions": [...] * B}`` (ints for Discrete actions, lists of floats clipped to the bounds for Box,
  lists of each part's index for categorical parts, and for a hybrid space the indices then the Box
  values clipped, all as floats);
* ``POST /v1/sessions`` ``{"envs": B}`` -> ``{"session": id}``: the recurrent state of B environments,
  which a recurrent policy needs (``episode_start`` resets rows); ``DELETE /v1/sessions/{id}`` ends it,
  and a session idle for 10 minutes expires. The open sessions hold at most 65,536 environments in
  all (429 past that): each environment's state is memory the service keeps.

Nothing is unpickled: the checkpoint is loaded with ``weights_only`` and bodies are parsed with
``json.loads``. The handlers are coroutines that act inline on the event loop: acting on a batch
takes tens of microseconds for an MLP (NumPy), less than a hop to a worker thread, and the policy and
its sessions are then only ever touched by one request at a time.
"""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from mlxe.config import ConfigError
from mlxe.core import Policy, State
from mlxe.runtime.trained import TrainedPolicy, load_policy
from mlxe.service.server import HttpService
from mlxe.service.tokens import refusal

POLICY_SERVICE_FILE = "policy_service.json"
DEFAULT_ADDRESS = "127.0.0.1:8766"
MAX_OBSERVATIONS = 4096  # most observations (environments) one request or session may hold
MAX_BODY_BYTES = 32 * 2**20  # a larger body is refused (413) before it is parsed
MAX_SESSIONS = 1024  # sessions alive at once: each holds a recurrent state per environment
MAX_SESSION_ENVS = 16 * MAX_OBSERVATIONS  # environments of all open sessions together: about 77 MB of state
# for an LSTM core of 128 (1,024 sessions of 4,096 environments would be about 5 GB)
SESSION_IDLE_S = 600.0  # a session unused this long (seconds) is forgotten
KEEP_ALIVE_S = 60  # an idle connection is closed after this long (uvicorn's default, 5 s, is shorter than a
# slow simulator's step: its client would find the connection closed at its next request)
REQUEST_TIMEOUT_S = 30.0  # seconds a connection may take to send a whole request: a body of up to 32 MB
FLOAT32_MAX = float(np.finfo(np.float32).max)  # about 3.4e38: a value past it is inf once stored as float32


class _BadRequest(ValueError):
    """A request the service refuses, with its HTTP status (400 unless said); the message names the field."""

    def __init__(self, message: str, status_code: int = 400) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass
class ServedPolicy:
    """A run's policy as the service acts with it (:class:`mlxe.runtime.trained.TrainedPolicy`), and
    the /v1/spec answer."""

    trained: TrainedPolicy
    greedy: bool
    spec: dict  # the /v1/spec answer

    @property
    def policy(self) -> Policy:
        return self.trained.policy

    @property
    def obs_shape(self) -> tuple[int, ...]:
        return tuple(int(n) for n in self.trained.spec.obs_shape)

    @property
    def obs_dtype(self) -> str:
        return self.trained.spec.obs_dtype

    @property
    def recurrent(self) -> bool:
        return self.trained.recurrent

    def act(self, obs: np.ndarray, state: State) -> tuple[list, State]:
        """obs [B, *obs] (raw, as the simulator observes them) -> (B actions as JSON values, the next state)."""
        actions, state = self.trained.predict(obs, state, deterministic=self.greedy)
        return actions.tolist(), state


def load_served_policy(run_dir: Path, last: bool = False, greedy: bool = True) -> ServedPolicy:
    """The policy of ``run_dir``'s ``best.pt`` (its ``last.pt`` with ``last``, or when it has no ``best.pt``),
    loaded as ``mlxe eval`` loads it. A multi-agent run, or one acting with masks, is a ConfigError."""

    from mlxe.runtime.setup import problem_spec

    def refuse(run_dir: Path, config) -> None:
        """What /v1/act cannot carry: agents' turns, action masks."""
        if config.env.api == "pettingzoo":
            raise ConfigError(
                f"serve-policy: {run_dir} is a multi-agent run (env.api 'pettingzoo'); serve-policy serves "
                "single-agent runs for now"
            )
        if problem_spec(config).action_mask:
            raise ConfigError(
                f"serve-policy: {run_dir} acts with its environment's action masks, which /v1/act requests do not "
                "carry; serve-policy serves runs without masks (env.action_mask: false)"
            )

    run_dir = Path(run_dir)
    trained = load_policy(run_dir, last, refuse)
    spec = trained.spec
    if spec.continuous:
        action = {
            "kind": "box", "shape": [spec.n_actions], "low": list(spec.action_low), "high": list(spec.action_high),
        }
    elif spec.hybrid:  # each categorical part's index, then the Box values clipped to their bounds
        action = {"kind": "hybrid", "nvec": list(spec.action_nvec),
                  "box": {"shape": [spec.box_dims], "low": list(spec.action_low), "high": list(spec.action_high)}}
    elif spec.factorized:  # an action is each part's index (a MultiDiscrete's, a MultiBinary's bits, ...)
        action = {"kind": "multi_discrete", "nvec": list(spec.action_nvec)}
    else:
        action = {"kind": "discrete", "n": spec.n_actions}
    description = {
        "observation_shape": [int(n) for n in spec.obs_shape], "observation_dtype": spec.obs_dtype, "action": action,
        "recurrent": trained.recurrent, "greedy": greedy, "max_observations": MAX_OBSERVATIONS,
        "run": run_dir.resolve().name, "checkpoint": str(trained.checkpoint.relative_to(run_dir)),
    }
    return ServedPolicy(trained, greedy, description)


@dataclass
class _Session:
    """The recurrent state of one simulator's ``envs`` environments."""

    envs: int
    state: State
    used: float = field(default_factory=time.monotonic)  # monotonic seconds of the last request


def _error(status_code: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status_code)


async def _json_body(request: Request) -> dict:
    """The request's JSON object; raises _BadRequest (413 past MAX_BODY_BYTES)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
        raise _BadRequest(f"body: {declared} bytes; at most {MAX_BODY_BYTES} are accepted", 413)
    chunks, size = [], 0
    try:
        async for chunk in request.stream():  # counted as it arrives: a chunked body has no length to check first
            size += len(chunk)
            if size > MAX_BODY_BYTES:
                raise _BadRequest(f"body: over {MAX_BODY_BYTES} bytes", 413)
            chunks.append(chunk)
    except ClientDisconnect:  # the client left, or the server closed a body sent too slowly: nobody reads this
        raise _BadRequest("body: the connection closed before the whole body arrived") from None
    try:
        body = json.loads(b"".join(chunks))
    except ValueError as e:  # JSONDecodeError, or bytes that are not UTF-8
        raise _BadRequest(f"body: not valid JSON ({e})") from None
    except RecursionError:  # json.loads recurses once per level of nesting
        raise _BadRequest("body: JSON nested too deeply (no field needs more than a few levels)") from None
    if not isinstance(body, dict):
        raise _BadRequest(f"body: expected a JSON object, got {type(body).__name__}")
    return body


def _shown(value: object, limit: int = 100) -> str:
    """``value`` as JSON for an error message, cut to ``limit`` characters: a body may hold megabytes,
    or nesting deeper than json.dumps recurses."""
    try:
        text = json.dumps(value)
    except RecursionError:
        text = f"a nested {type(value).__name__}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _floats(value: object, name: str, expected: str) -> np.ndarray:
    """``value`` (numbers in nested lists) as float64; a _BadRequest naming ``name`` and the ``expected`` shape."""
    try:
        return np.asarray(value, np.float64)
    except OverflowError:  # a JSON integer past float64's range
        raise _BadRequest(f"{name}: a number is beyond float range; expected finite numbers of shape {expected}") from None
    except (ValueError, TypeError):  # ragged lists, strings, nulls, objects, nesting past 64 dimensions
        raise _BadRequest(f"{name}: expected numbers in nested lists of shape {expected}") from None


def _float32(values: np.ndarray, name: str, where: str = "") -> np.ndarray:
    """``values`` as float32; a _BadRequest naming ``name``, the first value that is NaN, infinite or
    beyond float32's range (which float32 would turn into inf) and its index, then ``where``."""
    bad = ~(np.abs(values) <= FLOAT32_MAX)  # NaN compares False
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise _BadRequest(
            f"{name}: every value must be a finite number within float32's range (magnitude at most "
            f"{FLOAT32_MAX:.7g}); got {float(values[index])!r} at {list(index)}{where}"
        )
    return values.astype(np.float32)


def _count(value: object, name: str) -> int:
    """A count of environments from 1 to MAX_OBSERVATIONS (JSON true is not a count)."""
    if type(value) is not int or not 1 <= value <= MAX_OBSERVATIONS:
        raise _BadRequest(f"{name}: expected an integer from 1 to {MAX_OBSERVATIONS}, got {_shown(value)}")
    return value


def make_policy_app(run_dir: Path, token: str, last: bool = False, greedy: bool = True) -> Starlette:
    """The policy service of ``run_dir`` (see the module doc); its routes answer requests that carry
    ``token``. ``greedy=False``: actions sampled from the policy. ``app.state.spec`` is the /v1/spec answer."""
    from mlxe.runtime.rollout import reset_state

    served = load_served_policy(run_dir, last, greedy)
    expected = token.encode()
    shape_text = ", ".join(["B", *map(str, served.obs_shape)])
    sessions: dict[str, _Session] = {}

    def observations(body: dict) -> np.ndarray:
        """body["observations"] as an array [B, *obs] of the observation dtype."""
        if "observations" not in body:
            raise _BadRequest(f"observations: missing; expected a list of B observations of shape [{shape_text}]")
        raw = body["observations"]
        if not isinstance(raw, list) or not raw:
            raise _BadRequest(f"observations: expected a non-empty list of observations of shape [{shape_text}]")
        if len(raw) > MAX_OBSERVATIONS:
            raise _BadRequest(f"observations: {len(raw)} observations; at most {MAX_OBSERVATIONS} per request")
        obs = _floats(raw, "observations", f"[{shape_text}]")
        if obs.shape[1:] != served.obs_shape:
            raise _BadRequest(f"observations: expected shape [{shape_text}], got {list(obs.shape)}")
        obs = _float32(obs, "observations")
        return obs if served.obs_dtype == "float32" else obs.astype(served.obs_dtype)

    def episode_starts(body: dict, rows: int) -> np.ndarray | None:
        """body["episode_start"] as a bool array [B], or None when absent."""
        starts = body.get("episode_start")
        if starts is None:
            return None
        if not isinstance(starts, list) or len(starts) != rows or any(type(v) is not bool for v in starts):
            raise _BadRequest(f"episode_start: expected a list of {rows} booleans (one per observation)")
        return np.asarray(starts, bool)

    def session_of(session_id: object) -> _Session:
        session = sessions.get(session_id) if isinstance(session_id, str) else None
        if session is not None and time.monotonic() - session.used > SESSION_IDLE_S:
            del sessions[session_id]
            session = None
        if session is None:
            raise _BadRequest(
                f"session: no session {_shown(session_id)} (ended, expired after {SESSION_IDLE_S / 60:.0f} "
                "minutes idle, or never created: POST /v1/sessions)", 404
            )
        return session

    def api(endpoint):
        """``endpoint`` behind the token; a refused request is a JSON error naming the field."""

        async def guarded(request: Request) -> Response:
            refused = refusal(request, expected, POLICY_SERVICE_FILE)
            if refused is not None:
                return refused
            try:
                return await endpoint(request)
            except _BadRequest as e:
                return _error(e.status_code, str(e))

        return guarded

    @api
    async def spec(request: Request) -> Response:
        return JSONResponse(served.spec)

    @api
    async def act(request: Request) -> Response:
        body = await _json_body(request)
        obs = observations(body)
        starts = episode_starts(body, len(obs))
        session = None
        if "session" in body:
            session = session_of(body["session"])
            if session.envs != len(obs):
                raise _BadRequest(
                    f"observations: the session has {session.envs} environments, got {len(obs)} observations"
                )
        elif served.recurrent:
            raise _BadRequest("session: the policy is recurrent; create a session (POST /v1/sessions) and name it")
        state = None
        if session is not None:
            state = session.state if starts is None else reset_state(session.state, starts, served.policy)
        actions, state = served.act(obs, state)
        if session is not None:
            session.state, session.used = state, time.monotonic()
        return JSONResponse({"actions": actions})

    @api
    async def create_session(request: Request) -> Response:
        body = await _json_body(request)
        if "envs" not in body:
            raise _BadRequest(f"envs: missing; expected the number of environments (1 to {MAX_OBSERVATIONS})")
        envs = _count(body["envs"], "envs")
        now = time.monotonic()
        for key in [k for k, s in sessions.items() if now - s.used > SESSION_IDLE_S]:
            del sessions[key]
        if len(sessions) >= MAX_SESSIONS:
            raise _BadRequest(f"session: {MAX_SESSIONS} sessions are open; end one (DELETE /v1/sessions/ID)", 429)
        held = sum(s.envs for s in sessions.values())
        if held + envs > MAX_SESSION_ENVS:
            raise _BadRequest(
                f"envs: the open sessions hold {held} environments and at most {MAX_SESSION_ENVS} are allowed in "
                f"all ({MAX_SESSION_ENVS - held} left, {envs} asked); end a session (DELETE /v1/sessions/ID)", 429
            )
        session_id = secrets.token_urlsafe(16)
        sessions[session_id] = _Session(envs, served.policy.initial_state(envs))
        return JSONResponse({"session": session_id}, status_code=201)

    @api
    async def end_session(request: Request) -> Response:
        session_id = request.path_params["session_id"]
        session_of(session_id)
        del sessions[session_id]
        return JSONResponse({"ended": session_id})

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return _error(exc.status_code, exc.detail)

    routes = [
        Route("/v1/spec", spec, methods=["GET"]),
        Route("/v1/act", act, methods=["POST"]),
        Route("/v1/sessions", create_session, methods=["POST"]),
        Route("/v1/sessions/{session_id}", end_session, methods=["DELETE"]),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_error})
    app.state.spec = served.spec
    return app


class PolicyService(HttpService):
    """Serves ``run_dir``'s policy on ``address`` ("HOST:PORT"; port 0: any free port) from :meth:`start` to
    :meth:`stop`.

    After ``start``, ``url`` is where it answers (``http://HOST:PORT/``, the actual port), ``token`` what
    every route requires and ``spec`` the /v1/spec answer; the URL and token are in
    ``run_dir/policy_service.json`` (mode 0600) until ``stop``. ``last``: serve ``last.pt`` rather than
    ``best.pt``; ``greedy=False``: sample actions.
    """

    file_name = POLICY_SERVICE_FILE
    key = "serve-policy --address"
    keep_alive_s = KEEP_ALIVE_S
    request_timeout_s = REQUEST_TIMEOUT_S
    max_connections = 256  # simulators, one keep-alive connection each

    def __init__(
        self, run_dir: Path, address: str | int = DEFAULT_ADDRESS, last: bool = False, greedy: bool = True
    ) -> None:
        super().__init__(run_dir, address)
        self.last, self.greedy = last, greedy
        self.spec: dict = {}

    def make_app(self, token: str) -> Starlette:
        app = make_policy_app(self.run_dir, token, self.last, self.greedy)  # refuses a run before binding
        self.spec = app.state.spec
        return app
