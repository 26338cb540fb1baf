-- tool: Metabase, query builder on PostgreSQL with the report time zone Europe/Berlin
--   ("Count of rows by Visited At: Month")
-- source: the form issue 33 lists for project time zones (the bucket truncated after the
--   conversion and shown back in the zone)
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT (DATE_TRUNC('month', ("public"."visits"."visited_at" AT TIME ZONE 'Europe/Berlin')) AT TIME ZONE 'Europe/Berlin') AS "visited_at", COUNT(*) AS "count" FROM "public"."visits" GROUP BY (DATE_TRUNC('month', ("public"."visits"."visited_at" AT TIME ZONE 'Europe/Berlin')) AT TIME ZONE 'Europe/Berlin') ORDER BY (DATE_TRUNC('month', ("public"."visits"."visited_at" AT TIME ZONE 'Europe/Berlin')) AT TIME ZONE 'Europe/Berlin') ASC
