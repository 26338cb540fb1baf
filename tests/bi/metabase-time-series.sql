-- tool: Metabase, query builder on PostgreSQL ("Count of rows by Visited At: Month", a line chart)
-- source: Metabase's PostgreSQL driver truncates a temporal breakout with DATE_TRUNC('month', …) and
--   repeats the expression in GROUP BY and ORDER BY
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT DATE_TRUNC('month', "public"."visits"."visited_at") AS "visited_at", COUNT(*) AS "count" FROM "public"."visits" GROUP BY DATE_TRUNC('month', "public"."visits"."visited_at") ORDER BY DATE_TRUNC('month', "public"."visits"."visited_at") ASC
