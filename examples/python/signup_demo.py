#!/usr/bin/env python3
"""The 20-sign-up dead-letter experiment, run through jobwire.

Twenty sign-ups (user_1 .. user_20) each enqueue a "send-welcome-email" job. A fake email
provider answers "400 invalid address" for good for user_4 and user_9 (a comma in the address)
and "503 service unavailable" for user_12, user_13 and user_14 until it recovers. The queue
allows 3 attempts with exponential backoff and jitter (50 ms base, so the demo takes seconds).

Three runs:

  (a) retry everything: every provider error is failed with RETRY;
  (b) permanent errors not retried: a 400 is failed with NO_RETRY, a 503 with RETRY;
  (c) replay after recovery (not the 400s): continues (b): the provider recovers, then the
      dead jobs whose last error was provider_unavailable and that ran out of attempts are
      replayed with ReplayDeadLetters and a filter, so the two bad addresses stay dead.

The fake provider counts every request and dedupes sends by the lease's idempotency key (an
email sent twice with the same key counts once). The demo prints one markdown table row per run
and exits non-zero when a number differs from what the experiment expects:

  | strategy                             | emailed | dead-lettered | provider requests |
  | retry everything                     | 15      | 5             | 30                |
  | permanent errors not retried         | 15      | 5             | 26                |
  | replay after recovery (not the 400s) | 18      | 2             | 29                |

Usage: python signup_demo.py --server 127.0.0.1:50051

Over TLS with tokens (a server with --tls-cert/--tls-key and --auth-file; scripts/demo.sh
--secure sets one up): each part of the demo uses its own principal, as a real deployment
would: the sign-up API enqueues with a producer token, the email workers subscribe with a
worker token, the on-call person lists and replays dead letters with an admin token. The demo
then checks that the server refuses what each is not granted (a worker enqueueing, a producer
replaying, a call without a token) and that the refusals change nothing:

  python signup_demo.py --server localhost:50443 --ca ca.crt \
      --producer-token-file producer.token --worker-token-file worker.token \
      --admin-token-file admin.token
Exit codes: 0 all numbers match, 1 a number or a check differs, 2 the run itself failed
(server unreachable, an RPC error, jobs not settled in time).
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobwire_client import Worker, connect, load_stubs, ms, read_secret, state_name  # noqa: E402

SIGNUPS = 20
BAD_ADDRESSES = {"user_4", "user_9"}  # typos the provider rejects for good (HTTP 400)
OUTAGE = {"user_12", "user_13", "user_14"}  # the provider is down for these until it recovers
JOB_NAME = "send-welcome-email"
MAX_ATTEMPTS = 3
WORKERS = 2  # at most two worker streams

RETRY_ALL = "retry everything"
CLASSIFIED = "permanent errors not retried"
REPLAYED = "replay after recovery (not the 400s)"
EXPECTED = {
    RETRY_ALL: (15, 5, 30),
    CLASSIFIED: (15, 5, 26),
    REPLAYED: (18, 2, 29),
}
ALERT_MAX_DEPTH = 3
ALERT_MAX_AGE_S = 60.0

EMAIL_RE = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")

pb = load_stubs()


class DemoError(Exception):
    """The run could not be completed (exit code 2)."""


# === the fake provider ===


class RejectedAddress(Exception):
    """HTTP 400: this address can never work; trying again cannot help."""


class ProviderUnavailable(Exception):
    """HTTP 503: try again later."""


class FakeProvider:
    """Counts every request; rejects bad addresses; is down for some users until recover()."""

    def __init__(self) -> None:
        self.calls = 0  # every request that reached the provider, whether it worked or not
        self.down = set(OUTAGE)
        self.sent: dict[str, str] = {}  # idempotency key -> user: a key sent twice is one email
        self.duplicates = 0  # sends that reused a key (deduped, not sent again)
        self._lock = threading.Lock()

    def send(self, user_id: str, email: str, idempotency_key: str) -> None:
        with self._lock:
            self.calls += 1
            if not EMAIL_RE.match(email):
                raise RejectedAddress(f"400 invalid address: {email}")
            if user_id in self.down:
                raise ProviderUnavailable("503 service unavailable")
            if idempotency_key in self.sent:
                self.duplicates += 1
            else:
                self.sent[idempotency_key] = user_id

    def recover(self) -> None:
        with self._lock:
            self.down.clear()

    @property
    def emailed(self) -> int:
        with self._lock:
            return len(self.sent)


# === one queue's worth of jobs ===


@dataclass
class Run:
    """What one queue and its provider went through, shared by (b) and (c)."""

    queue: str
    provider: FakeProvider
    job_ids: dict[str, str] = field(default_factory=dict)  # job id -> user id
    keys: dict[str, set] = field(default_factory=dict)  # job id -> idempotency keys seen
    problems: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def signups() -> list[tuple[str, str]]:
    out = []
    for i in range(1, SIGNUPS + 1):
        user = f"user_{i}"
        email = f"{user}@example.com"
        if user in BAD_ADDRESSES:
            email = email.replace(".com", ",com")
        out.append((user, email))
    return out


def new_queue(slug: str) -> str:
    return f"signups-{slug}-{secrets.token_hex(4)}"


def enqueue_signups(jobs, run: Run) -> None:
    backoff = pb.Backoff(kind=pb.BACKOFF_KIND_EXPONENTIAL, delay=ms(50), jitter=0.5, max_delay=ms(1000))
    for user, email in signups():
        job_id = f"welcome-email:{user}"
        spec = pb.JobSpec(
            queue=run.queue,
            job_id=job_id,
            name=JOB_NAME,
            payload=json.dumps({"user_id": user, "email": email}).encode(),
            content_type="application/json",
            metadata={"demo": "signup"},
            max_attempts=MAX_ATTEMPTS,
            backoff=backoff,
        )
        resp = jobs.Enqueue(pb.EnqueueRequest(job=spec), timeout=10)
        if not resp.created:
            raise DemoError(f"Enqueue of {job_id!r} on fresh queue {run.queue} said created=false")
        run.job_ids[job_id] = user


def make_handler(run: Run, classify: bool):
    """The worker's job function: call the provider, then ack or fail the lease."""

    def handle(worker: Worker, lease) -> None:
        job = lease.job
        signup = json.loads(job.payload)
        key = lease.idempotency_key
        with run.lock:
            if not key:
                run.problems.append(f"lease of {job.job_id!r} attempt {lease.attempt} has no idempotency_key")
            run.keys.setdefault(job.job_id, set()).add(key)
        try:
            run.provider.send(signup["user_id"], signup["email"], key or job.job_id)
        except RejectedAddress as e:
            disposition = pb.FAIL_DISPOSITION_NO_RETRY if classify else pb.FAIL_DISPOSITION_RETRY
            worker.fail(lease, str(e), error_type="invalid_address", disposition=disposition)
        except ProviderUnavailable as e:
            worker.fail(lease, str(e), error_type="provider_unavailable", disposition=pb.FAIL_DISPOSITION_RETRY)
        else:
            worker.ack(lease)

    return handle


