"""Shared code of the example sqlite-tde command-keystore helpers.

The protocol is docs/COMMAND-KEYSTORE.md: one JSON request on stdin, one
JSON answer on stdout, exit code 0 on success, 3 for "no such master key",
4 for "does not authenticate", anything else for other failures, with a
one-line reason on stderr.  A helper never writes key bytes to stderr.
"""
import base64
import json
import subprocess
import sys

PROTOCOL = 1
EXIT_FAIL = 1
EXIT_NOKEY = 3
EXIT_AUTH = 4


class HelperError(Exception):
    def __init__(self, message, code=EXIT_FAIL):
        super().__init__(message)
        self.code = code


def read_request():
    try:
        req = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        raise HelperError("request is not JSON")
    if not isinstance(req, dict) or req.get("protocol") != PROTOCOL:
        raise HelperError("unsupported protocol version (this helper speaks %d)" % PROTOCOL)
    if req.get("op") not in ("wrap", "unwrap", "new_key", "list_keys"):
        raise HelperError("unknown op")
    return req


def b64decode(value, what):
    if not isinstance(value, str):
        raise HelperError("request has no %s" % what)
    try:
        return base64.b64decode(value, validate=True)
    except ValueError:
        raise HelperError("%s is not base64" % what)


def answer(obj):
    obj = dict(obj)
    obj["protocol"] = PROTOCOL
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def run(argv, stdin=b"", what="command"):
    """Run argv with stdin; return stdout bytes.  A failure raises
    HelperError with the first line of the tool's stderr (tools do not
    echo the data they were given on stdin)."""
    try:
        p = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, check=False)
    except OSError as e:
        raise HelperError("cannot run %s: %s" % (argv[0], e.strerror))
    if p.returncode != 0:
        first = p.stderr.decode("utf-8", "replace").strip().splitlines()
        raise HelperError("%s failed (exit %d)%s" % (what, p.returncode,
                          ": " + first[0][:200] if first else ""))
    return p.stdout


def main(handlers):
    """Dispatch the request to handlers[op] and print its answer."""
    try:
        req = read_request()
        fn = handlers.get(req["op"])
        if fn is None:
            raise HelperError("op %s not supported by this helper" % req["op"])
        answer(fn(req))
        return 0
    except HelperError as e:
        sys.stderr.write("%s\n" % e)
        return e.code
