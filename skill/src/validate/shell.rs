//! A small POSIX shell lexer, enough for two deterministic checks: which
//! variables a script reads without setting (environment use), and where
//! data reaches the shell as code or unquoted words (`eval`, `sh -c "$x"`,
//! `$1` outside double quotes, which is split and globbed). It tracks
//! quotes, escapes, comments, `[[ ]]`, `case` subjects, assignments and
//! here-documents; it does not try to be a full parser.

use std::collections::BTreeSet;

/// Special parameters (`$#`, `$?`, …) and what a shell sets by itself.
pub const SHELL_SET: &[&str] = &[
    "IFS",
    "RANDOM",
    "LINENO",
    "SECONDS",
    "BASH_SOURCE",
    "FUNCNAME",
    "PIPESTATUS",
    "BASH_VERSION",
    "OPTARG",
    "OPTIND",
    "REPLY",
    "PPID",
    "UID",
    "EUID",
    "HOSTNAME",
    "BASH_REMATCH",
];

#[derive(Debug, Default, PartialEq, Eq)]
pub struct ShellFacts {
    /// Every named parameter read, with its first line.
    pub reads: Vec<(String, u32)>,
    /// Names the script sets itself (assignments, `read`, `for`, `local`, …).
    pub assigned: BTreeSet<String>,
    /// Line and why, for each unsafe interpolation.
    pub unsafe_sites: Vec<(u32, String)>,
}

fn is_ident_start(c: char) -> bool {
    c.is_ascii_alphabetic() || c == '_'
}
fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// `NAME=`, `NAME+=` or `NAME[i]=` at the start of a word.
fn assignment_name(word: &str) -> Option<&str> {
    let end = word.find(|c: char| !is_ident(c))?;
    let name = &word[..end];
    let rest = &word[end..];
    (name.starts_with(is_ident_start)
        && (rest.starts_with('=') || rest.starts_with("+=") || rest.starts_with('[')))
    .then_some(name)
}

const SHELLS: &[&str] = &["sh", "bash", "dash", "zsh", "ksh", "/bin/sh", "/bin/bash"];

struct Lexer {
    facts: ShellFacts,
    line: u32,
    word: String,
    cmd: Vec<String>,
    in_double: bool,
    dbl_bracket: bool,
    expect_c_arg: bool,
    heredocs: Vec<(String, bool, bool)>,
}

impl Lexer {
    fn read(&mut self, name: &str, quoted: bool) {
        let special = name.is_empty() || !name.starts_with(is_ident_start);
        if !special && !self.facts.reads.iter().any(|(n, _)| n == name) {
            self.facts.reads.push((name.to_string(), self.line));
        }
        // `$#`, `$?`, `$$`, `$!` are numbers: no splitting hazard.
        let numeric = matches!(name, "#" | "?" | "$" | "!");
        let exempt = quoted
            || numeric
            || self.dbl_bracket
            || assignment_name(&self.word).is_some()
            || self.cmd.last().is_some_and(|w| w == "case")
            || self
                .cmd
                .first()
                .is_some_and(|w| w == "export" || w == "local");
        if !exempt {
            self.facts.unsafe_sites.push((
                self.line,
                format!("unquoted ${name} is split and globbed; write \"${name}\""),
            ));
        }
    }

    fn end_word(&mut self) {
        if self.word.is_empty() {
            return;
        }
        let w = std::mem::take(&mut self.word);
        if let Some(n) = assignment_name(&w) {
            self.facts.assigned.insert(n.to_string());
        }
        match self.cmd.first().map(String::as_str) {
            Some(
                "read" | "local" | "declare" | "export" | "readonly" | "typeset" | "mapfile"
                | "readarray",
            ) if w.starts_with(is_ident_start) && w.chars().all(is_ident) => {
                self.facts.assigned.insert(w.clone());
            }
            Some("getopts") if self.cmd.len() == 2 => {
                self.facts.assigned.insert(w.clone());
            }
            _ => {}
        }
        if self.cmd.last().is_some_and(|p| p == "for") {
            self.facts.assigned.insert(w.clone());
        }
        if self.expect_c_arg && w.contains('$') {
            self.facts.unsafe_sites.push((
                self.line,
                "a shell -c command built from an expansion runs data as code".into(),
            ));
        }
        self.expect_c_arg = w == "-c"
            && self
                .cmd
                .last()
                .is_some_and(|p| SHELLS.contains(&p.as_str()));
        if w == "eval" && self.cmd.is_empty() {
            self.facts
                .unsafe_sites
                .push((self.line, "eval runs its arguments as shell code".into()));
        }
        if w == "[[" {
            self.dbl_bracket = true;
        } else if w == "]]" {
            self.dbl_bracket = false;
        }
        self.cmd.push(w);
    }

