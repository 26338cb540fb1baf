-- tool: Metabase, object detail of one person (clicking a row)
-- chart: object detail
-- why: one person's row: must be refused
-- expect: refused 42501
SELECT "public"."people"."person_id" AS "person_id", "public"."people"."age" AS "age", "public"."people"."income" AS "income", "public"."people"."region" AS "region", "public"."people"."sex" AS "sex" FROM "public"."people" WHERE "public"."people"."person_id" = 17 LIMIT 1
