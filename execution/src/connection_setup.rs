//! Connections are skills (§5.10, §10.6): the NDJSON setup protocol between
//! the daemon and a connection skill's setup script, which runs as a
//! long-lived sandbox process.
//!
//! The script writes one JSON object per line on stdout ([`SetupMessage`]):
//!
//! | message | meaning |
//! |---|---|
//! | `{"type":"device_code","verification_uri":…,"user_code":…}` | show the owner a device-code card |
//! | `{"type":"browser_redirect","url":…}` | show the owner a link to open |
//! | `{"type":"secure_input","field":…,"prompt":…}` | ask the owner for a value (the `/secret` flow); the answer comes back on stdin |
//! | `{"type":"progress","message":…}` | a status line |
//! | `{"type":"token","secret_ref":…,"value":…}` | store `value` in the secret store under the connection's namespace |
//! | `{"type":"done"}` / `{"type":"error","message":…}` | the end |
//!
//! The daemon answers on the script's stdin with [`SetupReply`] lines. A
//! token's value goes straight to the [`SecretSink`]: it is never logged,
//! framed or put in an event (its `Debug` is redacted). Cancellation (or an
//! error, or the script ending without `done`) kills the script and removes
//! every secret it stored.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use silas_sandbox::{SandboxError, SandboxSpec, SubprocessSandbox};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, watch};

/// Longest protocol line accepted from a script.
const MAX_LINE: usize = 64 * 1024;
/// Most cards (sign-in links, codes, secure inputs) one setup may show the
/// owner; progress lines are not cards and not counted.
pub const MAX_STEPS: usize = 16;

/// One line read by [`next_line`].
enum Line {
    Text(String),
    TooLong,
    End,
}

/// The next line of `reader` without its newline. `pending` holds what was
/// read of it so far, so a cancelled call loses nothing (the select in
/// [`run_setup`] drops it whenever another branch wins); past `max` bytes
/// without a newline the line is refused at once, whatever follows.
async fn next_line<R: tokio::io::AsyncBufRead + Unpin>(
    reader: &mut R,
    pending: &mut Vec<u8>,
    max: usize,
) -> std::io::Result<Line> {
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            if pending.is_empty() {
                return Ok(Line::End);
            }
            let text = String::from_utf8_lossy(pending).into_owned();
            pending.clear();
            return Ok(Line::Text(text));
        }
        let (take, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (i, Some(i + 1)),
            None => (available.len(), None),
        };
        if pending.len() + take > max {
            return Ok(Line::TooLong);
        }
        pending.extend_from_slice(&available[..take]);
        reader.consume(done.unwrap_or(take));
        if done.is_some() {
            let text = String::from_utf8_lossy(pending).into_owned();
            pending.clear();
            return Ok(Line::Text(text));
        }
    }
}

/// One line from the setup script.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum SetupMessage {
    DeviceCode {
        verification_uri: String,
        user_code: String,
        #[serde(default)]
        expires_in: Option<u64>,
    },
    BrowserRedirect {
        url: String,
    },
    SecureInput {
        field: String,
        prompt: String,
    },
    Progress {
        message: String,
    },
    Token {
        secret_ref: String,
        value: String,
    },
    Done,
    Error {
        message: String,
    },
}

impl std::fmt::Debug for SetupMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // Never the value.
            SetupMessage::Token { secret_ref, .. } => f
                .debug_struct("Token")
                .field("secret_ref", secret_ref)
                .finish_non_exhaustive(),
            SetupMessage::DeviceCode {
                verification_uri,
                user_code,
                expires_in,
            } => f
                .debug_struct("DeviceCode")
                .field("verification_uri", verification_uri)
                .field("user_code", user_code)
                .field("expires_in", expires_in)
                .finish(),
            SetupMessage::BrowserRedirect { url } => {
                f.debug_struct("BrowserRedirect").field("url", url).finish()
            }
            SetupMessage::SecureInput { field, prompt } => f
                .debug_struct("SecureInput")
                .field("field", field)
                .field("prompt", prompt)
                .finish(),
            SetupMessage::Progress { message } => f
                .debug_struct("Progress")
                .field("message", message)
                .finish(),
            SetupMessage::Done => f.write_str("Done"),
            SetupMessage::Error { message } => {
                f.debug_struct("Error").field("message", message).finish()
            }
        }
    }
}

