-- tool: Ibis 12.0.0, ibis.to_sql(expr, dialect="postgres") of visits.group_by(year=_.visited_at.year(), department=...)
-- chart: data frame
-- keys: 1,2
-- why: Ibis's own compiler output
-- expect: answered
SELECT
  EXTRACT(year FROM "t0"."visited_at") AS "year",
  "t0"."department",
  COUNT(*) AS "n"
FROM "visits" AS "t0"
GROUP BY
  1,
  2