def settle(jobs, run: Run, workers: list[Worker], timeout: float) -> dict[str, object]:
    """Polls GetJob until every job is COMPLETED or DEAD; returns job id -> Job."""
    deadline = time.monotonic() + timeout
    final = {pb.JOB_STATE_COMPLETED, pb.JOB_STATE_DEAD}
    while True:
        for w in workers:
            if w.error is not None:
                raise DemoError(f"worker stream {w.worker_id} ended: {w.error.code().name}: {w.error.details()}")
            if w.handler_errors:
                raise DemoError(f"worker {w.worker_id} handler raised:\n{w.handler_errors[0]}")
        current = {}
        for job_id in run.job_ids:
            current[job_id] = jobs.GetJob(pb.GetJobRequest(queue=run.queue, job_id=job_id), timeout=10).job
        if all(j.state in final for j in current.values()):
            return current
        if time.monotonic() >= deadline:
            pending = [
                f"{job_id} {state_name(j.state)} (attempts {j.attempts_made}/{j.max_attempts})"
                for job_id, j in current.items()
                if j.state not in final
            ]
            raise DemoError(
                f"jobs on {run.queue} not settled after {timeout} s: {len(pending)} pending: " + ", ".join(pending)
            )
        time.sleep(0.1)


def list_dead(dead, queue: str, **filter_fields) -> list:
    """Every dead job of the queue (all pages), optionally filtered."""
    out, token, pages = [], "", 0
    while True:
        req = pb.ListDeadLettersRequest(queue=queue, page_size=100, page_token=token)
        if filter_fields:
            req.filter.CopyFrom(pb.DeadLetterFilter(**filter_fields))
        resp = dead.ListDeadLetters(req, timeout=10)
        out.extend(resp.dead_letters)
        token, pages = resp.next_page_token, pages + 1
        if not token:
            return out
        if pages > 1000:
            raise DemoError(f"ListDeadLetters on {queue} keeps returning a next_page_token")


