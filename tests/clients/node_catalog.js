// The catalog queries node scripts send through node-postgres (npm "pg") to list tables
// and columns, verbatim: the common information_schema idiom, and knex's hasTable and
// columnInfo for PostgreSQL as knex hands them to pg ("?" numbered "$1"). Prints one
// JSON object; tests/wire/test_catalog_tools.py reads it.
const { Client } = require("pg");

async function main() {
  const client = new Client({ host: "127.0.0.1", port: Number(process.argv[2]),
                              user: "alice", database: "demo" });
  await client.connect();
  const out = {};
  const tables = await client.query(
    "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'");
  out.tables = tables.rows.map((r) => r.table_name).sort();
  const columns = await client.query(
    "SELECT column_name, data_type FROM information_schema.columns " +
    "WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position", ["people"]);
  out.columns = columns.rows.map((r) => [r.column_name, r.data_type]);
  // knex: schema.hasTable("people") and table("people").columnInfo()
  const has = await client.query(
    "select * from information_schema.tables where table_name = $1 and table_schema = " +
    "current_schema()", ["people"]);
  out.hasTable = has.rows.length > 0;
  const info = await client.query(
    "select * from information_schema.columns where table_name = $1 and table_catalog = " +
    "current_database() and table_schema = current_schema()", ["people"]);
  out.columnInfo = info.rows.map((r) => r.column_name);
  const privilege = await client.query("SELECT has_table_privilege('people', 'select') AS p");
  out.privilege = privilege.rows[0].p;
  try {
    await client.query("SELECT * FROM people");
    out.refused = "none";
  } catch (e) {
    out.refused = e.code;
  }
  await client.end();
  console.log(JSON.stringify(out));
}

main().catch((e) => { console.error(e); process.exit(1); });
