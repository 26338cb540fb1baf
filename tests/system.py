"""What the suite needs from the machine beyond Python: PostgreSQL's server and psql,
Java with pgJDBC, Node.js with node-postgres. Missing pieces are installed (as root,
from Debian's packages and npm) so that no test is skipped; elsewhere the error says
what to install."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
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
    # under a lock: npm makes node_modules/pg before the packages pg needs, and another
    # test worker seeing it half installed ran node into "Cannot find module 'pg-pool'"
    with open(CLIENTS / ".npm-install.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (CLIENTS / "node_modules" / "pg").exists():
            subprocess.run(["npm", "install", "--silent", "--no-save", "--prefix",
                            str(CLIENTS), "pg@8"], check=True, capture_output=True)
    return ["node", str(CLIENTS / script)]


SUPERSET_VERSION = "6.1.0"
# Superset pins its own SQLAlchemy (1.4) and pandas, which clash with the suite's: it
# gets a virtual environment of its own, cached outside the clone. Flask-Caching 2.5
# breaks Superset 6.1's cache set-up (SupersetMetastoreCache: unexpected keyword
# ignore_delete_many_errors); its CLI needs rich and its PostgreSQL engine spec cachetools
# (through db_engine_specs/aws_iam.py), neither of which it declares.
SUPERSET_PACKAGES = (f"apache-superset=={SUPERSET_VERSION}", "Flask-Caching<2.5", "rich",
                     "cachetools", "psycopg2-binary")
SUPERSET_HOME = Path.home() / ".cache" / "idp-proxy-tests" / f"superset-{SUPERSET_VERSION}"


def superset_config(folder: Path, metadata: Path) -> Path:
    """A Superset configuration in ``folder`` with its metadata in SQLite ``metadata``."""
    config = folder / "superset_config.py"
    config.write_text(
        '"""Test only: a throwaway Superset."""\n'
        'SECRET_KEY = "idp-proxy-tests-only-not-a-secret-0123456789abcdef"\n'
        f"SQLALCHEMY_DATABASE_URI = {f'sqlite:///{metadata}'!r}\n"
        "WTF_CSRF_ENABLED = False\nTALISMAN_ENABLED = False\n")
    return config


def superset_env() -> tuple[Path, Path]:
    """Superset's Python and a prepared metadata database (migrated, roles made, an
    admin ``admin``/``admin``) to copy for each run: installed on first use into
    SUPERSET_HOME: 2 min 50 s here from scratch (pip's part the larger), 5 min while
    other test runs shared the machine."""
    python, template = SUPERSET_HOME / "bin" / "python", SUPERSET_HOME / "superset.db"
    ready = SUPERSET_HOME / "ready"
    if ready.exists():
        return python, template
    SUPERSET_HOME.parent.mkdir(parents=True, exist_ok=True)
    with (SUPERSET_HOME.parent / f"superset-{SUPERSET_VERSION}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time (pytest-xdist workers)
        if not ready.exists():
            _install_superset(python, template)
    return python, template


def _install_superset(python: Path, template: Path) -> None:
    if SUPERSET_HOME.exists():  # an install that was cut off
        shutil.rmtree(SUPERSET_HOME)
    subprocess.run([sys.executable, "-m", "venv", str(SUPERSET_HOME)], check=True,
                   capture_output=True)
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", *SUPERSET_PACKAGES],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"installing Superset failed:\n{done.stderr[-3000:]}")
    env = {**os.environ,
           "SUPERSET_CONFIG_PATH": str(superset_config(SUPERSET_HOME, template))}
    superset = str(SUPERSET_HOME / "bin" / "superset")
    for command in (["db", "upgrade"],
                    ["fab", "create-admin", "--username", "admin", "--firstname", "Ada",
                     "--lastname", "Admin", "--email", "admin@example.com", "--password",
                     "admin"],
                    ["init"]):
        done = subprocess.run([superset, *command], env=env, capture_output=True, text=True,
                              check=False)
        if done.returncode != 0:
            raise RuntimeError(f"superset {command[0]} failed:\n{done.stderr[-3000:]}")
    (SUPERSET_HOME / "ready").write_text(SUPERSET_VERSION + "\n")
