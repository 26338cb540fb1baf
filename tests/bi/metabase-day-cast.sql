-- tool: Metabase, query builder on PostgreSQL ("Count of rows by Visited At: Day")
-- source: Metabase's PostgreSQL driver casts a timestamp to date for the day grain (issue 33)
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT CAST("public"."visits"."visited_at" AS date) AS "visited_at", COUNT(*) AS "count" FROM "public"."visits" WHERE "public"."visits"."visited_at" >= timestamp '2024-03-01 00:00:00.000' AND "public"."visits"."visited_at" < timestamp '2024-04-01 00:00:00.000' GROUP BY CAST("public"."visits"."visited_at" AS date) ORDER BY CAST("public"."visits"."visited_at" AS date) ASC
