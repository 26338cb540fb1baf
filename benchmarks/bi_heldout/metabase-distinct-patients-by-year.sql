-- tool: Metabase, query builder: Distinct values of Person ID by Visited At: Year
-- chart: bar chart
-- keys: 1
-- why: COUNT(DISTINCT unit) per year
-- expect: answered
SELECT DATE_TRUNC('year', "public"."visits"."visited_at") AS "visited_at", COUNT(DISTINCT "public"."visits"."person_id") AS "count" FROM "public"."visits" GROUP BY DATE_TRUNC('year', "public"."visits"."visited_at") ORDER BY DATE_TRUNC('year', "public"."visits"."visited_at") ASC
