-- tool: Ibis 12.0.0, ibis.to_sql(expr, dialect="postgres") of visits.aggregate(p90=_.days.quantile(0.9))
-- chart: data frame
-- why: Ibis's own compiler output
-- expect: answered
SELECT
  PERCENTILE_CONT(0.9) WITHIN GROUP (ORDER BY
    "t0"."days") AS "p90"
FROM "visits" AS "t0"
