-- tool: Lightdash, "view underlying data" of the oncology bar
-- chart: table (raw)
-- why: the rows behind a bar: must be refused
-- expect: refused 42501
SELECT
  "visits".person_id AS "visits_person_id",
  "visits".cost AS "visits_cost"
FROM "public"."visits" AS "visits"
WHERE (("visits".department) IN ('oncology'))
LIMIT 500
