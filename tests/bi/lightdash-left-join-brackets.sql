-- tool: Lightdash, an explore of visits joined to people (average age by department)
-- source: Lightdash brackets each side of a join's ON: ("people".person_id) = ("visits".person_id) (issue 33)
-- identifiers: the demo's visits and people
-- expect: answered
SELECT
  "visits".department AS "visits_department",
  AVG("people".age) AS "people_average_age"
FROM "public"."visits" AS "visits"
LEFT OUTER JOIN "public"."people" AS "people"
  ON ("people".person_id) = ("visits".person_id)
GROUP BY 1
ORDER BY "people_average_age" DESC
LIMIT 500
