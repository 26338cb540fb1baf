-- tool: Tableau: COUNTD(IF [Cost] > 1000 THEN [Person Id] END) by a dimension, as its
--   PostgreSQL dialect writes an IF inside COUNTD
-- source: issue 33 (Tableau's COUNTD(IF …), refused until 2026-11-29)
-- identifiers: the demo's visits.department, cost and person_id
-- expect: answered
SELECT "visits"."department" AS "department", COUNT(DISTINCT (CASE WHEN ("visits"."cost" > 1000) THEN "visits"."person_id" ELSE NULL END)) AS "ctd:Calculation_1:ok" FROM "public"."visits" "visits" GROUP BY 1
