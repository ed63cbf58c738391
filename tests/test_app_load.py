"""Load test of the app: N concurrent ``gradio_client`` users making R requests each against
``python app.py`` in a separate process (the tiny two-domain model of tests/test_control.py).

Every request must complete or get Gradio's clean busy message ("Queue is full! Please try
again."); the server must stay up, answer afterwards, and its memory must stay bounded. The test
prints the latencies (p50/p95) and the server's peak RSS growth. Size: 30 users x 3 requests
(``LMSTUDY_LOAD_USERS`` / ``LMSTUDY_LOAD_REQUESTS`` change it); the queue holds 8 waiting requests
(the default ``--max-queue 16``), so a burst of 30 users meets the busy message.
``LMSTUDY_LOAD_MODEL=models/ctrl-demo`` runs it against another control-code checkpoint.

    OMP_NUM_THREADS=1 python -m pytest tests/test_app_load.py -q -s
"""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.test_app import free_port
from tests.test_control import trained  # noqa: F401  (the tiny two-domain model: a shared module fixture)

gradio_client = pytest.importorskip("gradio_client")
psutil = pytest.importorskip("psutil")

USERS = int(os.environ.get("LMSTUDY_LOAD_USERS", "30"))
REQUESTS = int(os.environ.get("LMSTUDY_LOAD_REQUESTS", "3"))
MAX_QUEUE = 16  # the default of app.py (--max-queue)
BUSY = "Queue is full! Please try again."
MAX_RSS_GROWTH_MB = 400
LATENCY_REQUESTS = int(os.environ.get("LMSTUDY_LATENCY_REQUESTS", "10"))
REPO = Path(__file__).resolve().parent.parent


def _wait_until_up(url: str, process: subprocess.Popen, timeout: float = 120.0):
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if process.poll() is not None:
            raise RuntimeError(f"the app exited with {process.returncode}")
        try:
            return gradio_client.Client(url, verbose=False, analytics_enabled=False, download_files=False)
        except Exception:  # not listening yet
            time.sleep(0.5)
    raise TimeoutError(f"the app did not answer on {url} within {timeout} s")


@contextlib.contextmanager
def running_app(model_dir: str, tmp_path: Path, threads: int = 1):
    """``python app.py --model model_dir`` in its own process; yields (client, server process, url), stops it after."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    env = {**os.environ, "LMSTUDY_MODELS": str(tmp_path / "models"), "LMSTUDY_RUNS": str(tmp_path / "runs"),
           "OMP_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    log = open(tmp_path / "server.log", "w")
    server = subprocess.Popen([sys.executable, str(REPO / "app.py"), "--model", model_dir, "--port", str(port),
                               "--max-queue", str(MAX_QUEUE)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield _wait_until_up(url, server), server, url
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
        log.close()


def _codes(model_dir: str) -> list[str]:
    return json.loads((Path(model_dir) / "control_codes.json").read_text(encoding="utf-8"))["codes"]


def _context(model_dir: str) -> int:
    """The model's context: its config's, or for a delta over a fetched base (models/ctrl-smollm2) the base's."""
    folder = Path(model_dir)
    if (folder / "smol_ctrl.json").is_file():
        from lmstudy.pretrained import resolve_pretrained

        base = json.loads((folder / "smol_ctrl.json").read_text(encoding="utf-8"))["base"]["name"]
        folder = resolve_pretrained(base)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    return config.get("n_positions") or config["max_position_embeddings"]


