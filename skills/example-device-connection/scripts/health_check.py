"""Health check: exit 0 when the stored token is accepted."""
import os
import sys
import urllib.request

request = urllib.request.Request(
    os.environ.get("OAUTH_BASE", "") + "/me",
    headers={"Authorization": "Bearer " + os.environ.get("CONNECTION_TOKEN", "")},
)
try:
    with urllib.request.urlopen(request, timeout=10) as response:
        sys.exit(0 if response.status == 200 else 1)
except OSError:
    sys.exit(1)
