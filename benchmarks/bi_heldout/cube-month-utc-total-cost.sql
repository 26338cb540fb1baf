-- tool: Cube, /load: visits.total_cost by visited_at month, timezone UTC, 2023
-- chart: line chart
-- keys: 1
-- why: date_trunc over ::timestamptz AT TIME ZONE 'UTC' with timestamptz literals
-- expect: answered
SELECT
      date_trunc('month', ("visits".visited_at::timestamptz AT TIME ZONE 'UTC')) "visits__visited_at_month", sum("visits".cost) "visits__total_cost"
    FROM
      public.visits AS "visits"  WHERE ("visits".visited_at >= '2023-01-01T00:00:00.000Z'::timestamptz AND "visits".visited_at <= '2023-12-31T23:59:59.999Z'::timestamptz) GROUP BY 1 ORDER BY 1 ASC LIMIT 10000
