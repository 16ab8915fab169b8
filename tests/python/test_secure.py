"""TLS, mTLS and the auth file as a Python (grpcio) client sees them.

A server with TLS (a throwaway CA, scripts/dev-certs.sh) and an auth file (conftest.PRINCIPALS,
tokens from `jobwire token new`): the producer / worker / viewer / admin flow over TLS, and
every refusal with its code, message and google.rpc.ErrorInfo (reason, queue, roles), checked to
change nothing; a client that speaks plaintext or trusts another CA; mTLS with a client
certificate as the principal; a token revoked by editing the auth file while the server runs.
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
import time

import grpc
import pytest
from google.rpc import error_details_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from grpc_status import rpc_status

from conftest import CERT_CLIENT, REPO_ROOT, JobwireProcess, auth_file_yaml, connect
from stream import Worker, state_name

WAIT_S = 15.0  # patience for anything asynchronous (a reload, a lease); never a timing claim


@pytest.fixture(scope="module")
def server(redis_url, security, tmp_path_factory):
    """TLS + auth file, no client certificate required."""
    s = JobwireProcess(redis_url, tmp_path_factory.mktemp("secure"), security=security)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def mtls_server(redis_url, security, tmp_path_factory):
    """TLS + auth file + client certificates required (--tls-client-ca)."""
    s = JobwireProcess(redis_url, tmp_path_factory.mktemp("mtls"), security=security, mtls=True)
    yield s
    s.stop()


@pytest.fixture
def orders():
    """A queue the orders-* principals are granted."""
    return f"orders-{secrets.token_hex(4)}"


def enqueue(pb, channel, queue, job_id, payload=b"{}"):
    return pb.JobServiceStub(channel).Enqueue(
        pb.EnqueueRequest(job=pb.JobSpec(queue=queue, job_id=job_id, name="send", payload=payload)), timeout=10)


def get_job(pb, channel, queue, job_id):
    return pb.JobServiceStub(channel).GetJob(pb.GetJobRequest(queue=queue, job_id=job_id), timeout=10).job


def refused(call) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


def error_info(err: grpc.RpcError) -> error_details_pb2.ErrorInfo:
    """The google.rpc.ErrorInfo among the error's details (grpc-status-details-bin)."""
    status = rpc_status.from_call(err)
    assert status is not None, f"no google.rpc.Status details on {err.code().name}: {err.details()}"
    for detail in status.details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    pytest.fail(f"no ErrorInfo in the details of {err.code().name}: {err.details()}")


def assert_unauthenticated(err: grpc.RpcError, *not_in_message: str) -> None:
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED, f"{err.code().name}: {err.details()}"
    info = error_info(err)
    assert (info.reason, info.domain) == ("UNAUTHENTICATED", "jobwire.dev")
    for secret in not_in_message:
        assert secret not in err.details(), "the refusal echoes the secret it was given"


def assert_denied(err: grpc.RpcError, principal: str, queue: str | None, role: str) -> None:
    """PERMISSION_DENIED naming the principal, the queue and the missing role, in the message and
    in ErrorInfo.metadata. `queue` None: the principal holds the role on no queue at all, so the
    call is refused before its request is read, naming the role "on at least one queue" and no
    queue (docs/security.md, "Request memory on the gRPC port")."""
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED, f"{err.code().name}: {err.details()}"
    assert principal in err.details() and role in err.details(), err.details()
    info = error_info(err)
    assert info.reason == "PERMISSION_DENIED" and info.domain == "jobwire.dev"
    assert role in info.metadata["roles"], dict(info.metadata)
    if queue is None:
        assert "on at least one queue" in err.details(), err.details()
        assert "queue" not in info.metadata, dict(info.metadata)
    else:
        assert queue in err.details(), err.details()
        assert info.metadata["queue"] == queue, dict(info.metadata)


def redis_keys_naming(redis_url: str, queue: str) -> list[str]:
    """Every Redis key whose name contains `queue` (the queue's hash tag), via redis-cli."""
    out = subprocess.run(["redis-cli", "-u", redis_url, "--scan", "--pattern", f"*{queue}*"],
                         check=True, capture_output=True, text=True).stdout
    return out.split()


# === the flow over TLS, one principal per role ===


