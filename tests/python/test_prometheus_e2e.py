"""A real Prometheus server (Debian's `prometheus` package) on loopback scrapes a real jobwire,
loads jobwire's shipped alert rules, and sees a backlog: the oldest-waiting-age gauge through
the query API, and the "waiting jobs, no workers" alert firing through the alerts API.

The only change to the shipped rules is the alert's `for:` (5m in production), set to 0s so
the test does not wait five minutes.

Run twice: with `/metrics` open, and with `--metrics-token-file`, where Prometheus sends the
token as the chart's ServiceMonitor does (`authorization: {type: Bearer, credentials: ...}`
becomes a scrape config's `authorization`); a second scrape job without the token is refused
(the target is down with HTTP 401).
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from conftest import REPO_ROOT, JobwireProcess, _stop, free_port

RULES = REPO_ROOT / "helm" / "jobwire" / "files" / "alerts.yaml"
ALERT = "JobwireWaitingJobsNoWorkers"
PATIENCE_S = 45


def rules_without_wait(src: Path, alert: str) -> str:
    """The rule file with `for:` of `alert` set to 0s."""
    out, in_alert = [], False
    for line in src.read_text().splitlines():
        if line.strip().startswith("- alert:"):
            in_alert = line.strip() == f"- alert: {alert}"
        if in_alert and line.strip().startswith("for:"):
            line = line.split("for:")[0] + "for: 0s"
            in_alert = False
        out.append(line)
    return "\n".join(out) + "\n"


def get_json(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=5) as r:
        return json.loads(r.read())


@pytest.fixture(params=["open", "token"])
def prometheus_and_jobwire(request, redis_url, tmp_path):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is not installed: apt-get install -y prometheus (scripts/setup.sh --test does it)")
    token_file = tmp_path / "metrics-token"
    extra: tuple[str, ...] = ()
    if request.param == "token":
        token_file.write_text(secrets.token_urlsafe(32) + "\n")
        extra = ("--metrics-token-file", str(token_file))
    server = JobwireProcess(redis_url, tmp_path, extra)
    rules = tmp_path / "rules.yaml"
    rules.write_text(rules_without_wait(RULES, ALERT))
    config = tmp_path / "prometheus.yml"
    scrape = f"    static_configs:\n      - targets: ['{server.http_addr}']\n"
    jobs = "  - job_name: jobwire\n" + scrape
    if request.param == "token":
        jobs += f"    authorization:\n      type: Bearer\n      credentials_file: {token_file}\n"
        jobs += "  - job_name: jobwire-no-token\n" + scrape
    config.write_text(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
        f"rule_files:\n  - {rules}\n"
        "scrape_configs:\n" + jobs
    )
    port = free_port()
    log = open(tmp_path / "prometheus.log", "wb")
    prom = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + PATIENCE_S
        while True:
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if prom.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"prometheus did not become ready:\n{(tmp_path / 'prometheus.log').read_text()[-3000:]}")
            time.sleep(0.2)
        yield base, server
    finally:
        _stop(prom, grace=5)
        log.close()
        server.stop()


def test_prometheus_scrapes_the_backlog_and_fires_the_no_worker_alert(stubs, prometheus_and_jobwire, queue_name):
    pb = stubs
    base, server = prometheus_and_jobwire
    import grpc

    with grpc.insecure_channel(server.grpc_addr) as ch:
        jobs = pb.JobServiceStub(ch)
        for i in range(3):
            jobs.Enqueue(pb.EnqueueRequest(job=pb.JobSpec(queue=queue_name, job_id=f"j{i}", name="backlog")))

    query = urllib.parse.quote(f'jobwire_queue_oldest_waiting_age_seconds{{queue="{queue_name}"}}')
    deadline = time.monotonic() + PATIENCE_S
    age = None
    while time.monotonic() < deadline:
        result = get_json(f"{base}/api/v1/query?query={query}")["data"]["result"]
        if result and float(result[0]["value"][1]) >= 1.0:
            age = float(result[0]["value"][1])
            break
        time.sleep(0.5)
    assert age is not None, "Prometheus never saw the oldest waiting age grow"

    firing = None
    while time.monotonic() < deadline:
        alerts = get_json(f"{base}/api/v1/alerts")["data"]["alerts"]
        firing = next((a for a in alerts if a["labels"].get("alertname") == ALERT
                       and a["labels"].get("queue") == queue_name and a["state"] == "firing"), None)
        if firing:
            break
        time.sleep(0.5)
    assert firing is not None, f"{ALERT} did not fire for {queue_name}"
    assert firing["labels"]["severity"] == "critical"
    assert firing["annotations"]["summary"] == f"Queue {queue_name} has waiting jobs and no connected worker"

    targets = {t["labels"]["job"]: t for t in get_json(f"{base}/api/v1/targets")["data"]["activeTargets"]}
    assert targets["jobwire"]["health"] == "up", targets["jobwire"]
    if "jobwire-no-token" in targets:  # the token run: a scrape without it is refused
        deadline = time.monotonic() + PATIENCE_S
        while targets["jobwire-no-token"]["health"] != "down" and time.monotonic() < deadline:
            time.sleep(0.5)
            targets = {t["labels"]["job"]: t for t in get_json(f"{base}/api/v1/targets")["data"]["activeTargets"]}
        assert targets["jobwire-no-token"]["health"] == "down", targets["jobwire-no-token"]
        assert "401" in targets["jobwire-no-token"]["lastError"], targets["jobwire-no-token"]