    fn end_command(&mut self) {
        self.end_word();
        self.cmd.clear();
        self.expect_c_arg = false;
    }
}

/// Scan `$NAME` / `${NAME…}` reads inside an unquoted here-document body.
fn heredoc_reads(lx: &mut Lexer, body_line: &str) {
    let chars: Vec<char> = body_line.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '$' {
            let start = i + 1 + usize::from(chars.get(i + 1) == Some(&'{'));
            let name: String = chars[start.min(chars.len())..]
                .iter()
                .take_while(|c| is_ident(**c))
                .collect();
            if !name.is_empty() {
                lx.read(&name, true);
            }
        }
        i += 1;
    }
}

pub fn analyze(src: &str) -> ShellFacts {
    let mut lx = Lexer {
        facts: ShellFacts::default(),
        line: 1,
        word: String::new(),
        cmd: Vec::new(),
        in_double: false,
        dbl_bracket: false,
        expect_c_arg: false,
        heredocs: Vec::new(),
    };
    let chars: Vec<char> = src.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            if !lx.in_double {
                lx.end_command();
            }
            lx.line += 1;
            i += 1;
            // Here-document bodies follow the line that opened them.
            for (delim, strip, expand) in std::mem::take(&mut lx.heredocs) {
                loop {
                    let end = chars[i..]
                        .iter()
                        .position(|c| *c == '\n')
                        .map_or(chars.len(), |p| i + p);
                    let body: String = chars[i..end].iter().collect();
                    let cmp = if strip {
                        body.trim_start_matches('\t')
                    } else {
                        &body
                    };
                    let done = cmp == delim || end >= chars.len();
                    if !done && expand {
                        heredoc_reads(&mut lx, &body);
                    }
                    i = (end + 1).min(chars.len());
                    lx.line += 1;
                    if done {
                        break;
                    }
                }
            }
            continue;
        }
        if lx.in_double {
            match c {
                '"' => lx.in_double = false,
                '\\' => {
                    lx.word.push(c);
                    i += 1;
                }
                '$' => {
                    i = expansion(&mut lx, &chars, i, true);
                    continue;
                }
                _ => {}
            }
            if let Some(ch) = chars.get(i) {
                lx.word.push(*ch);
            }
            i += 1;
            continue;
        }
        match c {
            '\'' => {
                lx.word.push(c);
                i += 1;
                while i < chars.len() && chars[i] != '\'' {
                    if chars[i] == '\n' {
                        lx.line += 1;
                    }
                    lx.word.push(chars[i]);
                    i += 1;
                }
                lx.word.push('\'');
                i += 1;
            }
            '"' => {
                lx.in_double = true;
                lx.word.push(c);
                i += 1;
            }
            '\\' => {
                if chars.get(i + 1) == Some(&'\n') {
                    lx.line += 1;
                } else if let Some(n) = chars.get(i + 1) {
                    lx.word.push(*n);
                }
                i += 2;
            }
            '#' if lx.word.is_empty() => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '$' => i = expansion(&mut lx, &chars, i, false),
            '<' if chars.get(i + 1) == Some(&'<') && chars.get(i + 2) != Some(&'<') => {
                lx.end_word();
                i += 2;
                let strip = chars.get(i) == Some(&'-');
                if strip {
                    i += 1;
                }
                while chars.get(i).is_some_and(|c| *c == ' ' || *c == '\t') {
                    i += 1;
                }
                let mut delim = String::new();
                let mut quoted = false;
                while let Some(&d) = chars.get(i) {
                    if d.is_whitespace() || matches!(d, ';' | '|' | '&' | ')' | '<' | '>') {
                        break;
                    }
                    if matches!(d, '\'' | '"' | '\\') {
                        quoted = true;
                    } else {
                        delim.push(d);
                    }
                    i += 1;
                }
                if !delim.is_empty() {
                    lx.heredocs.push((delim, strip, !quoted));
                }
            }
            ';' | '&' | '|' | '(' | ')' | '{' | '}'
                if lx.word.is_empty() || c != '{' && c != '}' =>
            {
                lx.end_command();
                i += 1;
            }
            ' ' | '\t' => {
                lx.end_word();
                i += 1;
            }
            _ => {
                lx.word.push(c);
                i += 1;
            }
        }
    }
    lx.end_command();
    lx.facts
}

