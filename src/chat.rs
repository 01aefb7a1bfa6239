//! `silas chat` — the CLI channel (spec §8.4): a text client of the running
//! daemon's WebSocket (`/ws`, the same typed protocol as the web app).
//!
//! Lines read from stdin become `message` frames; replies, notices,
//! `work_status` and errors are printed as text. An approval card is
//! rendered (title, body, budget, checks) and answered with `approve? [y/N]`:
//! only an explicit `y`/`yes` approves. No answer within the approval
//! timeout, end of input, or anything else is an explicit `declined` sent
//! to the daemon — approvals fail closed (§18.1: `E_CHANNEL_*` → decline).
//!
//! Scripted use (stdin not a terminal, e.g. `printf 'create a file x
//! containing y\ny\n' | silas chat`): lines are queued. A line answers the
//! card on screen once it has arrived and been printed; otherwise it is
//! sent as a message when the previous one's reply, and any card right
//! behind it, has arrived. A high-risk card (the server's `risk_level`) is
//! never approved by a queued line: it is declined, saying so, and the
//! answer line meant for it is dropped.
//!
//! Every reply carries an id: the session acknowledges each (`ack`) and
//! shows an id once, so a reply the daemon sends again after a reconnect
//! or a restart is not printed twice.
//!
//! This client holds no store or key: the daemon owns the redb file (its lock
//! would refuse a second opener), so with no daemon listening `silas chat`
//! says so in one line and tells the user to run `silas start`. Without
//! `--url` it connects only where the data dir's control socket says the
//! daemon listens, so its credential never goes to whatever holds the
//! configured port while the daemon is down.

use std::collections::{HashSet, VecDeque};
use std::io::{BufRead, IsTerminal, Write};
use std::process::ExitCode;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use silas_core::ErrorCode;
use silas_core::config::Config;
use silas_web::protocol::ClientFrame;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;

mod frames;
mod render;

use render::{Credential, closed};

use crate::cli::ChatArgs;
use crate::error::CliError;

/// Environment variable holding the web channel's bearer token.
pub const TOKEN_ENV: &str = "SILAS_WEB_TOKEN";
/// After the last expected frame, how long to keep listening for a trailing
/// one (the pipeline sends a plan card right after its reply).
const TRAILING_QUIET: Duration = Duration::from_millis(500);
/// Work statuses that end a work item.
const TERMINAL: [&str; 4] = ["done", "failed", "stuck", "blocked"];

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// One line of user input, or the end of it.
enum Input {
    Line(String),
    Eof,
}

/// An approval card waiting for the owner's answer.
struct Card {
    request_id: String,
    /// The server's `risk_level` is high or irreversible: never approved by
    /// a line queued before the owner could read the card.
    high_risk: bool,
    /// Approving it starts work whose status the session waits for (a plan,
    /// an apply); a skill install reports with a notice, not a status.
    starts_work: bool,
}

/// Why a high-risk card is declined in a scripted session.
const HIGH_RISK_PIPED: &str = "high-risk card in a non-interactive session; answer it in the web app or an interactive `silas chat`";

/// Why a scripted session leaves a card that was waiting before it began.
const FOREIGN_CARD_PIPED: &str = "(left open: this card was waiting before this session began; a script answers only the cards its own messages raise — answer it in the web app or an interactive `silas chat`)";

/// Is this line an answer to a card rather than a message?
fn is_answer(line: &str) -> bool {
    matches!(
        line.trim().to_ascii_lowercase().as_str(),
        "" | "y" | "yes" | "n" | "no"
    )
}

pub fn run(cfg: &Config, args: ChatArgs) -> Result<ExitCode, CliError> {
    let url = match args.url.as_deref() {
        Some(given) => socket_url(given),
        None => socket_url(&crate::remote::running_web_url(cfg)?),
    };
    let (token, credential) = credential(cfg, &args)?;
    let runtime = crate::error::runtime(&mut tokio::runtime::Builder::new_current_thread())?;
    runtime.block_on(chat(&url, token.as_deref(), &credential, &args))
}

