-- tool: Lightdash, explore visits joined to people: total cost by region
-- chart: bar chart
-- keys: 1
-- why: a LEFT JOIN on the unit, SUM per the joined table's key
-- expect: answered
SELECT
  "people".region AS "people_region",
  SUM("visits".cost) AS "visits_total_cost"
FROM "public"."visits" AS "visits"
LEFT OUTER JOIN "public"."people" AS "people"
  ON ("people".person_id) = ("visits".person_id)
GROUP BY 1
ORDER BY "visits_total_cost" DESC
LIMIT 500
