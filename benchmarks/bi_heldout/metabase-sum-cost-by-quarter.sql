-- tool: Metabase, query builder: Sum of Cost by Visited At: Quarter
-- chart: line chart
-- keys: 1
-- why: a SUM per quarter bucket
-- expect: answered
SELECT DATE_TRUNC('quarter', "public"."visits"."visited_at") AS "visited_at", SUM("public"."visits"."cost") AS "sum" FROM "public"."visits" GROUP BY DATE_TRUNC('quarter', "public"."visits"."visited_at") ORDER BY DATE_TRUNC('quarter', "public"."visits"."visited_at") ASC
