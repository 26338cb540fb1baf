-- tool: Metabase, query builder: Cumulative count of rows by Visited At: Month
-- chart: line chart
-- keys: 1
-- why: a window function over the released monthly counts
-- expect: answered
SELECT DATE_TRUNC('month', "public"."visits"."visited_at") AS "visited_at", SUM(COUNT(*)) OVER (ORDER BY DATE_TRUNC('month', "public"."visits"."visited_at") ASC ROWS UNBOUNDED PRECEDING) AS "count" FROM "public"."visits" GROUP BY DATE_TRUNC('month', "public"."visits"."visited_at") ORDER BY DATE_TRUNC('month', "public"."visits"."visited_at") ASC
