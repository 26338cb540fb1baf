-- tool: Ibis 12.0.0, ibis.to_sql(expr, dialect="postgres") of visits.group_by('department').aggregate(patients=_.person_id.nunique())
-- chart: data frame
-- keys: 1
-- why: Ibis's own compiler output
-- expect: answered
SELECT
  "t0"."department",
  COUNT(DISTINCT "t0"."person_id") AS "patients"
FROM "visits" AS "t0"
GROUP BY
  1