def work_until_settled(channel, jobs, run: Run, classify: bool, credits: int, timeout: float, label: str):
    handler = make_handler(run, classify)
    workers = [
        Worker(channel, [run.queue], credits=credits, worker_id=f"signup-demo-{label}-{i + 1}", handler=handler)
        for i in range(WORKERS)
    ]
    try:
        final = settle(jobs, run, workers, timeout)
    finally:
        for w in workers:
            w.half_close()  # both at once, then wait for each
        for w in workers:
            w.close()
    for w in workers:
        for s in w.drain_settled():
            if s.code != 0:
                run.problems.append(f"settle of {s.job_id!r} refused: code {s.code}: {s.message}")
    return final


def row(dead, run: Run, final: dict, strategy: str) -> tuple[str, int, int, int]:
    dead_jobs = list_dead(dead, run.queue)
    dead_by_state = sorted(j for j, job in final.items() if job.state == pb.JOB_STATE_DEAD)
    listed = sorted(job.job_id for job in dead_jobs)
    if listed != dead_by_state:
        run.problems.append(f"{strategy}: ListDeadLetters has {listed}, GetJob says DEAD for {dead_by_state}")
    return strategy, run.provider.emailed, len(dead_jobs), run.provider.calls


def alert_check(dead, queue: str, label: str) -> None:
    """The alert-style check: dead-letter depth (bursts) and the oldest entry's age (slow leaks)."""
    dead_jobs = list_dead(dead, queue)
    now = datetime.now(timezone.utc)
    ages = [(now - j.finish_time.ToDatetime(tzinfo=timezone.utc)).total_seconds() for j in dead_jobs if j.HasField("finish_time")]
    oldest = max(ages) if ages else 0.0
    alerts = []
    if len(dead_jobs) > ALERT_MAX_DEPTH:
        alerts.append(f"ALERT {len(dead_jobs)} dead-lettered jobs (limit {ALERT_MAX_DEPTH})")
    if oldest > ALERT_MAX_AGE_S:
        alerts.append(f"ALERT the oldest dead-lettered job is {oldest:.0f} s old (limit {ALERT_MAX_AGE_S:.0f} s)")
    kinds: dict[str, int] = {}
    for j in dead_jobs:
        kind = j.errors[-1].error_type if j.errors else "?"
        kinds[kind] = kinds.get(kind, 0) + 1
    by_kind = ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())) or "none"
    verdict = "; ".join(alerts) if alerts else "ok"
    print(
        f"alert check [{label}] queue {queue}: depth {len(dead_jobs)} (limit {ALERT_MAX_DEPTH}), "
        f"oldest {oldest:.1f} s (limit {ALERT_MAX_AGE_S:.0f} s), by error type: {by_kind} -> {verdict}"
    )


def check_keys(run: Run, label: str) -> None:
    for job_id, keys in sorted(run.keys.items()):
        if len(keys) != 1:
            run.problems.append(f"{label}: idempotency_key of {job_id!r} changed across attempts: {sorted(keys)}")
    if run.provider.duplicates:
        print(f"note [{label}]: the provider deduped {run.provider.duplicates} repeated send(s) by idempotency key")


