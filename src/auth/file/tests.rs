//! Unit tests of [`super`]: both formats, and every refusal names its line.

use std::path::Path;

use super::*;
use crate::auth::policy::Rpc;

const HASH: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

fn yaml(text: &str) -> Result<Policy, String> {
    parse(Path::new("auth.yaml"), text)
}

fn toml(text: &str) -> Result<Policy, String> {
    parse(Path::new("auth.toml"), text)
}

fn good_yaml() -> String {
    format!(
        "# comment\n\
         principals:\n\
         \x20 - name: billing\n\
         \x20   tokens:\n\
         \x20     - id: billing-1\n\
         \x20       sha256: {HASH}\n\
         \x20   grants:\n\
         \x20     - queues: [\"billing-*\", emails]\n\
         \x20       roles: [producer, viewer]\n\
         \x20 - name: worker\n\
         \x20   certs: [\"spiffe://example.org/w\"]\n\
         \x20   grants:\n\
         \x20     - queues: [\"*\"]\n\
         \x20       roles: [worker]\n"
    )
}

#[test]
fn yaml_and_toml_give_the_same_policy() {
    let a = yaml(&good_yaml()).expect("yaml");
    let b = toml(&format!(
        "[[principals]]\n\
         name = \"billing\"\n\
         tokens = [{{ id = \"billing-1\", sha256 = \"{HASH}\" }}]\n\
         grants = [{{ queues = [\"billing-*\", \"emails\"], roles = [\"producer\", \"viewer\"] }}]\n\
         \n\
         [[principals]]\n\
         name = \"worker\"\n\
         certs = [\"spiffe://example.org/w\"]\n\
         grants = [{{ queues = [\"*\"], roles = [\"worker\"] }}]\n"
    ))
    .expect("toml");
    for p in [&a, &b] {
        let hash = SecretHash::of("abc");
        let billing = p.by_token("billing-1", &hash).expect("token");
        assert_eq!(billing.name, "billing");
        assert!(billing.roles_on("billing-eu").allows(Rpc::Enqueue));
        assert!(billing.roles_on("emails").allows(Rpc::GetQueueStats));
        assert!(!billing.roles_on("other").allows(Rpc::Enqueue));
        assert!(p.by_token("billing-1", &SecretHash::of("abd")).is_none());
        assert!(p.by_token("nobody", &hash).is_none());
        let w = p.by_cert("spiffe://example.org/w").expect("cert");
        assert!(w.roles_on("anything").allows(Rpc::Subscribe));
        assert!(!w.roles_on("anything").allows(Rpc::Enqueue));
    }
}

/// Each bad file is refused with the line of the mistake.
#[test]
fn refusals_name_the_line() {
    let good = good_yaml();
    let cases: Vec<(String, &str, &str)> = vec![
        (
            good.replace("roles: [producer, viewer]", "roles: [producer, viewr]"),
            "line 9",
            "viewr",
        ),
        (
            good.replace("\"billing-*\"", "\"bil*ing\""),
            "line 8",
            "bil*ing",
        ),
        (good.replace(HASH, "abc123"), "line 5", "64 hex digits"),
        (
            good.replace("id: billing-1", "id: billing_1"),
            "line 5",
            "token id",
        ),
        (
            good.replace("    grants:\n      - queues: [\"*\"]", "    grant:\n      - queues: [\"*\"]"),
            "line 12",
            "grant",
        ),
        (
            good.replace("certs: [\"spiffe://example.org/w\"]", "certs: []"),
            "line 10",
            "neither tokens nor certs",
        ),
        (
            good.replace("name: worker", "name: billing"),
            "line 10",
            "more than once",
        ),
        (
            good.replace("queues: [\"*\"]", "queues: []"),
            "line 10",
            "at least one queue pattern",
        ),
        (
            format!(
                "{good}  - name: again\n    tokens:\n      - id: billing-1\n        sha256: {HASH}\n"
            ),
            "line 17",
            "token id \"billing-1\" appears more than once",
        ),
        ("principals: [\n".into(), "line ", ""),
        ("{}".into(), "", "principals"),
    ];
    for (text, line, words) in cases {
        let e = yaml(&text).expect_err(&text);
        assert!(e.contains(line), "{e:?} should name {line}");
        assert!(e.contains(words), "{e:?} should say {words}");
    }
    let e = toml("[[principals]]\nname = \"a\"\ntokens = [{ id = \"a\", sha256 = \"x\" }]\n")
        .expect_err("bad hash");
    assert!(
        e.starts_with("line 3:") && e.contains("64 hex digits"),
        "{e}"
    );
    let e = toml("[[principals]]\nname = \"a\"\ncerts = [\"c\"]\n\ngrants = [{ queues = [\"q\"], roles = [\"root\"] }]\n")
        .expect_err("bad role");
    assert!(e.starts_with("line 5:") && e.contains("root"), "{e}");
    assert!(parse(Path::new("auth.json"), "{}").is_err());
}

#[test]
fn an_empty_list_denies_everyone() {
    let p = yaml("principals: []\n").expect("valid");
    assert!(p.entries.is_empty());
}
