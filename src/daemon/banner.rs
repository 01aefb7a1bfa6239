//! What `silas start` prints once it serves: how to reach it, where its
//! data is, the zone cron times use (and a `TZ` it cannot read), Telegram.
//! Split from `daemon.rs` along that seam.

use std::net::SocketAddr;

use silas_core::config::Config;

pub struct Banner<'a> {
    pub cfg: &'a Config,
    /// The one-time pairing link, when no browser is paired yet.
    pub pairing_link: Option<&'a str>,
    pub paired: usize,
    /// The zone cron times use (`scheduler.timezone` resolved).
    pub timezone: &'a str,
    pub telegram_on: bool,
    pub addr: SocketAddr,
}

pub fn print(b: &Banner<'_>) {
    let Banner {
        cfg,
        pairing_link,
        paired,
        timezone,
        telegram_on,
        addr,
    } = *b;
    match pairing_link {
        Some(link) => print!("{}", crate::devices::pairing_banner(link)),
        None => println!(
            "Paired browsers: {paired} (pair another: `silas pair`, which prints a one-time link)"
        ),
    }
    let data_dir = std::fs::canonicalize(&cfg.data_dir).unwrap_or_else(|_| cfg.data_dir.clone());
    println!(
        "Data dir: {} (more devices: `silas pair`; list or revoke: `silas devices`)",
        data_dir.display()
    );
    println!(
        "Sandbox dirs: {} (work) and {} (verification)",
        cfg.sandbox_work_dir().display(),
        cfg.verify_dir().display()
    );
    if cfg.scheduler.enabled {
        println!(
            "Scheduler: cron times are in {} (scheduler.timezone: {}).",
            timezone,
            cfg.scheduler.timezone.trim()
        );
        if let Some(tz) = crate::doctor::probe::unread_tz(cfg) {
            let warning = silas_actors::scheduler::unread_tz_warning(&tz, timezone);
            tracing::warn!("{warning}");
            println!("  warning: {warning}; set scheduler.timezone to the zone you mean.");
        }
    }
    if telegram_on {
        println!(
            "Telegram: polling as the bot of channels.telegram ({}).",
            if cfg.active_goal.is_some() {
                "the owner's chat, and other chats as customers of the active goal"
            } else {
                "owner chat only"
            }
        );
    }
    println!(
        "Silas is running: web app and API at http://{addr}/ (health: http://{addr}/health). Press Ctrl-C to stop."
    );
}
