//! `silas connection add|list|escalate` (issue #17 item 6): requests to the
//! running daemon over the control socket. A setup conversation runs in the
//! daemon — its device-code / sign-in / secure-input cards go to the
//! owner's web app and Telegram — so `add` returns once it has started.

use std::collections::BTreeMap;
use std::process::ExitCode;

use silas_core::ErrorCode;
use silas_core::config::Config;
use silas_web::control::{Request, Response};

use crate::cli::ConnectionCommand;
use crate::error::CliError;
use crate::remote::{ask_daemon, unexpected};

/// `NAME=VALUE` pairs into settings; a name appears once.
pub fn parse_settings(pairs: &[String]) -> Result<BTreeMap<String, String>, CliError> {
    let mut out = BTreeMap::new();
    for p in pairs {
        let Some((k, v)) = p.split_once('=').filter(|(k, _)| !k.trim().is_empty()) else {
            return Err(CliError::new(
                ErrorCode::ECfgInvalid,
                format!("--set {p:?}: expected NAME=VALUE"),
            ));
        };
        if out.insert(k.trim().to_string(), v.to_string()).is_some() {
            return Err(CliError::new(
                ErrorCode::ECfgInvalid,
                format!("--set {k}: given twice"),
            ));
        }
    }
    Ok(out)
}

pub fn run(cfg: &Config, cmd: ConnectionCommand) -> Result<ExitCode, CliError> {
    match cmd {
        ConnectionCommand::Add { skill, settings } => {
            let settings = parse_settings(&settings)?;
            match ask_daemon(
                cfg,
                Request::ConnectionAdd { skill, settings },
                "setting up a connection",
            )? {
                Response::ConnectionSetupStarted { connection_id } => {
                    println!(
                        "setup of {connection_id} started: follow the card in your web app (or Telegram); `silas connection list` shows its status"
                    );
                    Ok(ExitCode::SUCCESS)
                }
                other => Err(unexpected(&other)),
            }
        }
        ConnectionCommand::List { json } => {
            match ask_daemon(cfg, Request::ConnectionList, "listing connections")? {
                Response::Connections { connections } => {
                    if json {
                        for c in &connections {
                            println!("{}", serde_json::to_string(c).unwrap_or_default());
                        }
                    } else if connections.is_empty() {
                        println!("no connections (add one: `silas connection add SKILL`)");
                    }
                    if !json {
                        for c in &connections {
                            let checked = c
                                .last_health_check
                                .map(|t| t.to_string())
                                .unwrap_or_else(|| "never".into());
                            println!(
                                "{}  {}  {}  skill {}  last health check {checked}",
                                c.connection_id,
                                c.status.as_str(),
                                c.name,
                                c.skill_name
                            );
                        }
                    }
                    Ok(ExitCode::SUCCESS)
                }
                other => Err(unexpected(&other)),
            }
        }
        ConnectionCommand::Escalate {
            connection_id,
            permissions,
            reason,
        } => match ask_daemon(
            cfg,
            Request::ConnectionEscalate {
                connection_id,
                permissions,
                reason,
            },
            "asking for connection permissions",
        )? {
            Response::ConnectionEscalationAsked { connection_id } => {
                println!(
                    "asked you to approve the permissions for {connection_id} (card in your web app); the answer is audited"
                );
                Ok(ExitCode::SUCCESS)
            }
            other => Err(unexpected(&other)),
        },
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn settings_are_name_value_pairs_named_once() {
        let s = parse_settings(&["OAUTH_BASE=http://x:1/a=b".into()]).unwrap();
        assert_eq!(s["OAUTH_BASE"], "http://x:1/a=b");
        assert!(parse_settings(&["novalue".into()]).is_err());
        assert!(parse_settings(&["=x".into()]).is_err());
        assert!(parse_settings(&["A=1".into(), "A=2".into()]).is_err());
    }
}