/// The owner credential to connect with, first found of: `--token`,
/// [`TOKEN_ENV`], the CLI credential file, `channels.web.auth_token` — and
/// which it was, for the message when the daemon refuses it.
fn credential(cfg: &Config, args: &ChatArgs) -> Result<(Option<String>, Credential), CliError> {
    if let Some(t) = args.token.clone().filter(|t| !t.is_empty()) {
        return Ok((Some(t), Credential::Flag));
    }
    if let Some(t) = std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()) {
        return Ok((Some(t), Credential::Env));
    }
    let file = crate::devices::cli_token_path(&cfg.data_dir);
    if let Some(t) = crate::devices::read_cli_token(&cfg.data_dir)? {
        return Ok((Some(t), Credential::CliFile(file)));
    }
    match cfg.channels.web.auth_token.clone() {
        Some(t) => Ok((Some(t), Credential::Config)),
        None => Ok((None, Credential::Missing(file))),
    }
}

/// The WebSocket URL for what the owner passed: any address of the web
/// app (`http://127.0.0.1:8420/`, a page of it, the pairing link) becomes
/// its socket (`ws://127.0.0.1:8420/ws`, where the web app itself
/// connects); a `ws://` or `wss://` URL is kept.
pub(crate) fn socket_url(given: &str) -> String {
    // The pairing link `silas start` prints carries `#pair=…`, a fragment
    // no server ever sees: the address is what precedes it.
    let given = given.trim();
    let given = given.split_once('#').map_or(given, |(before, _)| before);
    let (scheme, rest) = match given.split_once("://") {
        Some(("http", rest)) => ("ws", rest),
        Some(("https", rest)) => ("wss", rest),
        _ => return given.to_string(),
    };
    // Only the authority counts: a page's path or query is not the socket.
    let authority = rest.split(['/', '?']).next().unwrap_or(rest);
    format!("{scheme}://{authority}/ws")
}

/// `ws://host:port/ws` from `channels.web`; a wildcard bind is reached over
/// loopback.
pub(crate) fn default_url(cfg: &Config) -> String {
    let host = match cfg.channels.web.host.as_str() {
        "0.0.0.0" | "" => "127.0.0.1".to_string(),
        "::" | "[::]" => "[::1]".to_string(),
        h if h.contains(':') && !h.starts_with('[') => format!("[{h}]"),
        h => h.to_string(),
    };
    format!("ws://{host}:{}/ws", cfg.channels.web.port)
}

async fn connect(url: &str, token: Option<&str>) -> Result<Ws, CliError> {
    let mut request = url.into_client_request().map_err(|e| {
        CliError::new(
            ErrorCode::ECfgInvalid,
            format!("invalid daemon URL {url:?}: {e}"),
        )
    })?;
    // The token travels in the subprotocol header (never the URL); the
    // daemon echoes `silas.v1`. No Origin header: this is not a browser.
    if let Some(t) = token {
        let value = HeaderValue::from_str(&format!("{}, bearer.{t}", silas_web::ws::SUBPROTOCOL))
            .map_err(|_| {
            CliError::new(
                ErrorCode::ECfgInvalid,
                "the web token contains characters not allowed in a header",
            )
        })?;
        request
            .headers_mut()
            .insert("sec-websocket-protocol", value);
    }
    match tokio_tungstenite::connect_async(request).await {
        Ok((ws, _)) => Ok(ws),
        Err(tungstenite::Error::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(CliError::new(
                ErrorCode::EChannelDisconnected,
                format!(
                    "no Silas daemon is listening at {url}; start it with `silas start` (or pass --url)"
                ),
            ))
        }
        Err(tungstenite::Error::Http(resp)) => Err(CliError::new(
            ErrorCode::EChannelProtocol,
            format!(
                "the daemon at {url} refused the connection (HTTP {})",
                resp.status()
            ),
        )),
        Err(e) => Err(CliError::new(
            ErrorCode::EChannelDisconnected,
            format!("cannot connect to {url}: {e}"),
        )),
    }
}

/// Reads stdin on a plain thread (stdin is blocking) and forwards lines.
fn spawn_stdin() -> mpsc::Receiver<Input> {
    let (tx, rx) = mpsc::channel(64);
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            match line {
                Ok(l) => {
                    if tx.blocking_send(Input::Line(l)).is_err() {
                        return;
                    }
                }
                Err(_) => break,
            }
        }
        let _ = tx.blocking_send(Input::Eof);
    });
    rx
}

