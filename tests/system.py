"""What the suite needs from the machine beyond Python: PostgreSQL's server and psql,
Java with pgJDBC, Node.js with node-postgres. Missing pieces are installed (as root,
from Debian's packages and npm) so that no test is skipped; elsewhere the error says
what to install."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

CLIENTS = Path(__file__).resolve().parent / "clients"
JDBC_JAR = Path("/usr/share/java/postgresql.jar")


def apt_install(*packages: str) -> None:
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise RuntimeError(f"missing system packages: install {' '.join(packages)} "
                           "(Debian/Ubuntu) and run the tests again")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-q"], check=True, env=env, capture_output=True)
    subprocess.run(["apt-get", "install", "-y", "-q", *packages], check=True, env=env,
                   capture_output=True)


def jdbc_classpath(build: Path) -> str:
    """Compile tests/clients/JdbcClient.java into ``build``; return the class path."""
    if not JDBC_JAR.exists() or not shutil.which("javac"):
        apt_install("libpostgresql-jdbc-java", "default-jdk-headless")
    subprocess.run(["javac", "-d", str(build), str(CLIENTS / "JdbcClient.java")], check=True,
                   capture_output=True)
    return f"{JDBC_JAR}:{build}"


def node_client(script: str = "node_client.js") -> list[str]:
    """The command that runs a script of tests/clients/ with npm's ``pg`` installed."""
    if not shutil.which("node") or not shutil.which("npm"):
        apt_install("nodejs", "npm")
    if not (CLIENTS / "node_modules" / "pg").exists():
        subprocess.run(["npm", "install", "--silent", "--no-save", "--prefix", str(CLIENTS),
                        "pg@8"], check=True, capture_output=True)
    return ["node", str(CLIENTS / script)]
