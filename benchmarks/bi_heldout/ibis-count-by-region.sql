-- tool: Ibis 12.0.0, ibis.to_sql(expr, dialect="postgres") of people.group_by('region').aggregate(n=_.count()).order_by('region')
-- chart: data frame
-- keys: 1
-- why: Ibis's own compiler output
-- expect: answered
SELECT
  *
FROM (
  SELECT
    "t0"."region",
    COUNT(*) AS "n"
  FROM "people" AS "t0"
  GROUP BY
    1
) AS "t1"
ORDER BY
  "t1"."region" ASC