def test_producer_worker_viewer_admin_over_tls(stubs, server, orders):
    pb = stubs
    api, worker_ch, viewer, oncall = (server.channel(p) for p in ("orders-api", "orders-worker", "orders-viewer",
                                                                  "oncall"))
    try:
        assert enqueue(pb, api, orders, "order-1").created
        with Worker(worker_ch, [orders], credits=1, worker_id="orders-worker-1") as w:
            lease = w.next_lease(timeout=WAIT_S)
            assert lease.job.job_id == "order-1"
            w.ack(lease)
            assert w.next_settled(timeout=WAIT_S).code == 0
        assert get_job(pb, api, orders, "order-1").state == pb.JOB_STATE_COMPLETED
        stats = pb.QueueServiceStub(viewer).GetQueueStats(pb.GetQueueStatsRequest(queue=orders), timeout=10)
        assert stats.stats.completed == 1, stats
        pb.QueueServiceStub(oncall).PauseQueue(pb.PauseQueueRequest(queue=orders), timeout=10)
        pb.QueueServiceStub(oncall).ResumeQueue(pb.ResumeQueueRequest(queue=orders), timeout=10)
    finally:
        for ch in (api, worker_ch, viewer, oncall):
            ch.close()


def test_health_and_reflection_need_no_token(server):
    with server.channel(None) as ch:
        health = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert health.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(ch)
        answers = stub.ServerReflectionInfo(iter([reflection_pb2.ServerReflectionRequest(list_services="")]),
                                            timeout=10)
        names = {s.name for a in answers for s in a.list_services_response.service}
        assert "jobwire.v1.JobService" in names


# === UNAUTHENTICATED ===


def test_no_token_bad_token_unknown_token_are_unauthenticated(stubs, server, security, orders, redis_url):
    pb = stubs
    real = security.tokens["orders-api"]
    token_id, _, secret = real[len("jw_"):].partition("_")
    wrong_secret = f"jw_{token_id}_{secret[::-1]}"
    unknown_id = f"jw_nobody_{secret}"
    with server.channel(None) as ch:
        assert_unauthenticated(refused(lambda: enqueue(pb, ch, orders, "x")))
    for token in (wrong_secret, unknown_id, "not-a-jobwire-token", real.upper()):
        with connect(server.grpc_addr, ca=security.ca, token=token) as ch:
            assert_unauthenticated(refused(lambda: enqueue(pb, ch, orders, "x")), secret, secret[::-1])
    # Nothing was written: no key of the queue exists.
    assert redis_keys_naming(redis_url, orders) == []


# === PERMISSION_DENIED ===


def test_right_token_wrong_role(stubs, server, orders, redis_url):
    pb = stubs
    worker_ch, api, viewer = server.channel("orders-worker"), server.channel("orders-api"), server.channel("orders-viewer")
    try:
        # Each holds the role it lacks on no queue: refused before the request is read.
        assert_denied(refused(lambda: enqueue(pb, worker_ch, orders, "x")), "orders-worker", None, "producer")
        assert_denied(refused(lambda: pb.QueueServiceStub(viewer).PurgeQueue(
            pb.PurgeQueueRequest(queue=orders), timeout=10)), "orders-viewer", None, "admin")
        assert redis_keys_naming(redis_url, orders) == []
        # A producer may not subscribe: the stream ends with the refusal.
        w = Worker(api, [orders], credits=1, worker_id="not-a-worker")
        assert w.done.wait(WAIT_S), "the stream of a producer was not refused"
        assert_denied(w.error, "orders-api", None, "worker")
        w.close()
    finally:
        for ch in (worker_ch, api, viewer):
            ch.close()


def test_worker_of_another_team(stubs, server, orders):
    """billing-worker holds worker on billing-*: orders' jobs are out of its reach, even with a
    lease token it got hold of, and a Subscribe naming one orders queue among its own is refused."""
    pb = stubs
    api, mine, theirs = server.channel("orders-api"), server.channel("orders-worker"), server.channel("billing-worker")
    billing = f"billing-{secrets.token_hex(4)}"
    try:
        enqueue(pb, api, orders, "order-1")
        for queues in ([orders], [billing, orders]):
            w = Worker(theirs, queues, credits=1, worker_id="billing-1")
            assert w.done.wait(WAIT_S), f"Subscribe to {queues} was not refused"
            assert_denied(w.error, "billing-worker", orders, "worker")
            w.close()
        with Worker(mine, [orders], credits=1, worker_id="orders-1") as w:
            lease = w.next_lease(timeout=WAIT_S)
            ack = pb.AckRequest(queue=orders, job_id="order-1", lease_token=lease.lease_token)
            assert_denied(refused(lambda: pb.WorkerServiceStub(theirs).Ack(ack, timeout=10)),
                          "billing-worker", orders, "worker")
            job = get_job(pb, api, orders, "order-1")
            assert job.state == pb.JOB_STATE_ACTIVE and job.attempts_made == 1, state_name(job.state)
            w.ack(lease)
            assert w.next_settled(timeout=WAIT_S).code == 0
        assert get_job(pb, api, orders, "order-1").state == pb.JOB_STATE_COMPLETED
    finally:
        for ch in (api, mine, theirs):
            ch.close()


