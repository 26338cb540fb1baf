-- tool: Lightdash, explore: average cost by department and month, H1 2024
-- chart: line chart
-- keys: 1,2
-- why: Lightdash's metrics CTE, two keys, date filter
-- expect: answered
WITH metrics AS (
SELECT
  "visits".department AS "visits_department",
  DATE_TRUNC('MONTH', "visits".visited_at) AS "visits_visited_at_month",
  AVG("visits".cost) AS "visits_average_cost"
FROM "public"."visits" AS "visits"
WHERE ((("visits".visited_at) >= ('2024-01-01')) AND (("visits".visited_at) < ('2024-07-01')))
GROUP BY 1,2
)
SELECT
  *
FROM metrics
ORDER BY "visits_visited_at_month" DESC
LIMIT 500
