# Reads a Python script on stdin and prints one JSON object: the syntax
# error (if any), every environment variable read (name or null when the
# name is computed), every call handing a string to a shell, and every
# eval/exec. Parses only (ast); never imports or runs the script, writes
# nothing. Embedded in silas-skill; run as `python3 -I -S -B -c`.
import ast, json, sys

src = sys.stdin.buffer.read()
out = {"syntax_error": None, "env": [], "shell": [], "dynamic": []}
ENV = {"os.environ", "environ", "os.environb", "environb"}
GET = {"os.getenv", "getenv", "os.getenvb", "getenvb"}
SHELL = {"os.system", "system", "os.popen", "popen", "subprocess.getoutput",
         "subprocess.getstatusoutput", "getoutput", "getstatusoutput",
         "commands.getoutput", "commands.getstatusoutput", "pty.spawn"}
DYNAMIC = {"eval", "exec", "compile", "__import__", "builtins.eval", "builtins.exec"}


def dotted(n):
    parts = []
    while isinstance(n, ast.Attribute):
        parts.append(n.attr)
        n = n.value
    if isinstance(n, ast.Name):
        parts.append(n.id)
        return ".".join(reversed(parts))
    return None


def lit(n):
    if isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes)):
        v = n.value
        return v.decode("utf-8", "replace") if isinstance(v, bytes) else v
    return None


try:
    tree = ast.parse(src)
except SyntaxError as e:
    out["syntax_error"] = {"line": e.lineno or 0, "message": str(e.msg)}
except (ValueError, RecursionError, MemoryError) as e:
    out["syntax_error"] = {"line": 0, "message": type(e).__name__}
else:
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and dotted(node.value) in ENV:
            key = node.slice
            if hasattr(ast, "Index") and isinstance(key, getattr(ast, "Index")):
                key = key.value
            out["env"].append({"name": lit(key), "line": node.lineno})
        elif isinstance(node, ast.Call):
            f = dotted(node.func)
            if f in GET and node.args:
                out["env"].append({"name": lit(node.args[0]), "line": node.lineno})
            elif (isinstance(node.func, ast.Attribute)
                  and dotted(node.func.value) in ENV
                  and node.func.attr in ("get", "setdefault", "pop")
                  and node.args):
                out["env"].append({"name": lit(node.args[0]), "line": node.lineno})
            if f in SHELL:
                out["shell"].append({"line": node.lineno, "what": f + "()"})
            if f in DYNAMIC:
                out["dynamic"].append({"line": node.lineno, "what": f + "()"})
            for kw in node.keywords:
                if kw.arg == "shell" and not (
                        isinstance(kw.value, ast.Constant) and not kw.value.value):
                    out["shell"].append({"line": node.lineno, "what": "shell=True"})
print(json.dumps(out, sort_keys=True))
