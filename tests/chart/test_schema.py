"""values.schema.json refuses bad values before anything reaches a cluster.

Checked through Helm's own validator when helm-python-sdk is there, else with the `jsonschema`
package over the chart defaults merged with the values (what Helm validates)."""

import json

import pytest
import yaml

import render

BAD = {
    "replicas 0": {"replicaCount": 0},
    "unknown top-level key": {"replicas": 3},
    "unknown nested key": {"config": {"shutdownGrace": "25s"}},
    "no Redis URL with the in-chart Redis off": {"redis": {"inChart": {"enabled": False}}},
    "empty existing Secret with the in-chart Redis off": {
        "redis": {"inChart": {"enabled": False}, "existingSecret": {"name": ""}}},
    "URL and existing Secret both": {
        "redis": {"inChart": {"enabled": False}, "url": "redis://redis:6379",
                  "existingSecret": {"name": "s"}}},
    "URL and the in-chart Redis both": {"redis": {"url": "redis://redis:6379"}},
    "URL that is not Redis": {"redis": {"inChart": {"enabled": False}, "url": "http://redis"}},
    "password needing escaping": {"redis": {"inChart": {"password": "p@ss/word"}}},
    "URL of an unknown kind": {"redis": {"inChart": {"enabled": False}, "url": "redis+shard://a:1"}},
    "Sentinel without a master name": {"redis": {"inChart": {"enabled": False},
                                                 "external": {"mode": "sentinel", "hosts": ["s:26379"]}}},
    "Sentinel over TLS": {"redis": {"inChart": {"enabled": False}, "external": {
        "mode": "sentinel", "hosts": ["s:26379"], "tls": True, "sentinel": {"masterName": "m"}}}},
    "master name outside Sentinel mode": {"redis": {"inChart": {"enabled": False}, "external": {
        "mode": "cluster", "hosts": ["n:6379"], "sentinel": {"masterName": "m"}}}},
    "cluster without hosts": {"redis": {"inChart": {"enabled": False}, "external": {"mode": "cluster"}}},
    "single with two hosts": {"redis": {"inChart": {"enabled": False},
                                        "external": {"mode": "single", "hosts": ["a:6379", "b:6379"]}}},
    "host without a port": {"redis": {"inChart": {"enabled": False},
                                      "external": {"mode": "cluster", "hosts": ["redis-0"]}}},
    "hosts without a mode": {"redis": {"inChart": {"enabled": False}, "url": "redis://r:6379",
                                       "external": {"hosts": ["a:6379"]}}},
    "unknown mode": {"redis": {"inChart": {"enabled": False}, "external": {"mode": "replicated", "hosts": ["a:1"]}}},
    "external mode and the in-chart Redis both": {"redis": {"external": {"mode": "single", "hosts": ["a:6379"]}}},
    "external mode and a URL both": {"redis": {"inChart": {"enabled": False}, "url": "redis://r:6379",
                                               "external": {"mode": "single", "hosts": ["a:6379"]}}},
    "external mode and an existing Secret both": {"redis": {
        "inChart": {"enabled": False}, "existingSecret": {"name": "s"},
        "external": {"mode": "single", "hosts": ["a:6379"]}}},
    "password Secret without a key": {"redis": {"inChart": {"enabled": False}, "external": {
        "mode": "single", "hosts": ["a:6379"], "passwordSecret": {"name": "s", "key": ""}}}},
    "user name needing escaping": {"redis": {"inChart": {"enabled": False}, "external": {
        "mode": "single", "hosts": ["a:6379"], "username": "a@b"}}},
    "negative wait replicas": {"redis": {"waitReplicas": -1}},
    "wait replicas on the in-chart Redis (it has none)": {"redis": {"waitReplicas": 1}},
    "wait timeout without unit": {"redis": {"inChart": {"enabled": False}, "waitReplicas": 1, "waitTimeout": "500",
                                            "external": {"mode": "single", "hosts": ["a:6379"]}}},
    "unknown log format": {"config": {"logFormat": "xml"}},
    "payload above the server's cap": {"config": {"maxPayloadBytes": 5000000}},
    "checkpoint above the server's cap": {"config": {"maxCheckpointBytes": 1048577}},
    "result of zero bytes": {"config": {"maxResultBytes": 0}},
    "zero worker threads": {"config": {"workerThreads": 0}},
    "duration without unit": {"config": {"leaseDuration": "30"}},
    "liveness of an unknown type": {"livenessProbe": {"type": "tcp"}},
    "alert override with an unknown field": {"prometheusRule": {"alerts": {"JobwireWaitingJobsNoWorkers": {"limit": 2}}}},
    "alert threshold that is not a number": {"prometheusRule": {"alerts": {"JobwireWaitingJobsNoWorkers": {"threshold": "2"}}}},
    "insecure as text": {"insecure": "yes"},
    "auth file of an unknown format": {"auth": {"existingSecret": {"name": "a", "key": "auth.json"}}},
    "auth file inline as a list": {"auth": {"config": ["principals"]}},
    "TLS Secret name that is not a Kubernetes name": {"tls": {"enabled": True, "secretName": "My_TLS"}},
    "unknown TLS key": {"tls": {"cert": "/etc/tls.crt"}},
    "cert-manager issuer of an unknown kind": {"tls": {"certManager": {"issuerRef": {"kind": "Vault"}}}},
    "cert-manager duration in days": {"tls": {"certManager": {"duration": "90d"}}},
    "metrics token Secret without a key": {"metricsAuth": {"existingSecret": {"name": "m", "key": ""}}},
    "extra argument that is not text": {"extraArgs": ["--max-concurrent-streams", 100]},
    "unknown limit": {"limits": {"maxSockets": 10}},
    "limit duration without unit": {"limits": {"grpcPrefaceTimeout": "10"}},
    "limit below its flag's range": {"limits": {"fdReserve": 4}},
}
GOOD = {
    "defaults": {},
    "external URL": {"redis": {"inChart": {"enabled": False}, "url": "rediss://:pw@redis:6379"}},
    "cluster URL": {"redis": {"inChart": {"enabled": False}, "url": "rediss+cluster://:pw@a:6379,b:6379"}},
    "Sentinel URL": {"redis": {"inChart": {"enabled": False}, "url": "redis+sentinel://a:26379,b:26379/mymaster"}},
    "single external, no password": {"redis": {"inChart": {"enabled": False},
                                                "external": {"mode": "single", "hosts": ["10.0.0.7:6379"]}}},
    "existing Secret": {"redis": {"inChart": {"enabled": False}, "existingSecret": {"name": "s"}}},
    "TLS, mTLS from another Secret, TOML auth file": {
        "tls": {"enabled": True, "secretName": "jobwire-tls", "clientAuth": True,
                "clientCa": {"secretName": "client-ca", "key": "ca.pem"}},
        "auth": {"existingSecret": {"name": "a", "key": "auth.toml"}}},
    "auth file inline as text": {"auth": {"config": "principals: []\n"}},
    **{f"ci {name}": render.load_values(path) for name, path in render.CI_VALUES.items()},
}


