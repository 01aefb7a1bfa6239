//! New Python modules that would shadow what a check imports. A check runs
//! with directories of the project on the import path (the working
//! directory for `python -m`, a `-t .` or `PYTHONPATH=src`, pytest's
//! rootdir insertion), ahead of the standard library and the test tools: a
//! new `argparse.py` or `unittest/__init__.py` there replaces the real one
//! and can print "OK" for a failing suite. Only *new* files count — an
//! existing module is the owner's code, and the work's edits to it are what
//! the checks are for — and only where they can shadow: directly in a
//! directory that is not itself a package (a new `myapp/types.py` inside the
//! package `myapp` is `myapp.types` and stays).

use std::collections::BTreeSet;

/// The standard library's public top-level modules (`sys.stdlib_module_names`
/// of CPython 3.11), the test tools checks run through, and the start-up
/// hooks `site` imports.
pub const SHADOWED: &[&str] = &[
    "_pytest",
    "abc",
    "aifc",
    "antigravity",
    "argparse",
    "array",
    "ast",
    "asynchat",
    "asyncio",
    "asyncore",
    "atexit",
    "audioop",
    "base64",
    "bdb",
    "binascii",
    "bisect",
    "builtins",
    "bz2",
    "cProfile",
    "calendar",
    "cgi",
    "cgitb",
    "chunk",
    "cmath",
    "cmd",
    "code",
    "codecs",
    "codeop",
    "collections",
    "colorsys",
    "compileall",
    "concurrent",
    "configparser",
    "contextlib",
    "contextvars",
    "copy",
    "copyreg",
    "coverage",
    "crypt",
    "csv",
    "ctypes",
    "curses",
    "dataclasses",
    "datetime",
    "dbm",
    "decimal",
    "difflib",
    "dis",
    "distutils",
    "doctest",
    "email",
    "encodings",
    "ensurepip",
    "enum",
    "errno",
    "faulthandler",
    "fcntl",
    "filecmp",
    "fileinput",
    "fnmatch",
    "fractions",
    "ftplib",
    "functools",
    "gc",
    "genericpath",
    "getopt",
    "getpass",
    "gettext",
    "glob",
    "graphlib",
    "grp",
    "gzip",
    "hashlib",
    "heapq",
    "hmac",
    "html",
    "http",
    "idlelib",
    "imaplib",
    "imghdr",
    "imp",
    "importlib",
    "iniconfig",
    "inspect",
    "io",
    "ipaddress",
    "itertools",
    "json",
    "keyword",
    "lib2to3",
    "linecache",
    "locale",
    "logging",
    "lzma",
    "mailbox",
    "mailcap",
    "marshal",
    "math",
    "mimetypes",
    "mmap",
    "modulefinder",
    "msilib",
    "msvcrt",
    "multiprocessing",
    "netrc",
    "nis",
    "nntplib",
    "nt",
    "ntpath",
    "nturl2path",
    "numbers",
    "opcode",
    "operator",
    "optparse",
    "os",
    "ossaudiodev",
    "pathlib",
    "pdb",
    "pickle",
    "pickletools",
    "pipes",
    "pkgutil",
    "platform",
    "plistlib",
    "pluggy",
    "poplib",
    "posix",
    "posixpath",
    "pprint",
    "profile",
    "pstats",
    "pty",
    "pwd",
    "py",
    "py_compile",
    "pyclbr",
    "pydoc",
    "pydoc_data",
    "pyexpat",
    "pytest",
    "queue",
    "quopri",
    "random",
    "re",
    "readline",
    "reprlib",
    "resource",
    "rlcompleter",
    "runpy",
    "sched",
    "secrets",
    "select",
    "selectors",
    "shelve",
    "shlex",
    "shutil",
    "signal",
    "site",
    "sitecustomize",
    "smtpd",
    "smtplib",
    "sndhdr",
    "socket",
    "socketserver",
    "spwd",
    "sqlite3",
    "sre_compile",
    "sre_constants",
    "sre_parse",
    "ssl",
    "stat",
    "statistics",
    "string",
    "stringprep",
    "struct",
    "subprocess",
    "sunau",
    "symtable",
    "sys",
    "sysconfig",
    "syslog",
    "tabnanny",
    "tarfile",
    "telnetlib",
    "tempfile",
    "termios",
    "textwrap",
    "this",
    "threading",
    "time",
    "timeit",
    "tkinter",
    "token",
    "tokenize",
    "tomllib",
    "trace",
    "traceback",
    "tracemalloc",
    "tty",
    "turtle",
    "turtledemo",
    "types",
    "typing",
    "unicodedata",
    "unittest",
    "urllib",
    "usercustomize",
    "uu",
    "uuid",
    "venv",
    "warnings",
    "wave",
    "weakref",
    "webbrowser",
    "winreg",
    "winsound",
    "wsgiref",
    "xdrlib",
    "xml",
    "xmlrpc",
    "zipapp",
    "zipfile",
    "zipimport",
    "zlib",
    "zoneinfo",
];

