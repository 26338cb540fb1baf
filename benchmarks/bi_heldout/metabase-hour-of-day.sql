-- tool: Metabase, query builder: Count by Visited At: Hour of day
-- chart: bar chart
-- keys: 1
-- why: hour 0..23 as the key (hours with no visits are empty groups)
-- expect: answered
SELECT CAST(EXTRACT(hour FROM "public"."visits"."visited_at") AS integer) AS "visited_at", COUNT(*) AS "count" FROM "public"."visits" GROUP BY CAST(EXTRACT(hour FROM "public"."visits"."visited_at") AS integer) ORDER BY CAST(EXTRACT(hour FROM "public"."visits"."visited_at") AS integer) ASC
