-- tool: Cube, /load with a dateRange and the day granularity, timezone UTC
-- source: Cube's PostgreSQL dialect writes the range as typed literals '…Z'::timestamptz (issue 33)
-- identifiers: the demo's visits.visited_at
-- expect: answered
SELECT
      date_trunc('day', ("visits".visited_at::timestamptz AT TIME ZONE 'UTC')) "visits__visited_at_day", count(*) "visits__count"
    FROM
      public.visits AS "visits"  WHERE ("visits".visited_at >= '2024-06-01T00:00:00.000Z'::timestamptz AND "visits".visited_at <= '2024-06-30T23:59:59.999Z'::timestamptz) GROUP BY 1 ORDER BY 1 ASC LIMIT 10000
