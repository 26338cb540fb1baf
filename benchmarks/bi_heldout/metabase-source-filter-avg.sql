-- tool: Metabase, query builder over a saved question (a "source" subquery)
-- chart: bar chart
-- keys: 1
-- why: AVG per region over a filtered source subquery
-- expect: answered
SELECT "source"."region" AS "region", AVG("source"."income") AS "avg" FROM (SELECT "public"."people"."region" AS "region", "public"."people"."income" AS "income", "public"."people"."age" AS "age" FROM "public"."people" WHERE "public"."people"."age" >= 65) AS "source" GROUP BY "source"."region" ORDER BY "source"."region" ASC
