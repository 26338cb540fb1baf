-- tool: Metabase, query builder: Min of Age and Max of Age by Region
-- chart: table
-- keys: 1
-- why: MIN and MAX per public key
-- expect: answered
SELECT "public"."people"."region" AS "region", MIN("public"."people"."age") AS "min", MAX("public"."people"."age") AS "max" FROM "public"."people" GROUP BY "public"."people"."region" ORDER BY "public"."people"."region" ASC
