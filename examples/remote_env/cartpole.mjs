// A remote simulator driven by `mlxe serve-policy`, in Node.js 20 with no packages: N CartPole-v1
// environments simulated here (Gymnasium's equations, Euler integration, terminated past 2.4 m or
// 12 degrees, truncated at 500 steps), their actions asked of the service in one request per step
// (fetch keeps the connection alive). Prints the same JSON object as cartpole_client.py.
//
//   node examples/remote_env/cartpole.mjs --url http://127.0.0.1:8766/ --token TOKEN --envs 8 --episodes 16
//
// The token (default: the MLXE_TOKEN variable) is in the run directory's policy_service.json.

import { parseArgs } from "node:util";
import { CartPole, generator } from "./cartpole_physics.mjs";

const { values: args } = parseArgs({
  options: {
    url: { type: "string", default: "http://127.0.0.1:8766/" },
    token: { type: "string", default: process.env.MLXE_TOKEN ?? "" },
    envs: { type: "string", default: "8" },
    episodes: { type: "string", default: "16" },
    seed: { type: "string", default: "0" },
  },
});
if (!args.token) {
  console.error("give --token or set MLXE_TOKEN (the token is in the run directory's policy_service.json)");
  process.exit(2);
}
const nEnvs = Number(args.envs), nEpisodes = Number(args.episodes);
const headers = { Authorization: `Bearer ${args.token}`, "Content-Type": "application/json" };

async function call(method, path, body) {
  const response = await fetch(new URL(path, args.url), {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(`${method} ${path}: ${response.status} ${answer.error}`);
  return answer;
}

const spec = await call("GET", "v1/spec");
if (spec.observation_shape.join() !== "4" || spec.action.kind !== "discrete" || spec.action.n !== 2) {
  console.error(`the service's policy does not play CartPole: ${JSON.stringify(spec)}`);
  process.exit(1);
}
const session = spec.recurrent ? (await call("POST", "v1/sessions", { envs: nEnvs })).session : null;

const random = generator(Number(args.seed));
const envs = Array.from({ length: nEnvs }, () => new CartPole(random));
const starts = new Array(nEnvs).fill(true); // a recurrent policy's state is reset where an episode starts
const running = new Array(nEnvs).fill(0); // each environment's return so far
const returns = [];
let steps = 0, requests = 0;
const started = performance.now();
while (returns.length < nEpisodes) {
  const body = { observations: envs.map((env) => env.state) };
  if (session !== null) Object.assign(body, { session, episode_start: starts });
  const { actions } = await call("POST", "v1/act", body);
  requests += 1;
  envs.forEach((env, i) => {
    const [reward, terminated, truncated] = env.step(actions[i]);
    running[i] += reward;
    starts[i] = terminated || truncated;
    if (starts[i]) {
      returns.push(running[i]);
      running[i] = 0;
      env.reset();
    }
  });
  steps += nEnvs;
}
const wall = (performance.now() - started) / 1000;
if (session !== null) await call("DELETE", `v1/sessions/${session}`);
const mean = returns.reduce((a, b) => a + b, 0) / returns.length;
console.log(JSON.stringify({
  episodes: returns.length, mean_return: mean, env_steps: steps, requests, wall_s: Math.round(wall * 1000) / 1000,
}));