/// One line to the setup script.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum SetupReply {
    /// The owner's answer to a `secure_input` request.
    SecureInput { field: String, value: String },
}

/// What the owner must see: each becomes a card (`connection_setup_step`,
/// `secure_input_request`) on the owner's channel. No secret values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SetupStep {
    DeviceCode {
        verification_uri: String,
        user_code: String,
        /// Seconds the code stays valid, when the script says.
        expires_in: Option<u64>,
    },
    BrowserRedirect {
        url: String,
    },
    SecureInput {
        field: String,
        prompt: String,
    },
    Progress {
        message: String,
    },
}

/// The owner's secure-input answer.
pub struct SecureAnswer {
    pub field: String,
    pub value: String,
}

/// Where tokens go: the daemon's secret store.
pub trait SecretSink: Send + Sync {
    fn put(&self, ref_id: &str, value: &[u8]) -> Result<(), String>;
    fn remove(&self, ref_id: &str);
}

/// The connection's namespace in the secret store: a script names only the
/// last part, so it cannot overwrite another connection's secrets.
pub fn connection_secret_ref(skill: &str, name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= 48
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    ok.then(|| format!("conn_{skill}_{name}"))
}

/// What to run: the skill's setup script and what it is granted.
#[derive(Clone, Debug)]
pub struct SetupLaunch {
    pub skill: String,
    pub skill_dir: PathBuf,
    /// e.g. `scripts/setup.py`, inside the skill.
    pub script: PathBuf,
    pub work_dir: PathBuf,
    pub env: Vec<(String, String)>,
    /// The skill's declared network: `network` with an egress proxy port in
    /// the daemon; tests reaching a loopback fake server grant the host network.
    pub network: bool,
    pub egress_proxy_port: Option<u16>,
    pub lifetime: Duration,
}

impl SetupLaunch {
    fn spec(&self) -> Result<SandboxSpec, SetupError> {
        if !self
            .script
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)))
        {
            return Err(SetupError::Protocol(
                "the setup script must be inside the skill".into(),
            ));
        }
        let path = self.skill_dir.join(&self.script).display().to_string();
        let argv = match self.script.extension().and_then(|e| e.to_str()) {
            Some("py") => vec!["python3".into(), "-u".into(), path],
            Some("sh") => vec!["/bin/sh".into(), path],
            _ => vec![path],
        };
        let mut spec = SandboxSpec::new(argv, self.work_dir.clone());
        spec.env
            .push(("PYTHONDONTWRITEBYTECODE".into(), "1".into()));
        spec.env.extend(self.env.iter().cloned());
        spec.read_paths.push(self.skill_dir.clone());
        spec.network = self.network;
        spec.egress_proxy_port = self.egress_proxy_port;
        spec.timeout = self.lifetime;
        Ok(spec)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    #[error("E_SANDBOX_FAILED: connection setup protocol: {0}")]
    Protocol(String),
    /// The script said it failed.
    #[error("E_SANDBOX_FAILED: connection setup failed: {0}")]
    Failed(String),
    #[error("E_SANDBOX_FAILED: connection setup cancelled")]
    Cancelled,
    #[error("E_SANDBOX_FAILED: cannot store the token: {0}")]
    Store(String),
}

impl silas_core::Coded for SetupError {
    fn code(&self) -> silas_core::ErrorCode {
        match self {
            SetupError::Sandbox(e) => e.code(),
            _ => silas_core::ErrorCode::ESandboxFailed,
        }
    }
}

