-- tool: Ibis 12.0.0, ibis.to_sql(expr, dialect="postgres") of people.filter(_.region == 'north').select('person_id', 'income').limit(20)
-- chart: data frame
-- why: Ibis's own compiler output; per-person values: must be refused
-- expect: refused 42501
SELECT
  "t0"."person_id",
  "t0"."income"
FROM "people" AS "t0"
WHERE
  "t0"."region" = 'north'
LIMIT 20