/// The module a new file at `rel` would shadow: its top-level import name,
/// when the file is importable as one (`NAME.py`, `NAME.pyc`, `NAME.so`,
/// `NAME.<abi>.so`, `NAME/__init__.py[c]`) from a directory that is not a
/// package in the untouched copy (`base_has`: whether it holds a file).
pub fn module_of(rel: &str, base_has: impl Fn(&str) -> bool) -> Option<&str> {
    let (dir, file) = rel.rsplit_once('/').unwrap_or(("", rel));
    let (dir, name) = if file == "__init__.py" || file == "__init__.pyc" {
        dir.rsplit_once('/').unwrap_or(("", dir))
    } else {
        let stem = file.split('.').next().unwrap_or(file);
        let ext = file.rsplit('.').next().unwrap_or("");
        if stem.is_empty() || !matches!(ext, "py" | "pyc" | "so") {
            return None;
        }
        (dir, stem)
    };
    if name.is_empty() || dir.split('/').any(|p| p == "__pycache__") {
        return None;
    }
    let in_package = !dir.is_empty() && base_has(&format!("{dir}/__init__.py"));
    (!in_package).then_some(name)
}

/// Whether a new file at `rel` would shadow a module of [`SHADOWED`], one
/// installed for the host's Python ([`installed`]: pytest's own `attr`,
/// `pluggy`, `iniconfig` …) or one of `also` (what the checks run with
/// `python -m`).
pub fn shadows(rel: &str, also: &BTreeSet<String>, base_has: impl Fn(&str) -> bool) -> bool {
    module_of(rel, base_has).is_some_and(|m| {
        SHADOWED.binary_search(&m).is_ok() || also.contains(m) || installed().contains(m)
    })
}

/// Compiled Python: anything under `__pycache__/`, bytecode (`*.pyc`,
/// `*.pyo`) and extension modules (`*.so`, `NAME.<abi>.so`, `*.pyd`).
/// Python imports an extension module in preference to the `.py` beside
/// it, so a planted `calc.cpython-311-x86_64-linux-gnu.so` passed the
/// restored tests with the reviewed `calc.py` still wrong, and then ran
/// native code, unsandboxed, when the owner ran the project (red-team).
pub fn is_compiled_python(rel: &str) -> bool {
    let (dirs, file) = rel.rsplit_once('/').unwrap_or(("", rel));
    dirs.split('/').any(|d| d == "__pycache__")
        || [".pyc", ".pyo", ".so", ".pyd"]
            .iter()
            .any(|ext| file.len() > ext.len() && file.ends_with(ext))
}

/// Where the host's Pythons keep their standard library and packages: the
/// sandbox runs checks with the host's `/usr`, so these are what a check
/// imports.
const PREFIXES: &[&str] = &["/usr/lib", "/usr/local/lib", "/usr/lib64"];

/// The top-level module names importable from the host's Pythons (read
/// once): the standard library of every installed version and the
/// packages in their `site-packages`/`dist-packages`.
pub fn installed() -> &'static BTreeSet<String> {
    static INSTALLED: std::sync::OnceLock<BTreeSet<String>> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(|| {
        let mut dirs = Vec::new();
        for prefix in PREFIXES {
            let Ok(entries) = std::fs::read_dir(prefix) else {
                continue;
            };
            for e in entries.flatten() {
                let name = e.file_name();
                if !name.to_string_lossy().starts_with("python3") {
                    continue;
                }
                let lib = e.path();
                dirs.push(lib.join("site-packages"));
                dirs.push(lib.join("dist-packages"));
                dirs.push(lib);
            }
        }
        let mut names = BTreeSet::new();
        for dir in dirs {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                if let Some(name) = module_name(&e.file_name().to_string_lossy(), is_dir) {
                    names.insert(name);
                }
            }
        }
        names
    })
}

/// The module a directory entry of a library directory provides: a package
/// directory, `NAME.py`, `NAME[.abi].so`; not metadata (`*.dist-info`),
/// caches or `.pth` files.
fn module_name(entry: &str, is_dir: bool) -> Option<String> {
    let name = if is_dir {
        entry
    } else {
        let (stem, ext) = entry.split_once('.')?;
        let ext = ext.rsplit('.').next().unwrap_or(ext);
        if !matches!(ext, "py" | "so") {
            return None;
        }
        stem
    };
    let identifier = name
        .chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_alphanumeric() || c == '_');
    (identifier && name != "__pycache__" && name != "__init__").then(|| name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_entries_name_their_modules() {
        for (entry, dir, want) in [
            ("attr", true, Some("attr")),
            ("pluggy", true, Some("pluggy")),
            ("iniconfig", true, Some("iniconfig")),
            ("py.py", false, Some("py")),
            (
                "_cffi_backend.cpython-311-x86_64-linux-gnu.so",
                false,
                Some("_cffi_backend"),
            ),
            ("attrs-22.2.0.dist-info", true, None),
            ("distutils-precedence.pth", false, None),
            ("README.txt", false, None),
            ("__pycache__", true, None),
            ("config-3.11-x86_64-linux-gnu", true, None),
        ] {
            assert_eq!(module_name(entry, dir).as_deref(), want, "{entry}");
        }
    }

    #[test]
    fn compiled_python_is_any_bytecode() {
        for yes in [
            "calc/__pycache__/add.cpython-311.pyc",
            "__pycache__/x",
            "a.pyc",
            "b/c.pyo",
            "calc.cpython-311-x86_64-linux-gnu.so",
            "pkg/_speedups.abi3.so",
            "lib/native.so",
            "win/calc.cp311-win_amd64.pyd",
        ] {
            assert!(is_compiled_python(yes), "{yes}");
        }
        for no in [
            "calc/add.py",
            "pyc",
            "notes/pycache.md",
            "x.pyc.txt",
            "libfoo.so.1",
            "docs/so",
            ".so",
        ] {
            assert!(!is_compiled_python(no), "{no}");
        }
    }

    #[test]
    fn the_list_is_sorted_for_its_binary_search() {
        assert!(SHADOWED.windows(2).all(|w| w[0] < w[1]));
    }
}
