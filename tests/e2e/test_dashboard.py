"""The web dashboard in a real headless Chromium (Debian's, through Playwright) against a real head:
sign-in, the cluster map with the running job on its GPU, the queue with why a gang waits, the
projects, a GPU's history charts, and a job page whose log grows while the job prints; and the
actions each user is offered (cancel on their own jobs, drain for admins, none to a read-only
token). The page must ask nothing of any host but the head; screenshots go to test-artifacts/ for
people to look at. One head and one browser serve the module; each test leaves no job of its own
running and no node drained."""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from gpupool.client import ClientError, GpupoolClient
from tests.support import REPLICA_SERVER
from tests.support.headproc import HeadProcess, wait_for, wait_state
from tests.support.unix_accounts import TestAccounts

pytestmark = pytest.mark.e2e

CHROMIUM = Path("/usr/bin/chromium")
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
VENDOR = ROOT / "src" / "gpupool" / "dashboard" / "static" / "vendor" / "uPlot.iife.min.js"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# What may answer 404 without breaking the page: endpoints a head may not have yet (the page hides
# their sections) and the chart library where npm was missing at install (no charts, a note).
OPTIONAL = ("/api/v1/gpus/idle", "/api/v1/alerts", "/ui/vendor/")
PRINTER = "import time\nfor i in range(600):\n    print(f'dashboard line {i}', flush=True)\n    time.sleep(0.1)\n"
DONE = "import os\nprint(f'rank {os.environ[\"RANK\"]} done')\n"
LINE = re.compile(r"dashboard line (\d+)")


def need(what: str, how: str) -> None:
    """Skip where the browser is missing (a developer's machine); fail in CI, where it must be."""
    message = f"{what}; {how}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="module")
def playwright_api() -> Any:
    if not CHROMIUM.exists():
        need(f"no {CHROMIUM} to drive", "run scripts/chromium.sh (installs Debian's chromium; needs root)")
    try:
        from playwright import sync_api
    except ImportError:
        need("Playwright for Python is not installed", "run scripts/install.sh test")
    return sync_api


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HeadProcess]:
    """A running 2 nodes x 4 simulated GPUs head, for the whole module."""
    head = HeadProcess(tmp_path_factory.mktemp("dashboard") / "data").start()
    yield head
    head.kill_everything()


@pytest.fixture(scope="module")
def browser(playwright_api: Any) -> Iterator[Any]:
    with playwright_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def start_jobs(head: HeadProcess) -> tuple[dict[str, Any], dict[str, Any], int]:
    """A running job that prints a line every 0.1 s, a gang of 2 x 4 GPUs that cannot start while
    that job holds one of the 8 GPUs, and a CPU-only gang of 2 workers that has already ended."""
    with head.client() as c:
        done_id = int(c.submit(command=[sys.executable, "-c", DONE], name="two-ranks", gpus=0, workers=2)["id"])
        wait_state(c, done_id, ("succeeded",))
        running_id = int(c.submit(command=[sys.executable, "-c", PRINTER], name="printer", gpus=1)["id"])
        running = wait_state(c, running_id, ("running",))
        gang_id = int(c.submit(command=["sleep", "60"], name="big-gang", gpus=4, workers=2)["id"])
        pending = wait_for(lambda: (j := c.job(gang_id))["reason_code"] == "gang" and j, what="the gang's reason")
    assert pending["state"] == "pending"
    return running, pending, done_id


