//! What the sandbox's test crates share: finding the commands' processes
//! from the host.

/// Prints the pid of the shell running it as the host sees it: in the
/// sandbox's own PID namespace `$$` and `$!` are that namespace's numbers.
pub const HOST_PID: &str = "read -r p _ < /proc/self/stat; echo $p";

/// Whether `pid` runs; a zombie is dead for our purpose (its parent just
/// has not reaped it).
pub fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|s| {
            s.rsplit(')')
                .next()
                .and_then(|r| r.split_whitespace().next())
                != Some("Z")
        })
        .unwrap_or(false)
}
