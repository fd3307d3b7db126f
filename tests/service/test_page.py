"""The live page in a browser (Playwright driving the system's Chromium): it shows the run's fields,
the Executors and the learning curve, and follows status.json and metrics.csv as they change."""

import shutil

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytest.importorskip("playwright")

from playwright.sync_api import expect, sync_playwright  # noqa: E402

from mlxe.service.server import RunService  # noqa: E402
from mlxe.telemetry.metrics import MetricsWriter  # noqa: E402
from tests.service import EVAL_EVERY, ITERATIONS, local_status, make_run, metrics_row, write_status  # noqa: E402

TIMEOUT_MS = 15_000  # a page polls every 2 s; a loaded test machine may take a while to start Chromium


@pytest.fixture
def browser():
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium executable on PATH (apt-get install chromium); Playwright's own browsers are not used")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield browser
        browser.close()


def test_the_page_shows_the_run_and_follows_it(tmp_path, browser):
    run_dir = make_run(tmp_path / "run")
    with RunService(run_dir, "127.0.0.1:0") as service:
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(f"{service.url}#{service.token}")
        expect(page.locator("#global-episode")).to_have_text("1,234", timeout=TIMEOUT_MS)
        expect(page.locator("#best-score")).to_have_text("187.5")
        expect(page.locator("#state")).to_have_text("running")
        expect(page.locator("#name")).to_have_text("cartpole_demo")
        expect(page.locator("#last-eval")).to_have_text("160.0")
        expect(page.locator("#workers tr")).to_have_count(2)
        expect(page.locator("#workers tr").nth(1)).to_contain_text("failed")
        # the error message is shown as text, not markup
        expect(page.locator("#workers tr").nth(1).locator("td").last).to_have_text("RuntimeError: <b>boom</b>")
        curve = page.locator("#curve")
        expect(curve).to_have_attribute("data-points", str(ITERATIONS), timeout=TIMEOUT_MS)
        expect(curve).to_have_attribute("data-evals", str(ITERATIONS // EVAL_EVERY))
        assert page.evaluate(
            "() => { const c = document.getElementById('curve');"
            " return c.getContext('2d').getImageData(0, 0, c.width, c.height).data.some((v, i) => i % 4 == 3 && v); }"
        ), "nothing drawn on the canvas"
        assert page.locator("#message").text_content() == ""

        # the run goes on: a new status and a new iteration with an evaluation
        write_status(run_dir, local_status(run_dir, episodes=2345, best_return=499.0, state="finished",
                                           stop_reason="max_env_steps"))
        with MetricsWriter(run_dir, tensorboard=False) as writer:
            writer.log({**metrics_row(ITERATIONS + 1), "eval_return": 400.0})
        expect(page.locator("#global-episode")).to_have_text("2,345", timeout=TIMEOUT_MS)
        expect(page.locator("#best-score")).to_have_text("499.0")
        expect(page.locator("#state")).to_have_text("finished (max_env_steps)")
        expect(curve).to_have_attribute("data-points", str(ITERATIONS + 1), timeout=TIMEOUT_MS)
        expect(curve).to_have_attribute("data-evals", str(ITERATIONS // EVAL_EVERY + 1))
        assert errors == []


def test_the_page_says_when_the_token_is_refused(tmp_path, browser):
    run_dir = make_run(tmp_path / "run")
    with RunService(run_dir, "127.0.0.1:0") as service:
        page = browser.new_page()
        page.goto(f"{service.url}#not-the-token")
        expect(page.locator("#message")).to_contain_text("token was refused", timeout=TIMEOUT_MS)
        expect(page.locator("#global-episode")).to_have_text("-")
        page.goto(service.url)
        expect(page.locator("#message")).to_contain_text("#TOKEN", timeout=TIMEOUT_MS)