def expect_refused(problems: list[str], what: str, want: grpc.StatusCode, call) -> None:
    """Runs `call`, which the server must refuse with `want`; prints the refusal."""
    try:
        call()
    except grpc.RpcError as e:
        print(f"auth check: {what}: refused, {e.code().name}: {e.details()}")
        if e.code() != want:
            problems.append(f"auth check: {what}: got {e.code().name}, expected {want.name}")
        return
    problems.append(f"auth check: {what}: accepted, expected {want.name}")


def auth_checks(args, channels: dict, queue: str, job_id: str) -> list[str]:
    """With tokens: each principal is refused what its role does not allow, and nothing changes."""
    problems: list[str] = []
    before = pb.JobServiceStub(channels["producer"]).GetJob(pb.GetJobRequest(queue=queue, job_id=job_id), timeout=10).job
    expect_refused(problems, "the worker's token enqueues", grpc.StatusCode.PERMISSION_DENIED,
                   lambda: pb.JobServiceStub(channels["worker"]).Enqueue(pb.EnqueueRequest(job=pb.JobSpec(
                       queue=queue, job_id=job_id, name=JOB_NAME, payload=b"{}")), timeout=10))
    expect_refused(problems, "the producer's token replays dead letters", grpc.StatusCode.PERMISSION_DENIED,
                   lambda: pb.DeadLetterServiceStub(channels["producer"]).ReplayDeadLetters(
                       pb.ReplayDeadLettersRequest(queue=queue, job_ids=[job_id]), timeout=10))
    anonymous = connect(args.server, ca=args.ca, cert=args.cert, key=args.key, server_name=args.server_name)
    try:
        expect_refused(problems, "a call without a token", grpc.StatusCode.UNAUTHENTICATED,
                       lambda: pb.DeadLetterServiceStub(anonymous).ReplayDeadLetters(
                           pb.ReplayDeadLettersRequest(queue=queue, job_ids=[job_id]), timeout=10))
    finally:
        anonymous.close()
    after = pb.JobServiceStub(channels["producer"]).GetJob(pb.GetJobRequest(queue=queue, job_id=job_id), timeout=10).job
    if after != before:
        problems.append(f"auth check: {job_id!r} changed although every call was refused")
    return problems


