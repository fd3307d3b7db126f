"""A run that knows it is stuck (``run.stuck_after``): once a share of its step budget is played, a
run whose returns have not left a random policy's level says so, on the console, in the progress
display and in ``summary.json``, and names what to try.

The random policy's level comes from a probe of the environment (:func:`mlxe.envs.probe.probe`,
10 episodes of uniform random actions) taken at that moment: its mean return plus a margin of
twice its spread across episodes (at least 5% of its magnitude). The run's return is the best it
has shown so far: its greedy evaluations where it makes them, else the moving average of its
training episodes. The run goes on either way; one that leaves the level later is told so too.
"""

from __future__ import annotations

import threading

from mlxe.config import Config
from mlxe.envs.probe import Probe, probe

PROBE_TIMEOUT_S = 60.0  # the probe's time without env.step_timeout


def level(p: Probe) -> float:
    """The return a run must exceed to have left the random policy's level."""
    return p.mean_return + max(2.0 * p.std_return, 0.05 * abs(p.mean_return), 1e-3)


def advice(cfg: Config, p: Probe) -> list[str]:
    """What to try, from what the probe saw."""
    tips = []
    if p.sparse:
        tips.append("icm.enabled: true (curiosity rewards what the model cannot predict yet: random actions "
                    f"never changed the return, {p.mean_return:g} in every episode)")
        if p.mean_length > 200 and cfg.algo.gamma < 0.999:
            tips.append(f"algo.gamma: 0.999 (episodes last {p.mean_length:.0f} steps)")
    if p.box_actions and cfg.algo.name != "sac":
        tips.append("algo.name: sac (entropy-driven exploration for Box actions)")
    if max(abs(p.mean_return), p.std_return) > 1000 and not cfg.filters.reward:
        tips.append(f"filters.reward: true (returns of order {max(abs(p.mean_return), p.std_return):.3g})")
    tips.append("a larger stop.max_env_steps, or another algorithm (mlxe train --env ID --algo NAME)")
    return tips


class StuckWatch:
    """Tells, once the run has played ``after`` env steps, whether its best return is still at the
    random policy's level (:meth:`update` each iteration)."""

    def __init__(self, cfg: Config, after: int) -> None:
        self.cfg, self.after = cfg, after
        self.best: float | None = None
        self.report: dict | None = None  # summary.json's "stuck" once decided stuck
        self.checked = False

    def update(self, env_steps: int, value: float | None) -> str | None:
        """Note the run's return ``value`` at ``env_steps``; a line to show when its state changes."""
        if value is not None:
            self.best = value if self.best is None else max(self.best, value)
        if not self.checked and env_steps >= self.after:
            self.checked = True
            found, failure = self.probe()
            if failure is not None:  # the run's own environments play on: a check must not stop it
                return f"stuck check skipped: the random-policy probe of {self.cfg.env.id!r} {failure}"
            if found is None or self.best is None or self.best > level(found):
                return None
            self.report = {
                "at_env_steps": env_steps, "best_return": self.best, "random_level": level(found),
                "probe": found.as_dict(), "try": advice(self.cfg, found),
            }
            return (f"stuck: after {env_steps:,} env steps the best return ({self.best:g}) has not left a random "
                    f"policy's level ({found.mean_return:g} +- {found.std_return:g}); try: "
                    + "; ".join(self.report["try"]))
        if self.report is not None and "left_at_env_steps" not in self.report and self.best > self.report["random_level"]:
            self.report["left_at_env_steps"] = env_steps
            return f"no longer stuck: the best return ({self.best:g}) left the random policy's level at {env_steps:,} env steps"
        return None

    def probe(self) -> tuple[Probe | None, str | None]:
        """(the probe, or None where no episode ended; what went wrong, or None). It plays in a thread
        of its own, given ``env.step_timeout`` (else :data:`PROBE_TIMEOUT_S`): an environment that hangs
        is left behind there, as an ISTB Executor's hung thread is, and the run goes on."""
        result: dict = {}

        def play() -> None:
            try:
                result["probe"] = probe(self.cfg.env, seed=self.cfg.seed)
            except Exception as e:
                result["error"] = e

        thread = threading.Thread(target=play, name="stuck-probe", daemon=True)
        thread.start()
        timeout = self.cfg.env.step_timeout or PROBE_TIMEOUT_S
        thread.join(timeout)
        if thread.is_alive():
            return None, f"took over {timeout:g} s"
        if "error" in result:
            return None, f"failed: {result['error']}"
        return result["probe"], None

    @property
    def stuck(self) -> bool:
        return self.report is not None and "left_at_env_steps" not in self.report
