// A remote simulator a run with `env.api: remote` trains on, in Node.js 20 with no packages: k CartPole-v1
// environments simulated here (cartpole.mjs's physics: Gymnasium's equations, Euler integration,
// terminated past 2.4 m or 12 degrees, truncated at 500 steps). It connects, sends the first
// observations, then steps with the actions each answer brings and sends what the environments
// returned, until the run ends (410) or --steps steps; a dropped session (404) connects again.
// Prints the same JSON object as train_cartpole_client.py.
//
//   node examples/remote_env/train_cartpole.mjs --token-file RUN_DIR/simulators.json --envs 8
//
// The token (--token, the MLXE_TOKEN variable, or --token-file) and the URL are in RUN_DIR/simulators.json.

import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { CartPole, generator } from "./cartpole_physics.mjs";

const RETRY_MS = 200; // pause between attempts to reach the run, or to find free rows

const { values: args } = parseArgs({
  options: {
    address: { type: "string" },
    token: { type: "string", default: process.env.MLXE_TOKEN ?? "" },
    "token-file": { type: "string" },
    envs: { type: "string", default: "8" },
    steps: { type: "string" },
    seed: { type: "string", default: "0" },
    wait: { type: "string", default: "30" },
  },
});
let url = "http://127.0.0.1:8770/";
if (args["token-file"]) {
  const written = JSON.parse(readFileSync(args["token-file"], "utf8"));
  args.token ||= written.token;
  url = written.url;
}
if (args.address) url = `http://${args.address}/`;
if (!args.token) {
  console.error("give --token, --token-file RUN_DIR/simulators.json or set MLXE_TOKEN");
  process.exit(2);
}
const nEnvs = Number(args.envs), maxSteps = args.steps === undefined ? Infinity : Number(args.steps);
const waitMs = Number(args.wait) * 1000;
const headers = { Authorization: `Bearer ${args.token}`, "Content-Type": "application/json" };
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

class Ended extends Error {}
class Dropped extends Error {}

// One request; 410 throws Ended, a step's 404 Dropped, other errors Error. Retries while the run is not listening yet.
async function call(method, path, body) {
  const deadline = Date.now() + waitMs;
  let response;
  for (;;) {
    try {
      response = await fetch(new URL(path, url), {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body),
      });
      break;
    } catch (error) {
      if (Date.now() > deadline) throw error;
      await sleep(RETRY_MS);
    }
  }
  const answer = await response.json();
  if (response.status === 410) throw new Ended(answer.error);
  if (response.status === 404 && path === "v1/step") throw new Dropped(answer.error);
  if (!response.ok) {
    const error = new Error(`${method} ${path}: ${response.status} ${answer.error}`);
    error.status = response.status;
    throw error;
  }
  return answer;
}

async function connect() {
  const deadline = Date.now() + waitMs;
  for (;;) {
    try {
      return await call("POST", "v1/connect", { envs: nEnvs });
    } catch (error) {
      if (error.status !== 503 || Date.now() > deadline) throw error; // 503: no free rows yet
      await sleep(RETRY_MS);
    }
  }
}

const random = generator(Number(args.seed));
const envs = Array.from({ length: nEnvs }, () => new CartPole(random));
const episodes = []; // [length, return] of each finished episode
const lengths = new Array(nEnvs).fill(0), returns = new Array(nEnvs).fill(0);
let dropped = 0, steps = 0, requests = 0, sessions = 0, ended = false;
const started = performance.now();
try {
  while (steps < maxSteps) {
    const { session } = await connect();
    sessions += 1;
    envs.forEach((env, i) => { env.reset(); lengths[i] = 0; returns[i] = 0; });
    let body = { session, obs: envs.map((env) => env.state) };
    let gone = false;
    try {
      while (steps < maxSteps) {
        const { actions } = await call("POST", "v1/step", body);
        requests += 1;
        const obs = [], reward = [], terminated = [], truncated = [], resetObs = [];
        envs.forEach((env, i) => {
          const [r, term, trunc] = env.step(actions[i]);
          obs.push(env.state);
          reward.push(r);
          terminated.push(term);
          truncated.push(trunc);
          lengths[i] += 1;
          returns[i] += r;
          if (term || trunc) {
            episodes.push([lengths[i], returns[i]]);
            lengths[i] = 0;
            returns[i] = 0;
            resetObs.push(env.reset());
          }
        });
        steps += 1;
        body = { session, obs, reward, terminated, truncated, reset_obs: resetObs };
      }
    } catch (error) {
      if (!(error instanceof Dropped)) throw error;
      gone = true;
    }
    dropped += lengths.filter((n) => n > 0).length; // the episodes in progress are cut
    if (!gone) await call("DELETE", `v1/sessions/${session}`);
  }
} catch (error) {
  if (!(error instanceof Ended)) throw error;
  ended = true;
}
const wall = (performance.now() - started) / 1000;
console.log(JSON.stringify({
  episodes, dropped, env_steps: steps * nEnvs, requests, sessions, ended, wall_s: Math.round(wall * 1000) / 1000,
}));
