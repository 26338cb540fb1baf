"""A throwaway real Spark Connect server (Apache Spark in local mode, from the pyspark
pip package) for the Spark smoke test and the benchmark.

The pip package has no ``sbin/start-connect-server.sh`` (it would daemonise anyway);
it has ``bin/spark-submit`` and the connect server's jar, so this runs what that script
runs, ``spark-submit --class …SparkConnectServer``, in the foreground: spark-submit
``exec``s the JVM, so the process started is the server, and stopping it stops Spark.
Everything Spark writes goes under ``folder`` (the working directory): the warehouse,
``spark.local.dir``, the JVM's temporary files, Derby's home, the log (``spark.log``).
The catalog is in memory (no Hive metastore, no Derby database), shared by every
session of the server. Needs ``java`` (JDK 17; on Debian ``apt-get install -y
openjdk-17-jre-headless``); the JVM takes 25–40 s to start on a 2-core machine."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.sailserver import connect_server, free_port

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


@contextmanager
def throwaway_spark(folder: Path, memory: str = "1g", quick: bool = True,
                    timeout: float = 240.0) -> Iterator[str]:
    """``sc://127.0.0.1:PORT`` of a Spark Connect server in local mode (two threads,
    ``memory`` for the driver, which runs everything), in ``folder``. ``quick``: for
    short runs over small data, the JVM compiles with C1 only and collects garbage on
    one thread: the smoke test's JVM then used 39 s of CPU instead of 69 s (and started
    in 13 s instead of 61 s, under load); and it does not verify the bytecode of Spark's
    jars as it loads their thousands of classes (the JDK's own are not verified either;
    what runs is the same): the smoke test's CPU 28.6 s -> 26.1 s and 26.7 s -> 22.7 s in
    two pairs of runs side by side under load. The benchmark turns it off."""
    import pyspark

    if shutil.which("java") is None:
        raise RuntimeError("no `java`: install a JDK 17 (apt-get install -y "
                           "openjdk-17-jre-headless)")
    home = Path(pyspark.__file__).parent
    port = free_port()
    for part in ("warehouse", "local", "tmp"):
        (folder / part).mkdir(parents=True, exist_ok=True)
    settings = {
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.warehouse.dir": str(folder / "warehouse"),
        "spark.local.dir": str(folder / "local"),
        "spark.ui.enabled": "false",  # no web UI port to collide on
        # few shuffle partitions for two cores (Spark's default is 200)
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={folder / 'tmp'} "
                                         f"-Dderby.system.home={folder}"
                                         + (" -XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
                                            " -XX:+UnlockDiagnosticVMOptions"
                                            " -XX:-BytecodeVerificationRemote"
                                            if quick else ""),
    }
    command = [str(home / "bin" / "spark-submit"), "--class", SERVER_CLASS,
               "--master", "local[2]", "--driver-memory", memory]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    env = {**os.environ, "SPARK_HOME": str(home), "SPARK_LOG_DIR": str(folder),
           "SPARK_PID_DIR": str(folder)}
    with connect_server(command, port, folder, "spark", timeout, env) as url:
        yield url