/// Handle the `$` at `chars[i]`; returns the index after the expansion.
fn expansion(lx: &mut Lexer, chars: &[char], i: usize, quoted: bool) -> usize {
    let next = chars.get(i + 1).copied();
    match next {
        Some('(') => {
            // Command substitution or arithmetic: the inside lexes as shell;
            // `$((…))` names no parameter with `$`, so nothing to record.
            lx.word.push('$');
            i + 1
        }
        Some('{') => {
            let mut j = i + 2;
            if chars.get(j) == Some(&'#') && chars.get(j + 1).is_some_and(|c| *c != '}') {
                j += 1; // ${#name}: the length, still a read
            }
            let name: String = if chars.get(j).is_some_and(|c| is_ident_start(*c)) {
                chars[j..].iter().take_while(|c| is_ident(**c)).collect()
            } else {
                chars.get(j).map(|c| c.to_string()).unwrap_or_default()
            };
            let mut depth = 0;
            let mut k = i + 1;
            while k < chars.len() {
                match chars[k] {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    '\n' => lx.line += 1,
                    _ => {}
                }
                k += 1;
            }
            lx.read(&name, quoted);
            lx.word.extend(&chars[i..(k + 1).min(chars.len())]);
            k + 1
        }
        Some(c) if is_ident_start(c) => {
            let name: String = chars[i + 1..]
                .iter()
                .take_while(|c| is_ident(**c))
                .collect();
            lx.read(&name, quoted);
            lx.word.push('$');
            lx.word.push_str(&name);
            i + 1 + name.chars().count()
        }
        Some(c) if c.is_ascii_digit() || "@*#?$!-".contains(c) => {
            lx.read(&c.to_string(), quoted);
            lx.word.push('$');
            lx.word.push(c);
            i + 2
        }
        _ => {
            lx.word.push('$');
            i + 1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unsafe_lines(src: &str) -> Vec<u32> {
        analyze(src).unsafe_sites.iter().map(|(l, _)| *l).collect()
    }

    #[test]
    fn quoted_expansions_assignments_and_tests_are_safe() {
        let src = "#!/bin/sh\n# $NOT_READ in a comment\nset -eu\nname=\"$1\"\ncount=$#\necho \"hello $name\" '$literal'\nif [ \"$count\" -gt 0 ]; then echo \"${name:-x}\"; fi\ncase $name in a) echo a;; esac\nfor f in \"$@\"; do echo \"$f\"; done\nread -r line\necho \"$line\"\n";
        let f = analyze(src);
        assert_eq!(f.unsafe_sites, vec![], "{f:?}");
        let reads: Vec<&str> = f.reads.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(reads, ["name", "count", "f", "line"]);
        for n in ["name", "count", "f", "line"] {
            assert!(f.assigned.contains(n), "{n}");
        }
    }

    #[test]
    fn unquoted_eval_and_sh_c_are_unsafe_with_their_lines() {
        assert_eq!(unsafe_lines("echo ok\nrm -rf $1\n"), [2]);
        assert_eq!(unsafe_lines("x=\"$1\"\neval \"$x\"\n"), [2]);
        assert_eq!(unsafe_lines("sh -c \"ls $1\"\n"), [1]);
        assert_eq!(
            unsafe_lines("cat <<EOF\n$HOME and $TOKEN\nEOF\necho $2\n"),
            [4]
        );
    }

    #[test]
    fn environment_reads_are_the_names_never_set() {
        let f = analyze(
            "#!/bin/sh\necho \"$API_TOKEN\"\nx=1\necho \"$x\"\ncat <<EOF\n${SECRET_URL}\nEOF\ncat <<'EOF'\n$QUOTED\nEOF\n",
        );
        let undeclared: Vec<(&str, u32)> = f
            .reads
            .iter()
            .filter(|(n, _)| !f.assigned.contains(n))
            .map(|(n, l)| (n.as_str(), *l))
            .collect();
        assert_eq!(undeclared, [("API_TOKEN", 2), ("SECRET_URL", 6)]);
    }
}
