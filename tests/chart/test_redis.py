"""The Redis jobwire is given: single, Sentinel or Cluster, built from `redis.external`, with
the password only ever coming from a Secret, and `redis.waitReplicas` as
`--redis-wait-replicas`."""

import base64

import pytest

import render
from k8s import container, env_map, expanded_env, jobwire_deployment, of_kind, one

PASSWORD = "pw-from-the-secret"

# CI values file -> the JOBWIRE_REDIS_URL a pod sees once the kubelet filled the password in.
EXPECTED_URL = {
    "external-cluster": "redis+cluster://:" + PASSWORD + "@"
    "redis-cluster-0.redis-cluster-headless.redis.svc:6379,"
    "redis-cluster-1.redis-cluster-headless.redis.svc:6379,"
    "redis-cluster-2.redis-cluster-headless.redis.svc:6379",
    "external-cluster-tls": "rediss+cluster://jobwire:" + PASSWORD + "@"
    "redis-node-a.cache.example.internal:6380,"
    "redis-node-b.cache.example.internal:6380,"
    "redis-node-c.cache.example.internal:6380",
    "external-sentinel": "redis+sentinel://:" + PASSWORD + "@"
    "redis-node-0.redis-headless.redis.svc:26379,"
    "redis-node-1.redis-headless.redis.svc:26379,"
    "redis-node-2.redis-headless.redis.svc:26379/mymaster",
}


def pod_url(docs) -> str:
    """JOBWIRE_REDIS_URL as the container sees it, secrets read from the render or faked."""
    secrets = {s["metadata"]["name"]: s for s in of_kind(docs, "Secret")}

    def secret_value(name, key):
        if name in secrets:
            return base64.b64decode(secrets[name]["data"][key]).decode()
        assert (name, key) == ("jobwire-redis", "redis-password"), f"unexpected Secret {name}/{key}"
        return PASSWORD

    return expanded_env(container(jobwire_deployment(docs), "jobwire"), secret_value)["JOBWIRE_REDIS_URL"]


@pytest.mark.parametrize("name", list(EXPECTED_URL))
def test_external_values_file_gives_the_url(rendered_all, name):
    assert pod_url(rendered_all[name]) == EXPECTED_URL[name]


@pytest.mark.parametrize("name", list(EXPECTED_URL))
def test_password_only_from_the_secret(rendered_all, name):
    docs = rendered_all[name]
    c = container(jobwire_deployment(docs), "jobwire")
    env = env_map(c)
    names = [e["name"] for e in c["env"]]
    ref = env["REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"]
    assert (ref["name"], ref["key"]) == ("jobwire-redis", "redis-password")
    # The kubelet expands $(REDIS_PASSWORD) only if it is defined before the URL.
    assert names.index("REDIS_PASSWORD") < names.index("JOBWIRE_REDIS_URL")
    assert "$(REDIS_PASSWORD)@" in env["JOBWIRE_REDIS_URL"]["value"]
    # No Redis Secret of the chart's own: no Redis secret is in the values (the auth file's
    # Secret may be there: it holds token hashes).
    assert not [k for s in of_kind(docs, "Secret") for k in s["data"] if "redis" in k]
    assert not of_kind(docs, "StatefulSet"), "no in-chart Redis beside an external one"
    assert not any("@" in a for a in c["args"]), "a URL in the args"


def test_sentinel_network_policy_opens_sentinel_and_redis_ports(rendered_all):
    policy = one(rendered_all["external-sentinel"], "NetworkPolicy", "jobwire")
    ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"]}
    assert {26379, 6379} <= ports, ports
    cluster = one(rendered_all["external-cluster-tls"], "NetworkPolicy", "jobwire")
    ports = {p["port"] for rule in cluster["spec"]["egress"] for p in rule["ports"]}
    assert 6380 in ports and 6379 not in ports, ports


def test_single_external_redis_without_password():
    pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")
    docs = render.manifests({"insecure": True,
                             "redis": {"inChart": {"enabled": False},
                                       "external": {"mode": "single", "hosts": ["redis.data:6379"]}}})
    env = env_map(container(jobwire_deployment(docs), "jobwire"))
    assert env["JOBWIRE_REDIS_URL"]["value"] == "redis://redis.data:6379"
    assert "REDIS_PASSWORD" not in env


def test_wait_replicas_becomes_the_flag(rendered_all):
    args = container(jobwire_deployment(rendered_all["external-cluster"]), "jobwire")["args"]
    i = args.index("--redis-wait-replicas")
    assert args[i + 1] == "1"
    i = args.index("--redis-wait-timeout")
    assert args[i + 1] == "500ms"
    for name in ("defaults", "external-sentinel"):
        args = container(jobwire_deployment(rendered_all[name]), "jobwire")["args"]
        assert "--redis-wait-replicas" not in args and "--redis-wait-timeout" not in args