/// Every line the chat prints: what the daemon sends is partly the model's
/// words, so escape sequences are shown, never obeyed.
fn out(line: impl AsRef<str>) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{}", silas_core::terminal::printable(line.as_ref()));
    let _ = o.flush();
}

fn prompt(text: &str) {
    let mut o = std::io::stdout().lock();
    let _ = write!(o, "{text}");
    let _ = o.flush();
}

/// What the session is waiting for before it may end after stdin closes.
#[derive(Default)]
struct Outstanding {
    /// Messages sent whose reply has not been seen.
    replies: usize,
    /// Approved plans whose work has not reached a terminal status.
    work: usize,
}

impl Outstanding {
    fn idle(&self) -> bool {
        self.replies == 0 && self.work == 0
    }
}

struct Session {
    ws: Ws,
    cards: VecDeque<Card>,
    asking: Option<(Card, Instant)>,
    approval_timeout: Duration,
    outstanding: Outstanding,
    /// stdin is a terminal: lines go out as they are typed. Otherwise
    /// (piped, scripted) they are queued: a line answers the card on
    /// screen, or is sent once the previous message's reply (and any card
    /// right behind it) has arrived.
    interactive: bool,
    /// Lines read but not yet used.
    queue: VecDeque<String>,
    /// stdin reached its end (queued lines may remain).
    input_ended: bool,
    /// The last frame received or message sent (scripted pacing).
    last_activity: Instant,
    /// How long a scripted line waits for an overdue reply.
    wait: Duration,
    /// A high-risk card was just declined unasked: the scripted answer
    /// meant for it is dropped rather than sent as a message.
    skip_answer: bool,
    /// This session has sent a message: cards from now on may be its own.
    talked: bool,
    /// Reply ids shown (issue #19 item 6): one sent again is dropped.
    shown: HashSet<String>,
    /// Reply ids received and not yet acknowledged to the daemon.
    acks: Vec<String>,
    /// Which replies answer this session's messages: the ids the daemon
    /// accepted our messages under, and reply ids seen before their
    /// `accepted` (a fast turn can answer first). A reply to an earlier
    /// session's message is shown but does not count as ours: counted, it
    /// ended a script before the reply to its own last line.
    replies: ReplyMatch,
}

/// Pairs `accepted` ids with reply ids, in either order (see `Session`).
#[derive(Default)]
struct ReplyMatch {
    accepted: HashSet<String>,
    unclaimed: HashSet<String>,
}

impl ReplyMatch {
    /// Our message was accepted as `id`: true when its reply came first.
    fn accepted(&mut self, id: String) -> bool {
        self.unclaimed.remove(&id) || {
            self.accepted.insert(id);
            false
        }
    }

    /// A reply `id` arrived: true when it answers one of ours.
    fn reply(&mut self, id: String) -> bool {
        self.accepted.remove(&id) || {
            // Bounded: an earlier session's backlog is small, and an id
            // left here costs nothing but memory.
            if self.unclaimed.len() < 4096 {
                self.unclaimed.insert(id);
            }
            false
        }
    }
}

impl Session {
    async fn send(&mut self, frame: &ClientFrame) -> Result<(), CliError> {
        let text = serde_json::to_string(frame).map_err(|e| {
            CliError::new(
                ErrorCode::EChannelProtocol,
                format!("cannot encode frame: {e}"),
            )
        })?;
        self.ws.send(Message::text(text)).await.map_err(|e| {
            CliError::new(
                ErrorCode::EChannelDisconnected,
                format!("the daemon connection was lost: {e}"),
            )
        })
    }

    /// Acknowledges every reply received since the last call, so the
    /// daemon does not send them again on the next connection.
    async fn flush_acks(&mut self) -> Result<(), CliError> {
        for id in std::mem::take(&mut self.acks) {
            self.send(&ClientFrame::Ack { id }).await?;
        }
        Ok(())
    }