def validate(values: dict):
    if render.have_helm():
        import helm_python as helm
        with helm.Chart.load(str(render.CHART)) as chart:
            chart.validate_schema(values)
        return
    import jsonschema
    defaults = yaml.safe_load((render.CHART / "values.yaml").read_text())
    schema = json.loads((render.CHART / "values.schema.json").read_text())
    jsonschema.validate(render._merge(defaults, values), schema)


@pytest.mark.parametrize("values", BAD.values(), ids=BAD.keys())
def test_schema_rejects(values):
    with pytest.raises(Exception):
        validate(values)


@pytest.mark.parametrize("values", GOOD.values(), ids=GOOD.keys())
def test_schema_accepts(values):
    validate(values)


def test_render_refuses_what_the_schema_refuses():
    if not render.have_helm():
        pytest.skip("helm-python-sdk is not installed")
    with pytest.raises(Exception, match="replicaCount"):
        render.render({"insecure": True, "replicaCount": 0})


def leaf_keys(values: dict, prefix="") -> list[str]:
    keys = []
    for k, v in values.items():
        path = f"{prefix}{k}"
        if isinstance(v, dict) and v and k not in ("resources", "podSecurityContext", "securityContext", "labels"):
            keys.extend(leaf_keys(v, path + "."))
        else:
            keys.append(path)
    return keys


def test_chart_readme_documents_every_value():
    readme = (render.CHART / "README.md").read_text()
    defaults = yaml.safe_load((render.CHART / "values.yaml").read_text())
    schema = json.loads((render.CHART / "values.schema.json").read_text())
    for key in leaf_keys(defaults):
        short = key.rsplit(".", 1)[-1]
        assert f"`{key}`" in readme or f"{short}`" in readme, f"helm/jobwire/README.md misses {key}"
    assert set(defaults) == set(schema["properties"]), "values.yaml and values.schema.json differ"
