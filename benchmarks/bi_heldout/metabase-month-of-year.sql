-- tool: Metabase, query builder: Count by Visited At: Month of year
-- chart: bar chart
-- keys: 1
-- why: an extracted month number (1..12) as the key
-- expect: answered
SELECT CAST(EXTRACT(month FROM "public"."visits"."visited_at") AS integer) AS "visited_at", COUNT(*) AS "count" FROM "public"."visits" GROUP BY CAST(EXTRACT(month FROM "public"."visits"."visited_at") AS integer) ORDER BY CAST(EXTRACT(month FROM "public"."visits"."visited_at") AS integer) ASC