    /// Queues a card to be asked. A scripted session answers only cards
    /// raised after it began talking: one already waiting when it
    /// connected (re-sent from before, perhaps from before a restart) was
    /// answered by the script's first line — declined, or approved by a
    /// `y` meant for its own plan — and that line never sent. Such a card
    /// is shown and left for the web app or an interactive session.
    fn queue_card(&mut self, card: Card) {
        if !self.interactive && !self.talked {
            out(FOREIGN_CARD_PIPED);
            return;
        }
        self.cards.push_back(card);
    }

    /// No more lines will come: stdin ended and the queue is used up.
    fn input_done(&self) -> bool {
        self.input_ended && self.queue.is_empty()
    }

    /// Shows the next queued card and starts its answer clock. With input
    /// already closed there is nobody to ask: declined at once; a
    /// high-risk card in a scripted session is declined without asking.
    /// Whether a card was taken.
    async fn ask_next(&mut self) -> Result<bool, CliError> {
        if self.asking.is_some() {
            return Ok(false);
        }
        let Some(card) = self.cards.pop_front() else {
            return Ok(false);
        };
        if card.high_risk && !self.interactive {
            self.skip_answer = true;
            self.decide(card, false, HIGH_RISK_PIPED).await?;
            return Ok(true);
        }
        if self.input_done() {
            self.decide(card, false, "input closed").await?;
            return Ok(true);
        }
        let ask = format!(
            "approve? [y/N] (declined automatically in {} s)",
            self.approval_timeout.as_secs()
        );
        // A terminal answers on the same line; a script (or a test driving
        // a pipe) needs the whole line to see the question.
        if std::io::stdin().is_terminal() {
            prompt(&format!("{ask} "));
        } else {
            out(ask);
        }
        self.asking = Some((card, Instant::now() + self.approval_timeout));
        Ok(true)
    }

    /// When a scripted session may send its next queued line as a message:
    /// nothing on screen to answer, no reply outstanding (or overdue past
    /// `--wait`), and a quiet moment for a card that follows a reply.
    fn send_ready_at(&self) -> Option<Instant> {
        if self.interactive
            || self.queue.is_empty()
            || self.asking.is_some()
            || !self.cards.is_empty()
        {
            return None;
        }
        let quiet = if self.outstanding.replies == 0 {
            TRAILING_QUIET
        } else {
            self.wait
        };
        Some(self.last_activity + quiet)
    }

    /// Uses one queued line if it can be used now: as the answer to the
    /// card on screen, or as a message. Whether one was used.
    async fn use_line(&mut self) -> Result<bool, CliError> {
        if self.asking.is_some() {
            let Some(line) = self.queue.pop_front() else {
                return Ok(false);
            };
            self.answer(&line).await?;
            return Ok(true);
        }
        let ready = self.interactive || self.send_ready_at().is_some_and(|at| Instant::now() >= at);
        if !ready || !self.cards.is_empty() {
            return Ok(false);
        }
        let Some(line) = self.queue.pop_front() else {
            return Ok(false);
        };
        if std::mem::take(&mut self.skip_answer) && is_answer(&line) {
            out(format!(
                "(not sent: {:?} was meant for the declined high-risk card)",
                line.trim()
            ));
            return Ok(true);
        }
        self.message(&line).await?;
        Ok(true)
    }

    /// The scripted answer to the card on screen: shown, then decided.
    async fn answer(&mut self, line: &str) -> Result<(), CliError> {
        let Some((card, _)) = self.asking.take() else {
            return Ok(());
        };
        if !self.interactive {
            // A piped answer is not echoed by a terminal.
            out(format!("> {}", line.trim()));
        }
        let answer = line.trim().to_ascii_lowercase();
        let yes = answer == "y" || answer == "yes";
        let why = if answer.is_empty() {
            "no explicit yes"
        } else {
            "answer was not yes"
        };
        self.decide(card, yes, why).await
    }

    async fn message(&mut self, line: &str) -> Result<(), CliError> {
        let text = line.trim();
        if text.is_empty() {
            return Ok(());
        }
        self.talked = true;
        self.outstanding.replies += 1;
        self.last_activity = Instant::now();
        self.send(&ClientFrame::Message {
            text: text.to_string(),
            sender_id: None,
            client_id: None,
        })
        .await
    }