@pytest.mark.slow
def test_one_user_four_columns_of_128_tokens(trained, tmp_path):  # noqa: F811
    """The app's speed for one user: 4 columns x 128 new tokens (fewer where the model's context allows fewer),
    the paper's decoding (greedy, penalty 1.2), LATENCY_REQUESTS requests one after the other; prints p50 / max.
    The issue's budget (p50 <= 2 s on the 2-core machine, the demo model, two threads) is measured by hand:

        LMSTUDY_LOAD_MODEL=models/ctrl-demo LMSTUDY_APP_THREADS=2 python -m pytest tests/test_app_load.py -q -s -k one_user
    """
    model_dir = os.environ.get("LMSTUDY_LOAD_MODEL") or str(trained[3].path / "model")
    threads = int(os.environ.get("LMSTUDY_APP_THREADS", "1"))
    codes = (_codes(model_dir) * 4)[:4]
    context = _context(model_dir)
    tokens = min(128, context // 2)  # the app's cap: half the model's context
    with running_app(model_dir, tmp_path, threads) as (client, _, _):
        latencies = []
        for request in range(LATENCY_REQUESTS + 1):  # the first one warms up
            start = time.perf_counter()
            result = client.predict(model_dir, "The", 4, *codes, "greedy", 1.0, 0, 1.0, "ctrl", 1.2, tokens,
                                    request, True, api_name="/compare")
            if request:
                latencies.append(time.perf_counter() - start)
            assert len(result) == 9 and all(text.startswith("The") for text in result[:4])
    print(f"\none user, 4 columns x {tokens} new tokens, {threads} thread(s), {Path(model_dir).name}: "
          f"p50 {statistics.median(latencies):.2f} s, max {max(latencies):.2f} s over {len(latencies)} requests")


@pytest.mark.slow
def test_concurrent_users(trained, tmp_path):  # noqa: F811
    model_dir = os.environ.get("LMSTUDY_LOAD_MODEL") or str(trained[3].path / "model")
    a, b = _codes(model_dir)[:2]
    with running_app(model_dir, tmp_path) as (first, server, url):
        first.predict(model_dir, "apple", 2, a, b, "", "", "greedy", 1.0, 0, 1.0, "none", 1.2, 8, 0, True,
                      api_name="/compare")  # warm
        process = psutil.Process(server.pid)
        rss_start = process.memory_info().rss
        peak = [rss_start]
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                peak[0] = max(peak[0], process.memory_info().rss)
                time.sleep(0.05)

        latencies, busy, errors = [], [], []
        lock = threading.Lock()
        barrier = threading.Barrier(USERS)

        def user(index: int):
            client = gradio_client.Client(url, verbose=False, analytics_enabled=False, download_files=False)
            barrier.wait()  # every user starts at once: a burst
            for request in range(REQUESTS):
                start = time.perf_counter()
                try:
                    if request % 3 == 2:
                        result = client.predict(model_dir, "engine piston gear.", "", "uniform", api_name="/attribute")
                        assert len(result) == 3
                    else:
                        n = 2 + (index + request) % 3
                        result = client.predict(model_dir, "apple banana", n, a, b, a, b,
                                                "sample", 0.9, 20, 1.0, "ctrl", 1.2, 16, index, True,
                                                api_name="/compare")
                        assert len(result) == 9 and all(text.startswith("apple banana") for text in result[:n])
                    with lock:
                        latencies.append(time.perf_counter() - start)
                except Exception as error:  # noqa: BLE001  (sorted below: busy is fine, anything else is not)
                    with lock:
                        (busy if str(error) == BUSY else errors).append(f"{type(error).__name__}: {error}")

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        start = time.perf_counter()
        threads = [threading.Thread(target=user, args=(i,)) for i in range(USERS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
        wall = time.perf_counter() - start
        stop.set()
        watcher.join()

        assert not any(thread.is_alive() for thread in threads), "some users never finished"
        assert not errors, errors[:5]
        assert len(latencies) + len(busy) == USERS * REQUESTS and latencies
        # The server is still up, still answers, and its memory stayed bounded.
        assert server.poll() is None
        after = first.predict(model_dir, "apple", 2, a, b, "", "", "greedy", 1.0, 0, 1.0, "none", 1.2, 8, 0,
                              True, api_name="/compare")
        assert len(after) == 9
        growth_mb = (peak[0] - rss_start) / 2**20
        quantiles = statistics.quantiles(latencies, n=20) if len(latencies) > 1 else latencies * 19
        print(f"\nload: {USERS} users x {REQUESTS} requests in {wall:.1f} s (queue max {MAX_QUEUE}): "
              f"{len(latencies)} completed, {len(busy)} busy; latency p50 {statistics.median(latencies):.2f} s, "
              f"p95 {quantiles[18]:.2f} s, max {max(latencies):.2f} s; server RSS {rss_start / 2**20:.0f} MB at "
              f"start, peak growth {growth_mb:.0f} MB")
        assert growth_mb < MAX_RSS_GROWTH_MB
