"""The chart's security settings: TLS and mTLS from a Secret (cert-manager's layout), the auth file
from a Secret, the bind rule's `--insecure` only when asked for, the /metrics token shared with
the ServiceMonitor, probes that work with TLS, and the NetworkPolicy example."""

import base64
import posixpath

import pytest
import yaml

import render
from k8s import container, jobwire_deployment, of_kind, one

# Flags whose value is a file the pod must have, and the Secret key each reads by default.
FILE_FLAGS = ("--tls-cert", "--tls-key", "--tls-client-ca", "--auth-file", "--metrics-token-file")
AUTH = {"principals": [{"name": "ci", "tokens": [{"id": "ci", "sha256": "ab" * 32}],
                        "grants": [{"queues": ["*"], "roles": ["admin"]}]}]}


def needs_helm():
    pytest.importorskip("helm_python", reason="helm-python-sdk is not installed")


def flag_values(args: list[str]) -> dict[str, str]:
    return {a: args[i + 1] for i, a in enumerate(args) if a in FILE_FLAGS}


def pod_spec(docs):
    return jobwire_deployment(docs)["spec"]["template"]["spec"]


def mounted_file(docs, path: str) -> tuple[dict, str]:
    """The pod volume holding `path` and the file's name inside it. Fails unless a volume is
    mounted whole (no subPath: the kubelet never updates a subPath mount, so rotation would
    stop) and read-only over the file's directory."""
    c = container(jobwire_deployment(docs), "jobwire")
    mounts = [m for m in c["volumeMounts"] if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert len(mounts) == 1, f"{path} is under {len(mounts)} mounts"
    m = mounts[0]
    assert "subPath" not in m and "subPathExpr" not in m, f"{m['name']} uses subPath: no rotation"
    assert m.get("readOnly") is True, f"{m['name']} must be mounted read-only"
    volume = {v["name"]: v for v in pod_spec(docs)["volumes"]}[m["name"]]
    return volume, posixpath.relpath(path, m["mountPath"])


def secret_data(docs, name: str) -> dict[str, str] | None:
    """A Secret the chart renders, decoded; None if the chart does not render it."""
    found = [s for s in of_kind(docs, "Secret") if s["metadata"]["name"] == name]
    if not found:
        return None
    return {k: base64.b64decode(v).decode() for k, v in found[0]["data"].items()}


# === the bind rule: auth file, or insecure said out loud ===

def test_neither_auth_nor_insecure_fails_the_render():
    needs_helm()
    with pytest.raises(Exception, match=r"no authentication configured.*auth\.existingSecret\.name.*insecure=true"):
        render.render({})


def test_auth_and_insecure_together_fail_the_render():
    needs_helm()
    with pytest.raises(Exception, match="insecure=true and an auth file"):
        render.render({"insecure": True, "auth": {"config": AUTH}})
    with pytest.raises(Exception, match="both set"):
        render.render({"auth": {"config": AUTH, "existingSecret": {"name": "mine"}}})


def test_insecure_flag_only_when_asked_for(rendered_all):
    for name, docs in rendered_all.items():
        values = render.load_values(render.CI_VALUES[name])
        args = container(jobwire_deployment(docs), "jobwire")["args"]
        has_auth = "--auth-file" in args
        assert ("--insecure" in args) == bool(values.get("insecure")), name
        assert has_auth != ("--insecure" in args), f"{name}: exactly one of --auth-file and --insecure"
        env = {e["name"] for e in container(jobwire_deployment(docs), "jobwire")["env"]}
        assert "JOBWIRE_INSECURE" not in env and "JOBWIRE_AUTH_FILE" not in env, "args only, so this test sees them"


def test_notes_say_whether_auth_is_on():
    needs_helm()
    notes = render.render({"insecure": True})["jobwire/templates/NOTES.txt"]
    assert "Authentication: OFF (insecure=true)" in notes and "TLS: off" in notes
    notes = render.render(render.load_values(render.CI_VALUES["secure"]))["jobwire/templates/NOTES.txt"]
    assert "Authentication: on, auth file from Secret jobwire-auth" in notes
    assert "TLS: on" in notes and "mTLS: on" in notes and "-cacert ca.crt" in notes


# === every file a flag names is in a Secret mounted whole ===

def test_flag_files_come_from_secrets_mounted_whole(rendered_all):
    seen = set()
    for name, docs in rendered_all.items():
        args = container(jobwire_deployment(docs), "jobwire")["args"]
        for flag, path in flag_values(args).items():
            seen.add(flag)
            volume, key = mounted_file(docs, path)
            assert "secret" in volume, f"{name}: {flag} {path} is not from a Secret"
            assert volume["secret"]["defaultMode"] == 0o440, "key material: owner and fsGroup only"
            data = secret_data(docs, volume["secret"]["secretName"])
            if data is not None:  # a Secret the chart makes: the key must be in it
                assert key in data, f"{name}: {flag} reads {key}, the Secret has {sorted(data)}"
    assert seen == set(FILE_FLAGS), f"no CI render covers {set(FILE_FLAGS) - seen}"


def test_tls_uses_cert_manager_keys_and_no_restart_on_rotation(rendered_all):
    docs = rendered_all["secure"]
    c = container(jobwire_deployment(docs), "jobwire")
    flags = flag_values(c["args"])
    for flag, key in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key"), ("--tls-client-ca", "ca.crt")):
        volume, name = mounted_file(docs, flags[flag])
        assert (volume["secret"]["secretName"], name) == ("jobwire-grpc-tls", key)
    annotations = jobwire_deployment(docs)["spec"]["template"]["metadata"]["annotations"]
    dumped = yaml.safe_dump(annotations)
    assert "tls" not in dumped and "auth" not in dumped, "jobwire reloads these files: no restart on change"


def test_client_ca_from_its_own_secret():
    needs_helm()
    docs = render.manifests({"insecure": True, "tls": {
        "enabled": True, "secretName": "srv", "clientAuth": True, "clientCa": {"secretName": "clients", "key": "bundle.pem"}}})
    flags = flag_values(container(jobwire_deployment(docs), "jobwire")["args"])
    volume, key = mounted_file(docs, flags["--tls-client-ca"])
    assert (volume["secret"]["secretName"], key) == ("clients", "bundle.pem")
    volume, key = mounted_file(docs, flags["--tls-cert"])
    assert (volume["secret"]["secretName"], key) == ("srv", "tls.crt")


def test_tls_without_client_auth_asks_no_client_cert(rendered_all):
    args = container(jobwire_deployment(rendered_all["external-cluster-tls"]), "jobwire")["args"]
    assert "--tls-cert" in args and "--tls-client-ca" not in args


@pytest.mark.parametrize("values, message", [
    ({"insecure": True, "tls": {"enabled": True}}, "tls.enabled needs tls.secretName"),
    ({"insecure": True, "tls": {"clientAuth": True}}, "need tls.enabled=true"),
    ({"insecure": True, "tls": {"enabled": True, "secretName": "s"}, "livenessProbe": {"type": "grpc"}},
     "livenessProbe.type=grpc cannot be used with tls.enabled"),
    ({"insecure": True, "tls": {"enabled": True, "secretName": "s", "certManager": {"enabled": True}}},
     "issuerRef.name"),
], ids=["no secret", "mTLS without TLS", "gRPC liveness over TLS", "cert-manager without issuer"])
def test_tls_mistakes_fail_the_render(values, message):
    needs_helm()
    with pytest.raises(Exception, match=message):
        render.render(values)


def test_cert_manager_certificate_covers_the_service_names(rendered_all):
    docs = rendered_all["secure"]
    cert = one(docs, "Certificate")
    assert cert["spec"]["secretName"] == "jobwire-grpc-tls"
    service = one(docs, "Service", "jobwire")["metadata"]["name"]
    for dns in (service, f"{service}.jobwire", f"{service}.jobwire.svc", f"{service}.jobwire.svc.cluster.local",
                "jobwire.example.internal"):
        assert dns in cert["spec"]["dnsNames"]
    assert cert["spec"]["issuerRef"] == {"name": "jobwire-ca", "kind": "Issuer", "group": "cert-manager.io"}
    assert "server auth" in cert["spec"]["usages"]
    for name, other in rendered_all.items():
        if name != "secure":
            assert not of_kind(other, "Certificate"), name


# === the auth file ===

def test_inline_auth_object_and_text_become_the_file(rendered_all):
    values = render.load_values(render.CI_VALUES["all-enabled"])
    data = secret_data(rendered_all["all-enabled"], "jobwire-auth")
    assert yaml.safe_load(data["auth.yaml"]) == values["auth"]["config"]
    values = render.load_values(render.CI_VALUES["external-sentinel"])
    data = secret_data(rendered_all["external-sentinel"], "jobwire-auth")
    assert data["auth.yaml"] == values["auth"]["config"]


def test_existing_auth_secret_is_used_not_made(rendered_all):
    for name, key in (("external-cluster", "auth.yaml"), ("external-cluster-tls", "auth.toml")):
        docs = rendered_all[name]
        assert secret_data(docs, "jobwire-auth") is None, "the chart must not make a Secret the user manages"
        flags = flag_values(container(jobwire_deployment(docs), "jobwire")["args"])
        volume, file = mounted_file(docs, flags["--auth-file"])
        assert (volume["secret"]["secretName"], file) == ("jobwire-auth", key)


# === /metrics token and the ServiceMonitor ===

def test_service_monitor_sends_the_metrics_token(rendered_all):
    for name in ("all-enabled", "secure"):
        docs = rendered_all[name]
        flags = flag_values(container(jobwire_deployment(docs), "jobwire")["args"])
        volume, key = mounted_file(docs, flags["--metrics-token-file"])
        endpoint = one(docs, "ServiceMonitor")["spec"]["endpoints"][0]
        credentials = endpoint["authorization"]["credentials"]
        assert endpoint["authorization"]["type"] == "Bearer"
        assert (credentials["name"], credentials["key"]) == (volume["secret"]["secretName"], key)
        token = secret_data(docs, credentials["name"])[credentials["key"]]
        assert len(token) >= 32 and token.isalnum()
    for name in ("defaults", "external-cluster-tls"):
        docs = rendered_all[name]
        assert "--metrics-token-file" not in container(jobwire_deployment(docs), "jobwire")["args"]
        for monitor in of_kind(docs, "ServiceMonitor"):
            assert "authorization" not in monitor["spec"]["endpoints"][0]


# === NetworkPolicy example ===

def test_secure_example_limits_who_reaches_each_port(rendered_all):
    policy = one(rendered_all["secure"], "NetworkPolicy", "jobwire")
    by_port: dict[str, list] = {}
    for rule in policy["spec"]["ingress"]:
        by_port.setdefault(rule["ports"][0]["port"], []).append(rule["from"])
    [grpc], [http, dashboard] = by_port["grpc"], by_port["http"]
    # One peer with both selectors: a labelled pod in a labelled namespace, not either alone.
    assert grpc == [{"namespaceSelector": {"matchLabels": {"jobwire-access": "true"}},
                     "podSelector": {"matchLabels": {"jobwire-client": "true"}}}]
    assert http[0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "monitoring"}
    # The dashboard (ui.enabled): the HTTP port from the ingress controller's namespace too.
    assert dashboard == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}]
    assert {"Ingress", "Egress"} <= set(policy["spec"]["policyTypes"])
    assert not of_kind(rendered_all["defaults"], "NetworkPolicy"), "off by default"