def test_dashboard_shows_cluster_queue_and_live_job_log(head: HeadProcess, browser: Any, playwright_api: Any) -> None:
    expect = playwright_api.expect
    running, pending, done_id = start_jobs(head)
    (placement,) = running["placements"]
    link = head.cli("dashboard").stdout.strip()
    assert link == f"{head.url}/ui/#token={head.token()}"
    ARTIFACTS.mkdir(exist_ok=True)

    context = browser.new_context(viewport={"width": 1440, "height": 900})
    try:
        page = context.new_page()
        urls: list[str] = []
        problems: list[str] = []
        page.on("request", lambda r: urls.append(r.url))
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("console", lambda m: m.type == "error" and problems.append(f"{m.text} ({m.location.get('url')})"))

        # Without a token: the sign-in form, saying where a token comes from.
        page.goto(f"{head.url}/")
        expect(page.get_by_test_id("signin")).to_contain_text("gpupool dashboard")
        assert urlsplit(page.url).path == "/ui/"

        # The link `gpupool dashboard` prints signs in and leaves no token in the address bar.
        page.goto(link)
        expect(page.get_by_test_id("node-card")).to_have_count(2)
        assert "token" not in page.url
        expect(page.get_by_test_id("who")).to_contain_text(running["owner"])
        expect(page.get_by_test_id("gpu-tile")).to_have_count(8)
        # Each node says which walls it enforces around a job (issue 14), as `gpupool nodes` does.
        expect(page.get_by_test_id("node-walls")).to_have_count(2)
        expect(page.get_by_test_id("node-walls").first).to_contain_text("memory ")
        expect(page.get_by_test_id("node-walls").first).to_contain_text("network ")
        tile = page.locator(
            f'[data-testid="gpu-tile"][data-node="{placement["node"]}"][data-gpu="{placement["gpus"][0]}"]'
        )
        expect(tile.get_by_test_id("gpu-job")).to_contain_text(f"#{running['id']} printer")
        expect(tile.get_by_test_id("gpu-job")).to_contain_text(running["owner"])
        expect(page.locator('[data-testid="gpu-job"]')).to_have_count(1)
        # The head reads every GPU every 5 s: every tile gets its utilisation within ~20 s.
        expect(page.locator('[data-testid="gpu-tile"][data-has-reading="1"]')).to_have_count(8, timeout=20_000)
        expect(tile.get_by_test_id("gpu-util")).to_have_text(re.compile(r"^\d+%$"))

        row = page.locator(f'[data-testid="queue-row"][data-job-id="{pending["id"]}"]')
        expect(row).to_contain_text("big-gang")
        expect(row).to_contain_text("4 × 2 workers")
        expect(row.get_by_test_id("queue-reason")).to_contain_text(pending["reason"])
        expect(row.get_by_test_id("reason-code")).to_have_text(pending["reason_code"])
        project = page.locator(f'[data-testid="project-row"][data-project="{running["project"]}"]')
        expect(project.get_by_test_id("project-facts")).to_contain_text("1 held")
        expect(page.get_by_test_id("section-services")).to_be_hidden()  # no service yet

        # A click on the tile opens the GPU's history: three charts with the readings so far.
        tile.click()
        expect(page.get_by_test_id("gpu-history")).to_be_visible()
        if VENDOR.exists():
            charts = page.get_by_test_id("gpu-chart")
            expect(charts).to_have_count(3)
            expect(page.locator('[data-testid="gpu-chart"] canvas')).to_have_count(3)
            expect(charts.first).to_have_attribute("data-points", re.compile(r"^[1-9]\d*$"))
        else:
            expect(page.get_by_test_id("charts-note")).to_contain_text("scripts/install.sh")
        page.screenshot(path=str(ARTIFACTS / "dashboard.png"), full_page=True)

        # The job page: its events, and its log growing while the job prints.
        tile.get_by_test_id("gpu-job").get_by_role("link").click()
        expect(page.get_by_test_id("job-title")).to_contain_text("printer")
        expect(page.get_by_test_id("job-state")).to_have_text("running")
        with head.client() as c:
            events = c.job(running["id"])["events"]
        assert events
        for event in events:
            expect(page.get_by_test_id("job-events")).to_contain_text(event["message"])
        expect(page.get_by_test_id("placement-row")).to_contain_text(placement["node"])
        log = page.get_by_test_id("job-log")
        expect(log).to_contain_text("dashboard line 0")
        seen = max(int(n) for n in LINE.findall(log.text_content() or ""))
        expect(log).to_contain_text(f"dashboard line {seen + 10}\n", timeout=10_000)
        text = log.text_content() or ""
        numbers = [int(n) for n in LINE.findall(text)]
        assert numbers == list(range(len(numbers))), "the log lost or repeated lines"
        expect(page.get_by_test_id("log-status")).to_contain_text("following")
        page.screenshot(path=str(ARTIFACTS / "dashboard-job.png"), full_page=True)

        # A gang that ended: each worker's whole log, then "finished" (polling stops).
        page.goto(f"{head.url}/ui/#/jobs/{done_id}")
        expect(page.get_by_test_id("job-state")).to_have_text("succeeded")
        expect(page.get_by_test_id("log-status")).to_have_text("finished")
        expect(log).to_contain_text("rank 0 done\n")
        page.get_by_test_id("log-worker").select_option("1")
        expect(log).to_contain_text("rank 1 done\n")
        expect(log).not_to_contain_text("rank 0")
        expect(page.get_by_test_id("log-status")).to_have_text("finished")
        problems = [p for p in problems if not ("404" in p and any(o in p for o in OPTIONAL))]
        assert not problems, f"the browser reported errors: {problems}"

        # Signing out forgets the token; a wrong one comes back to the form with the head's
        # message (the browser logs those 401s, as it should); the right one signs in again.
        page.get_by_test_id("sign-out").click()
        expect(page.get_by_test_id("signin-error")).to_have_text("Signed out.")
        page.get_by_test_id("signin-token").fill("gp_not-a-token")
        page.get_by_test_id("signin-submit").click()
        expect(page.get_by_test_id("signin-error")).to_contain_text("invalid token")
        page.get_by_test_id("signin-token").fill(head.token())
        page.get_by_test_id("signin-submit").click()
        expect(page.get_by_test_id("job-title")).to_contain_text("two-ranks")
    finally:
        context.close()
        with head.client() as c:  # the next test wants a quiet cluster
            for job_id in (running["id"], pending["id"]):
                with contextlib.suppress(ClientError):  # it may have ended meanwhile
                    c.cancel(job_id)

    head_origin = urlsplit(head.url).netloc
    elsewhere = [u for u in urls if urlsplit(u).scheme != "data" and urlsplit(u).netloc != head_origin]
    assert not elsewhere, f"the page fetched from outside the head: {elsewhere}"
    assert not any(head.token() in u for u in urls), "the token must never be in a request URL"


