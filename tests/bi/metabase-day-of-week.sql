-- tool: Metabase, query builder on PostgreSQL ("Sum of Cost by Visited At: Day of week")
-- source: Metabase's PostgreSQL driver: the day of week 1..7 from Sunday, an extract cast to integer plus 1 (issue 33)
-- identifiers: the demo's visits.visited_at, visits.cost
-- expect: answered
SELECT (CAST(EXTRACT(dow FROM "public"."visits"."visited_at") AS integer) + 1) AS "visited_at", SUM("public"."visits"."cost") AS "sum" FROM "public"."visits" WHERE "public"."visits"."department" = 'oncology' GROUP BY (CAST(EXTRACT(dow FROM "public"."visits"."visited_at") AS integer) + 1) ORDER BY (CAST(EXTRACT(dow FROM "public"."visits"."visited_at") AS integer) + 1) ASC
