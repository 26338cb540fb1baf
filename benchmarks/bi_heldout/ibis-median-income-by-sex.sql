-- tool: Ibis 12.0.0, ibis.to_sql(expr, dialect="postgres") of people.group_by('sex').aggregate(median_income=_.income.median())
-- chart: data frame
-- keys: 1
-- why: Ibis's own compiler output
-- expect: answered
SELECT
  "t0"."sex",
  PERCENTILE_CONT(0.5) WITHIN GROUP (ORDER BY
    "t0"."income") AS "median_income"
FROM "people" AS "t0"
GROUP BY
  1
