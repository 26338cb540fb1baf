// The proxy through node-postgres (npm "pg"), as Grafana-style tools use it. Prints one
// JSON object; tests/wire/test_clients.py reads it.
const { Client } = require("pg");

async function main() {
  const client = new Client({ host: "127.0.0.1", port: Number(process.argv[2]),
                              user: "alice", database: "demo" });
  const notices = [];
  client.on("notice", (msg) => notices.push(msg.message));
  await client.connect();
  const out = {};
  out.median = Number((await client.query("SELECT MEDIAN(income) AS m FROM people")).rows[0].m);
  const groups = await client.query("SELECT region, COUNT(*) AS n FROM people GROUP BY region");
  out.groups = Object.fromEntries(groups.rows.map((r) => [r.region, Number(r.n)]));
  const count = await client.query(
    "SELECT COUNT(*) AS n FROM people WHERE age BETWEEN $1 AND $2", [30, 50]);
  out.count = Number(count.rows[0].n);
  try {
    await client.query("SELECT * FROM people");
    out.refused = "none";
  } catch (e) {
    out.refused = e.code;
  }
  out.notices = notices;
  await client.end();
  console.log(JSON.stringify(out));
}

main().catch((e) => { console.error(e); process.exit(1); });
