// CartPole-v1 in JavaScript for the example simulators (cartpole.mjs, train_cartpole.mjs): Gymnasium's
// equations, Euler integration, terminated past 2.4 m or 12 degrees, truncated at 500 steps.

const GRAVITY = 9.8, MASS_CART = 1.0, MASS_POLE = 0.1, HALF_LENGTH = 0.5, FORCE = 10.0, TAU = 0.02;
const TOTAL_MASS = MASS_CART + MASS_POLE, POLEMASS_LENGTH = MASS_POLE * HALF_LENGTH;
const X_THRESHOLD = 2.4, THETA_THRESHOLD = (12 * 2 * Math.PI) / 360, MAX_STEPS = 500;

// mulberry32: a small seeded generator, so a run can be repeated
export function generator(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export class CartPole {
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
