-- tool: Metabase, query builder on PostgreSQL ("Count of rows by Visited At: Week", start of week Sunday)
-- source: Metabase's PostgreSQL driver shifts by a day around DATE_TRUNC('week', …) when the week
--   starts on Sunday (issue 33)
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT (DATE_TRUNC('week', ("public"."visits"."visited_at" + INTERVAL '1 day')) + INTERVAL '-1 day') AS "visited_at", COUNT(*) AS "count" FROM "public"."visits" GROUP BY (DATE_TRUNC('week', ("public"."visits"."visited_at" + INTERVAL '1 day')) + INTERVAL '-1 day') ORDER BY (DATE_TRUNC('week', ("public"."visits"."visited_at" + INTERVAL '1 day')) + INTERVAL '-1 day') ASC
