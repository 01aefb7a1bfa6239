"""Device-code setup for the example connection: NDJSON on stdout."""
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

BASE = os.environ.get("OAUTH_BASE", "https://oauth.example.com")


def say(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def post(path, fields):
    body = urllib.parse.urlencode(fields).encode()
    with urllib.request.urlopen(BASE + path, data=body, timeout=10) as response:
        return json.loads(response.read().decode())


def main():
    try:
        grant = post("/device/code", {"client_id": "silas"})
    except (OSError, ValueError) as error:
        say({"type": "error", "message": "device code request failed: %s" % error})
        return
    say(
        {
            "type": "device_code",
            "verification_uri": grant["verification_uri"],
            "user_code": grant["user_code"],
            "expires_in": grant.get("expires_in", 600),
        }
    )
    deadline = time.time() + grant.get("expires_in", 600)
    while time.time() < deadline:
        time.sleep(grant.get("interval", 1))
        try:
            answer = post("/token", {"device_code": grant["device_code"]})
        except urllib.error.HTTPError as error:
            answer = json.loads(error.read().decode() or "{}")
        except (OSError, ValueError) as error:
            say({"type": "error", "message": "token request failed: %s" % error})
            return
        if "access_token" in answer:
            say({"type": "token", "secret_ref": "access", "value": answer["access_token"]})
            say({"type": "done"})
            return
        if answer.get("error") != "authorization_pending":
            say({"type": "error", "message": "authorization refused"})
            return
    say({"type": "error", "message": "the device code expired"})


if "--help" in sys.argv[1:]:
    # The install dry run: no network, nothing to set up.
    print("setup.py: runs the OAuth device flow; speaks NDJSON on stdout")
else:
    main()