# === main ===


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", default="127.0.0.1:50051", help="jobwire gRPC address HOST:PORT")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds each run may take to settle")
    ap.add_argument("--credits", type=int, default=4, help="credits of each of the two worker streams")
    ap.add_argument("--ca", help="TLS: PEM file of the CA that signed the server's certificate")
    ap.add_argument("--cert", help="mTLS: the client certificate (PEM); needs --key")
    ap.add_argument("--key", help="mTLS: the client certificate's private key (PEM)")
    ap.add_argument("--server-name", help="TLS: the name the server's certificate must have (default: the host)")
    ap.add_argument("--token-file", help="a file with the bearer token of every call (jw_<id>_<secret>)")
    for role, who in (("producer", "Enqueue, GetJob"), ("worker", "Subscribe, Ack, Fail"),
                      ("admin", "ListDeadLetters, ReplayDeadLetters")):
        ap.add_argument(f"--{role}-token-file", help=f"the token of the {role} calls ({who}); default --token-file")
    args = ap.parse_args(argv)

    # One channel per principal (three plaintext channels when no token is given).
    channels: dict[str, grpc.Channel] = {}
    for role in ("producer", "worker", "admin"):
        path = getattr(args, f"{role}_token_file") or args.token_file
        channels[role] = connect(args.server, ca=args.ca, cert=args.cert, key=args.key,
                                 token=read_secret(path) if path else None, server_name=args.server_name)
    per_role_tokens = all(getattr(args, f"{r}_token_file") for r in ("producer", "worker", "admin"))
    channel = channels["worker"]
    try:
        for ch in set(channels.values()):
            grpc.channel_ready_future(ch).result(timeout=10)
    except grpc.FutureTimeoutError:
        print(f"error: cannot connect to jobwire at {args.server} within 10 s", file=sys.stderr)
        return 2
    jobs = pb.JobServiceStub(channels["producer"])
    dead = pb.DeadLetterServiceStub(channels["admin"])

    rows: list[tuple[str, int, int, int]] = []
    problems: list[str] = []
    try:
        # (a) retry everything
        a = Run(queue=new_queue("retry-all"), provider=FakeProvider())
        enqueue_signups(jobs, a)
        final = work_until_settled(channel, jobs, a, classify=False, credits=args.credits, timeout=args.timeout, label="a")
        rows.append(row(dead, a, final, RETRY_ALL))
        check_keys(a, "a")
        alert_check(dead, a.queue, RETRY_ALL)
        problems += a.problems

        # (b) permanent errors not retried
        b = Run(queue=new_queue("classified"), provider=FakeProvider())
        enqueue_signups(jobs, b)
        final = work_until_settled(channel, jobs, b, classify=True, credits=args.credits, timeout=args.timeout, label="b")
        rows.append(row(dead, b, final, CLASSIFIED))
        alert_check(dead, b.queue, CLASSIFIED)
        for j in list_dead(dead, b.queue):
            want = pb.DEAD_REASON_NO_RETRY if b.job_ids[j.job_id] in BAD_ADDRESSES else pb.DEAD_REASON_ATTEMPTS_EXHAUSTED
            if j.dead_reason != want:
                b.problems.append(
                    f"{CLASSIFIED}: {j.job_id!r} dead with {pb.DeadReason.Name(j.dead_reason)}, "
                    f"expected {pb.DeadReason.Name(want)}"
                )

        # (c) replay after recovery, not the 400s: same queue and provider as (b)
        b.provider.recover()
        replay_filter = pb.DeadLetterFilter(
            reason=pb.DEAD_REASON_ATTEMPTS_EXHAUSTED, error_type="provider_unavailable"
        )
        replayed = dead.ReplayDeadLetters(
            pb.ReplayDeadLettersRequest(queue=b.queue, filter=replay_filter), timeout=10
        )
        want_replayed = sorted(j for j, u in b.job_ids.items() if u in OUTAGE)
        print(
            f"replay [{REPLAYED}] filter reason=ATTEMPTS_EXHAUSTED error_type=provider_unavailable: "
            f"replayed {sorted(replayed.replayed_job_ids)}"
        )
        if sorted(replayed.replayed_job_ids) != want_replayed:
            b.problems.append(f"{REPLAYED}: replayed {sorted(replayed.replayed_job_ids)}, expected {want_replayed}")
        final = work_until_settled(channel, jobs, b, classify=True, credits=args.credits, timeout=args.timeout, label="c")
        rows.append(row(dead, b, final, REPLAYED))
        check_keys(b, "b+c")
        alert_check(dead, b.queue, REPLAYED)
        for job_id in want_replayed:
            if final[job_id].replays != 1:
                b.problems.append(f"{REPLAYED}: {job_id!r} has replays={final[job_id].replays}, expected 1")
        problems += b.problems
        if per_role_tokens:
            problems += auth_checks(args, channels, b.queue, sorted(b.job_ids)[0])
    except DemoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except grpc.RpcError as e:
        print(f"error: RPC failed: {e.code().name}: {e.details()}", file=sys.stderr)
        return 2
    finally:
        for ch in channels.values():
            ch.close()

    print()
    print("| strategy | emailed | dead-lettered | provider requests |")
    print("|---|---|---|---|")
    for strategy, emailed, dead_count, requests in rows:
        print(f"| {strategy} | {emailed} | {dead_count} | {requests} |")
    print()

    for strategy, emailed, dead_count, requests in rows:
        want = EXPECTED[strategy]
        if (emailed, dead_count, requests) != want:
            problems.append(
                f"{strategy}: got {emailed}/{dead_count}/{requests}, expected {want[0]}/{want[1]}/{want[2]} "
                "(emailed/dead-lettered/provider requests)"
            )
    if problems:
        for p in problems:
            print(f"MISMATCH {p}", file=sys.stderr)
        return 1
    print("all three rows match the experiment (15/5/30, 15/5/26, 18/2/29)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