/// Run a setup to its end. `steps` receives what the owner must see;
/// `answers` carries the owner's secure inputs; `cancel` set to `true` (or
/// dropped) stops it. Returns the secret refs stored.
pub async fn run_setup(
    sandbox: &SubprocessSandbox,
    launch: &SetupLaunch,
    secrets: &dyn SecretSink,
    steps: mpsc::Sender<SetupStep>,
    mut answers: mpsc::Receiver<SecureAnswer>,
    mut cancel: watch::Receiver<bool>,
) -> Result<Vec<String>, SetupError> {
    let mut process = sandbox.spawn(&launch.spec()?).await?;
    let (Some(mut stdin), Some(stdout)) = (process.take_stdin(), process.take_stdout()) else {
        return Err(SetupError::Protocol("no pipes".into()));
    };
    let mut reader = BufReader::new(stdout);
    // The line being read: kept across the select's other branches.
    let mut pending = Vec::new();
    // Lines read, for errors that name the line at fault.
    let mut number = 0usize;
    // Steps shown to the owner: each is a card.
    let mut shown = 0usize;
    let mut stored: Vec<String> = Vec::new();
    // Every secret value this setup has seen (tokens handed over, the
    // owner's secure answers): never shown again on a later step's card.
    let mut known: Vec<zeroize::Zeroizing<String>> = Vec::new();
    let outcome = loop {
        let line = tokio::select! {
            l = next_line(&mut reader, &mut pending, MAX_LINE) => l,
            // The guard `wait_for` returns is dropped inside, so the setup
            // future stays `Send` (the daemon spawns it).
            _ = async { let _ = cancel.wait_for(|c| *c).await; } => break Err(SetupError::Cancelled),
            Some(a) = answers.recv() => {
                known.push(zeroize::Zeroizing::new(a.value.clone()));
                let reply = SetupReply::SecureInput { field: a.field, value: a.value };
                match serde_json::to_string(&reply) {
                    Ok(mut text) => {
                        text.push('\n');
                        if stdin.write_all(text.as_bytes()).await.is_err() {
                            break Err(SetupError::Protocol("the script closed its stdin".into()));
                        }
                    }
                    Err(e) => break Err(SetupError::Protocol(e.to_string())),
                }
                continue;
            }
        };
        number += 1;
        let line = match line {
            Ok(Line::Text(l)) => l,
            Ok(Line::End) => {
                break Err(SetupError::Protocol("the script ended without done".into()));
            }
            // Refused as soon as it is too long, not when it ends: a script
            // that never ends its line held the daemon's memory (310 MB).
            Ok(Line::TooLong) => {
                break Err(SetupError::Protocol(format!(
                    "line {number} is longer than {} KiB",
                    MAX_LINE / 1024
                )));
            }
            Err(e) => break Err(SetupError::Protocol(e.to_string())),
        };
        if line.trim().is_empty() {
            continue;
        }
        let message = match serde_json::from_str::<SetupMessage>(&line) {
            Ok(m) => m,
            Err(_) => {
                break Err(SetupError::Protocol(format!(
                    "line {number}: {}",
                    what_is_wrong(&line)
                )));
            }
        };
        // A link the owner is asked to open is a web address: a
        // `javascript:` or `file:` one is no sign-in page.
        let link = match &message {
            SetupMessage::DeviceCode {
                verification_uri, ..
            } => Some(("verification_uri", verification_uri)),
            SetupMessage::BrowserRedirect { url } => Some(("url", url)),
            _ => None,
        };
        if let Some((field, url)) = link
            && !is_web_address(url)
        {
            break Err(SetupError::Protocol(format!(
                "line {number}: `{field}` must be an http:// or https:// address"
            )));
        }
        let step = match message {
            SetupMessage::DeviceCode {
                verification_uri,
                user_code,
                expires_in,
            } => SetupStep::DeviceCode {
                verification_uri,
                user_code,
                expires_in,
            },
            SetupMessage::BrowserRedirect { url } => SetupStep::BrowserRedirect { url },
            SetupMessage::SecureInput { field, prompt } => SetupStep::SecureInput { field, prompt },
            SetupMessage::Progress { message } => SetupStep::Progress { message },
            SetupMessage::Token { secret_ref, value } => {
                let Some(ref_id) = connection_secret_ref(&launch.skill, &secret_ref) else {
                    break Err(SetupError::Protocol(format!(
                        "line {number}: {BAD_SECRET_REF}"
                    )));
                };
                if let Err(e) = secrets.put(&ref_id, value.as_bytes()) {
                    break Err(SetupError::Store(e));
                }
                known.push(zeroize::Zeroizing::new(value));
                stored.push(ref_id);
                continue;
            }
            SetupMessage::Done => break Ok(()),
            // Shown to the owner like a progress line: without what it
            // stored.
            SetupMessage::Error { message } => {
                break Err(SetupError::Failed(scrubbed(message, &known)));
            }
        };
        // Each step but a progress line is a card in the owner's Review: a
        // script writing thousands filled it.
        if !matches!(step, SetupStep::Progress { .. }) {
            shown += 1;
        }
        if shown > MAX_STEPS {
            break Err(SetupError::Protocol(format!(
                "line {number}: more than {MAX_STEPS} cards for the owner"
            )));
        }
        if steps.send(scrub(step, &known)).await.is_err() {
            break Err(SetupError::Cancelled);
        }
    };
    // The script's part is over either way.
    process.kill();
    match outcome {
        Ok(()) => Ok(stored),
        Err(e) => {
            for r in &stored {
                secrets.remove(r);
            }
            Err(e)
        }
    }
}

