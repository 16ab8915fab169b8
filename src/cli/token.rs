//! `jobwire token new`: prints a fresh bearer token and the lines to paste into the auth
//! file. The token goes to stdout first, alone on its line (`jobwire token new | head -1`);
//! the server never sees it, only its SHA-256.

use clap::{Args, Subcommand, ValueEnum};

use crate::auth::token::Token;

/// `jobwire token ...`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// What to do.
    #[command(subcommand)]
    pub command: TokenCommand,
}

/// Subcommands of `jobwire token`.
#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Print a fresh token (secret from the OS's CSPRNG, about 256 bits) and its auth-file
    /// entry (token id and the SHA-256 of the secret).
    New(NewToken),
}

/// Format of the auth-file lines `token new` prints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FileFormat {
    /// YAML (an auth file ending in .yaml or .yml).
    Yaml,
    /// TOML (an auth file ending in .toml).
    Toml,
}

/// `jobwire token new`.
#[derive(Debug, Args)]
pub struct NewToken {
    /// The token id (1 to 64 of A-Z a-z 0-9 . -); it names the token in the auth file and in
    /// logs. Default: a random one.
    #[arg(long)]
    pub id: Option<String>,
    /// The principal name in the printed entry. Default: the token id.
    #[arg(long)]
    pub name: Option<String>,
    /// Format of the printed auth-file entry.
    #[arg(long, value_enum, default_value = "yaml")]
    pub format: FileFormat,
}

/// Runs `jobwire token ...`: returns what to print on stdout.
pub fn run(args: &TokenArgs) -> Result<String, String> {
    match &args.command {
        TokenCommand::New(n) => new_token(n),
    }
}

fn new_token(n: &NewToken) -> Result<String, String> {
    let id = match &n.id {
        Some(id) => id.clone(),
        None => format!("t-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]),
    };
    let token = Token::generate(&id).map_err(|e| format!("--id: {e}"))?;
    let hash = token.secret_hash().to_hex();
    let name = n.name.clone().unwrap_or_else(|| id.clone());
    let entry = match n.format {
        FileFormat::Yaml => format!(
            "# Auth file entry (YAML), under `principals:`; set the grants you need.\n\
             - name: {name:?}\n  \
               tokens:\n    \
                 - id: {id:?}\n      \
                   sha256: {hash:?}\n  \
               grants:\n    \
                 - queues: [\"example-queue\"]\n      \
                   roles: [producer]\n"
        ),
        FileFormat::Toml => format!(
            "# Auth file entry (TOML); set the grants you need.\n\
             [[principals]]\n\
             name = {name:?}\n\
             tokens = [{{ id = {id:?}, sha256 = {hash:?} }}]\n\
             grants = [{{ queues = [\"example-queue\"], roles = [\"producer\"] }}]\n"
        ),
    };
    Ok(format!(
        "{}\n# ^ the token: give it to the client (metadata `authorization: Bearer <token>`); it is shown only once.\n{entry}",
        token.reveal()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(format: FileFormat) -> String {
        new_token(&NewToken {
            id: Some("ci".into()),
            name: Some("ci-bot".into()),
            format,
        })
        .expect("valid in the test")
    }

    /// The printed entry parses as an auth file and the printed token authenticates as it.
    #[test]
    fn the_printed_entry_accepts_the_printed_token() {
        for (format, file) in [(FileFormat::Yaml, "a.yaml"), (FileFormat::Toml, "a.toml")] {
            let text = out(format);
            let token = Token::parse(text.lines().next().expect("valid in the test"))
                .expect("valid in the test");
            let entry: String = text.lines().skip(1).collect::<Vec<_>>().join("\n");
            let file_text = match format {
                FileFormat::Yaml => format!(
                    "principals:\n{}",
                    entry
                        .lines()
                        .map(|l| format!("  {l}"))
                        .collect::<Vec<_>>()
                        .join("\n")
                ),
                FileFormat::Toml => entry,
            };
            let policy = crate::auth::file::parse(std::path::Path::new(file), &file_text)
                .unwrap_or_else(|e| panic!("{file}: {e}\n{file_text}"));
            let p = policy
                .by_token(&token.id, &token.secret_hash())
                .expect("the token is the principal");
            assert_eq!(p.name, "ci-bot");
        }
        assert!(new_token(&NewToken {
            id: Some("bad_id".into()),
            name: None,
            format: FileFormat::Yaml
        })
        .is_err());
    }
}
