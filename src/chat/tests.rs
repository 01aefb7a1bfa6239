use super::*;

#[test]
fn url_from_config_reaches_wildcard_binds_over_loopback() {
    let mut cfg = Config::default();
    assert_eq!(default_url(&cfg), "ws://127.0.0.1:8420/ws");
    cfg.channels.web.host = "0.0.0.0".into();
    cfg.channels.web.port = 9000;
    assert_eq!(default_url(&cfg), "ws://127.0.0.1:9000/ws");
    cfg.channels.web.host = "::1".into();
    assert_eq!(default_url(&cfg), "ws://[::1]:9000/ws");
}

#[test]
fn unauthorized_close_names_the_credential_that_was_refused() {
    let file = std::path::PathBuf::from("/srv/silas/data/cli.token");
    for (cred, says) in [
        (Credential::Flag, "the token passed with --token"),
        (Credential::Env, TOKEN_ENV),
        (
            Credential::CliFile(file.clone()),
            "the CLI credential /srv/silas/data/cli.token",
        ),
        (Credential::Config, "channels.web.auth_token"),
        (
            Credential::Missing(file.clone()),
            "/srv/silas/data/cli.token",
        ),
    ] {
        let line = closed(Some(4001), &cred).one_line();
        assert!(line.starts_with("error[E_CHANNEL_AUTH]"), "{line}");
        assert!(line.contains(says), "{line}");
        assert!(!line.contains("{data_dir}"), "{line}");
    }
}

#[test]
fn the_web_apps_address_is_taken_for_its_socket() {
    for (given, url) in [
        ("http://127.0.0.1:8420/", "ws://127.0.0.1:8420/ws"),
        ("http://127.0.0.1:8420/#pair=abc", "ws://127.0.0.1:8420/ws"),
        ("http://127.0.0.1:8420", "ws://127.0.0.1:8420/ws"),
        ("https://silas.home.arpa", "wss://silas.home.arpa/ws"),
        ("http://[::1]:9000/ws", "ws://[::1]:9000/ws"),
        // A page, a query or both: the socket is the web app's.
        (
            "http://127.0.0.1:8420/?x=1#pair=abc",
            "ws://127.0.0.1:8420/ws",
        ),
        ("http://127.0.0.1:8420?x=1", "ws://127.0.0.1:8420/ws"),
        ("http://127.0.0.1:8420/index.html", "ws://127.0.0.1:8420/ws"),
        ("ws://127.0.0.1:8420/ws", "ws://127.0.0.1:8420/ws"),
        ("wss://h/ws", "wss://h/ws"),
    ] {
        assert_eq!(socket_url(given), url, "{given}");
    }
}

#[test]
fn replies_are_matched_to_accepted_messages_in_either_order() {
    let mut m = ReplyMatch::default();
    // An earlier session's reply: shown, not ours.
    assert!(!m.reply("in-old".into()));
    // Ours, accepted first.
    assert!(!m.accepted("in-1".into()));
    assert!(m.reply("in-1".into()));
    // Ours, answered before the accepted frame came.
    assert!(!m.reply("in-2".into()));
    assert!(m.accepted("in-2".into()));
    // Each counts once.
    assert!(!m.reply("in-1".into()));
    assert!(!m.accepted("in-2".into()));
}