/// What a `secret_ref` may be ([`connection_secret_ref`]).
const BAD_SECRET_REF: &str = "`secret_ref` must be 1 to 48 letters, digits, `-` or `_`";

/// The `type`s a setup line may have.
pub const MESSAGE_TYPES: [&str; 7] = [
    "device_code",
    "browser_redirect",
    "secure_input",
    "progress",
    "token",
    "done",
    "error",
];

/// Why `line` is not a setup message, for the owner (often the skill's
/// author) to fix — without a value from the line: it may hold a token.
/// serde's own messages are used where they name only fields, types and
/// what was expected; a name from the line is repeated only when it looks
/// like a field name, not a credential.
pub fn what_is_wrong(line: &str) -> String {
    let value = match serde_json::from_str::<serde_json::Value>(line) {
        // A syntax error names a position, never the text.
        Err(e) => return format!("not JSON ({e})"),
        Ok(v) => v,
    };
    let Some(object) = value.as_object() else {
        return "not a JSON object".into();
    };
    let kinds = MESSAGE_TYPES.join(", ");
    match object.get("type").map(|t| t.as_str()) {
        None => return format!("no \"type\" (one of {kinds})"),
        Some(None) => return format!("\"type\" is not a string (one of {kinds})"),
        Some(Some(t)) if !MESSAGE_TYPES.contains(&t) => {
            return format!("unknown type {} (expected one of {kinds})", shown_name(t));
        }
        Some(Some(_)) => {}
    }
    let Err(e) = serde_json::from_value::<SetupMessage>(value.clone()) else {
        return "not a setup message".into();
    };
    let text = e.to_string();
    // "unknown field `x`, expected one of `a`, `b`" / "missing field `a`".
    for what in ["unknown field", "missing field"] {
        if let Some((name, tail)) = text
            .strip_prefix(what)
            .and_then(|rest| rest.strip_prefix(" `"))
            .and_then(|rest| rest.split_once('`'))
        {
            return format!("{what} {}{tail}", shown_name(name));
        }
    }
    // "invalid type: string \"…\", expected u64" quotes the value: only
    // what was expected is kept, with the field at fault — the one whose
    // removal ends the complaint.
    if let Some((_, expected)) = text.rsplit_once(", expected ") {
        let complaint = |e: &serde_json::Error| {
            let t = e.to_string();
            t.starts_with("invalid type") || t.starts_with("invalid value")
        };
        let at_fault: Vec<String> = object
            .keys()
            .filter(|k| k.as_str() != "type")
            .filter(|k| {
                let mut without = object.clone();
                without.remove(k.as_str());
                serde_json::from_value::<SetupMessage>(serde_json::Value::Object(without))
                    .err()
                    .is_none_or(|e| !complaint(&e))
            })
            .map(|k| shown_name(k))
            .collect();
        return format!(
            "a field has the wrong type (expected {expected}){}",
            if at_fault.is_empty() {
                String::new()
            } else {
                format!(": {}", at_fault.join(", "))
            }
        );
    }
    "not a setup message".into()
}

