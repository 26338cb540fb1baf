-- tool: Tableau, AVG([Cost]) by Department
-- chart: bar chart
-- keys: 1
-- why: Tableau casts a measure to DOUBLE PRECISION before AVG
-- expect: answered
SELECT "visits"."department" AS "department", AVG(CAST("visits"."cost" AS DOUBLE PRECISION)) AS "avg:cost:ok" FROM "public"."visits" "visits" GROUP BY 1
