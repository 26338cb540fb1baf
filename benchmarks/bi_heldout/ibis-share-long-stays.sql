-- tool: Ibis 12.0.0, ibis.to_sql(expr, dialect="postgres") of visits.group_by('department').aggregate(share=(_.days > 7).mean())
-- chart: data frame
-- keys: 1
-- why: Ibis's own compiler output
-- expect: answered
SELECT
  "t0"."department",
  AVG(CAST("t0"."days" > 7 AS INT)) AS "share"
FROM "visits" AS "t0"
GROUP BY
  1