/// `https://…` or `http://…` with a host and no whitespace or control
/// characters.
fn is_web_address(url: &str) -> bool {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    rest.is_some_and(|r| {
        !r.is_empty()
            && !r.starts_with('/')
            && !url.chars().any(|c| c.is_whitespace() || c.is_control())
    })
}

/// `name` in backquotes when it reads like a field or type name (lower
/// case and `_`, at most 32 characters: no token looks like that), else a
/// placeholder.
fn shown_name(name: &str) -> String {
    let plain = !name.is_empty()
        && name.len() <= 32
        && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_');
    if plain {
        format!("`{name}`")
    } else {
        "(not repeated: it does not look like a field name)".into()
    }
}

/// A secret value this short is not scrubbed from steps (it would mangle
/// ordinary words); no real token is this short.
const SCRUB_MIN: usize = 6;

/// What replaces a known secret value in a step.
pub const SCRUBBED: &str = "[REDACTED]";

/// `step` with every known secret value of this setup taken out: a script
/// that handed over a token and then put it into a device-code card (a bug
/// or on purpose) showed it on the owner's card and left it in the stored
/// card until the setup ended.
fn scrub(step: SetupStep, known: &[zeroize::Zeroizing<String>]) -> SetupStep {
    let clean = |text: String| scrubbed(text, known);
    match step {
        SetupStep::DeviceCode {
            verification_uri,
            user_code,
            expires_in,
        } => SetupStep::DeviceCode {
            verification_uri: clean(verification_uri),
            user_code: clean(user_code),
            expires_in,
        },
        SetupStep::BrowserRedirect { url } => SetupStep::BrowserRedirect { url: clean(url) },
        SetupStep::SecureInput { field, prompt } => SetupStep::SecureInput {
            field: clean(field),
            prompt: clean(prompt),
        },
        SetupStep::Progress { message } => SetupStep::Progress {
            message: clean(message),
        },
    }
}

/// `text` with every known secret value of this setup taken out.
fn scrubbed(text: String, known: &[zeroize::Zeroizing<String>]) -> String {
    known
        .iter()
        .filter(|v| v.len() >= SCRUB_MIN)
        .fold(text, |t, v| t.replace(v.as_str(), SCRUBBED))
}

/// A health check (or refresh/recover) script of a connection skill, run
/// once in the sandbox with the connection's token in `CONNECTION_TOKEN`
/// (from the secret store; never in the model's view). Exit 0 = healthy.
pub async fn run_connection_script(
    sandbox: &SubprocessSandbox,
    launch: &SetupLaunch,
    token: &str,
) -> Result<bool, SetupError> {
    let secrets = NoSecrets;
    let env = vec![(
        "CONNECTION_TOKEN".to_string(),
        zeroize::Zeroizing::new(token.to_string()),
    )];
    Ok(run_one_shot(sandbox, launch, env, &secrets).await?.exit_ok)
}

/// A sink that stores nothing (a script with no business storing tokens).
struct NoSecrets;

impl SecretSink for NoSecrets {
    fn put(&self, _: &str, _: &[u8]) -> Result<(), String> {
        Err("this script may not store secrets".into())
    }
    fn remove(&self, _: &str) {}
}

/// What a one-shot connection script did. `result` is its last stdout line
/// that is not a `token` message (the caller parses it into its typed
/// result, e.g. a `HealthCheckResult`); it is never logged here.
pub struct OneShot {
    pub exit_ok: bool,
    pub result: Option<String>,
    /// Secret refs the script replaced (a refresh hands over new tokens).
    pub stored: Vec<String>,
}

impl std::fmt::Debug for OneShot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OneShot")
            .field("exit_ok", &self.exit_ok)
            .field("stored", &self.stored)
            .finish_non_exhaustive()
    }
}

