-- tool: Ibis 12.0.0, ibis.to_sql(expr, dialect="postgres") of people.filter(_.age > 60).aggregate(mean_income=_.income.mean())
-- chart: data frame
-- why: Ibis's own compiler output
-- expect: answered
SELECT
  AVG("t1"."income") AS "mean_income"
FROM (
  SELECT
    *
  FROM "people" AS "t0"
  WHERE
    "t0"."age" > 60
) AS "t1"
