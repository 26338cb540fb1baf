-- tool: Tableau, AVG([Income]) by Region with a filter on COUNT >= 1000
-- chart: bar chart
-- keys: 1
-- why: a HAVING on a count (true counts are far above it)
-- expect: answered
SELECT "people"."region" AS "region", AVG(CAST("people"."income" AS DOUBLE PRECISION)) AS "avg:income:ok" FROM "public"."people" "people" GROUP BY 1 HAVING (COUNT(1) >= 1000)