/// Run a one-shot connection script (`health_check`, `refresh_token`,
/// `recover`) with `secret_env` injected at spawn. `token` lines on its
/// stdout replace the connection's secrets through `secrets` (old value
/// removed first); everything else but the last line is ignored.
pub async fn run_one_shot(
    sandbox: &SubprocessSandbox,
    launch: &SetupLaunch,
    secret_env: Vec<(String, zeroize::Zeroizing<String>)>,
    secrets: &dyn SecretSink,
) -> Result<OneShot, SetupError> {
    let mut spec = launch.spec()?;
    for (k, v) in &secret_env {
        spec.env.push((k.clone(), v.to_string()));
    }
    let out = sandbox.run(&spec).await?;
    let mut result = None;
    let mut stored = Vec::new();
    // What the script was given and what it handed over: never in the
    // result, whose text reaches the owner (a health check's `error`
    // became a `connection_failure` card's message, token and all).
    let mut known: Vec<zeroize::Zeroizing<String>> =
        secret_env.iter().map(|(_, v)| v.clone()).collect();
    for line in out.stdout.lines().map(str::trim).filter(|l| !l.is_empty()) {
        match serde_json::from_str::<SetupMessage>(line) {
            Ok(SetupMessage::Token { secret_ref, value }) => {
                let ref_id = connection_secret_ref(&launch.skill, &secret_ref)
                    .ok_or_else(|| SetupError::Protocol(BAD_SECRET_REF.into()))?;
                secrets.remove(&ref_id);
                secrets
                    .put(&ref_id, value.as_bytes())
                    .map_err(SetupError::Store)?;
                known.push(zeroize::Zeroizing::new(value));
                stored.push(ref_id);
            }
            _ => result = Some(line.to_string()),
        }
    }
    Ok(OneShot {
        exit_ok: out.success(),
        result: result.map(|r| scrubbed(r, &known)),
        stored,
    })
}

/// The egress of connection scripts: a per-run proxy that reaches only the
/// skill's declared hosts, through a guard with the owner's host pins and
/// trusted ranges (`connections.host_pins`, `connections.trusted_private_cidrs`).
#[derive(Clone)]
pub struct ConnectionEgress {
    guard: silas_netguard::NetworkGuard,
}

impl ConnectionEgress {
    pub fn new(
        pins: std::collections::BTreeMap<String, Vec<std::net::IpAddr>>,
        trusted_private_cidrs: Vec<String>,
    ) -> Result<Self, silas_netguard::ConfigError> {
        let resolver = silas_netguard::PinnedResolver::new(
            pins,
            std::sync::Arc::new(silas_netguard::SystemResolver),
        );
        let cfg = silas_netguard::NetworkGuardConfig {
            trusted_private_cidrs,
            ..silas_netguard::NetworkGuardConfig::default()
        };
        Ok(ConnectionEgress {
            guard: silas_netguard::NetworkGuard::new(&cfg, std::sync::Arc::new(resolver))?,
        })
    }

