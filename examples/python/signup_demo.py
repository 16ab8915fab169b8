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

It runs on the Python SDK (clients/python, package `jobwire`: `pip install ./clients/python`;
scripts/setup.sh installs it into .venv): a `jobwire.Client` per principal, and two
`jobwire.Worker`s whose handler raises `jobwire.NonRetryable` for a 400 when errors are
classified, and lets any other error fail the attempt for a retry.

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
import asyncio
import logging
import re
import secrets
import sys
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone

import grpc

import jobwire
from jobwire import pb

SIGNUPS = 20
BAD_ADDRESSES = {"user_4", "user_9"}  # typos the provider rejects for good (HTTP 400)
OUTAGE = {"user_12", "user_13", "user_14"}  # the provider is down for these until it recovers
JOB_NAME = "send-welcome-email"
MAX_ATTEMPTS = 3
WORKERS = 2  # at most two worker streams
BACKOFF = jobwire.Backoff("exponential", delay=0.05, jitter=0.5, max_delay=1.0)

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


class DemoError(Exception):
    """The run could not be completed (exit code 2)."""


def state_name(state: pb.JobState.ValueType) -> str:
    return pb.JobState.Name(state).removeprefix("JOB_STATE_")


# === the fake provider ===


class RejectedAddress(Exception):
    """HTTP 400: this address can never work; trying again cannot help."""

    error_type = "invalid_address"  # the attempt's error_type when it is failed for a retry


class ProviderUnavailable(Exception):
    """HTTP 503: try again later."""

    error_type = "provider_unavailable"


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
    keys: dict[str, set[str]] = field(default_factory=dict)  # job id -> idempotency keys seen
    problems: list[str] = field(default_factory=list)


@dataclass
class Clients:
    """One client per principal (three times the same server without tokens)."""

    producer: jobwire.Client
    worker: jobwire.Client
    admin: jobwire.Client


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


async def enqueue_signups(producer: jobwire.Client, run: Run) -> None:
    for user, email in signups():
        job_id = f"welcome-email:{user}"
        resp = await producer.enqueue(
            run.queue, JOB_NAME, {"user_id": user, "email": email}, job_id=job_id,
            metadata={"demo": "signup"}, max_attempts=MAX_ATTEMPTS, backoff=BACKOFF,
        )
        if not resp.created:
            raise DemoError(f"Enqueue of {job_id!r} on fresh queue {run.queue} said created=false")
        run.job_ids[job_id] = user


def make_handler(run: Run, classify: bool) -> Callable[[jobwire.JobContext], Awaitable[None]]:
    """The worker's job function: call the provider; returning acks the job, raising fails it."""

    async def handle(ctx: jobwire.JobContext) -> None:
        signup = ctx.json()
        key = ctx.idempotency_key
        if not key:
            run.problems.append(f"lease of {ctx.job_id!r} attempt {ctx.attempt} has no idempotency_key")
        run.keys.setdefault(ctx.job_id, set()).add(key)
        try:
            run.provider.send(signup["user_id"], signup["email"], key or ctx.job_id)
        except RejectedAddress as e:
            if classify:  # permanent: dead-letter it now, whatever attempts remain
                raise jobwire.NonRetryable(str(e), error_type=e.error_type) from e
            raise  # any other exception fails the attempt for a retry, with its error_type

    return handle


