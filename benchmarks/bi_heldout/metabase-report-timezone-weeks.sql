-- tool: Metabase, query builder with report timezone America/New_York: Count by Visited At: Week, one quarter
-- chart: line chart
-- keys: 1
-- why: weeks in a project time zone, restricted to Q1 2024 by a timestamp filter
-- expect: answered
SELECT DATE_TRUNC('week', (("public"."visits"."visited_at" AT TIME ZONE 'UTC') AT TIME ZONE 'America/New_York')) AS "visited_at", COUNT(*) AS "count" FROM "public"."visits" WHERE "public"."visits"."visited_at" >= timestamp '2024-01-01 00:00:00.000' AND "public"."visits"."visited_at" < timestamp '2024-04-01 00:00:00.000' GROUP BY DATE_TRUNC('week', (("public"."visits"."visited_at" AT TIME ZONE 'UTC') AT TIME ZONE 'America/New_York')) ORDER BY DATE_TRUNC('week', (("public"."visits"."visited_at" AT TIME ZONE 'UTC') AT TIME ZONE 'America/New_York')) ASC
