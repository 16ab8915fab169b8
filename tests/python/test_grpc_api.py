"""jobwire's gRPC API driven from Python (grpcio), exactly as a user in another language would.

Each test uses its own queue on one server per session (see conftest.py).
"""

from __future__ import annotations

import subprocess
import sys
import time

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase
from grpc_status import rpc_status

from conftest import EXAMPLES, JobwireProcess
from stream import Worker, ms, state_name

SERVICES = {
    "jobwire.v1.JobService",
    "jobwire.v1.WorkerService",
    "jobwire.v1.DeadLetterService",
    "grpc.health.v1.Health",
}
MIB = 1024 * 1024
WAIT_S = 15.0  # patience for anything asynchronous (leases, reaper); never a timing claim


# === helpers ===


def spec(pb, queue, **fields):
    fields.setdefault("name", "test-job")
    return pb.JobSpec(queue=queue, **fields)


def enqueue(pb, channel, queue, **fields):
    return pb.JobServiceStub(channel).Enqueue(pb.EnqueueRequest(job=spec(pb, queue, **fields)), timeout=10)


def get_job(pb, channel, queue, job_id):
    return pb.JobServiceStub(channel).GetJob(pb.GetJobRequest(queue=queue, job_id=job_id), timeout=10).job


def rpc_error(fn, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        fn(*args, **kwargs)
    return info.value


def field_violations(err: grpc.RpcError) -> list:
    """The google.rpc.BadRequest field violations in the error's grpc-status-details-bin."""
    status = rpc_status.from_call(err)
    assert status is not None, f"no google.rpc.Status details on {err.code().name}: {err.details()}"
    out = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            out.extend(bad.field_violations)
    return out


def wait_for_state(pb, channel, queue, job_id, states, timeout=WAIT_S):
    deadline = time.monotonic() + timeout
    while True:
        job = get_job(pb, channel, queue, job_id)
        if job.state in states:
            return job
        if time.monotonic() > deadline:
            want = ", ".join(state_name(s) for s in states)
            pytest.fail(f"{job_id!r} is {state_name(job.state)} after {timeout} s, expected {want}")
        time.sleep(0.05)


def settled_for(worker: Worker, token: str, timeout=WAIT_S):
    """The Settled answer for the ack/fail that presented ``token``."""
    deadline = time.monotonic() + timeout
    while True:
        s = worker.next_settled(timeout=max(0.1, deadline - time.monotonic()))
        if s.lease_token == token:
            return s


# === health and reflection ===


def test_health_serving(channel):
    stub = health_pb2_grpc.HealthStub(channel)
    resp = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    assert resp.status == health_pb2.HealthCheckResponse.SERVING


def test_reflection_v1alpha_lists_services_and_describes_them(channel):
    db = ProtoReflectionDescriptorDatabase(channel)
    services = set(db.get_services())
    assert SERVICES <= services, f"missing {SERVICES - services}; listed {sorted(services)}"

    # What grpcurl/Evans do next: fetch the files and read a method and a message.
    pool = descriptor_pool.DescriptorPool(db)
    subscribe = pool.FindServiceByName("jobwire.v1.WorkerService").methods_by_name["Subscribe"]
    proto = descriptor_pb2.MethodDescriptorProto()
    subscribe.CopyToProto(proto)
    assert proto.client_streaming and proto.server_streaming
    assert subscribe.input_type.full_name == "jobwire.v1.SubscribeRequest"
    job_spec = pool.FindMessageTypeByName("jobwire.v1.JobSpec")
    assert {"queue", "job_id", "payload", "max_attempts", "backoff"} <= set(job_spec.fields_by_name)
    replay = pool.FindServiceByName("jobwire.v1.DeadLetterService").methods_by_name["ReplayDeadLetters"]
    assert replay.output_type.full_name == "jobwire.v1.ReplayDeadLettersResponse"


def test_reflection_v1_lists_services(channel):
    # grpcio-reflection ships only v1alpha stubs; v1 has the same messages on the wire.
    call = channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    responses = list(call(iter([reflection_pb2.ServerReflectionRequest(list_services="")]), timeout=10))
    assert len(responses) == 1
    assert responses[0].WhichOneof("message_response") == "list_services_response"
    services = {s.name for s in responses[0].list_services_response.service}
    assert SERVICES <= services, f"missing {SERVICES - services}; listed {sorted(services)}"


# === the job life cycle ===


def test_enqueue_subscribe_lease_ack_completed(stubs, channel, queue_name):
    pb = stubs
    resp = enqueue(pb, channel, queue_name, job_id="job-1", payload=b"hello", content_type="text/plain",
                   metadata={"tenant": "acme", "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
    assert resp.created
    assert resp.job.job_id == "job-1" and resp.job.queue == queue_name
    assert resp.job.state == pb.JOB_STATE_WAITING
    assert get_job(pb, channel, queue_name, "job-1").state == pb.JOB_STATE_WAITING

    with Worker(channel, [queue_name], credits=1, worker_id="py-test-worker") as worker:
        lease = worker.next_lease(timeout=WAIT_S)
        assert lease.job.job_id == "job-1" and lease.job.queue == queue_name
        assert lease.job.name == "test-job"
        assert lease.job.payload == b"hello" and lease.job.content_type == "text/plain"
        assert dict(lease.job.metadata) == {"tenant": "acme",
                                            "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
        assert lease.attempt == 1
        assert lease.lease_token and lease.idempotency_key
        assert lease.lease_deadline.seconds > time.time() - 1
        assert get_job(pb, channel, queue_name, "job-1").state == pb.JOB_STATE_ACTIVE

        worker.ack(lease)
        settled = settled_for(worker, lease.lease_token)
        assert settled.code == 0, settled.message
        assert settled.job_id == "job-1" and settled.queue == queue_name

    job = get_job(pb, channel, queue_name, "job-1")
    assert job.state == pb.JOB_STATE_COMPLETED
    assert job.attempts_made == 1
    assert job.HasField("finish_time")
    assert job.idempotency_key == lease.idempotency_key


def test_server_generates_ids(stubs, channel, queue_name):
    a = enqueue(stubs, channel, queue_name)
    b = enqueue(stubs, channel, queue_name)
    assert a.created and b.created
    assert a.job.job_id and b.job.job_id and a.job.job_id != b.job.job_id


def test_duplicate_job_id_returns_existing_job(stubs, channel, queue_name):
    pb = stubs
    first = enqueue(pb, channel, queue_name, job_id="signup:42", payload=b"first")
    again = enqueue(pb, channel, queue_name, job_id="signup:42", payload=b"second")
    assert first.created is True
    assert again.created is False
    assert again.job.job_id == "signup:42"
    assert again.job.payload == b"first", "a duplicate must return the existing job unchanged"
    assert again.job.create_time == first.job.create_time
    assert get_job(pb, channel, queue_name, "signup:42").payload == b"first"

    # One job, not two: a sentinel enqueued after the duplicates is leased after them (FIFO).
    enqueue(pb, channel, queue_name, job_id="sentinel")
    leased = []
    with Worker(channel, [queue_name], credits=5) as worker:
        while "sentinel" not in leased:
            lease = worker.next_lease(timeout=WAIT_S)
            leased.append(lease.job.job_id)
            worker.ack(lease)
        with pytest.raises(TimeoutError):
            extra = worker.next_lease(timeout=0.5)
            leased.append(extra.job.job_id)
    assert sorted(leased) == ["sentinel", "signup:42"]


UNUSUAL_IDS = [
    "user:42",
    "{emails}",
    "jw:{emails}:job:1",
    "a}b{c",
    "x",
    "x:",
    ":x",
    "x}",
    "{x",
    "12345",
    "Grüße, 世界 ✉️",
    "ключ:{значение}",
    "with space and \\ backslash and \"quotes\"",
    "é" * 128,  # 256 bytes: the longest legal id
]


def test_unicode_colon_and_brace_ids_round_trip(stubs, channel, queue_name):
    pb = stubs
    for job_id in UNUSUAL_IDS:
        resp = enqueue(pb, channel, queue_name, job_id=job_id, payload=job_id.encode())
        assert resp.created, f"{job_id!r} collided with an earlier id"
        assert resp.job.job_id == job_id
    for job_id in UNUSUAL_IDS:
        job = get_job(pb, channel, queue_name, job_id)
        assert job.job_id == job_id and job.payload == job_id.encode()

    keys = {}
    with Worker(channel, [queue_name], credits=len(UNUSUAL_IDS)) as worker:
        for _ in UNUSUAL_IDS:
            lease = worker.next_lease(timeout=WAIT_S)
            assert lease.job.payload == lease.job.job_id.encode()
            keys[lease.job.job_id] = lease.idempotency_key
            worker.ack(lease)
            assert settled_for(worker, lease.lease_token).code == 0
    assert sorted(keys) == sorted(UNUSUAL_IDS)
    assert len(set(keys.values())) == len(UNUSUAL_IDS), "idempotency keys must differ between jobs"
    for job_id in UNUSUAL_IDS:
        assert get_job(pb, channel, queue_name, job_id).state == pb.JOB_STATE_COMPLETED


def test_get_unknown_job_is_not_found(stubs, channel, queue_name):
    err = rpc_error(stubs.JobServiceStub(channel).GetJob, stubs.GetJobRequest(queue=queue_name, job_id="nope"),
                    timeout=10)
    assert err.code() == grpc.StatusCode.NOT_FOUND


# === bad input ===


def _backoff(pb, jitter):
    return pb.Backoff(kind=pb.BACKOFF_KIND_EXPONENTIAL, delay=ms(50), jitter=jitter)


BAD_INPUT = [
    # (case id, JobSpec fields, a word the violating field's path must contain)
    ("empty-queue", lambda pb, q: dict(queue=""), "queue"),
    ("queue-bad-chars", lambda pb, q: dict(queue="bad queue!"), "queue"),
    ("queue-129-bytes", lambda pb, q: dict(queue="q" * 129), "queue"),
    ("jitter-2.0", lambda pb, q: dict(backoff=_backoff(pb, 2.0)), "jitter"),
    ("jitter-negative", lambda pb, q: dict(backoff=_backoff(pb, -0.5)), "jitter"),
    ("max-attempts-0", lambda pb, q: dict(max_attempts=0), "max_attempts"),
    ("max-attempts-1001", lambda pb, q: dict(max_attempts=1001), "max_attempts"),
    ("job-id-258-bytes", lambda pb, q: dict(job_id="é" * 129), "job_id"),
    ("empty-name", lambda pb, q: dict(name=""), "name"),
]


@pytest.mark.parametrize("case,fields,word", BAD_INPUT, ids=[c[0] for c in BAD_INPUT])
def test_bad_input_is_invalid_argument_with_field_violation(stubs, channel, queue_name, case, fields, word):
    pb = stubs
    job = dict(queue=queue_name, name="test-job", job_id=f"bad-{case}")
    job.update(fields(pb, queue_name))
    err = rpc_error(pb.JobServiceStub(channel).Enqueue, pb.EnqueueRequest(job=pb.JobSpec(**job)), timeout=10)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, f"{err.code().name}: {err.details()}"
    violations = field_violations(err)
    assert violations, f"no BadRequest field violation in the details of: {err.details()}"
    fields_named = [v.field for v in violations]
    assert any(word in f for f in fields_named), f"no violation names {word!r}: {fields_named}"
    assert all(v.description for v in violations)
    if word != "queue":
        # Nothing was created under the refused id.
        missing = rpc_error(pb.JobServiceStub(channel).GetJob,
                            pb.GetJobRequest(queue=queue_name, job_id=f"bad-{case}"), timeout=10)
        assert missing.code() in (grpc.StatusCode.NOT_FOUND, grpc.StatusCode.INVALID_ARGUMENT)


def test_payload_over_one_mib_is_refused(stubs, channel, queue_name):
    pb = stubs
    err = rpc_error(enqueue, pb, channel, queue_name, job_id="too-big", payload=b"x" * (MIB + 1))
    assert err.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT), \
        f"{err.code().name}: {err.details()}"
    named = "payload" in (err.details() or "")
    if not named:
        named = any("payload" in v.field for v in field_violations(err))
    assert named, f"the error does not name the payload: {err.code().name}: {err.details()}"


def test_payload_of_exactly_one_mib_is_accepted(stubs, channel, queue_name):
    pb = stubs
    resp = enqueue(pb, channel, queue_name, job_id="one-mib", payload=b"y" * MIB)
    assert resp.created
    assert len(get_job(pb, channel, queue_name, "one-mib").payload) == MIB


# === fencing: stale lease tokens ===


def test_stale_lease_token_is_failed_precondition(stubs, channel, queue_name):
    pb = stubs
    workers = pb.WorkerServiceStub(channel)
    enqueue(pb, channel, queue_name, job_id="fenced", max_attempts=3)
    with Worker(channel, [queue_name], credits=1, worker_id="py-fencing") as worker:
        first = worker.next_lease(timeout=WAIT_S)
        # A token that was never issued changes nothing.
        err = rpc_error(workers.Ack, pb.AckRequest(queue=queue_name, job_id="fenced", lease_token="not-a-token"),
                        timeout=10)
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, f"{err.code().name}: {err.details()}"
        assert get_job(pb, channel, queue_name, "fenced").state == pb.JOB_STATE_ACTIVE

        # Fail the first attempt (retry at once); the job is leased again under a new token.
        worker.fail(first, "boom", error_type="test_error", retry_after=ms(0))
        assert settled_for(worker, first.lease_token).code == 0
        second = worker.next_lease(timeout=WAIT_S)
        assert second.job.job_id == "fenced"
        assert second.attempt == 2
        assert second.lease_token != first.lease_token
        assert second.idempotency_key == first.idempotency_key

        # The first token is stale: an Ack with it is refused, on the stream and unary.
        worker.ack(first)
        stale = settled_for(worker, first.lease_token)
        assert stale.code == grpc.StatusCode.FAILED_PRECONDITION.value[0], stale
        err = rpc_error(workers.Ack, pb.AckRequest(queue=queue_name, job_id="fenced",
                                                   lease_token=first.lease_token), timeout=10)
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, f"{err.code().name}: {err.details()}"
        # A Fail repeated with the token its first Fail was applied with (a lost reply's retry)
        # answers that first outcome again and changes nothing, whatever it asks now.
        again = workers.Fail(pb.FailRequest(queue=queue_name, job_id="fenced",
                                            lease_token=first.lease_token,
                                            disposition=pb.FAIL_DISPOSITION_NO_RETRY,
                                            error=pb.JobError(message="late")), timeout=10)
        assert again.state == pb.JOB_STATE_WAITING, again
        job = get_job(pb, channel, queue_name, "fenced")
        assert job.state == pb.JOB_STATE_ACTIVE and job.attempts_made == 2

        # The current token still works.
        worker.ack(second)
        assert settled_for(worker, second.lease_token).code == 0
    job = get_job(pb, channel, queue_name, "fenced")
    assert job.state == pb.JOB_STATE_COMPLETED
    assert [e.error_type for e in job.errors] == ["test_error"]

    # After completion the failed attempt's token stays refused, while an Ack repeated with
    # the token it was applied with (a lost reply's retry) answers OK and changes nothing.
    err = rpc_error(workers.Ack, pb.AckRequest(queue=queue_name, job_id="fenced",
                                               lease_token=first.lease_token), timeout=10)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, f"{err.code().name}: {err.details()}"
    workers.Ack(pb.AckRequest(queue=queue_name, job_id="fenced", lease_token=second.lease_token),
                timeout=10)
    assert get_job(pb, channel, queue_name, "fenced").state == pb.JOB_STATE_COMPLETED


def test_expired_lease_is_retried_and_its_token_is_stale(stubs, channel, queue_name):
    """A worker that vanishes loses its lease at the deadline (2 s here); the attempt counts."""
    pb = stubs
    enqueue(pb, channel, queue_name, job_id="orphan", max_attempts=3)
    crashed = Worker(channel, [queue_name], credits=1, worker_id="py-crashes")
    lost = crashed.next_lease(timeout=WAIT_S)
    crashed.cancel()

    with Worker(channel, [queue_name], credits=1, worker_id="py-survivor") as worker:
        lease = worker.next_lease(timeout=WAIT_S)
        assert lease.job.job_id == "orphan"
        assert lease.attempt == 2
        assert lease.lease_token != lost.lease_token
        assert lease.idempotency_key == lost.idempotency_key
        err = rpc_error(pb.WorkerServiceStub(channel).Ack,
                        pb.AckRequest(queue=queue_name, job_id="orphan", lease_token=lost.lease_token), timeout=10)
        assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, f"{err.code().name}: {err.details()}"
        worker.ack(lease)
        assert settled_for(worker, lease.lease_token).code == 0
    job = get_job(pb, channel, queue_name, "orphan")
    assert job.state == pb.JOB_STATE_COMPLETED
    assert [e.error_type for e in job.errors] == ["LEASE_EXPIRED"]
    assert job.errors[0].worker_id == "py-crashes"


# === failures and the dead-letter queue ===


def test_retry_until_attempts_exhausted(stubs, channel, queue_name):
    pb = stubs
    enqueue(pb, channel, queue_name, job_id="flaky", max_attempts=2,
            backoff=pb.Backoff(kind=pb.BACKOFF_KIND_FIXED, delay=ms(20)))
    with Worker(channel, [queue_name], credits=1) as worker:
        lease = worker.next_lease(timeout=WAIT_S)
        worker.fail(lease, "503 service unavailable", error_type="provider_unavailable")
        s = settled_for(worker, lease.lease_token)
        assert s.code == 0 and s.state in (pb.JOB_STATE_WAITING, pb.JOB_STATE_DELAYED), s
        lease = worker.next_lease(timeout=WAIT_S)
        assert lease.attempt == 2
        worker.fail(lease, "503 service unavailable", error_type="provider_unavailable")
        s = settled_for(worker, lease.lease_token)
        assert s.code == 0 and s.state == pb.JOB_STATE_DEAD, s
    job = get_job(pb, channel, queue_name, "flaky")
    assert job.state == pb.JOB_STATE_DEAD
    assert job.dead_reason == pb.DEAD_REASON_ATTEMPTS_EXHAUSTED
    assert [e.attempt for e in job.errors] == [1, 2]


def test_no_retry_dead_letters_and_replay(stubs, channel, queue_name):
    pb = stubs
    dead = pb.DeadLetterServiceStub(channel)
    enqueue(pb, channel, queue_name, job_id="welcome:user_4", name="send-welcome-email", max_attempts=3)
    enqueue(pb, channel, queue_name, job_id="welcome:user_5", name="send-welcome-email", max_attempts=3)
    with Worker(channel, [queue_name], credits=2, worker_id="py-dlq") as worker:
        leases = {}
        for _ in range(2):
            lease = worker.next_lease(timeout=WAIT_S)
            leases[lease.job.job_id] = lease
        worker.fail(leases["welcome:user_4"], "400 invalid address: user_4@example,com",
                    error_type="invalid_address", details="{\"status\": 400}",
                    disposition=pb.FAIL_DISPOSITION_NO_RETRY)
        s = settled_for(worker, leases["welcome:user_4"].lease_token)
        assert s.code == 0 and s.state == pb.JOB_STATE_DEAD, s
        worker.ack(leases["welcome:user_5"])
        assert settled_for(worker, leases["welcome:user_5"].lease_token).code == 0

    job = get_job(pb, channel, queue_name, "welcome:user_4")
    assert job.state == pb.JOB_STATE_DEAD and job.dead_reason == pb.DEAD_REASON_NO_RETRY
    assert job.attempts_made == 1, "NO_RETRY skips the remaining attempts"
    (error,) = job.errors
    assert (error.attempt, error.message, error.error_type, error.details, error.worker_id) == (
        1, "400 invalid address: user_4@example,com", "invalid_address", "{\"status\": 400}", "py-dlq")
    assert error.disposition == pb.FAIL_DISPOSITION_NO_RETRY

    listed = dead.ListDeadLetters(pb.ListDeadLettersRequest(queue=queue_name), timeout=10)
    assert [j.job_id for j in listed.dead_letters] == ["welcome:user_4"]
    for f, want in [
        (pb.DeadLetterFilter(error_type="invalid_address"), ["welcome:user_4"]),
        (pb.DeadLetterFilter(error_message_prefix="400"), ["welcome:user_4"]),
        (pb.DeadLetterFilter(reason=pb.DEAD_REASON_NO_RETRY, job_name="send-welcome-email"), ["welcome:user_4"]),
        (pb.DeadLetterFilter(error_type="provider_unavailable"), []),
        (pb.DeadLetterFilter(reason=pb.DEAD_REASON_ATTEMPTS_EXHAUSTED), []),
        (pb.DeadLetterFilter(error_message_prefix="503"), []),
    ]:
        got = dead.ListDeadLetters(pb.ListDeadLettersRequest(queue=queue_name, filter=f), timeout=10)
        assert [j.job_id for j in got.dead_letters] == want, f"filter {f}"
    one = dead.GetDeadLetter(pb.GetDeadLetterRequest(queue=queue_name, job_id="welcome:user_4"), timeout=10)
    assert one.dead_letter.job_id == "welcome:user_4"

    replay = pb.ReplayDeadLettersRequest(queue=queue_name, job_ids=["welcome:user_4", "welcome:user_5", "nope"])
    first = dead.ReplayDeadLetters(replay, timeout=10)
    assert list(first.replayed_job_ids) == ["welcome:user_4"]
    assert sorted(first.skipped_job_ids) == ["nope", "welcome:user_5"]
    again = dead.ReplayDeadLetters(replay, timeout=10)
    assert list(again.replayed_job_ids) == []
    assert sorted(again.skipped_job_ids) == ["nope", "welcome:user_4", "welcome:user_5"]

    job = get_job(pb, channel, queue_name, "welcome:user_4")
    assert job.state == pb.JOB_STATE_WAITING and job.replays == 1 and job.attempts_made == 0
    assert len(job.errors) == 1, "the error history is kept across replays"
    with Worker(channel, [queue_name], credits=1) as worker:
        lease = worker.next_lease(timeout=WAIT_S)
        assert lease.job.job_id == "welcome:user_4" and lease.attempt == 1
        assert lease.idempotency_key == leases["welcome:user_4"].idempotency_key
        worker.ack(lease)
        assert settled_for(worker, lease.lease_token).code == 0
    assert get_job(pb, channel, queue_name, "welcome:user_4").state == pb.JOB_STATE_COMPLETED
    listed = dead.ListDeadLetters(pb.ListDeadLettersRequest(queue=queue_name), timeout=10)
    assert list(listed.dead_letters) == []


def test_lease_expired_on_last_attempt_dead_letters(stubs, channel, queue_name):
    pb = stubs
    enqueue(pb, channel, queue_name, job_id="last-chance", max_attempts=1)
    crashed = Worker(channel, [queue_name], credits=1, worker_id="py-crashes-again")
    lease = crashed.next_lease(timeout=WAIT_S)
    crashed.cancel()
    job = wait_for_state(pb, channel, queue_name, "last-chance", {pb.JOB_STATE_DEAD})
    assert job.dead_reason == pb.DEAD_REASON_LEASE_EXPIRED
    assert [e.error_type for e in job.errors] == ["LEASE_EXPIRED"]
    err = rpc_error(pb.WorkerServiceStub(channel).Ack,
                    pb.AckRequest(queue=queue_name, job_id="last-chance", lease_token=lease.lease_token), timeout=10)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, f"{err.code().name}: {err.details()}"
    dead = pb.DeadLetterServiceStub(channel).ListDeadLetters(
        pb.ListDeadLettersRequest(queue=queue_name, filter=pb.DeadLetterFilter(reason=pb.DEAD_REASON_LEASE_EXPIRED)),
        timeout=10)
    assert [j.job_id for j in dead.dead_letters] == ["last-chance"]


def test_rate_limited_fail_does_not_consume_an_attempt(stubs, channel, queue_name):
    pb = stubs
    enqueue(pb, channel, queue_name, job_id="throttled", max_attempts=1)
    with Worker(channel, [queue_name], credits=1) as worker:
        lease = worker.next_lease(timeout=WAIT_S)
        worker.fail(lease, "429 slow down", error_type="provider_throttled",
                    disposition=pb.FAIL_DISPOSITION_RATE_LIMITED, retry_after=ms(50))
        s = settled_for(worker, lease.lease_token)
        assert s.code == 0 and s.state in (pb.JOB_STATE_DELAYED, pb.JOB_STATE_WAITING), s
        again = worker.next_lease(timeout=WAIT_S)
        assert again.job.job_id == "throttled" and again.attempt == 1
        worker.ack(again)
        assert settled_for(worker, again.lease_token).code == 0
    job = get_job(pb, channel, queue_name, "throttled")
    assert job.state == pb.JOB_STATE_COMPLETED and job.attempts_made == 1


def test_list_dead_letters_pages_oldest_first(stubs, channel, queue_name):
    pb = stubs
    ids = [f"dead-{i}" for i in range(5)]
    for job_id in ids:
        enqueue(pb, channel, queue_name, job_id=job_id)
    with Worker(channel, [queue_name], credits=1) as worker:
        for job_id in ids:  # one at a time, FIFO, so deaths happen in id order
            lease = worker.next_lease(timeout=WAIT_S)
            assert lease.job.job_id == job_id
            worker.fail(lease, "nope", disposition=pb.FAIL_DISPOSITION_NO_RETRY)
            assert settled_for(worker, lease.lease_token).state == pb.JOB_STATE_DEAD
    dead = pb.DeadLetterServiceStub(channel)
    pages, token = [], ""
    while True:
        resp = dead.ListDeadLetters(pb.ListDeadLettersRequest(queue=queue_name, page_size=2, page_token=token),
                                    timeout=10)
        assert len(resp.dead_letters) <= 2
        pages.append([j.job_id for j in resp.dead_letters])
        token = resp.next_page_token
        if not token:
            break
        assert len(pages) < 10, "next_page_token never ends"
    assert [j for page in pages for j in page] == ids
    err = rpc_error(dead.ListDeadLetters, pb.ListDeadLettersRequest(queue=queue_name, page_size=1001), timeout=10)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert any("page_size" in v.field for v in field_violations(err))


def test_enqueue_batch_reports_each_item(stubs, channel, queue_name):
    pb = stubs
    resp = pb.JobServiceStub(channel).EnqueueBatch(pb.EnqueueBatchRequest(jobs=[
        spec(pb, queue_name, job_id="b1"),
        spec(pb, queue_name, job_id="b2", max_attempts=0),
        spec(pb, queue_name, job_id="b1"),
        spec(pb, queue_name, job_id="b3"),
    ]), timeout=10)
    r = resp.results
    assert len(r) == 4
    assert r[0].created and r[0].job.job_id == "b1" and not r[0].HasField("error")
    assert r[1].HasField("error") and r[1].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "max_attempts" in r[1].error.field and r[1].error.field.startswith("jobs[1]")
    assert not r[2].created and r[2].job.job_id == "b1"
    assert r[3].created and r[3].job.job_id == "b3"
    missing = rpc_error(pb.JobServiceStub(channel).GetJob, pb.GetJobRequest(queue=queue_name, job_id="b2"), timeout=10)
    assert missing.code() == grpc.StatusCode.NOT_FOUND


def test_sigterm_drains_streams_and_hands_leases_back(stubs, channel, redis_url, tmp_path, queue_name):
    """A second server on the same Redis: SIGTERM sends Draining, waits the grace, releases the lease."""
    pb = stubs
    server = JobwireProcess(redis_url, tmp_path, ("--shutdown-grace", "1s"))
    own = grpc.insecure_channel(server.grpc_addr)
    try:
        enqueue(pb, own, queue_name, job_id="held", max_attempts=1)
        worker = Worker(own, [queue_name], credits=1, worker_id="py-held")
        lease = worker.next_lease(timeout=WAIT_S)
        server.proc.terminate()
        assert worker.draining.wait(WAIT_S), "no Draining message after SIGTERM"
        assert worker.done.wait(WAIT_S), "the stream did not end after the grace period"
        assert server.proc.wait(timeout=WAIT_S) == 0, server.tail()
        worker.close()
    finally:
        own.close()
        server.stop()
    # The hand-back is orderly: back to waiting at once, no attempt consumed (max_attempts=1 is not
    # dead), and the old token is fenced off. Read through the session's server on the same Redis.
    job = get_job(pb, channel, queue_name, "held")
    assert job.state == pb.JOB_STATE_WAITING, state_name(job.state)
    assert job.attempts_made == 0 and len(job.errors) == 0
    err = rpc_error(pb.WorkerServiceStub(channel).Ack,
                    pb.AckRequest(queue=queue_name, job_id="held", lease_token=lease.lease_token), timeout=10)
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION, f"{err.code().name}: {err.details()}"


# === the sign-up experiment ===


def test_signup_demo(jobwire_server, tmp_path):
    """The demo's table; over TLS each part uses its own principal's token and the demo checks
    the refusals (a worker enqueueing, a producer replaying, no token)."""
    args = ["--server", jobwire_server.grpc_addr]
    sec = jobwire_server.security
    if sec is not None:
        args += ["--ca", str(sec.ca)]
        for role, principal in (("producer", "signup-api"), ("worker", "email-worker"), ("admin", "signup-oncall")):
            (tmp_path / role).write_text(sec.tokens[principal] + "\n")
            args += [f"--{role}-token-file", str(tmp_path / role)]
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / "signup_demo.py"), *args],
        capture_output=True, text=True, timeout=180,
    )
    output = f"--- stdout ---\n{proc.stdout}\n--- stderr ---\n{proc.stderr}"
    assert proc.returncode == 0, output
    if sec is not None:
        for check in ("the worker's token enqueues: refused, PERMISSION_DENIED",
                      "the producer's token replays dead letters: refused, PERMISSION_DENIED",
                      "a call without a token: refused, UNAUTHENTICATED"):
            assert f"auth check: {check}" in proc.stdout, output
    assert "| strategy | emailed | dead-lettered | provider requests |" in proc.stdout, output
    for line in ("| retry everything | 15 | 5 | 30 |",
                 "| permanent errors not retried | 15 | 5 | 26 |",
                 "| replay after recovery (not the 400s) | 18 | 2 | 29 |"):
        assert line in proc.stdout, output
