"""A remote simulator a run with ``env.api: remote`` trains on: k Gymnasium CartPole-v1 environments stepped here.

Standalone: the standard library (``http.client``, one persistent connection), NumPy and Gymnasium;
nothing from MLxE. It connects (``POST /v1/connect``), sends its environments' first observations,
then steps them with the actions each answer brings and sends what they returned (``POST /v1/step``),
until the run ends (410) or ``--steps`` steps. A dropped session (404: no step within the run's
``env.remote.step_timeout``) connects again with fresh episodes. Prints, at the end, one JSON object:
``episodes`` (the lengths and returns of the episodes it finished), ``dropped`` (episodes cut by a
disconnection), ``env_steps``, ``requests``, ``sessions``, ``ended`` (the run ended) and ``wall_s``.

    mlxe train configs/remote_cartpole_ppo.yaml &          # writes RUN_DIR/simulators.json
    python examples/remote_env/train_cartpole_client.py --token-file RUN_DIR/simulators.json --envs 8
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import time
from urllib.parse import urlsplit

import gymnasium as gym
import numpy as np

RETRY_S = 0.2  # pause between attempts to reach the run, or to find free rows (seconds)


class Ended(Exception):
    """The run ended (410)."""


class Dropped(Exception):
    """The session is gone (404): dropped by the run, or disconnected."""


class TrainingClient:
    """The simulator service's routes on one keep-alive connection; 410 raises Ended, 404 Dropped, other
    errors RuntimeError with the service's message."""

    def __init__(self, host: str, port: int, token: str, wait_s: float) -> None:
        # no timeout on reads: a step is answered when the Executor acted, after the Learner's update
        self.connection = http.client.HTTPConnection(host, port)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        self.wait_s = wait_s

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                self.connection.request(method, path, None if body is None else json.dumps(body), self.headers)
                response = self.connection.getresponse()
                break
            except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected):
                self.connection.close()  # the run is not listening yet, or closed an idle connection
                if time.monotonic() > deadline:
                    raise
                time.sleep(RETRY_S)
        answer = json.loads(response.read())
        if response.status == 410:
            raise Ended(answer.get("error"))
        if response.status == 404 and path == "/v1/step":
            raise Dropped(answer.get("error"))
        if response.status >= 400:
            raise RuntimeError(f"{method} {path}: {response.status} {answer.get('error')}")
        return answer

    def connect(self, envs: int) -> dict:
        """A session of ``envs`` rows, waiting for rows to free up (503) as long as for the run to answer."""
        deadline = time.monotonic() + self.wait_s
        while True:
            try:
                return self.call("POST", "/v1/connect", {"envs": envs})
            except RuntimeError as e:
                if " 503 " not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(RETRY_S)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--address", help="the run's env.remote.address, HOST:PORT (default: the URL in --token-file, "
                                          "else 127.0.0.1:8770)")
    parser.add_argument("--token", default=os.environ.get("MLXE_TOKEN"), help="the run's token (default: MLXE_TOKEN)")
    parser.add_argument("--token-file", help="RUN_DIR/simulators.json: the token and the URL")
    parser.add_argument("--envs", type=int, default=8, help="environments stepped together (rows of one Executor)")
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps (default: until the run ends)")
    parser.add_argument("--disconnect-after", type=int, default=None, metavar="N",
                        help="disconnect after N steps, mid-episode, then connect again (a simulator restarting)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the run to answer, or for free rows")
    args = parser.parse_args()
    url = None
    if args.token_file:
        with open(args.token_file) as f:
            written = json.load(f)
        args.token, url = args.token or written["token"], written["url"]
    if not args.token:
        parser.error("give --token, --token-file RUN_DIR/simulators.json or set MLXE_TOKEN")
    if args.address:
        host, _, port = args.address.rpartition(":")
        host, port = host.strip("[]") or "127.0.0.1", int(port)
    elif url:
        host, port = urlsplit(url).hostname, urlsplit(url).port
    else:
        host, port = "127.0.0.1", 8770

    client = TrainingClient(host, port, args.token, args.wait)
    envs = [gym.make("CartPole-v1") for _ in range(args.envs)]
    episodes: list[list[float]] = []  # [length, return] of each finished episode
    lengths, returns = np.zeros(args.envs, np.int64), np.zeros(args.envs)
    dropped = steps = requests = sessions = 0
    ended = False
    started = time.perf_counter()
    session = None
    try:
        while args.steps is None or steps < args.steps:
            session = client.connect(args.envs)["session"]
            sessions += 1
            obs = np.stack([env.reset(seed=args.seed + sessions * args.envs + i)[0] for i, env in enumerate(envs)])
            lengths[:], returns[:] = 0, 0.0
            body: dict = {"session": session, "obs": obs.tolist()}
            try:
                while args.steps is None or steps < args.steps:
                    actions = client.call("POST", "/v1/step", body)["actions"]
                    requests += 1
                    if steps == args.disconnect_after:
                        args.disconnect_after = None
                        break
                    reward = np.zeros(args.envs)
                    done = np.zeros((2, args.envs), bool)  # terminated, truncated
                    fresh = []  # the next episodes' first observations, in environment order
                    for i, (env, action) in enumerate(zip(envs, actions)):
                        obs[i], reward[i], done[0, i], done[1, i], _ = env.step(action)
                        lengths[i] += 1
                        returns[i] += reward[i]
                        if done[0, i] or done[1, i]:
                            episodes.append([int(lengths[i]), float(returns[i])])
                            lengths[i], returns[i] = 0, 0.0
                            fresh.append(env.reset()[0].tolist())
                    steps += 1
                    body = {
                        "session": session, "obs": obs.tolist(), "reward": reward.tolist(),
                        "terminated": done[0].tolist(), "truncated": done[1].tolist(), "reset_obs": fresh,
                    }
            except Dropped:
                session = None
            dropped += int(np.count_nonzero(lengths))  # the episodes in progress are cut
            if session is not None:
                client.call("DELETE", f"/v1/sessions/{session}")
                session = None
    except Ended:
        ended = True
    wall = time.perf_counter() - started
    client.connection.close()
    print(json.dumps({
        "episodes": episodes, "dropped": dropped, "env_steps": steps * args.envs, "requests": requests,
        "sessions": sessions, "ended": ended, "wall_s": round(wall, 3),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
