"""Run inside Superset's own virtual environment (tests/system.py superset_env), never
imported by the suite: one Superset app with Flask's test client (no web server),
logged in as its admin through the REST API, that answers REST calls read as JSON
lines on standard input, one JSON line each on standard output:

    {"method": "POST", "path": "/api/v1/sqllab/execute/", "json": {...}}
    -> {"status": 200, "json": {...}}

SUPERSET_CONFIG_PATH names the configuration (its metadata database a copy of the one
superset_env prepared, with the admin user ``admin``/``admin``).
"""

import json
import os
import sys


def main() -> None:
    out = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # Superset's prints go to stderr
    from superset.app import create_app

    app = create_app()
    # No app context held around the calls: each request pushes its own, as under a web
    # server (one held open would carry flask.g, and its anonymous user, across them).
    client = app.test_client()
    login = client.post("/api/v1/security/login", json={
        "username": "admin", "password": "admin", "provider": "db", "refresh": False})
    if login.status_code != 200:
        raise SystemExit(f"Superset login failed: {login.status_code} {login.text}")
    headers = {"Authorization": "Bearer " + login.json["access_token"]}
    out.write(json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        call = json.loads(line)
        response = client.open(call["path"], method=call["method"], headers=headers,
                               json=call.get("json"))
        body = response.get_json(silent=True)
        out.write(json.dumps({"status": response.status_code, "json": body,
                              "text": None if body is not None else response.text},
                             default=str) + "\n")
        out.flush()

if __name__ == "__main__":
    main()
