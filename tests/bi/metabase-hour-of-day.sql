-- tool: Metabase, query builder on PostgreSQL ("Count of rows by Visited At: Hour of day", 2024 only)
-- source: Metabase's PostgreSQL driver extracts the hour and casts it to integer (issue 33)
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT CAST(EXTRACT(hour FROM "public"."visits"."visited_at") AS integer) AS "visited_at", COUNT(*) AS "count" FROM "public"."visits" WHERE "public"."visits"."visited_at" >= timestamp '2024-01-01 00:00:00.000' GROUP BY CAST(EXTRACT(hour FROM "public"."visits"."visited_at") AS integer) ORDER BY CAST(EXTRACT(hour FROM "public"."visits"."visited_at") AS integer) ASC