async def settle(producer: jobwire.Client, run: Run, tasks: list[asyncio.Task[None]], timeout: float) -> dict[str, pb.Job]:
    """Polls GetJob until every job is COMPLETED or DEAD; returns job id -> Job."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    final = {pb.JOB_STATE_COMPLETED, pb.JOB_STATE_DEAD}
    while True:
        for t in tasks:
            if t.done():
                raise DemoError(f"a worker stopped: {t.exception()!r}")
        current = {job_id: await producer.get_job(run.queue, job_id) for job_id in run.job_ids}
        if all(j.state in final for j in current.values()):
            return current
        if loop.time() >= deadline:
            pending = [
                f"{job_id} {state_name(j.state)} (attempts {j.attempts_made}/{j.max_attempts})"
                for job_id, j in current.items()
                if j.state not in final
            ]
            raise DemoError(
                f"jobs on {run.queue} not settled after {timeout} s: {len(pending)} pending: " + ", ".join(pending)
            )
        await asyncio.sleep(0.1)


async def work_until_settled(
    clients: Clients, run: Run, classify: bool, credits: int, timeout: float, label: str
) -> dict[str, pb.Job]:
    """Two workers of `credits` each serve the queue until every job is COMPLETED or DEAD."""
    workers = []
    for i in range(WORKERS):
        w = jobwire.Worker(clients.worker, [run.queue], concurrency=credits,
                           worker_id=f"signup-demo-{label}-{i + 1}", handle_signals=False)
        w.handle(JOB_NAME, make_handler(run, classify))
        workers.append(w)
    tasks = [asyncio.create_task(w.run()) for w in workers]
    try:
        final = await settle(clients.producer, run, tasks, timeout)
    finally:
        for w in workers:
            w.stop()  # both at once, then wait for each
        results = await asyncio.gather(*tasks, return_exceptions=True)
    for w, result in zip(workers, results, strict=True):
        if isinstance(result, BaseException):
            raise DemoError(f"worker {w.worker_id} failed: {result!r}")
        if w.stats.lost or w.stats.refused:
            run.problems.append(f"worker {w.worker_id}: {w.stats.lost} result(s) lost, {w.stats.refused} refused")
    return final


async def row(admin: jobwire.Client, run: Run, final: dict[str, pb.Job], strategy: str) -> tuple[str, int, int, int]:
    dead_jobs = await admin.dead_letters.list(run.queue)
    dead_by_state = sorted(j for j, job in final.items() if job.state == pb.JOB_STATE_DEAD)
    listed = sorted(job.job_id for job in dead_jobs)
    if listed != dead_by_state:
        run.problems.append(f"{strategy}: ListDeadLetters has {listed}, GetJob says DEAD for {dead_by_state}")
    return strategy, run.provider.emailed, len(dead_jobs), run.provider.calls


async def alert_check(admin: jobwire.Client, queue: str, label: str) -> None:
    """The alert-style check: dead-letter depth (bursts) and the oldest entry's age (slow leaks)."""
    dead_jobs = await admin.dead_letters.list(queue)
    now = datetime.now(timezone.utc)
    ages = [
        (now - j.finish_time.ToDatetime(tzinfo=timezone.utc)).total_seconds()
        for j in dead_jobs
        if j.HasField("finish_time")
    ]
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


async def expect_refused(
    problems: list[str], what: str, want: grpc.StatusCode, call: Callable[[], Awaitable[object]]
) -> None:
    """Awaits `call()`, which the server must refuse with `want`; prints the refusal."""
    try:
        await call()
    except grpc.RpcError as e:
        print(f"auth check: {what}: refused, {e.code().name}: {e.details()}")
        if e.code() != want:
            problems.append(f"auth check: {what}: got {e.code().name}, expected {want.name}")
        return
    problems.append(f"auth check: {what}: accepted, expected {want.name}")


async def auth_checks(args: argparse.Namespace, clients: Clients, queue: str, job_id: str) -> list[str]:
    """With tokens: each principal is refused what its role does not allow, and nothing changes."""
    problems: list[str] = []
    before = await clients.producer.get_job(queue, job_id)
    await expect_refused(problems, "the worker's token enqueues", grpc.StatusCode.PERMISSION_DENIED,
                         lambda: clients.worker.enqueue(queue, JOB_NAME, b"{}", job_id=job_id))
    await expect_refused(problems, "the producer's token replays dead letters", grpc.StatusCode.PERMISSION_DENIED,
                         lambda: clients.producer.dead_letters.replay(queue, [job_id]))
    async with jobwire.Client(args.server, tls=tls_of(args)) as anonymous:
        await expect_refused(problems, "a call without a token", grpc.StatusCode.UNAUTHENTICATED,
                             lambda: anonymous.dead_letters.replay(queue, [job_id]))
    after = await clients.producer.get_job(queue, job_id)
    if after != before:
        problems.append(f"auth check: {job_id!r} changed although every call was refused")
    return problems


# === main ===


def tls_of(args: argparse.Namespace) -> jobwire.TLS | None:
    """TLS when a CA is given (a client certificate for mTLS too); plaintext otherwise."""
    if args.ca is None:
        if args.cert or args.key:
            raise DemoError("a client certificate needs TLS: give --ca too")
        return None
    return jobwire.TLS(ca=args.ca, cert=args.cert, key=args.key, server_name=args.server_name)


Row = tuple[str, int, int, int]


