"""The app in a real browser: Playwright drives Debian's Chromium (headless, ``/usr/bin/chromium``;
no ``playwright install``). It types a prompt, chooses three codes, clicks Generate, reads each
column's text (equal to ``generate_codes`` with the page's sampling settings and seed), checks that
the columns sit side by side, and saves a screenshot; an example opens the Sampling panel and says what it
changed. A second test checks what the page renders: a code typed with HTML, Markdown or LaTeX is shown as
typed (stats line and error message), and the attribution chart's labels of all the model's codes do not overlap.

The model: the app's default ``models/ctrl-smollm2`` when SmolLM2 is fetched, else the committed ``models/ctrl-demo``,
else the smoke checkpoint
(``models/smoke/ctrl-demo``), else the tiny model of tests/test_control.py. The screenshot goes to
the test's tmp folder; with ``LMSTUDY_UPDATE_SCREENSHOT=1`` it is also copied to
``figures/app_screenshot.png`` (the README's). Without Chromium or Playwright the test is skipped
with the install command; in CI (``CI=true``) that is a failure.

    LMSTUDY_UPDATE_SCREENSHOT=1 python -m pytest tests/test_app_browser.py -q
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

import app
from lmstudy.ctrl.generation import generate_codes
from lmstudy.ctrl.sampling import SamplingConfig
from lmstudy.ctrl.serving import delta_ready, load_served_model
from lmstudy.paths import figures_dir, models_dir
from tests.conftest import IN_CI
from tests.test_app import running
from tests.test_control import trained  # noqa: F401  (the fallback model)

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--disable-quic"]
INSTALL = "apt-get install -y chromium && .venv/bin/pip install playwright  (no `playwright install`)"
PROMPT = "The knife"


def _require_browser():
    missing = []
    if not Path(CHROMIUM).exists():
        missing.append(CHROMIUM)
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        missing.append("the playwright package")
    if missing:
        message = f"{' and '.join(missing)} missing: {INSTALL}"
        if IN_CI:
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def checkpoint(request) -> Path:
    for folder in (models_dir() / "ctrl-smollm2", models_dir() / "ctrl-demo", models_dir("smoke") / "ctrl-demo"):
        if (folder / "control_codes.json").is_file() and delta_ready(folder):
            return folder
    return request.getfixturevalue("trained")[3].path / "model"


def test_compare_in_chromium(checkpoint, tmp_path):
    _require_browser()
    from playwright.sync_api import expect, sync_playwright

    # float32 in the page and here: bfloat16 logits depend on the batch's make-up (a composite column's padding),
    # so only float32 columns equal generate_codes of the bare codes alone
    served = load_served_model(checkpoint, weights="float32")
    wanted = [code for code in ("Wikipedia", "Books", "Reviews", "r/worldnews") if code in served.codes]
    known = wanted + [c for c in served.codes if c not in wanted]
    codes = [known[k % len(known)] for k in range(3)]  # (the tiny fallback model has two codes: one repeats)
    if "Reviews" in codes:  # a composite code, typed
        codes[codes.index("Reviews")] = "Reviews Rating: 1.0"
    demo = app.build_demo(model=str(checkpoint), weights="float32")
    with running(demo) as client, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(client.src, wait_until="networkidle")
            page.locator("#prompt textarea").fill(PROMPT)
            page.locator("#n-columns").get_by_label("3", exact=True).check()
            for k, code in enumerate(codes, start=1):
                box = page.locator(f"#code-{k} input")
                box.fill(code)
                box.press("Enter")
            expect(page.locator("#column-4")).to_be_hidden()
            page.locator("#generate").click()
            for k in range(1, 4):
                expect(page.locator(f"#stats-{k}")).to_contain_text("done", timeout=60_000)
            texts = [page.locator(f"#text-{k} textarea").input_value() for k in range(1, 4)]
            boxes = [page.locator(f"#column-{k}").bounding_box() for k in range(1, 4)]
            screenshot = tmp_path / "app_screenshot.png"
            page.screenshot(path=str(screenshot), full_page=True)
            # An example is one click away: it fills the prompt and four codes, and generates.
            example = page.get_by_role("button", name=re.compile(r"^The knife · "))
            if example.count():  # (the tiny fallback model knows none of the examples' codes)
                expect(page.locator("#decoding")).to_be_hidden()  # the Sampling panel is closed ...
                example.first.click()
                expect(page.locator("#decoding")).to_be_visible()  # ... the example opens it and says what it set
                expect(page.locator("#settings-notice")).to_contain_text("The example changed the sampling settings")
                expect(page.locator("#column-4")).to_be_visible()
                expect(page.locator("#stats-4")).to_contain_text("done", timeout=60_000)
                assert page.locator("#prompt textarea").input_value() == "The knife"
                assert page.locator("#code-3 input").input_value() == "Reviews Rating: 1.0"
            # A bad input: a message in the page, not a stack trace.
            page.locator("#prompt textarea").fill("   ")
            page.locator("#generate").click()
            expect(page.get_by_text("The prompt is empty", exact=False).first).to_be_visible(timeout=20_000)
            assert "Traceback" not in page.content()
        finally:
            browser.close()

    # The page's defaults: sampling at T = 0.8, top-k 40, the paper's penalty θ = 1.2, seed 0 in every column.
    # A column does not depend on its neighbours, so each bare-code column equals generate_codes alone.
    assert all(text.startswith(PROMPT) for text in texts)
    if checkpoint.parent == models_dir():  # a committed model: three codes, three different continuations
        assert len(set(texts)) == len(texts), texts
    bare = [(k, code) for k, code in enumerate(codes) if " " not in code]
    sampling = SamplingConfig(temperature=0.8, top_k=40, penalty="ctrl", theta=1.2)
    direct = generate_codes(served.model, served.tokenizer, PROMPT, [code for _, code in bare], sampling,
                            max_new_tokens=min(40, served.max_new_tokens), seed=0)
    assert [texts[k] for k, _ in bare] == [g.prompt + g.text for g in direct]
    # Side by side: one row, left to right, same width.
    assert max(b["y"] for b in boxes) - min(b["y"] for b in boxes) < 5
    assert boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"]
    assert abs(boxes[0]["width"] - boxes[2]["width"]) < 5 and boxes[0]["x"] + boxes[0]["width"] <= boxes[1]["x"] + 1
    assert screenshot.stat().st_size > 10_000
    if os.environ.get("LMSTUDY_UPDATE_SCREENSHOT") == "1":
        shutil.copy(screenshot, figures_dir() / "app_screenshot.png")


def test_typed_text_is_shown_and_many_code_labels_do_not_overlap(checkpoint):
    """In the page: a composite code with HTML and Markdown in its stats line and in an error message is
    shown as typed; the attribution chart's labels of every code of the model (20 for the demo) do not overlap."""
    _require_browser()
    from playwright.sync_api import expect, sync_playwright

    # float32 in the page and here: bfloat16 logits depend on the batch's make-up (a composite column's padding),
    # so only float32 columns equal generate_codes of the bare codes alone
    served = load_served_model(checkpoint, weights="float32")
    # News takes `Title: <any text>`; the tiny fallback model's codes take any secondary text.
    code = "News Title:" if "News" in served.codes else served.codes[0]
    typed = f"{code} <b>bold</b> *x* $$y$$"
    with running(app.build_demo(model=str(checkpoint))) as client, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(client.src, wait_until="networkidle")
            page.locator("#n-columns").get_by_label("2", exact=True).check()
            page.locator("#max-new-tokens input").fill("4")
            for k, code in enumerate([typed, served.codes[0]], start=1):
                box = page.locator(f"#code-{k} input")
                box.fill(code)
                box.press("Enter")
            page.locator("#generate").click()
            expect(page.locator("#stats-1")).to_contain_text("done", timeout=60_000)
            assert page.locator("#stats-1").inner_text().startswith(typed + " · seed 0")
            assert page.locator("#stats-1 b, #stats-1 em, #stats-1 .katex").count() == 0
            box = page.locator("#code-2 input")
            box.fill("Gamma<b>x</b>")
            box.press("Enter")
            page.locator("#generate").click()
            expect(page.get_by_text("Unknown control code 'Gamma<b>x</b>'", exact=False).first).to_be_visible(
                timeout=20_000)

            page.get_by_role("tab", name="Attribute").click()
            page.locator("#attribute").click()
            labels = page.locator('#chart svg g[aria-label^="X-axis"] g.role-axis-label text')
            expect(labels).to_have_count(len(served.codes), timeout=60_000)
            boxes = sorted((labels.nth(k).bounding_box() for k in range(len(served.codes))), key=lambda b: b["x"])
            for left, right in zip(boxes, boxes[1:]):
                assert left["x"] + left["width"] <= right["x"] + 0.5, (left, right)
        finally:
            browser.close()