def node_named(c: GpupoolClient, name: str) -> dict[str, Any]:
    return next(n for n in c.nodes() if n["name"] == name)


def sign_in(page: Any, token: str, expect: Any) -> None:
    """Through the form, as a person pasting a token does."""
    expect(page.get_by_test_id("signin")).to_be_visible()
    page.get_by_test_id("signin-token").fill(token)
    page.get_by_test_id("signin-submit").click()
    expect(page.get_by_test_id("signin")).to_be_hidden()


def sign_out(page: Any, expect: Any) -> None:
    page.get_by_test_id("sign-out").click()
    expect(page.get_by_test_id("signin-error")).to_have_text("Signed out.")


def test_the_dashboard_offers_each_user_only_the_actions_they_may_take(
    head: HeadProcess, browser: Any, playwright_api: Any, unix_accounts: TestAccounts
) -> None:
    """A member sees who is signed in, no drain button, a cancel button on their own job that
    cancels it and none on another user's job; a read-only token gets no action at all; an admin
    drains and undrains a node and one GPU from the page."""
    expect = playwright_api.expect
    with head.client() as admin:
        mia = str(admin.add_user("mia", unix_user=unix_accounts.make("mia"))["token"])
        otto = str(admin.add_user("otto", unix_user=unix_accounts.make("otto"))["token"])
        wall = str(admin.create_token(name="wall", scope="read")["token"])
        node, other = sorted(n["name"] for n in admin.nodes())
    with GpupoolClient(head.url, mia) as c:
        mine = int(c.submit(command=["sleep", "300"], name="mias-job", gpus=0)["id"])
    with GpupoolClient(head.url, otto) as c:
        theirs = int(c.submit(command=["sleep", "300"], name="ottos-job", gpus=0)["id"])

    context = browser.new_context(viewport={"width": 1440, "height": 900})
    urls: list[str] = []
    errors: list[str] = []
    try:
        page = context.new_page()
        page.on("request", lambda r: urls.append(r.url))
        page.on("pageerror", lambda e: errors.append(str(e)))
        cancel = page.get_by_test_id("job-cancel")
        confirm = page.get_by_test_id("confirm")

        # A member: who is signed in, and no drain anywhere, not even on a chosen GPU.
        page.goto(f"{head.url}/ui/")
        sign_in(page, mia, expect)
        expect(page.get_by_test_id("who")).to_have_text("mia (member)")
        expect(page.get_by_test_id("node-card")).to_have_count(2)
        page.locator(f'[data-testid="gpu-tile"][data-node="{node}"][data-gpu="0"]').click()
        expect(page.locator('[data-testid="gpu-tile"].selected')).to_have_count(1)
        for button in ("node-drain", "node-undrain", "gpu-drain", "gpu-undrain"):
            expect(page.get_by_test_id(button)).to_have_count(0)

        # Another user's job: shown, its command hidden, and no cancel button.
        page.goto(f"{head.url}/ui/#/jobs/{theirs}")
        expect(page.get_by_test_id("job-title")).to_contain_text("ottos-job")
        expect(page.locator('[data-fact="command"]')).to_contain_text("hidden")
        expect(cancel).to_have_count(0)

        # Their own job: a cancel button, a confirmation in the page, and the job is cancelled.
        page.goto(f"{head.url}/ui/#/jobs/{mine}")
        expect(page.get_by_test_id("job-title")).to_contain_text("mias-job")
        cancel.click()
        expect(confirm).to_be_visible()
        expect(page.get_by_test_id("confirm-text")).to_contain_text(f"#{mine}")
        page.get_by_test_id("confirm-no").click()  # changing one's mind changes nothing
        expect(confirm).to_be_hidden()
        cancel.click()
        page.get_by_test_id("confirm-ok").click()
        expect(page.get_by_test_id("notice")).to_contain_text(f"Cancel requested for job #{mine}")
        with head.client() as c:
            wait_state(c, mine, ("cancelled",))
            assert c.job(theirs)["state"] != "cancelled"
        expect(page.get_by_test_id("job-state")).to_have_text("cancelled")
        expect(cancel).to_have_count(0)
        sign_out(page, expect)

        # A read-only token of the admin: no action buttons at all.
        sign_in(page, wall, expect)
        expect(page.get_by_test_id("who")).to_contain_text("(admin)")
        expect(page.get_by_test_id("who")).to_contain_text("read-only")
        page.goto(f"{head.url}/ui/#/jobs/{theirs}")
        expect(page.get_by_test_id("job-title")).to_contain_text("ottos-job")
        expect(cancel).to_have_count(0)
        page.goto(f"{head.url}/ui/#/")
        expect(page.get_by_test_id("node-card")).to_have_count(2)
        expect(page.get_by_test_id("node-drain")).to_have_count(0)
        sign_out(page, expect)

        # The admin: cancel on anyone's job; drain a node (with a reason) and undrain it.
        sign_in(page, head.token(), expect)
        expect(page.get_by_test_id("who")).to_have_text(re.compile(r"\(admin\)$"))
        page.goto(f"{head.url}/ui/#/jobs/{theirs}")
        expect(page.get_by_test_id("job-title")).to_contain_text("ottos-job")
        expect(cancel).to_be_visible()
        page.goto(f"{head.url}/ui/#/")
        card = page.locator(f'[data-testid="node-card"][data-node="{node}"]')
        expect(page.get_by_test_id("node-drain")).to_have_count(2)
        card.get_by_test_id("node-drain").click()
        expect(confirm).to_contain_text(node)
        page.get_by_test_id("confirm-reason").fill("dashboard test")
        page.get_by_test_id("confirm-ok").click()
        with head.client() as c:
            wait_for(lambda: node_named(c, node)["drain_requested"], what="the drain")
            assert not node_named(c, other)["drain_requested"]
        expect(card.get_by_test_id("node-undrain")).to_be_visible()
        expect(card.get_by_test_id("node-state")).to_have_text(re.compile("^(draining|drained)$"))
        page.screenshot(path=str(ARTIFACTS / "dashboard-admin.png"), full_page=True)
        card.get_by_test_id("node-undrain").click()
        with head.client() as c:
            wait_for(lambda: not node_named(c, node)["drain_requested"], what="the undrain")
        expect(card.get_by_test_id("node-drain")).to_be_visible()

        # One GPU, from its tile once chosen: out of service, then back.
        tile = page.locator(f'[data-testid="gpu-tile"][data-node="{other}"][data-gpu="1"]')
        tile.click()
        tile.get_by_test_id("gpu-drain").click()
        page.get_by_test_id("confirm-ok").click()
        with head.client() as c:
            wait_for(lambda: node_named(c, other)["gpus"][1]["disabled"], what="the GPU drained")
            expect(tile.get_by_test_id("gpu-undrain")).to_be_visible()
            tile.get_by_test_id("gpu-undrain").click()
            wait_for(lambda: not node_named(c, other)["gpus"][1]["disabled"], what="the GPU back")
        expect(tile.get_by_test_id("gpu-drain")).to_be_visible()
        assert not errors, f"the page threw: {errors}"
    finally:
        context.close()
        with head.client() as c:
            with contextlib.suppress(ClientError):
                c.cancel(theirs)
            for name in (node, other):
                c.undrain(name)
            c.undrain(other, gpu=1)

    assert urls
    for token in (mia, otto, wall, head.token()):
        assert not any(token in u for u in urls), "the token must never be in a request URL"