    /// A proxy for one run (dropped with it); `None` when no host is declared.
    pub async fn proxy_for(
        &self,
        hosts: &[String],
    ) -> Result<Option<silas_netguard::EgressProxy>, SetupError> {
        if hosts.is_empty() {
            return Ok(None);
        }
        silas_netguard::EgressProxy::start_for_hosts(
            self.guard.clone(),
            silas_netguard::EgressLimits::default(),
            hosts.to_vec(),
        )
        .await
        .map(Some)
        .map_err(|e| SetupError::Protocol(format!("no egress proxy: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protocol_messages_parse_and_a_token_never_prints() {
        let m: SetupMessage = serde_json::from_str(
            r#"{"type":"device_code","verification_uri":"http://x/device","user_code":"ABCD-1234"}"#,
        )
        .unwrap();
        assert!(matches!(m, SetupMessage::DeviceCode { .. }));
        let t: SetupMessage =
            serde_json::from_str(r#"{"type":"token","secret_ref":"access","value":"CANARY-123"}"#)
                .unwrap();
        assert!(!format!("{t:?}").contains("CANARY"));
        assert_eq!(
            serde_json::from_str::<SetupMessage>(r#"{"type":"done"}"#).unwrap(),
            SetupMessage::Done
        );
        assert!(serde_json::from_str::<SetupMessage>(r#"{"type":"run","cmd":"x"}"#).is_err());
    }

    #[test]
    fn a_bad_line_is_explained_without_repeating_its_values() {
        let canary = "CANARY-9f3a";
        let cases: &[(String, &str)] = &[
            (
                format!("token={canary}"),
                "not JSON (expected ident at line 1 column 2)",
            ),
            (format!("[\"{canary}\"]"), "not a JSON object"),
            (
                format!("{{\"value\":\"{canary}\"}}"),
                "no \"type\" (one of device_code, ",
            ),
            (
                r#"{"type":"devicecode","user_code":"X"}"#.into(),
                "unknown type `devicecode` (expected one of device_code, browser_redirect,",
            ),
            (
                format!("{{\"type\":\"{canary}\"}}"),
                "unknown type (not repeated: it does not look like a field name)",
            ),
            (
                r#"{"type":"device_code","verification_uri":"http://x","usercode":"AB"}"#.into(),
                "unknown field `usercode`, expected one of `verification_uri`, `user_code`",
            ),
            (
                r#"{"type":"device_code","verification_uri":"http://x"}"#.into(),
                "missing field `user_code`",
            ),
            (
                format!(
                    "{{\"type\":\"token\",\"secret_ref\":\"a\",\"value\":\"{canary}\",\"{canary}\":1}}"
                ),
                "unknown field (not repeated: it does not look like a field name), expected",
            ),
            (
                format!(
                    "{{\"type\":\"device_code\",\"verification_uri\":\"x\",\"user_code\":\"A\",\"expires_in\":\"{canary}\"}}"
                ),
                "a field has the wrong type (expected u64): `expires_in`",
            ),
            (
                r#"{"type":"progress","message":42}"#.into(),
                "a field has the wrong type (expected a string): `message`",
            ),
        ];
        for (line, want) in cases {
            let got = what_is_wrong(line);
            assert!(
                got.starts_with(want),
                "{line}\n  got:  {got}\n  want: {want}"
            );
            assert!(!got.contains(canary), "{got}");
            assert!(
                serde_json::from_str::<SetupMessage>(line).is_err(),
                "{line}"
            );
        }
        // Every listed type is one the enum reads.
        for kind in MESSAGE_TYPES {
            let got = what_is_wrong(&format!("{{\"type\":\"{kind}\"}}"));
            assert!(!got.starts_with("unknown type"), "{kind}: {got}");
        }
    }

    #[test]
    fn only_web_addresses_are_links() {
        for ok in [
            "https://example.org/device",
            "http://oauth.example.com:9101/x?a=b",
        ] {
            assert!(is_web_address(ok), "{ok}");
        }
        for bad in [
            "javascript:alert(1)",
            "file:///etc/passwd",
            "https://",
            "https:///path",
            "https://example.org/a b",
            "data:text/html,x",
            "HTTPS://example.org",
        ] {
            assert!(!is_web_address(bad), "{bad}");
        }
    }

    #[tokio::test]
    async fn a_line_too_long_is_refused_before_it_ends() {
        let text = |l: Line| match l {
            Line::Text(t) => t,
            Line::TooLong => "<too long>".into(),
            Line::End => "<end>".into(),
        };
        let mut pending = Vec::new();
        let mut r: &[u8] = b"a\nbb\ntail";
        let mut got = Vec::new();
        for _ in 0..4 {
            got.push(text(next_line(&mut r, &mut pending, 8).await.unwrap()));
        }
        assert_eq!(got, ["a", "bb", "tail", "<end>"]);
        // Nine bytes and no newline yet: refused, the rest never read.
        let mut r: &[u8] = b"123456789 and on and on";
        assert!(matches!(
            next_line(&mut r, &mut pending, 8).await.unwrap(),
            Line::TooLong
        ));
        assert!(pending.len() <= 8);
    }

    #[test]
    fn a_script_names_only_its_own_secrets() {
        assert_eq!(
            connection_secret_ref("gmail", "access").as_deref(),
            Some("conn_gmail_access")
        );
        for bad in ["", "../x", "a b", "x/y"] {
            assert_eq!(connection_secret_ref("gmail", bad), None, "{bad}");
        }
    }
}