    async fn decide(&mut self, card: Card, approve: bool, why: &str) -> Result<(), CliError> {
        let verdict = if approve { "approved" } else { "declined" };
        if approve {
            out("approved.");
            if card.starts_work {
                self.outstanding.work += 1;
            }
        } else {
            out(format!("declined ({why}): nothing runs."));
        }
        self.send(&ClientFrame::ApprovalResponse {
            request_id: card.request_id,
            verdict: verdict.into(),
        })
        .await
    }

    async fn on_input(&mut self, input: Input) -> Result<(), CliError> {
        match input {
            Input::Eof => {
                self.input_ended = true;
                if self.queue.is_empty()
                    && let Some((card, _)) = self.asking.take()
                {
                    out("");
                    self.decide(card, false, "input closed").await?;
                }
                Ok(())
            }
            Input::Line(line) => {
                self.queue.push_back(line);
                Ok(())
            }
        }
    }
}

async fn chat(
    url: &str,
    token: Option<&str>,
    credential: &Credential,
    args: &ChatArgs,
) -> Result<ExitCode, CliError> {
    let ws = connect(url, token).await?;
    let mut s = Session {
        ws,
        cards: VecDeque::new(),
        asking: None,
        approval_timeout: Duration::from_secs(args.approval_timeout),
        outstanding: Outstanding::default(),
        interactive: std::io::stdin().is_terminal(),
        queue: VecDeque::new(),
        talked: false,
        input_ended: false,
        last_activity: Instant::now(),
        wait: Duration::from_secs(args.wait),
        skip_answer: false,
        shown: HashSet::new(),
        replies: ReplyMatch::default(),
        acks: Vec::new(),
    };
    let mut input = spawn_stdin();
    let wait = Duration::from_secs(args.wait);
    // Set when input has closed: the session ends once nothing is
    // outstanding (after a short quiet period), or at this deadline.
    let mut linger_until: Option<Instant> = None;
    let mut quiet_until: Option<Instant> = None;
    loop {
        // Cards first, then queued lines, until neither moves.
        while s.ask_next().await? || s.use_line().await? {}
        if s.input_done() && s.asking.is_none() && s.cards.is_empty() {
            let now = Instant::now();
            let linger = *linger_until.get_or_insert(now + wait);
            if s.outstanding.idle() {
                let quiet = *quiet_until.get_or_insert(now + TRAILING_QUIET);
                if now >= quiet {
                    break;
                }
            } else {
                quiet_until = None;
            }
            if now >= linger {
                // A script must be able to tell an answered session from
                // one that gave up: not a success.
                let _ = s.ws.close(None).await;
                return Err(CliError::new(
                    ErrorCode::EChannelTimeout,
                    format!(
                        "stopped waiting after {} s ({} replies and {} work items outstanding; \
                         --wait SECONDS waits longer, and the replies stay in the web app)",
                        wait.as_secs(),
                        s.outstanding.replies,
                        s.outstanding.work
                    ),
                ));
            }
        }
        let card_deadline = s.asking.as_ref().map(|(_, d)| *d);
        let wake = [quiet_until, linger_until, s.send_ready_at()]
            .into_iter()
            .flatten()
            .min();
        tokio::select! {
            msg = s.ws.next() => match msg {
                Some(Ok(Message::Text(t))) => {
                    quiet_until = None;
                    s.last_activity = Instant::now();
                    s.on_frame(&t);
                    s.flush_acks().await?;
                }
                Some(Ok(Message::Close(frame))) => {
                    let code = frame.as_ref().map(|f| u16::from(f.code));
                    return Err(closed(code, credential));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    return Err(CliError::new(
                        ErrorCode::EChannelDisconnected,
                        format!("the daemon connection was lost: {e}"),
                    ));
                }
                None => return Err(closed(None, credential)),
            },
            line = input.recv(), if !s.input_ended => {
                s.on_input(line.unwrap_or(Input::Eof)).await?;
            }
            _ = sleep_until(card_deadline), if card_deadline.is_some() => {
                if let Some((card, _)) = s.asking.take() {
                    out("");
                    let why = format!("no answer within {} s", s.approval_timeout.as_secs());
                    s.decide(card, false, &why).await?;
                }
            }
            _ = sleep_until(wake), if wake.is_some() => {}
        }
    }
    let _ = s.ws.close(None).await;
    Ok(ExitCode::SUCCESS)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
