-- tool: Metabase, query builder: Average of Cost by Department
-- chart: bar chart
-- keys: 1
-- why: an AVG per public key, the breakout ordered ascending
-- expect: answered
SELECT "public"."visits"."department" AS "department", AVG("public"."visits"."cost") AS "avg" FROM "public"."visits" GROUP BY "public"."visits"."department" ORDER BY "public"."visits"."department" ASC
