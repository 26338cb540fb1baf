-- tool: Lightdash, table calculation running_total of visit count by quarter
-- chart: line chart
-- keys: 1
-- why: a running SUM over released quarterly counts
-- expect: answered
WITH metrics AS (
SELECT
  DATE_TRUNC('QUARTER', "visits".visited_at) AS "visits_visited_at_quarter",
  COUNT("visits".visit_id) AS "visits_count"
FROM "public"."visits" AS "visits"
GROUP BY 1
),
table_calculations AS (
SELECT
  *,
  SUM("visits_count") OVER (ORDER BY "visits_visited_at_quarter" ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS "running_total"
FROM metrics
)
SELECT
  *
FROM table_calculations
ORDER BY "visits_visited_at_quarter" ASC
LIMIT 500