async def experiment(args: argparse.Namespace, clients: Clients, per_role_tokens: bool) -> tuple[list[Row], list[str]]:
    rows: list[Row] = []
    problems: list[str] = []
    producer, admin = clients.producer, clients.admin

    # (a) retry everything
    a = Run(queue=new_queue("retry-all"), provider=FakeProvider())
    await enqueue_signups(producer, a)
    final = await work_until_settled(clients, a, False, args.credits, args.timeout, "a")
    rows.append(await row(admin, a, final, RETRY_ALL))
    check_keys(a, "a")
    await alert_check(admin, a.queue, RETRY_ALL)
    problems += a.problems

    # (b) permanent errors not retried
    b = Run(queue=new_queue("classified"), provider=FakeProvider())
    await enqueue_signups(producer, b)
    final = await work_until_settled(clients, b, True, args.credits, args.timeout, "b")
    rows.append(await row(admin, b, final, CLASSIFIED))
    await alert_check(admin, b.queue, CLASSIFIED)
    for j in await admin.dead_letters.list(b.queue):
        want = pb.DEAD_REASON_NO_RETRY if b.job_ids[j.job_id] in BAD_ADDRESSES else pb.DEAD_REASON_ATTEMPTS_EXHAUSTED
        if j.dead_reason != want:
            b.problems.append(
                f"{CLASSIFIED}: {j.job_id!r} dead with {pb.DeadReason.Name(j.dead_reason)}, "
                f"expected {pb.DeadReason.Name(want)}"
            )

    # (c) replay after recovery, not the 400s: same queue and provider as (b)
    b.provider.recover()
    replay_filter = pb.DeadLetterFilter(reason=pb.DEAD_REASON_ATTEMPTS_EXHAUSTED, error_type="provider_unavailable")
    replayed = await admin.dead_letters.replay(b.queue, filter=replay_filter)
    want_replayed = sorted(j for j, u in b.job_ids.items() if u in OUTAGE)
    print(
        f"replay [{REPLAYED}] filter reason=ATTEMPTS_EXHAUSTED error_type=provider_unavailable: "
        f"replayed {sorted(replayed.replayed_job_ids)}"
    )
    if sorted(replayed.replayed_job_ids) != want_replayed:
        b.problems.append(f"{REPLAYED}: replayed {sorted(replayed.replayed_job_ids)}, expected {want_replayed}")
    final = await work_until_settled(clients, b, True, args.credits, args.timeout, "c")
    rows.append(await row(admin, b, final, REPLAYED))
    check_keys(b, "b+c")
    await alert_check(admin, b.queue, REPLAYED)
    for job_id in want_replayed:
        if final[job_id].replays != 1:
            b.problems.append(f"{REPLAYED}: {job_id!r} has replays={final[job_id].replays}, expected 1")
    problems += b.problems
    if per_role_tokens:
        problems += await auth_checks(args, clients, b.queue, sorted(b.job_ids)[0])
    return rows, problems


async def run_demo(args: argparse.Namespace) -> int:
    tls = tls_of(args)
    made = {}
    for role in ("producer", "worker", "admin"):
        path = getattr(args, f"{role}_token_file") or args.token_file
        made[role] = jobwire.Client(args.server, token=jobwire.read_token(path) if path else None, tls=tls)
    clients = Clients(**made)
    per_role_tokens = all(getattr(args, f"{r}_token_file") for r in ("producer", "worker", "admin"))
    try:
        try:
            for c in made.values():
                await c.wait_ready(timeout=10)
        except TimeoutError:
            print(f"error: cannot connect to jobwire at {args.server} within 10 s", file=sys.stderr)
            return 2
        try:
            rows, problems = await experiment(args, clients, per_role_tokens)
        except DemoError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        except grpc.RpcError as e:
            print(f"error: RPC failed: {e.code().name}: {e.details()}", file=sys.stderr)
            return 2
    finally:
        for c in made.values():
            await c.close()

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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--server", default="127.0.0.1:50051", help="jobwire gRPC address HOST:PORT")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds each run may take to settle")
    ap.add_argument("--credits", type=int, default=4, help="credits (concurrency) of each of the two workers")
    ap.add_argument("--ca", help="TLS: PEM file of the CA that signed the server's certificate")
    ap.add_argument("--cert", help="mTLS: the client certificate (PEM); needs --key")
    ap.add_argument("--key", help="mTLS: the client certificate's private key (PEM)")
    ap.add_argument("--server-name", help="TLS: the name the server's certificate must have (default: the host)")
    ap.add_argument("--token-file", help="a file with the bearer token of every call (jw_<id>_<secret>)")
    for role, who in (("producer", "Enqueue, GetJob"), ("worker", "Subscribe, Ack, Fail"),
                      ("admin", "ListDeadLetters, ReplayDeadLetters")):
        ap.add_argument(f"--{role}-token-file", help=f"the token of the {role} calls ({who}); default --token-file")
    args = ap.parse_args(argv)
    # Failed attempts are what the demo is about: the table reports them, not the SDK's log.
    logging.basicConfig(level=logging.ERROR, format="%(name)s: %(message)s")
    try:
        return asyncio.run(run_demo(args))
    except DemoError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
