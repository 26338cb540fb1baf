-- tool: Ibis 12.0.0, ibis.to_sql(expr, dialect="postgres") of visits.group_by(month=_.visited_at.truncate('M')).aggregate(sum, count)
-- chart: data frame
-- keys: 1
-- why: Ibis's own compiler output
-- expect: answered
SELECT
  *
FROM (
  SELECT
    DATE_TRUNC('MONTH', "t0"."visited_at") AS "month",
    SUM("t0"."cost") AS "total_cost",
    COUNT(*) AS "visits"
  FROM "visits" AS "t0"
  GROUP BY
    1
) AS "t1"
ORDER BY
  "t1"."month" ASC
