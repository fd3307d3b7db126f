// A remote simulator driven by `mlxe serve-policy`, in Node.js 20 with no packages: N CartPole-v1
// environments simulated here (Gymnasium's equations, Euler integration, terminated past 2.4 m or
// 12 degrees, truncated at 500 steps), their actions asked of the service in one request per step
// (fetch keeps the connection alive). Prints the same JSON object as cartpole_client.py.
//
//   node examples/remote_env/cartpole.mjs --url http://127.0.0.1:8766/ --token TOKEN --envs 8 --episodes 16
//
// The token (default: the MLXE_TOKEN variable) is in the run directory's policy_service.json.

import { parseArgs } from "node:util";

const GRAVITY = 9.8, MASS_CART = 1.0, MASS_POLE = 0.1, HALF_LENGTH = 0.5, FORCE = 10.0, TAU = 0.02;
const TOTAL_MASS = MASS_CART + MASS_POLE, POLEMASS_LENGTH = MASS_POLE * HALF_LENGTH;
const X_THRESHOLD = 2.4, THETA_THRESHOLD = (12 * 2 * Math.PI) / 360, MAX_STEPS = 500;

// mulberry32: a small seeded generator, so a run can be repeated
function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

class CartPole {
  constructor(random) {
    this.random = random;
    this.reset();
  }

  reset() {
    this.state = Array.from({ length: 4 }, () => this.random() * 0.1 - 0.05); // x, x_dot, theta, theta_dot
    this.steps = 0;
    return this.state;
  }

  // action 0 (push left) or 1 (push right) -> [reward, terminated, truncated]
  step(action) {
    const [x, xDot, theta, thetaDot] = this.state;
    const force = action === 1 ? FORCE : -FORCE;
    const cos = Math.cos(theta), sin = Math.sin(theta);
    const temp = (force + POLEMASS_LENGTH * thetaDot ** 2 * sin) / TOTAL_MASS;
    const thetaAcc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - (MASS_POLE * cos ** 2) / TOTAL_MASS));
    const xAcc = temp - (POLEMASS_LENGTH * thetaAcc * cos) / TOTAL_MASS;
    this.state = [x + TAU * xDot, xDot + TAU * xAcc, theta + TAU * thetaDot, thetaDot + TAU * thetaAcc];
    this.steps += 1;
    const terminated = Math.abs(this.state[0]) > X_THRESHOLD || Math.abs(this.state[2]) > THETA_THRESHOLD;
    return [1.0, terminated, !terminated && this.steps >= MAX_STEPS];
  }
}

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