# === the transport ===


def test_plaintext_client_and_unknown_ca_cannot_connect(stubs, server, security, tmp_path):
    pb = stubs
    with grpc.insecure_channel(server.grpc_addr) as ch:
        err = refused(lambda: enqueue(pb, ch, "orders-x", "x"))
        assert err.code() == grpc.StatusCode.UNAVAILABLE, f"{err.code().name}: {err.details()}"
    other = tmp_path / "other-ca"
    subprocess.run(["bash", str(REPO_ROOT / "scripts" / "dev-certs.sh"), str(other)], check=True)
    with connect(server.grpc_addr, ca=other / "ca.crt", token=security.tokens["orders-api"]) as ch:
        err = refused(lambda: enqueue(pb, ch, "orders-x", "x"))
        assert err.code() == grpc.StatusCode.UNAVAILABLE, f"{err.code().name}: {err.details()}"


def test_mtls_client_certificate_is_the_principal(stubs, mtls_server, security, orders, tmp_path):
    pb = stubs
    # The certificate alone authenticates (its URI SAN is a principal of the auth file).
    with mtls_server.channel(None) as ch:
        assert enqueue(pb, ch, orders, "by-cert").created
        billing = f"billing-{secrets.token_hex(4)}"
        assert_denied(refused(lambda: enqueue(pb, ch, billing, "x")), CERT_CLIENT, billing, "producer")
    # Without a client certificate, or with one from another CA, there is no TLS session at all.
    with connect(mtls_server.grpc_addr, ca=security.ca, token=security.tokens["oncall"]) as ch:
        err = refused(lambda: enqueue(pb, ch, orders, "x"))
        assert err.code() == grpc.StatusCode.UNAVAILABLE, f"{err.code().name}: {err.details()}"
    other = tmp_path / "other-ca"
    subprocess.run(["bash", str(REPO_ROOT / "scripts" / "dev-certs.sh"), str(other), "cert-client"], check=True)
    with connect(mtls_server.grpc_addr, ca=security.ca, cert=other / "client.crt", key=other / "client.key") as ch:
        err = refused(lambda: enqueue(pb, ch, orders, "x"))
        assert err.code() == grpc.StatusCode.UNAVAILABLE, f"{err.code().name}: {err.details()}"


# === reload ===


def test_revoked_token_after_reload_and_bad_file_kept_out(stubs, redis_url, security, tmp_path, orders):
    """Editing the auth file revokes a token without a restart; a file with an error is refused,
    logged with its line, and the last good one stays in force."""
    pb = stubs
    shutil.copytree(security.dir, tmp_path / "pki")
    sec = type(security)(tmp_path / "pki", dict(security.tokens), dict(security.hashes))
    s = JobwireProcess(redis_url, tmp_path, security=sec)
    api, oncall = s.channel("orders-api"), s.channel("oncall")
    try:
        assert enqueue(pb, api, orders, "before").created
        sec.auth_file.write_text(auth_file_yaml(sec.principals(without=("orders-api",))))
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                enqueue(pb, api, orders, "after")
            except grpc.RpcError as err:
                assert_unauthenticated(err)
                break
            assert time.monotonic() < deadline, "the token still works after its removal from the auth file"
            time.sleep(0.2)
        # "after" may have gone in before the reload; nothing did once the token was refused.
        assert get_job(pb, oncall, orders, "before").job_id == "before"
        # A broken file: refused with its line, the old one stays (oncall still works).
        good = sec.auth_file.read_text()
        sec.auth_file.write_text(good + "  - name: [unclosed\n")
        where = f"auth file {sec.auth_file}: line {len(good.splitlines()) + 1}:"
        deadline = time.monotonic() + WAIT_S
        while not any("reload refused" in line and where in line for line in s.tail(400).splitlines()):
            assert time.monotonic() < deadline, f"no reload error naming {where!r} logged:\n{s.tail()}"
            time.sleep(0.2)
        assert get_job(pb, oncall, orders, "before").job_id == "before"
    finally:
        api.close()
        oncall.close()
        s.stop()
