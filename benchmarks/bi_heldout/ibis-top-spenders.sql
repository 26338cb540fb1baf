-- tool: Ibis 12.0.0, ibis.to_sql(expr, dialect="postgres") of visits.group_by('person_id').aggregate(total=sum).order_by(desc).limit(10)
-- chart: data frame
-- why: Ibis's own compiler output; per-person values: must be refused
-- expect: refused 42501
SELECT
  *
FROM (
  SELECT
    "t0"."person_id",
    SUM("t0"."cost") AS "total"
  FROM "visits" AS "t0"
  GROUP BY
    1
) AS "t1"
ORDER BY
  "t1"."total" DESC NULLS LAST
LIMIT 10
