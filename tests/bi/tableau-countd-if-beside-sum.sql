-- tool: Tableau: a sheet with two measures by a dimension, COUNTD(IF [Cost] > 1000 THEN
--   [Person Id] END) beside SUM([Cost]), in one query as its PostgreSQL dialect writes them
-- source: issue 33 (Tableau's COUNTD(IF …), refused until 2026-11-29)
-- identifiers: the demo's visits.department, cost and person_id
-- expect: answered
SELECT "visits"."department" AS "department", COUNT(DISTINCT (CASE WHEN ("visits"."cost" > 1000) THEN "visits"."person_id" ELSE NULL END)) AS "ctd:Calculation_1:ok", SUM("visits"."cost") AS "sum:cost:ok" FROM "public"."visits" "visits" GROUP BY 1