def test_the_services_panel_shows_each_service_and_replica_with_the_gateways_load(
    head: HeadProcess, browser: Any, playwright_api: Any
) -> None:
    """A service of one real replica (tests/support/replica_server.py), and a load report for it as the
    gateway sends one: the panel shows the service's replicas and load, and the replica's row its
    own requests a second, in flight and latency."""
    expect = playwright_api.expect
    made = head.cli("serve", "web", "--gpus", "0", "--replicas", "1", "--", sys.executable, str(REPLICA_SERVER))
    assert made.returncode == 0, made.stderr
    with head.client() as c:
        s = wait_for(lambda: (x := c.service("web"))["replicas"]["ready"] == 1 and x, 60, 0.2, "web ready")
        job = s["replica_list"][0]["job_id"]
        line = {"service": "web", "replica": str(job), "in_flight": 3, "queued": 2, "requests": 50, "errors": 0}
        line |= {"latency_counts": [0, 50, 0, 0], "latency_sum_s": 1.0}
    body = {"window_s": 5, "latency_bounds": [0.01, 0.025, 0.05], "replicas": [line]}
    admin = {"Authorization": f"Bearer {head.token()}"}
    assert httpx.post(f"{head.url}/api/v1/gateway/stats", json=body, headers=admin).json() == {"kept": 1}

    context = browser.new_context(viewport={"width": 1440, "height": 900})
    try:
        page = context.new_page()
        page.goto(f"{head.url}/ui/#token={head.token()}")
        panel = page.get_by_test_id("section-services")
        expect(panel).to_be_visible()
        row = page.locator('[data-testid="service-row"][data-service="web"]')
        expect(row.get_by_test_id("service-state")).to_have_text("ready")
        expect(row.get_by_test_id("service-replicas")).to_have_text("1/1")
        expect(row.get_by_test_id("svc-in-flight")).to_have_text("3")
        expect(row.get_by_test_id("svc-queued")).to_have_text("2")
        replica = page.locator(f'[data-testid="replica-row"][data-job-id="{job}"]')
        expect(replica).to_contain_text(f"#{job}")
        expect(replica.get_by_test_id("svc-p50")).to_have_text("18 ms")
        expect(replica.get_by_test_id("svc-p99")).to_have_text("25 ms")
        expect(replica.get_by_test_id("svc-rps")).to_have_text("10.0")  # 50 answers over the report's 5 s
        panel.screenshot(path=str(ARTIFACTS / "dashboard-services.png"))
    finally:
        context.close()
        assert head.cli("service", "delete", "web").returncode == 0


