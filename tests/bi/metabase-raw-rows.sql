-- tool: Metabase, query builder on PostgreSQL: the table's "raw data" view (no summary), which
--   Metabase sends with LIMIT 2000 for display
-- identifiers: the demo's people columns
-- expect: refused 42501
SELECT "public"."people"."person_id" AS "person_id", "public"."people"."age" AS "age", "public"."people"."income" AS "income", "public"."people"."region" AS "region", "public"."people"."sex" AS "sex" FROM "public"."people" LIMIT 2000
