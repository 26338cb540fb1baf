-- tool: Ibis 12.0.0, ibis.to_sql(expr, dialect="postgres") of people.group_by(bracket=ibis.cases(...)).aggregate(n=_.count())
-- chart: data frame
-- keys: 1
-- why: Ibis's own compiler output
-- expect: answered
SELECT
  CASE
    WHEN "t0"."income" < 30000
    THEN 'low'
    WHEN "t0"."income" < 80000
    THEN 'mid'
    ELSE 'high'
  END AS "bracket",
  COUNT(*) AS "n"
FROM "people" AS "t0"
GROUP BY
  1