def test_the_head_serves_the_dashboard_files_without_a_token_and_the_data_only_with_one(head: HeadProcess) -> None:
    """The static files hold no data, so they need no token; they carry a CSP that keeps the page
    on the head; the data stays behind the token."""
    with httpx.Client(base_url=head.url) as http:
        root = http.get("/")
        assert root.status_code == 307
        assert root.headers["location"] == "/ui/"
        page = http.get("/ui/")
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert 'src="js/app.js"' in page.text
        assert "default-src 'self'" in page.headers["content-security-policy"]
        assert "connect-src 'self'" in page.headers["content-security-policy"]
        script = http.get("/ui/js/app.js")
        assert script.status_code == 200
        assert "javascript" in script.headers["content-type"]
        assert http.get("/api/v1/nodes").status_code == 401
    announced = f"dashboard: {head.url}/ui/ (gpupool dashboard prints a signed-in link)\n"
    wait_for(lambda: announced in head.output, 5, what="the head to announce the dashboard")


def test_the_projects_panel_shows_the_tree_with_each_levels_bar(
    head: HeadProcess, browser: Any, playwright_api: Any
) -> None:
    """Issue 34: unit org (quota 2) over unit lab (quota 1) and project web, lab over project
    vision; a 1-GPU job in vision. The panel lists each unit before its children, indented by
    depth, and every level's row says what the projects below it hold against its quota and fair
    share. Everything is deleted afterwards (leaves first), so the head is as it was."""
    expect = playwright_api.expect

    def ok(*args: str) -> str:
        out = head.cli(*args)
        assert out.returncode == 0, out.stderr
        return out.stdout

    ok("project", "set", "org", "--quota", "2")
    ok("project", "set", "lab", "--quota", "1", "--parent", "org")
    ok("project", "set", "web", "--quota", "1", "--parent", "org")
    ok("project", "set", "vision", "--quota", "1", "--parent", "lab", "--everyone")
    job = ok("submit", "--project", "vision", "--gpus", "1", "--", "sleep", "60").split()[-1]
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    try:
        with head.client() as c:
            wait_state(c, int(job), ("running",))
        page = context.new_page()
        page.goto(f"{head.url}/ui/#token={head.token()}")
        rows = page.get_by_test_id("project-row")
        expect(page.locator('[data-testid="project-row"][data-project="vision"]')).to_be_visible()
        expect(rows).to_have_count(5)  # default and the four of the tree
        order = [(r.get_attribute("data-project"), r.get_attribute("data-depth")) for r in rows.all()]
        assert order == [("default", "0"), ("org", "0"), ("lab", "1"), ("vision", "2"), ("web", "1")]

        def row(name: str) -> Any:
            return page.locator(f'[data-testid="project-row"][data-project="{name}"]')

        for unit in ("org", "lab"):
            expect(row(unit)).to_have_attribute("data-unit", "1")
            expect(row(unit).get_by_test_id("project-facts")).to_contain_text("1 held below")
        expect(row("lab")).to_have_attribute("data-parent", "org")
        expect(row("org").get_by_test_id("project-facts")).to_contain_text("quota 2")
        expect(row("lab").get_by_test_id("project-facts")).to_contain_text("quota 1")
        expect(row("vision").get_by_test_id("project-facts")).to_contain_text("1 held")
        expect(row("vision")).to_have_attribute("data-unit", "0")
        expect(row("web").get_by_test_id("project-facts")).to_contain_text("0 held")
        for name in ("org", "lab", "vision"):
            expect(row(name).get_by_test_id("project-facts")).to_contain_text("fair share")
        indent = [
            row(n).locator(".project-name").evaluate("e => getComputedStyle(e).paddingLeft")
            for n in ("org", "lab", "vision")
        ]
        assert indent == ["0px", "18px", "36px"]
        page.get_by_test_id("projects").screenshot(path=str(ARTIFACTS / "dashboard-project-tree.png"))
    finally:
        context.close()
        head.cli("cancel", job)
        with head.client() as c:
            wait_state(c, int(job), ("cancelled",))
        for name in ("vision", "web", "lab", "org"):
            ok("project", "delete", name)


