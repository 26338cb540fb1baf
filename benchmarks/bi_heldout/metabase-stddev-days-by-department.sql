-- tool: Metabase, query builder: Standard deviation of Days by Department
-- chart: table
-- keys: 1
-- why: Metabase compiles StandardDeviation to STDDEV_POP
-- expect: answered
SELECT "public"."visits"."department" AS "department", STDDEV_POP("public"."visits"."days") AS "stddev" FROM "public"."visits" GROUP BY "public"."visits"."department" ORDER BY "public"."visits"."department" ASC
