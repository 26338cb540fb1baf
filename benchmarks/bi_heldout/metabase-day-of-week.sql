-- tool: Metabase, query builder: Average of Days by Visited At: Day of week
-- chart: bar chart
-- keys: 1
-- why: day of week 1..7 (Sunday first) as the key
-- expect: answered
SELECT (CAST(EXTRACT(dow FROM "public"."visits"."visited_at") AS integer) + 1) AS "visited_at", AVG("public"."visits"."days") AS "avg" FROM "public"."visits" GROUP BY (CAST(EXTRACT(dow FROM "public"."visits"."visited_at") AS integer) + 1) ORDER BY (CAST(EXTRACT(dow FROM "public"."visits"."visited_at") AS integer) + 1) ASC
