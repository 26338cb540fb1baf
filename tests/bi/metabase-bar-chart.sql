-- tool: Metabase, query builder on PostgreSQL ("Count of rows by Region", shown as a bar chart)
-- source: the SQL Metabase's PostgreSQL driver compiles for a summarised question: schema-qualified
--   quoted columns, COUNT(*) AS "count", GROUP BY and ORDER BY the breakout ascending (Metabase docs,
--   "View the SQL" / query-builder/expressions pages; metabase/metabase src/metabase/driver/postgres.clj)
-- identifiers: the demo's people.region
-- expect: answered
SELECT "public"."people"."region" AS "region", COUNT(*) AS "count" FROM "public"."people" GROUP BY "public"."people"."region" ORDER BY "public"."people"."region" ASC
