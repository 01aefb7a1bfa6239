"""Health check: prints a HealthCheckResult; exit 0 when the token works."""
import json
import os
import sys
import time
import urllib.error
import urllib.request


def main():
    request = urllib.request.Request(
        os.environ.get("OAUTH_BASE", "https://oauth.example.com") + "/me",
        headers={"Authorization": "Bearer " + os.environ.get("CONNECTION_TOKEN", "")},
    )
    started = time.time()
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            healthy = response.status == 200
            error = None if healthy else "unexpected status %d" % response.status
    except urllib.error.HTTPError as failure:
        healthy, error = False, "token rejected (HTTP %d)" % failure.code
    except OSError:
        healthy, error = False, "service unreachable"
    latency = int((time.time() - started) * 1000)
    print(json.dumps({"healthy": healthy, "latency_ms": latency, "error": error}))
    sys.exit(0 if healthy else 1)


if "--help" in sys.argv[1:]:
    print("health_check.py: checks the stored token against the profile endpoint")
else:
    main()
