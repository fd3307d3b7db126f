"""A remote simulator driven by ``mlxe serve-policy``: N Gymnasium CartPole-v1 environments stepped here,
their actions asked of the service in one request per step.

Standalone: the standard library (``http.client``, one persistent connection), NumPy and Gymnasium;
nothing from MLxE. Prints, at the end, one JSON object: the finished episodes, their mean return,
the env steps and requests made and the wall seconds.

    mlxe serve-policy runs/cartpole_ppo-... &
    export MLXE_TOKEN=...  # "token" in runs/cartpole_ppo-.../policy_service.json
    python examples/remote_env/cartpole_client.py --url http://127.0.0.1:8766/ --envs 8 --episodes 16
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


class PolicyClient:
    """The service's routes on one keep-alive connection; an error answer raises RuntimeError with its message."""

    def __init__(self, url: str, token: str) -> None:
        parts = urlsplit(url)
        self.connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=30)
        self.headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}

    def call(self, method: str, path: str, body: dict | None = None) -> dict:
        self.connection.request(method, path, None if body is None else json.dumps(body), self.headers)
        response = self.connection.getresponse()
        answer = json.loads(response.read())
        if response.status >= 400:
            raise RuntimeError(f"{method} {path}: {response.status} {answer.get('error')}")
        return answer

    def close(self) -> None:
        self.connection.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8766/", help="the service's URL")
    parser.add_argument("--token", default=os.environ.get("MLXE_TOKEN"),
                        help="the service's token (default: MLXE_TOKEN); in the run directory's policy_service.json")
    parser.add_argument("--envs", type=int, default=8, help="environments stepped together (observations per request)")
    parser.add_argument("--episodes", type=int, default=16, help="stop once this many episodes have finished")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if not args.token:
        parser.error("give --token or set MLXE_TOKEN (the token is in the run directory's policy_service.json)")

    client = PolicyClient(args.url, args.token)
    spec = client.call("GET", "/v1/spec")
    if spec["observation_shape"] != [4] or spec["action"] != {"kind": "discrete", "n": 2}:
        sys.exit(f"the service's policy does not play CartPole: {spec}")
    session = client.call("POST", "/v1/sessions", {"envs": args.envs})["session"] if spec["recurrent"] else None

    envs = [gym.make("CartPole-v1") for _ in range(args.envs)]
    obs = np.stack([env.reset(seed=args.seed + i)[0] for i, env in enumerate(envs)])
    starts = [True] * args.envs  # a recurrent policy's state is reset where an episode starts
    running = np.zeros(args.envs)  # each environment's return so far
    returns: list[float] = []
    steps = requests = 0
    started = time.perf_counter()
    while len(returns) < args.episodes:
        body = {"observations": obs.tolist()}
        if session is not None:
            body.update(session=session, episode_start=starts)
        actions = client.call("POST", "/v1/act", body)["actions"]
        requests += 1
        for i, (env, action) in enumerate(zip(envs, actions)):
            o, reward, terminated, truncated, _ = env.step(action)
            running[i] += reward
            starts[i] = terminated or truncated
            if starts[i]:
                returns.append(float(running[i]))
                running[i] = 0.0
                o, _ = env.reset()
            obs[i] = o
        steps += args.envs
    wall = time.perf_counter() - started
    if session is not None:
        client.call("DELETE", f"/v1/sessions/{session}")
    client.close()
    print(json.dumps({
        "episodes": len(returns), "mean_return": float(np.mean(returns)), "env_steps": steps, "requests": requests,
        "wall_s": round(wall, 3),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