def test_the_job_page_draws_an_elastic_jobs_width_over_time(
    head: HeadProcess, browser: Any, playwright_api: Any
) -> None:
    """Issue 35: an elastic job of 1 to 2 workers of 4 GPUs starts on one node and grows onto the
    other; its page says so in its facts and draws the width it ran at, 1 then 2."""
    expect = playwright_api.expect
    made = head.cli("submit", "--gpus", "4", "--workers", "1:2", "--name", "stretchy", "--", "sleep", "120")
    assert made.returncode == 0, made.stderr
    job = int(made.stdout.split()[-1])
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    try:
        with head.client() as c:
            wait_for(lambda: len(c.job(job)["placements"]) == 2, timeout=30, what="the job grown to 2 workers")
        page = context.new_page()
        page.goto(f"{head.url}/ui/#token={head.token()}")
        page.goto(f"{head.url}/ui/#/jobs/{job}")
        expect(page.get_by_test_id("job-facts")).to_contain_text("× 2 workers (elastic, 1 to 2)")
        width = page.get_by_test_id("job-width")
        expect(width).to_have_attribute("data-widths", "1,2")
        if VENDOR.exists():
            expect(width.locator("canvas")).to_have_count(1)
        width.screenshot(path=str(ARTIFACTS / "dashboard-elastic-width.png"))
    finally:
        context.close()
        head.cli("cancel", str(job))
        with head.client() as c:
            wait_state(c, job, ("cancelled",))
