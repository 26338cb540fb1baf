-- tool: Ibis 12.0.0, ibis.to_sql(expr, dialect="postgres") of visits.group_by('department').aggregate(mean days, std cost, max days)
-- chart: data frame
-- keys: 1
-- why: Ibis's own compiler output
-- expect: answered
SELECT
  "t0"."department",
  AVG("t0"."days") AS "mean_days",
  STDDEV_SAMP("t0"."cost") AS "sd_cost",
  MAX("t0"."days") AS "max_days"
FROM "visits" AS "t0"
GROUP BY
  1
